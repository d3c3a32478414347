"""Python's garbage collector on the training's schedule instead of its own.

CPython collects when its allocation counters cross a threshold, so each rank pauses at a moment of its own. A
pause on one rank is a pause for all of them (the next collective waits for it), so with many ranks some rank is
paused in many steps: a straggler the GPUs pay for. torchtitan turns the automatic collector off and collects every
few steps instead ("used to avoid stragglers in garbage collection", torchtitan/tools/utils.py, GarbageCollection:
gc.disable(), then gc.collect(1) every gc_freq steps). Here every rank collects the young generations at the same
steps, and everything (the oldest generation too) where all ranks already wait together, before a checkpoint or an
evaluation, and every FULL_EVERY collections in any case, so that garbage old enough to have left the young
generations is freed in a run without either. `--gc_every 0` leaves Python's collector as it is.

Standard library only: benchmarks reuse it without Ray (bench/record/gc_bench.py).
"""
from __future__ import annotations

import gc

FULL_EVERY = 20  # young-generation collections per full one: every 1,000 steps at the default --gc_every 50


class StepCollector:
    """Owns the collector for a training loop: `after_step(done)` each step, `at_pause()` where all ranks wait
    together anyway, `close()` when the loop ends (the collector back to automatic)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.was_enabled = gc.isenabled()
        if every > 0:
            gc.collect()  # what setup left behind, once
            gc.disable()

    def after_step(self, done: int) -> None:
        if self.every > 0 and done % (self.every * FULL_EVERY) == 0:
            gc.collect()
        elif self.every > 0 and done % self.every == 0:
            gc.collect(1)

    def at_pause(self) -> None:
        if self.every > 0:
            gc.collect()

    def close(self) -> None:
        if self.was_enabled:
            gc.enable()
