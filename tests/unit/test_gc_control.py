"""The job's schedule for Python's garbage collector (workload/gc_control.py): off during training, the young
generations every --gc_every steps, everything at the pauses all ranks share, and back on afterwards; --gc_every 0
leaves Python's own schedule alone. Recorded through gc.callbacks, which see every collection and its generation."""
from __future__ import annotations

import gc

import pytest

from workload.config import TrainConfig, parse_args
from workload.gc_control import FULL_EVERY, StepCollector


@pytest.fixture
def collections():
    seen: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.enable()


def test_the_collector_runs_on_the_steps_schedule_and_is_restored(collections):
    collector = StepCollector(every=50)
    assert not gc.isenabled() and collections == [2], "setup's garbage collected once, then automatic collection off"
    for done in range(1, 151):
        cycles = [[] for _ in range(20)]  # 3,000 containers in all: past gen 0's threshold (700) several times
        for cycle in cycles:
            cycle.append(cycle)  # garbage only a collection frees
        del cycles
        collector.after_step(done)
    assert collections == [2, 1, 1, 1], f"the young generations at steps 50, 100 and 150, nothing automatic: " \
                                        f"{collections}"
    collector.at_pause()
    assert collections[-1] == 2, "a pause collects everything"
    del collections[:]
    for done in range(151, 50 * FULL_EVERY + 1):
        collector.after_step(done)
    assert collections[-1] == 2 and collections.count(2) == 1, (
        f"every {FULL_EVERY}th collection is a full one, pauses or not: {collections[-3:]}")
    collector.close()
    assert gc.isenabled(), "automatic collection back after the loop"


def test_gc_every_0_leaves_pythons_schedule(monkeypatch):
    called: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: called.append(generation))
    collector = StepCollector(every=0)
    for done in range(1, 101):
        collector.after_step(done)
    collector.at_pause()
    collector.close()
    assert gc.isenabled() and called == [], f"Python's own schedule, no collection of ours: {called}"


def test_the_flag_defaults_to_50_and_refuses_a_negative():
    assert TrainConfig().gc_every == 50 and parse_args(["--gc_every", "0"]).gc_every == 0
    with pytest.raises(ValueError, match="--gc_every must be at least 0"):
        TrainConfig(gc_every=-1)
