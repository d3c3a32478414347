"""The TrainingJob provider's create, diff, update and delete against a real Ray head on this machine.

One `ray start --head` with token auth for the module (workload.local's cluster). Kubernetes is the only thing
replaced: the connector yields the head's address through a LocalForward (the same local end the Kubernetes
port-forward uses) and the head's token. The CPU workload is really submitted, with the tiny model. A create that
succeeds is tests/runs/test_workload_submit.py's: its one job is created through this module's connector and provider, and
its metrics scraped while it runs.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
from urllib.parse import urlparse

import pytest

from infra.job import job_config, job_server, ray_job
from infra.kubernetes.portforward import LocalForward
from tests.support.local_ray import FAST_RAY_TRAIN

TINY_ARGS = ["--model_config", "tiny", "--steps", "2", "--batch_size", "2", "--seq_len", "32",
             "--learning_rate", "1e-3", "--num_workers", "2"]


@pytest.fixture(scope="module")
def ray_head():
    from workload.run.local import local_cluster

    with pytest.MonkeyPatch.context() as patch:
        # The head's processes inherit these; the client side must hold no token of its own.
        for name, value in FAST_RAY_TRAIN.items():
            patch.setenv(name, value)
        for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
            patch.delenv(name, raising=False)
        # A shell's RAY_ADDRESS of another cluster, which answers nothing: the local cluster's clients leave it aside
        # (it had the job client wait minutes on that GCS), and it is the shell's again afterwards.
        patch.setenv("RAY_ADDRESS", "127.0.0.1:1")
        with local_cluster() as (address, token):
            assert "RAY_ADDRESS" not in os.environ
            yield address, token
        assert os.environ["RAY_ADDRESS"] == "127.0.0.1:1"


class Connector:
    """The test's JobServerConnector: the real head through a LocalForward, with a chosen token."""

    def __init__(self, address: str, token: str | None) -> None:
        parsed = urlparse(address)
        self.remote = (parsed.hostname, parsed.port)
        self.token = token
        self.calls: list[bool] = []
        self.forwards: list[LocalForward] = []

    @contextlib.contextmanager
    def __call__(self, props, preflight=False):
        self.calls.append(preflight)
        with LocalForward(lambda: socket.create_connection(self.remote, timeout=30)) as forward:
            self.forwards.append(forward)
            yield job_server.JobServer(forward.address, self.token)

    def cut(self) -> None:
        """The connection lost, as when a port-forward dies: every open stream closed, new ones refused."""
        for forward in self.forwards:
            forward.close()


STACK = "test"


def props(**overrides) -> dict:
    """A job's inputs as the program makes them (the submission id derived from the run), plus `overrides`."""
    base = {
        "kubeconfig": "apiVersion: v1\nkind: Config\n",
        "namespace": "ray",
        "cluster_name": "ray-train",
        "auth_secret_name": "ray-train",
        "train_args": list(TINY_ARGS),
        "run_id": "1",
        "pip": [],
        "env_vars": {"NCCL_DEBUG_FILE": job_config.NCCL_DEBUG_FILE, **FAST_RAY_TRAIN},
        "timeout_s": 300.0,
        "expect_transport": "any",
        "gpus_per_worker": 4,
        "efa_per_worker": 1,
        "workers": 2,
        "stack": STACK,
        "wait": "finish",
        **overrides,
    }
    derived = job_config.submission_id(STACK, base["run_id"], base["train_args"], base["pip"], base["env_vars"])
    return {"submission_id": derived, **base}


def provider(ray_head, token="right", logs=None):
    address, real_token = ray_head
    connector = Connector(address, real_token if token == "right" else token)
    return ray_job.TrainingJobProvider(connect=connector, on_log=(logs.append if logs is not None else None)), \
        connector


def test_create_fails_when_the_verdict_disagrees_with_the_expectation(monkeypatch):
    """The CPU job has no NCCL lines, so this one job's result is given: rank 1 fell back to sockets."""
    from tests.support.fake_nccl_logs import nccl_job
    from workload.fabric import transport
    from workload.run import submit

    ranks = nccl_job(overrides={4: {"network": "Socket", "plugin": False}})
    nccl_logs = {str(rank.rank): "\n".join(filter(transport.is_transport_line, rank.lines)) for rank in ranks}
    summary = {"world_size": 8, "device": "cuda", "final_loss": 2.5, "tokens_per_s": 9000.0, "nccl_logs": nccl_logs}
    submitted = []

    def fake_start(client, train_args, **kwargs):
        submitted.append({**kwargs, "token": client})
        return "raytrain-1-abc", False

    monkeypatch.setattr(submit, "connect", lambda address, token: token)
    monkeypatch.setattr(submit, "start_job", fake_start)
    monkeypatch.setattr(submit, "wait_for_end", lambda client, job_id, on_log, timeout_s: submit.JobResult(
        job_id, "SUCCEEDED", summary, "step 50/50 loss 2.5\nTRAIN_SUMMARY {}"))
    connector = Connector("http://127.0.0.1:1", "token")
    job_provider = ray_job.TrainingJobProvider(connect=connector, on_log=lambda line: None)
    with pytest.raises(ray_job.TrainingJobError) as raised:
        job_provider.create(props(expect_transport="efa"))
    message = str(raised.value)
    assert "NCCL transport is wrong" in message and "4=socket" in message and "TRAIN_SUMMARY" in message, \
        f"create must fail naming rank 4's socket verdict, with the log tail: {message}"
    assert submitted[0]["env_vars"] == props()["env_vars"] and submitted[0]["token"] == "token" \
        and submitted[0]["time_limit_s"] == 300.0 and submitted[0]["submission_id"] == props()["submission_id"], \
        f"the job gets the resource's env, token, time limit and submission id: {submitted[0]}"
    created = job_provider.create(props(expect_transport="any"))
    assert created.outs["verdicts"]["4"] == "socket" and created.outs["verdicts"]["3"] == "efa", \
        f"expect=any never fails; the per-rank verdicts are outputs: {created.outs['verdicts']}"


def test_a_tcp_fallback_in_the_transport_report_stops_the_job_and_fails_create(monkeypatch):
    """trainWait=transport: rank 4 fell back to sockets after the first steps. Nothing may train on like that."""
    from tests.support.fake_nccl_logs import nccl_job
    from workload.fabric import transport
    from workload.run import submit

    ranks = nccl_job(overrides={4: {"network": "Socket", "plugin": False}})
    report = {"step": 2, "world_size": 8, "device": "cuda",
              "nccl_logs": {str(r.rank): "\n".join(filter(transport.is_transport_line, r.lines)) for r in ranks}}

    class Client:
        stopped: list[str] = []

        def stop_job(self, job_id):
            self.stopped.append(job_id)

    client = Client()
    monkeypatch.setattr(submit, "connect", lambda address, token: client)
    monkeypatch.setattr(submit, "start_job", lambda client, train_args, **kwargs: ("raytrain-test-1-abc", False))
    monkeypatch.setattr(submit, "wait_for_transport", lambda client, job_id, on_log, timeout_s: (
        report, "step 2/50 loss 2.9\n"))
    job_provider = ray_job.TrainingJobProvider(connect=Connector("http://127.0.0.1:1", "token"), on_log=lambda l: None)
    with pytest.raises(ray_job.TrainingJobError, match="after step 2 and was stopped.*4=socket"):
        job_provider.create(props(wait="transport", expect_transport="efa"))
    assert client.stopped == ["raytrain-test-1-abc"], "the job on sockets must be stopped, not left to run for days"


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
        job_provider.create(props(train_args=TINY_ARGS + ["--min_bus_gbytes_per_s", "900", "--fabric_check_seconds",
                                                          "0.1"], run_id="slow-fabric"))
    message = str(raised.value)
    assert "FAILED" in message and "fabric check: bus bandwidth" in message, message[-3000:]
    assert "below the expected minimum of 900 GB/s" in message and "trainMinBusBandwidthGBps" in message, \
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
    from workload.run.submit import connect

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
    ({"wait": "transport"}, []),
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


def test_a_job_created_before_submission_ids_were_derived_is_kept_on_upgrade():
    """State written by the previous provider has no submission_id, stack or wait: an update, not a new job."""
    olds = {key: value for key, value in props().items() if key not in ("submission_id", "stack", "wait")}
    olds.update(job_id="raytrain-1-0abc1234", status="SUCCEEDED", verdicts={}, final_loss=2.5)
    job_provider = ray_job.TrainingJobProvider()
    diff = job_provider.diff("raytrain-1-0abc1234", olds, props())
    assert diff.changes is True and diff.replaces == [], f"no new job on upgrade: {diff.replaces}"
    outs = job_provider.update("raytrain-1-0abc1234", olds, props()).outs
    assert (outs["job_id"], outs["final_loss"]) == ("raytrain-1-0abc1234", 2.5), "the job's results are kept"
    assert "tools.job logs raytrain-1-0abc1234" in outs["follow"], f"and it gets a follow command: {outs['follow']}"


# A job that runs until it is stopped (its own time limit is the backstop), under a run name of its own so that its
# jobs can be counted by their entrypoint, whoever submitted them.
LONG_ARGS = ["--model_config", "tiny", "--steps", "100000", "--batch_size", "2", "--seq_len", "32",
             "--learning_rate", "1e-3", "--num_workers", "2", "--run_name", "lost-connection"]


def jobs_of_run(client, run_name: str) -> list:
    return [job for job in client.list_jobs() if f"--run_name {run_name}" in job.entrypoint]


def test_submit_lose_the_connection_create_again_one_job_that_the_cli_follows_and_stops(ray_head, capsys):
    from tools import job as job_cli
    from workload import cli
    from workload.run.submit import connect

    address, token = ray_head
    client = connect(address, token)
    run = props(train_args=LONG_ARGS, run_id="lost", wait="transport", timeout_s=600.0)
    try:
        # 1. Submit, then lose the connection while create waits for the job: create fails, the job runs on.
        connector = Connector(address, token)
        first = ray_job.TrainingJobProvider(connect=connector, on_log=lambda line: "submitted" in line and connector.cut())
        with pytest.raises(OSError):
            first.create(dict(run))
        assert len(jobs_of_run(client, "lost-connection")) == 1, "the first create submitted one job"

        # 2. Create again (the next `pulumi up`): it attaches to that job and returns once every rank has reported
        # its transport, while the job runs on.
        logs: list[str] = []
        created = ray_job.TrainingJobProvider(connect=Connector(address, token), on_log=logs.append).create(dict(run))
        jobs = jobs_of_run(client, "lost-connection")
        print(f"\njobs of the run after the lost connection and a second create: {len(jobs)}", file=sys.stderr)
        assert [job.submission_id for job in jobs] == [created.id] == [run["submission_id"]], (
            f"one job, under the run's derived submission id: {[(j.submission_id, j.status) for j in jobs]}")
        assert any("attached to this run's job" in line for line in logs), logs[:5]
        assert created.outs["status"] == "RUNNING" and client.get_job_status(created.id).value == "RUNNING", (
            f"trainWait=transport returns while the job runs: {created.outs['status']}")
        assert created.outs["world_size"] == 2 and created.outs["follow"].startswith("python -m tools.job logs"), \
            created.outs
        assert ray_job.TrainingJobProvider(connect=Connector(address, token)).read(created.id, created.outs) \
            .outs["status"] == "RUNNING", "a refresh reads the job's status"

        # 3. The CLI lists it and follows it until it ends; a teammate stops it meanwhile (the stop runs in a thread,
        # once the job has made progress past its report: `logs --follow` blocks as long as the job runs).
        def job_command(argv: list[str]) -> int:
            return job_cli.main([*argv, "--stack", STACK], job_server=Connector(address, token))

        assert cli.run(job_command, ["list"]) == cli.OK
        listed = capsys.readouterr().out
        assert created.id in listed and "RUNNING" in listed, f"`list` shows the running job:\n{listed}"
        reported_at = len(client.get_job_logs(created.id).splitlines())
        stopped: list[int] = []

        def stop_after_progress() -> None:
            deadline = time.monotonic() + 120
            while len(client.get_job_logs(created.id).splitlines()) <= reported_at + 2:  # steps after the report
                if time.monotonic() > deadline:
                    return
                time.sleep(0.5)
            stopped.append(job_command(["stop"]))

        stopper = threading.Thread(target=stop_after_progress)
        stopper.start()
        followed = cli.run(job_command, ["logs", "--follow"])
        stopper.join(timeout=120)
        out, err = capsys.readouterr()
        steps = [int(m) for m in re.findall(r"step (\d+)/100000 loss", out)]
        assert stopped == [cli.OK] and f"job {created.id} STOPPED" in out, (
            f"`stop` waits until the job has stopped: {stopped}\n{out[-2000:]}")
        assert steps and max(steps) > 2, f"`logs --follow` streamed the job's progress past the report: {out[-2000:]}"
        assert followed == cli.CHECK_FAILED and f"error: job {created.id} STOPPED" in err, (
            f"`logs --follow` ends with the job, and a stopped job is exit 1: {followed}\n{err[-1000:]}")
        assert client.get_job_status(created.id).value == "STOPPED"
    finally:
        for job in jobs_of_run(client, "lost-connection"):
            client.stop_job(job.submission_id)


def test_the_job_stops_itself_at_its_time_limit(ray_head):
    """No `pulumi up` waits for it: the driver's own deadline ends the job (and Ray its workers)."""
    from workload.run import submit

    address, token = ray_head
    client = submit.connect(address, token)
    job_id, _ = submit.start_job(client, LONG_ARGS[:-2] + ["--run_name", "time-limit"], time_limit_s=5,
                                 env_vars=FAST_RAY_TRAIN)
    with pytest.raises(submit.JobFailedError) as failure:
        submit.wait_for_end(client, job_id, lambda line: None, timeout_s=180)
    assert failure.value.status == "FAILED" and "time limit of 5 s" in failure.value.log_tail, (
        f"the job must end itself at its limit, saying so: {failure.value}")


def test_the_job_runs_with_expandable_segments_unless_train_env_says_otherwise():
    assert job_config.job_env({})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    own = job_config.job_env({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512", "NCCL_DEBUG_FILE": "/dev/null"})
    assert own["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512" and own["NCCL_DEBUG_FILE"] == "/dev/null", \
        f"a user's own trainEnv value wins over the project's default: {own}"
