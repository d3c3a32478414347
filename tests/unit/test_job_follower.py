"""What a person sees while a submitted job's workers start (workload/run/submit.py's follower): a
`waiting for workers: N s` line every HEARTBEAT_S until the trainer's first line, then none. The job server is a
fake: `tail_job_logs` is an async generator of log chunks as Ray's JobSubmissionClient.tail_job_logs yields them
(ray/dashboard/modules/job/sdk.py: the websocket's text messages, each one or more lines), and the clock is injected,
so nothing sleeps."""
from __future__ import annotations

import asyncio

from workload.run import output, submit


class FakeClock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class SilentThenTraining:
    """A job whose log says nothing of its own for a while (Ray's scheduling lines), then trains."""

    def __init__(self, chunks: list[str]) -> None:
        self.chunks = chunks

    def tail_job_logs(self, job_id: str):
        async def stream():
            for chunk in self.chunks:
                await asyncio.sleep(0)  # the follower's ticker runs between messages, as between websocket frames
                yield chunk
        return stream()


RAY_NOISE = ["INFO worker.py:1 -- Connecting to existing Ray cluster", "(TrainController pid=7) Attempting to start "
             "training worker group of size 2", "(pid=8) Installing packages"]
TRAINING = ["(RayTrainWorker pid=9) training 'tiny' with --method full on 2 x cpu", "(RayTrainWorker pid=9) step 1/4"]


def test_a_heartbeat_every_ten_seconds_until_the_trainers_first_line(monkeypatch):
    monkeypatch.setattr(submit, "TICK_S", 0)
    seen: list[str] = []
    client = SilentThenTraining(RAY_NOISE * 4 + TRAINING + RAY_NOISE * 4)
    followed = submit.follow_log(client, "job-1", seen.append, timeout_s=None, clock=FakeClock(step=2.0))
    beats = [line for line in seen if line.startswith(output.HEARTBEAT_PREFIX)]
    first_training = seen.index(TRAINING[0])
    assert beats and all(seen.index(beat) < first_training for beat in beats), seen
    assert beats[0] == "waiting for workers: 10 s", beats
    seconds = [int(beat.split(": ")[1].split()[0]) for beat in beats]
    assert all(later - earlier >= submit.HEARTBEAT_S for earlier, later in zip(seconds, seconds[1:])), seconds
    assert followed.lines == len(RAY_NOISE) * 8 + len(TRAINING)


def test_no_heartbeat_when_training_starts_at_once_and_the_line_is_shown_quiet(monkeypatch):
    monkeypatch.setattr(submit, "TICK_S", 0)
    seen: list[str] = []
    submit.follow_log(SilentThenTraining(TRAINING + RAY_NOISE), "job-2", seen.append, None, clock=FakeClock(step=5.0))
    assert not [line for line in seen if line.startswith(output.HEARTBEAT_PREFIX)], seen
    shown: list[str] = []
    output.Progress(verbose=False, out=shown.append)("waiting for workers: 20 s")
    assert shown == ["waiting for workers: 20 s"], "the quiet local run must show the heartbeat"


def test_the_heartbeat_counts_from_its_start_with_the_injected_clock():
    said: list[str] = []
    clock = FakeClock(step=0.0)
    heartbeat = submit.Heartbeat(said.append, clock)
    for now in (3, 9.9, 10, 15, 20.5, 31):
        clock.now = now
        heartbeat.tick()
    assert said == ["waiting for workers: 10 s", "waiting for workers: 20 s", "waiting for workers: 31 s"]
    heartbeat.line("(RayTrainWorker pid=1) effective batch 8 sequences")
    clock.now = 60
    heartbeat.tick()
    assert len(said) == 3
