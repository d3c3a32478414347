"""The Jobs API path against a real `ray start --head` with token authentication on (workload.local's cluster):
a tiny training job succeeds and returns its summary; a failing job, a timeout and a wrong token fail clearly."""
from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
from ray.job_submission import JobStatus

from tests import listening_sockets
from workload import local, submit

# Ray Train's print patch stays at its default (on), as on a real cluster, so the test sees the progress lines a
# real job log gets.
FAST_RAY_TRAIN = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1", "RAY_DEDUP_LOGS": "0"}
TINY = ["--model_config", "tiny", "--steps", "3", "--batch_size", "2", "--seq_len", "32"]


@pytest.fixture(scope="module")
def head():
    """One cluster for the module. It is left the way Ctrl-C would leave it, and must then be down."""
    cluster = local.local_cluster()
    address, token = cluster.__enter__()
    yield address, token
    cluster.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
    port = int(address.rsplit(":", 1)[1])
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"job server on port {port} must be down after Ctrl-C"


def test_job_runs_through_the_jobs_api_and_returns_its_summary(head):
    address, token = head
    lines: list[str] = []
    result = submit.submit_training_job(address, TINY, token=token, env_vars=FAST_RAY_TRAIN, on_log=lines.append,
                                        timeout_s=300)
    assert result.status == "SUCCEEDED", f"tiny job: expected SUCCEEDED, got {result.status}"
    assert (result.summary["steps"], result.summary["world_size"], result.summary["device"]) == (3, 2, "cpu"), (
        f"summary: expected 3 steps on 2 cpu workers, got {result.summary}"
    )
    assert set(result.summary) == {"world_size", "device", "steps", "initial_loss", "final_loss", "eval_loss",
                                   "effective_batch", "tokens_seen", "tokens_per_s", "mfu", "start_step",
                                   "diverged_at_step", "checkpoint", "model", "tensorboard", "nccl_logs", "sharding",
                                   "fabric", "memory_plan"}, f"summary keys: got {sorted(result.summary)}"
    assert result.summary["memory_plan"] is None, "CPU workers plan no GPU memory (the host's is theirs)"
    assert result.summary["sharding"]["sharding"] == "full" and "one node" in result.summary["sharding"]["reason"], \
        f"2 CPU workers on one node: full sharding, and why: {result.summary['sharding']}"
    assert result.summary["fabric"]["ranks"] == 2 and result.summary["fabric"]["bus_gbytes_per_s"] > 0, \
        f"the fabric check runs by default, on gloo here: {result.summary['fabric']}"
    for step in (1, 2, 3):
        count = sum(f"step {step}/3 loss" in line for line in lines)
        assert count == 1, f"rank 0's progress line for step {step} must stream through on_log once, seen {count}"
    assert token not in result.logs and not any(token in line for line in lines), "the auth token must never be logged"


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads the listening sockets from Linux's /proc")
def test_every_listener_of_the_local_cluster_is_on_loopback(head):
    """Every TCP socket the cluster's processes listen on (GCS, raylet, the agents and their metrics, the client
    server, the dashboard, and the workers of the job just run) is bound to loopback, as `ss -ltnp` would show.
    The cluster's processes are those that inherited its own token file's path. (Not seen here: while training runs,
    rank 0's torch TCPStore, the process group's rendezvous, which torch binds to every interface.)"""
    address, _ = head
    server = listening_sockets.listener_of_port(int(address.rsplit(":", 1)[1]))
    members = listening_sockets.processes_with_env(listening_sockets.environment_entry(server, "RAY_AUTH_TOKEN_PATH"))
    found = listening_sockets.listeners(members)
    names = {listener.process.split()[0] for listener in found}
    assert any("gcs_server" in name for name in names) and any("raylet" in name for name in names), \
        f"the GCS and the raylet must be among the cluster's listeners: {sorted(names)}"
    exposed = [listener for listener in found if not listener.loopback]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_failing_job_raises_with_the_tail_of_its_log(head):
    address, token = head
    callers_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(callers_loop)
    try:
        with pytest.raises(submit.JobFailedError) as failure:
            submit.submit_training_job(address, [*TINY, "--seq_len", "100000"], token=token,
                                       on_log=lambda line: None, timeout_s=120)
        assert asyncio.get_event_loop() is callers_loop, "submit_training_job must leave the caller's event loop"
    finally:
        asyncio.set_event_loop(None)
        callers_loop.close()
    assert failure.value.status == "FAILED", f"expected status FAILED, got {failure.value.status}"
    assert "--seq_len" in failure.value.log_tail, "the log tail must show the driver's error naming --seq_len"
    assert failure.value.log_tail in str(failure.value), "the exception message must include the log tail"


@pytest.mark.parametrize("token", ["not-the-cluster-token", None])
def test_wrong_or_missing_token_is_refused_clearly(head, token):
    address, _ = head
    with pytest.raises(submit.JobAuthenticationError, match="refused") as refusal:
        submit.submit_training_job(address, TINY, token=token, on_log=lambda line: None)
    assert "not-the-cluster-token" not in str(refusal.value), "the refusal must not echo the token"


def test_timeout_stops_the_job(head):
    address, token = head
    with pytest.raises(submit.JobFailedError, match="timeout") as failure:
        submit.submit_training_job(address, TINY, token=token, on_log=lambda line: None, timeout_s=2)
    client = submit.connect(address, token)
    deadline = time.monotonic() + 60
    while client.get_job_status(failure.value.job_id) != JobStatus.STOPPED and time.monotonic() < deadline:
        time.sleep(0.5)
    assert client.get_job_status(failure.value.job_id) == JobStatus.STOPPED, "a timed-out job must be stopped"

