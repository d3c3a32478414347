"""The run's pieces without a Ray cluster: the driver's worker sizing and summary, the local run's flags and paths,
and the submission through the Jobs API against fake job servers (a dropped log stream, a stop, a retry, a deadline).
Runs in seconds."""
from __future__ import annotations

import json
import os
import sys

import pytest
import ray

from workload import train, trainer
from workload.config import TrainConfig
from workload.run import preflight, submit


def test_summary_is_the_last_summary_line():
    logs = "\n".join(["step 1", 'TRAIN_SUMMARY {"steps": 1}', "noise", 'TRAIN_SUMMARY {"steps": 2}', "bye"])
    assert submit.parse_summary(logs) == {"steps": 2}, "the driver's last TRAIN_SUMMARY line wins"
    assert submit.parse_summary("no summary here") is None


def test_unreachable_job_server_is_not_reported_as_an_auth_failure():
    from workload.run.local import free_port

    with pytest.raises(ConnectionError):
        submit.connect(f"http://127.0.0.1:{free_port()}", token="x")


def test_the_local_clusters_ports_are_distinct_and_not_the_ones_taken(monkeypatch):
    """The OS never offers a port that a socket holds, but offers a closed one again at once: the metrics port a test
    chose (its probe closed) came back as the dashboard's, and `ray start` refused it. The fake OS here offers the
    lowest port no socket holds."""
    import socket

    from workload.run import local

    held: set[int] = set()

    class Probe:
        def bind(self, address):
            self.port = min(port for port in range(5000, 6000) if port not in held)
            held.add(self.port)

        def getsockname(self):
            return ("127.0.0.1", self.port)

        def close(self):
            held.discard(self.port)

    monkeypatch.setattr(socket, "socket", Probe)
    chosen = local.free_port()
    assert local.free_port() == chosen, "the fake offers a closed port again, as the OS may"
    assert local.free_ports(4, taken=(chosen,)) == [5001, 5002, 5003, 5004], "distinct, and none of the taken ones"
    assert not held, "every probe is closed"


@pytest.mark.parametrize(
    "resources, num_workers, expected",
    [({"GPU": 8.0, "CPU": 96.0}, 0, (8, True)), ({"CPU": 2.0}, 0, (2, False)), ({"GPU": 8.0}, 3, (3, True)),
     ({"CPU": 16.0}, 4, (4, False))],
)
def test_workers_are_sized_from_the_clusters_gpus(monkeypatch, resources, num_workers, expected):
    monkeypatch.setattr(ray, "cluster_resources", lambda: resources)
    got = trainer.worker_count(TrainConfig(num_workers=num_workers))
    assert got == expected, f"cluster {resources}, --num_workers {num_workers}: expected {expected}, got {got}"


@pytest.mark.parametrize(
    "storage_path, stored_path, expected",
    [("s3://bucket/runs", "bucket/runs/r/checkpoint_000010", "s3://bucket/runs/r/checkpoint_000010"),
     ("/data/runs", "/data/runs/r/checkpoint_000010", "/data/runs/r/checkpoint_000010")],
)
def test_summary_checkpoint_is_a_usable_uri(storage_path, stored_path, expected):
    class Stored:
        path = stored_path

    class Result:
        checkpoint = Stored()

    final = {"world_size": 2, "device": "cpu", "steps": 10, "initial_loss": 6.0, "final_loss": 1.0, "eval_loss": None,
             "effective_batch": 4, "tokens_seen": 80, "tokens_per_s": 5.0, "mfu": None, "start_step": 0,
             "diverged_at_step": None, "model": None, "tensorboard": None, "nccl_logs": {}, "sharding": {},
             "fabric": None, "memory_plan": None}
    summary = trainer.summarize(TrainConfig(storage_path=storage_path), Result(), final)
    assert summary["checkpoint"] == expected, f"checkpoint under {storage_path}: expected {expected}"


def test_local_head_resolves_the_job_entrypoint_with_this_interpreter(monkeypatch, tmp_path):
    """`.venv/bin/python -m workload.local` runs without an activated venv: the job's `python -m workload.train`
    must find this interpreter (and its Ray), not whatever `python` comes first on the caller's PATH."""
    from workload.run import local

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "a-token-from-elsewhere")
    env = local.head_environment(str(tmp_path / "auth_token"), "127.0.0.1:6379")
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable), env["PATH"]
    assert (env["RAY_AUTH_MODE"], env["RAY_AUTH_TOKEN_PATH"]) == ("token", str(tmp_path / "auth_token"))
    assert "RAY_AUTH_TOKEN" not in env, "the head must use its own token file, not a token from the environment"


@pytest.mark.parametrize("flags, named", [
    (["--batch_size", "0"], "--batch_size"),
    (["--dataset", "no/such/file.txt"], "--dataset"),
    (["--seq_len", "100000"], "--seq_len"),
])
def test_local_run_refuses_bad_flags_before_starting_ray(monkeypatch, flags, named):
    from workload.run import local

    def no_cluster():
        raise AssertionError("the local Ray cluster must not start for a bad flag")

    monkeypatch.setattr(local, "local_cluster", no_cluster)
    with pytest.raises(ValueError, match=named):
        local.main(flags)


def test_the_local_run_on_random_tokens_evaluates_nothing():
    """README: `--dataset ''` trains on random tokens; the local defaults' held-out fifth goes with the corpus."""
    from workload.run import local

    cfg = local.parse_args(["--dataset", ""])
    assert (cfg.dataset, cfg.eval_fraction, cfg.eval_every) == ("", 0, 0), cfg
    assert local.parse_args([]).eval_fraction == local.LOCAL_DEFAULTS["eval_fraction"] > 0


def test_a_given_flag_wins_over_the_local_default_it_conflicts_with():
    """The local defaults are not the user's: --eval_split replaces the default held-out fraction, and an empty
    --storage_path is a run without checkpoints, instead of refusals naming --eval_fraction or --checkpoint_every,
    which the user never gave. A refusal on random tokens names only the evaluation flags set."""
    from workload.run import local

    cfg = local.parse_args(["--dataset", "org/chats", "--eval_split", "validation"])
    assert (cfg.eval_split, cfg.eval_fraction) == ("validation", 0), cfg
    cfg = local.parse_args(["--storage_path", ""])
    assert (cfg.storage_path, cfg.checkpoint_every) == ("", 0), cfg
    with pytest.raises(ValueError, match="--checkpoint_every needs --storage_path"):
        local.parse_args(["--storage_path", "", "--checkpoint_every", "5"])
    with pytest.raises(ValueError) as refused:
        local.parse_args(["--dataset", "", "--eval_split", "validation"])
    assert str(refused.value).endswith("or leave --eval_split unset"), refused.value


def test_local_run_passes_local_files_by_absolute_path(monkeypatch, tmp_path):
    """The job runs in an uploaded copy of workload/, so relative paths of this machine must not reach it."""
    from contextlib import contextmanager

    from workload.run import local

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text\n" * 100)  # enough for a block of --seq_len 64 a worker (the check before Ray)
    monkeypatch.chdir(tmp_path)
    submitted = {}

    @contextmanager
    def fake_cluster():
        yield "http://127.0.0.1:1", "token"

    def fake_submit(address, train_args, **kwargs):
        submitted["args"] = train_args
        raise KeyboardInterrupt  # stop here: only the arguments matter

    monkeypatch.setattr(local, "local_cluster", fake_cluster)
    monkeypatch.setattr(submit, "submit_training_job", fake_submit)
    monkeypatch.setattr(preflight, "validate", lambda cfg: None)  # no tokenizer for this corpus
    with pytest.raises(KeyboardInterrupt):
        local.main(["--dataset", "corpus.txt", "--storage_path", str(tmp_path / "runs")])
    args = submitted["args"]
    assert args[args.index("--dataset") + 1] == str(corpus), args


class _FakeJobClient:
    """A Jobs API client whose log stream breaks or is interrupted, to test what submit does then."""

    def __init__(self, stream_error: BaseException):
        from ray.job_submission import JobStatus

        self.stream_error, self.stopped, self.status = stream_error, [], JobStatus.SUCCEEDED

    def submit_job(self, **kwargs):
        return "job-1"

    async def tail_job_logs(self, job_id):
        yield "step 1/2 loss 6.0\n"
        raise self.stream_error

    def get_job_status(self, job_id):
        return self.status

    def get_job_logs(self, job_id):
        return 'step 1/2 loss 6.0\nTRAIN_SUMMARY {"final_loss": 5.9}\n'

    def get_job_info(self, job_id):
        raise AssertionError("not needed for a job that succeeded")

    def stop_job(self, job_id):
        self.stopped.append(job_id)


def test_a_dropped_log_stream_falls_back_to_waiting_for_the_job(monkeypatch):
    from workload.run import submit

    client = _FakeJobClient(RuntimeError("Websocket closed abnormally: 1006"))
    monkeypatch.setattr(submit, "connect", lambda address, token: client)
    lines = []
    result = submit.submit_training_job("http://127.0.0.1:1", ["--steps", "2"], on_log=lines.append)
    assert result.summary == {"final_loss": 5.9} and result.status == "SUCCEEDED", result
    assert any("log stream of job-1 lost" in line for line in lines), lines
    assert client.stopped == [], "a job that is still fine must not be stopped when only its log stream drops"


def test_an_interrupted_wait_stops_the_job(monkeypatch):
    from workload.run import submit

    client = _FakeJobClient(KeyboardInterrupt())
    monkeypatch.setattr(submit, "connect", lambda address, token: client)
    with pytest.raises(KeyboardInterrupt):
        submit.submit_training_job("http://127.0.0.1:1", ["--steps", "2"], on_log=lambda line: None)
    assert client.stopped == ["job-1"], "nobody waits for the job any more: it must not keep the GPUs"


def test_max_failures_accepts_ray_retry_forever_and_nothing_below():
    assert TrainConfig(max_failures=-1).max_failures == -1, "-1 is FailureConfig's 'retry forever'"
    with pytest.raises(ValueError, match="--max_failures"):
        TrainConfig(max_failures=-2)


def test_a_failed_local_job_still_prints_its_summary_and_exits_1(monkeypatch, capsys, tmp_path):
    """A diverged run fails its job; the local run still ends with the summary it printed, then one error line."""
    from contextlib import contextmanager

    from workload import cli
    from workload.run import local

    @contextmanager
    def fake_cluster():
        yield "http://127.0.0.1:1", "token"

    summary = {"steps": 3, "final_loss": None, "diverged_at_step": 3}

    def failing_submit(address, train_args, **kwargs):
        log = f"step 3/20 loss nan\nTRAIN_SUMMARY {json.dumps(summary)}\nerror: training diverged"
        raise submit.JobFailedError("raysubmit_x", "FAILED", log, reason="ended FAILED")

    monkeypatch.setattr(local, "local_cluster", fake_cluster)
    monkeypatch.setattr(submit, "submit_training_job", failing_submit)
    assert cli.run(local.main, ["--storage_path", str(tmp_path)]) == cli.CHECK_FAILED
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == f"TRAIN_SUMMARY {json.dumps(summary)}", captured.out
    # The reason in one line, and the hint (issue 25: a quiet run's log is behind --verbose) in a second.
    assert captured.err.strip().splitlines() == ["error: Ray job raysubmit_x ended FAILED",
                                                 "--verbose shows the job's whole log"], captured.err


def test_a_local_job_that_refuses_its_data_exits_2(monkeypatch, capsys, tmp_path):
    """The job's own exit 2 (a flag or the data refused once read: packs into 0 training blocks) is the local run's
    exit 2 too, as the same refusal before Ray would be; any other failure stays exit 1."""
    from contextlib import contextmanager

    from workload import cli
    from workload.run import local

    @contextmanager
    def fake_cluster():
        yield "http://127.0.0.1:1", "token"

    def refusing_submit(address, train_args, **kwargs):
        raise submit.JobFailedError("raysubmit_y", "FAILED", "error: --dataset x packs into 0 training blocks",
                                    reason="ended FAILED: Job entrypoint command failed with exit code 2")

    monkeypatch.setattr(local, "local_cluster", fake_cluster)
    monkeypatch.setattr(submit, "submit_training_job", refusing_submit)
    assert cli.run(local.main, ["--storage_path", str(tmp_path)]) == cli.USAGE
    assert "error: Ray job raysubmit_y ended FAILED" in capsys.readouterr().err


class _JobServerOf:
    """A Jobs API client over a table of jobs: {submission id: status}; 404 for any other id."""

    def __init__(self, jobs: dict[str, str]):
        self.jobs, self.submitted = dict(jobs), []

    def get_job_info(self, job_id):
        from ray.job_submission import JobStatus

        if job_id not in self.jobs:
            raise RuntimeError(f"Request failed with status code 404: Job {job_id} does not exist.")
        return type("JobDetails", (), {"status": JobStatus(self.jobs[job_id])})()

    def submit_job(self, *, entrypoint, runtime_env, submission_id, metadata):
        self.submitted.append((submission_id, entrypoint, metadata))
        self.jobs[submission_id] = "PENDING"
        return submission_id


@pytest.mark.parametrize("jobs, expected", [
    ({}, ("run-1", False)),                                            # a new run: submitted under its id
    ({"run-1": "RUNNING"}, ("run-1", True)),                           # cut off and run again: attached
    ({"run-1": "SUCCEEDED"}, ("run-1", True)),                         # already done: its result, not a rerun
    ({"run-1": "FAILED"}, ("run-1-2", False)),                         # a failed run: tried again
    ({"run-1": "STOPPED", "run-1-2": "FAILED", "run-1-3": "RUNNING"}, ("run-1-3", True)),
])
def test_a_run_is_submitted_once_and_tried_again_only_after_it_failed_or_was_stopped(jobs, expected):
    client = _JobServerOf(jobs)
    assert submit.start_job(client, ["--steps", "2"], submission_id="run-1", time_limit_s=3600,
                            metadata={"raytrain.stack": "dev"}) == expected, jobs
    submitted = [job_id for job_id, _, _ in client.submitted]
    assert submitted == ([] if expected[1] else [expected[0]]), f"submitted {submitted} for {jobs}"
    if client.submitted:
        _, entrypoint, metadata = client.submitted[0]
        assert entrypoint.endswith("--steps 2 --time_limit_s 3600") and metadata == {"raytrain.stack": "dev"}, \
            f"the job's own time limit and the stack's metadata go with it: {entrypoint} {metadata}"


class _JobServerStartingUp(_JobServerOf):
    """A job server whose head's job agent registers only after `refusals` submissions, answering the 500 that
    ray/dashboard/modules/job/job_head.py (submit_job) returns meanwhile."""

    def __init__(self, refusals: int, error: str = "No available agent to submit job, please try again later."):
        super().__init__({})
        self.refusals, self.error = refusals, error

    def submit_job(self, **kwargs):
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError(f"Request failed with status code 500: {self.error}.")
        return super().submit_job(**kwargs)


def test_a_job_server_whose_agent_is_not_up_yet_is_asked_again_and_other_errors_are_not(monkeypatch):
    monkeypatch.setattr(submit, "AGENT_RETRY_INTERVAL_S", 0.0)
    client = _JobServerStartingUp(refusals=3)
    assert submit.start_job(client, ["--steps", "2"], submission_id="run-1", time_limit_s=60) == ("run-1", False)
    assert [job_id for job_id, _, _ in client.submitted] == ["run-1"], "submitted once, after the agent came up"
    monkeypatch.setattr(submit, "AGENT_WAIT_S", 0.0)
    with pytest.raises(RuntimeError, match="No available agent"):
        submit.start_job(_JobServerStartingUp(refusals=1000), ["--steps", "2"], submission_id="run-1",
                         time_limit_s=60)
    broken = _JobServerStartingUp(refusals=1, error="runtime_env: invalid pip spec")
    with pytest.raises(RuntimeError, match="invalid pip spec"):
        submit.start_job(broken, ["--steps", "2"], submission_id="run-1", time_limit_s=60)
    assert broken.refusals == 0 and not broken.submitted, "another server error is not retried"


def test_the_deadline_interrupts_a_blocked_driver_and_says_it_was_the_time_limit():
    import threading

    deadline = train.Deadline(0.05)
    with pytest.raises(KeyboardInterrupt, match="time limit"):
        with deadline:
            threading.Event().wait(30)  # blocked, as the driver is in trainer.fit
    assert deadline.reached, "a time limit, not a Ctrl-C"
    with train.Deadline(None) as none:
        pass
    assert not none.reached, "no --time_limit_s: no deadline"


def test_an_interrupt_a_library_swallows_is_followed_by_another(monkeypatch):
    import threading

    monkeypatch.setattr(train, "REPEAT_S", 0.05)
    swallowed = []
    deadline = train.Deadline(0.05)
    with pytest.raises(KeyboardInterrupt, match="time limit"):
        with deadline:
            try:
                threading.Event().wait(30)
            except BaseException as error:  # what a careless library does with the first one
                swallowed.append(error)
            threading.Event().wait(30)  # blocked again: the next interrupt must come
    assert len(swallowed) == 1 and deadline.reached


def test_the_transport_report_is_found_behind_rays_worker_prefix():
    logs = ("step 1/9 loss 6.0\n\x1b[36m(RayTrainWorker pid=12)\x1b[0m TRAIN_TRANSPORT "
            '{"step": 2, "world_size": 2, "nccl_logs": {"0": ""}}\nstep 3/9 loss 5.0\n')
    assert submit.parse_transport(logs) == {"step": 2, "world_size": 2, "nccl_logs": {"0": ""}}
    assert submit.parse_transport("step 1/9 loss 6.0\n") is None
