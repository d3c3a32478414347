"""`pulumi refresh` of the training job (TrainingJobProvider.read) never makes the next `up` repeat a finished job.

A RayCluster made anew (a changed spec, the head replaced) forgets every job its job server ran, and a head that is
down cannot be asked: in both cases a job the state records as ended keeps its stored outputs, so the resource stays
and the next `up` sees no change. Only a job recorded as unfinished is dropped (the next `up` runs it again). The job
server is tests/support/fake_ray_jobs.py, speaking the Ray Jobs API to Ray's own JobSubmissionClient.
"""
from __future__ import annotations

import contextlib

import pytest

from infra.job import ray_job
from infra.job.job_server import JobServer
from tests.support.fake_ray_jobs import FakeJob, FakeRayJobServer, training_log

TOKEN = "refresh-token"
JOB_ID = "raytrain-dev-run-1-abc"
STORED = {"submission_id": JOB_ID, "job_id": JOB_ID, "stack": "dev", "run_id": "run-1", "namespace": "ray",
          "cluster_name": "ray-train", "final_loss": 2.0, "tokens_per_s": 78000.0, "world_size": 8,
          "verdicts": {"0": "efa"}, "follow": "python -m tools.job logs", "train_args": ["--steps", "4"]}


@pytest.fixture(scope="module")
def server():
    with FakeRayJobServer(TOKEN) as running:
        yield running


def provider(server: FakeRayJobServer, logs: list[str]) -> ray_job.TrainingJobProvider:
    @contextlib.contextmanager
    def connect(_props, _preflight):
        yield JobServer(server.address, TOKEN)

    return ray_job.TrainingJobProvider(connect=connect, on_log=logs.append)


@pytest.mark.parametrize("status", sorted(ray_job.ENDED_STATUSES))
def test_a_finished_job_unknown_to_a_new_ray_cluster_keeps_its_results(server, status):
    server.jobs.clear()
    logs: list[str] = []
    result = provider(server, logs).read(JOB_ID, {**STORED, "status": status})
    assert result.id == JOB_ID and result.outs == {**STORED, "status": status}, result.outs
    assert any("stored results are kept" in line for line in logs), logs


def test_an_unfinished_job_unknown_to_the_job_server_is_dropped_so_up_runs_it_again(server):
    server.jobs.clear()
    result = provider(server, []).read(JOB_ID, {**STORED, "status": "RUNNING"})
    assert (result.id, result.outs) == ("", {})


def test_an_unreachable_job_server_keeps_the_state(server):
    @contextlib.contextmanager
    def unreachable(_props, _preflight):
        raise ConnectionRefusedError("port-forward to ray/ray-train-head-svc: connection refused")
        yield  # pragma: no cover

    logs: list[str] = []
    stored = {**STORED, "status": "RUNNING"}
    result = ray_job.TrainingJobProvider(connect=unreachable, on_log=logs.append).read(JOB_ID, stored)
    assert (result.id, result.outs) == (JOB_ID, stored)
    assert any("cannot be reached" in line and "stored state is kept" in line for line in logs), logs


def test_a_job_the_server_knows_is_read_as_before(server):
    lines = training_log("python3 -m workload.train --steps 4")
    server.jobs.clear()
    server.jobs[JOB_ID] = FakeJob(JOB_ID, "python3 -m workload.train --steps 4", {}, lines, shown=len(lines),
                                  status="SUCCEEDED")
    result = provider(server, []).read(JOB_ID, {**STORED, "status": "RUNNING", "final_loss": None})
    assert result.id == JOB_ID and result.outs["status"] == "SUCCEEDED"
    assert result.outs["final_loss"] == 2.0 and result.outs["world_size"] == 8, result.outs
