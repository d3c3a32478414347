"""The TrainingJob provider's create, diff, update and delete against a real Ray head on this machine.

One `ray start --head` with token auth for the module (workload.local's cluster). Kubernetes is the only thing
replaced: the connector yields the head's address through a LocalForward (the same local end the Kubernetes
port-forward uses) and the head's token. The CPU workload is really submitted, with the tiny model.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from urllib.parse import urlparse

import pytest

from infra import ray_job
from infra.portforward import LocalForward
from tests.test_workload_train import FAST_RAY_TRAIN

TINY_ARGS = ["--model_config", "tiny", "--steps", "2", "--batch_size", "2", "--seq_len", "32",
             "--learning_rate", "1e-3", "--num_workers", "2"]


@pytest.fixture(autouse=True, scope="module")
def _event_loop_restored():
    """workload.submit streams logs with asyncio.run, which leaves the main thread without an event loop; the
    Pulumi mock tests that run later in the same process need one."""
    yield
    asyncio.set_event_loop(asyncio.new_event_loop())


@pytest.fixture(scope="module")
def ray_head():
    from workload.local import local_cluster

    with pytest.MonkeyPatch.context() as patch:
        # The head's processes inherit these; the client side must hold no token of its own.
        for name, value in FAST_RAY_TRAIN.items():
            patch.setenv(name, value)
        for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS"):
            patch.delenv(name, raising=False)
        with local_cluster() as (address, token):
            yield address, token


class Connector:
    """The test's JobServerConnector: the real head through a LocalForward, with a chosen token."""

    def __init__(self, address: str, token: str | None) -> None:
        parsed = urlparse(address)
        self.remote = (parsed.hostname, parsed.port)
        self.token = token
        self.calls: list[bool] = []

    @contextlib.contextmanager
    def __call__(self, props, preflight):
        self.calls.append(preflight)
        with LocalForward(lambda: socket.create_connection(self.remote, timeout=30)) as forward:
            yield ray_job.JobServer(forward.address, self.token)


def props(**overrides) -> dict:
    base = {
        "kubeconfig": "apiVersion: v1\nkind: Config\n",
        "namespace": "ray",
        "cluster_name": "ray-train",
        "auth_secret_name": "ray-train",
        "train_args": list(TINY_ARGS),
        "run_id": "1",
        "pip": [],
        "env_vars": {"NCCL_DEBUG_FILE": ray_job.NCCL_DEBUG_FILE, **FAST_RAY_TRAIN},
        "timeout_s": 300.0,
        "expect_transport": "any",
        "gpus_per_worker": 4,
        "efa_per_worker": 1,
        "workers": 2,
    }
    return {**base, **overrides}


def provider(ray_head, token="right", logs=None):
    address, real_token = ray_head
    connector = Connector(address, real_token if token == "right" else token)
    return ray_job.TrainingJobProvider(connect=connector, on_log=(logs.append if logs is not None else None)), \
        connector


def test_create_runs_the_job_and_reports_its_results(ray_head, tmp_path):
    logs: list[str] = []
    job_provider, connector = provider(ray_head, logs=logs)
    # Ray Train 2.60 returns metrics only for checkpointed reports; without a storage path the driver has no
    # summary to print (a workload issue, reported), so this run checkpoints.
    created = job_provider.create(props(train_args=TINY_ARGS + ["--storage_path", str(tmp_path)]))
    outs = created.outs
    assert connector.calls == [True], "create must run the preflight through the connector once"
    assert created.id == outs["job_id"] and outs["job_id"].startswith("raytrain-1-"), \
        f"the resource id is the Ray submission id raytrain-<runId>-..., got {created.id}"
    assert outs["status"] == "SUCCEEDED", f"job status should be SUCCEEDED, got {outs['status']}"
    assert isinstance(outs["final_loss"], float) and outs["final_loss"] > 0, f"final_loss: {outs['final_loss']}"
    assert outs["tokens_per_s"] > 0 and outs["world_size"] == 2, f"tokens_per_s / world_size: {outs}"
    # Gloo on CPU writes no NCCL lines: every rank's debug file is empty, so there is no verdict to give.
    assert outs["verdicts"] == {}, f"a CPU job has no NCCL transport, got {outs['verdicts']}"
    assert any("step 2/2" in line for line in logs), "the job's log lines must be streamed while it runs"
    assert outs["kubeconfig"] == props()["kubeconfig"], "delete needs the kubeconfig kept in the outputs"
    assert outs["sharding"]["sharding"] == "full" and outs["fabric"]["ranks"] == 2, \
        f"the job's sharding choice and fabric check are outputs: {outs['sharding']}, {outs['fabric']}"
    assert outs["model"].endswith("/model_000002") and os.path.isfile(os.path.join(outs["model"], "config.json")), \
        f"the model the job exported is an output (jobModelPath): {outs['model']}"
    assert os.listdir(outs["tensorboard"]) and outs["eval_loss"] is None, \
        f"its event files are an output; no evaluation set, no eval loss: {outs['tensorboard']}, {outs['eval_loss']}"

    # The same results judged against expect=efa: the update refuses, naming the fix.
    with pytest.raises(ray_job.TrainingJobError, match="no NCCL transport lines.*change trainRunId"):
        job_provider.update(created.id, outs, props(expect_transport="efa"))
    updated = job_provider.update(created.id, outs, {**outs, "timeout_s": 60.0})
    assert updated.outs["job_id"] == created.id and updated.outs["timeout_s"] == 60.0, \
        "an in-place update keeps the job's results and takes the new inputs"


def test_create_fails_when_the_verdict_disagrees_with_the_expectation(monkeypatch):
    """The CPU job has no NCCL lines, so this one job's result is given: rank 1 fell back to sockets."""
    from tests.test_transport import nccl_job
    from workload import submit, transport

    ranks = nccl_job(overrides={4: {"network": "Socket", "plugin": False}})
    nccl_logs = {str(rank.rank): "\n".join(filter(transport.is_transport_line, rank.lines)) for rank in ranks}
    summary = {"world_size": 8, "device": "cuda", "final_loss": 2.5, "tokens_per_s": 9000.0, "nccl_logs": nccl_logs}
    submitted = []

    def fake_submit(address, train_args, **kwargs):
        submitted.append(kwargs)
        return submit.JobResult("raytrain-1-abc", "SUCCEEDED", summary, "step 50/50 loss 2.5\nTRAIN_SUMMARY {}")

    monkeypatch.setattr(submit, "submit_training_job", fake_submit)
    connector = Connector("http://127.0.0.1:1", "token")
    job_provider = ray_job.TrainingJobProvider(connect=connector, on_log=lambda line: None)
    with pytest.raises(ray_job.TrainingJobError) as raised:
        job_provider.create(props(expect_transport="efa"))
    message = str(raised.value)
    assert "NCCL transport is wrong" in message and "4=socket" in message and "TRAIN_SUMMARY" in message, \
        f"create must fail naming rank 4's socket verdict, with the log tail: {message}"
    assert submitted[0]["env_vars"] == props()["env_vars"] and submitted[0]["token"] == "token" \
        and submitted[0]["timeout_s"] == 300.0, f"the job gets the resource's env, token and timeout: {submitted[0]}"
    created = job_provider.create(props(expect_transport="any"))
    assert created.outs["verdicts"]["4"] == "socket" and created.outs["verdicts"]["3"] == "efa", \
        f"expect=any never fails; the per-rank verdicts are outputs: {created.outs['verdicts']}"


def test_failing_job_fails_create_with_its_log_tail(ray_head):
    job_provider, _ = provider(ray_head)
    with pytest.raises(ray_job.TrainingJobError) as raised:
        job_provider.create(props(train_args=["--model_config", "tiny", "--steps", "0"], run_id="bad"))
    message = str(raised.value)
    assert "FAILED" in message and "--steps must be" in message, \
        f"create must fail with the job's status and the log tail naming the bad flag: {message[-2000:]}"


def test_a_fabric_below_the_minimum_fails_create_naming_both_figures(ray_head):
    job_provider, _ = provider(ray_head)
    with pytest.raises(ray_job.TrainingJobError) as raised:
        job_provider.create(props(train_args=TINY_ARGS + ["--min_bus_gbytes_per_s", "1e6", "--fabric_check_seconds",
                                                          "0.1"], run_id="slow-fabric"))
    message = str(raised.value)
    assert "FAILED" in message and "fabric check: bus bandwidth" in message, message[-3000:]
    assert "below the expected minimum of 1e+06 GB/s" in message and "trainMinBusBandwidthGBps" in message, \
        f"the failure must name the measured and the expected figures and the stack key: {message[-3000:]}"


def test_wrong_token_fails_clearly_without_showing_it(ray_head):
    wrong = "not-the-token-" + "x" * 32
    job_provider, _ = provider(ray_head, token=wrong)
    with pytest.raises(Exception) as raised:
        job_provider.create(props(run_id="wrong-token"))
    message = str(raised.value)
    assert "refused the given auth token" in message, f"a wrong token must say so: {type(raised.value)} {message}"
    assert wrong not in message, "the token must never appear in an error"


def test_delete_stops_a_running_job(ray_head):
    from workload.submit import connect

    address, token = ray_head
    client = connect(address, token)
    job_id = client.submit_job(entrypoint="python -c 'import time; time.sleep(600)'")
    deadline = time.monotonic() + 60
    while client.get_job_status(job_id).value != "RUNNING":
        assert time.monotonic() < deadline, "the sleeping job did not start within 60 s"
        time.sleep(0.5)
    job_provider, connector = provider(ray_head)
    job_provider.delete(job_id, props())
    assert connector.calls == [False], "delete must not run the preflight"
    while (status := client.get_job_status(job_id).value) not in ("STOPPED", "FAILED"):
        assert time.monotonic() < deadline, f"job {job_id} was not stopped by delete, still {status}"
        time.sleep(0.5)
    assert status == "STOPPED", f"delete should stop the running job, got {status}"


def test_delete_of_a_finished_job_or_a_gone_cluster_succeeds(ray_head):
    logs: list[str] = []

    @contextlib.contextmanager
    def gone(props, preflight):
        raise RuntimeError("no running Ray head pod")
        yield  # pragma: no cover

    ray_job.TrainingJobProvider(connect=gone, on_log=logs.append).delete("raytrain-1-deadbeef", props())
    assert any("not stopped" in line and "no running Ray head pod" in line for line in logs), logs


@pytest.mark.parametrize("changed, replaces", [
    ({"train_args": TINY_ARGS + ["--seed", "1"]}, ["train_args"]),
    ({"run_id": "2"}, ["run_id"]),
    ({"pip": ["einops==0.8.1"]}, ["pip"]),
    ({"env_vars": {"NCCL_NET": "Socket"}}, ["env_vars"]),
    ({"timeout_s": 60.0}, []),
    ({"expect_transport": "socket"}, []),
    ({"kubeconfig": "apiVersion: v1\nkind: Config\nclusters: []\n"}, []),
])
def test_diff_replaces_only_on_a_new_job_definition(changed, replaces):
    olds = {**props(), "job_id": "raytrain-1-0", "status": "SUCCEEDED", "verdicts": {}}
    diff = ray_job.TrainingJobProvider().diff("raytrain-1-0", olds, props(**changed))
    assert diff.changes is True and diff.replaces == replaces, \
        f"changing {list(changed)} should replace {replaces}, got changes={diff.changes} replaces={diff.replaces}"
    assert diff.delete_before_replace is True, "the old job must be stopped before a new one takes the GPUs"
    unchanged = ray_job.TrainingJobProvider().diff("raytrain-1-0", olds, props())
    assert unchanged.changes is False and unchanged.replaces == [], "identical inputs: no change"


def test_provider_holds_no_secret_when_pickled():
    import dill

    restored = dill.loads(dill.dumps(ray_job.TrainingJobProvider(), recurse=True))
    assert restored._connect is None and restored._on_log is None, \
        "the pickled provider (stored in state) must carry no connector, client or token"
