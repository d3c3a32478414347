"""A run's checkpoint saves, synchronous or asynchronous (--checkpoint_mode), one in flight at a time.

sync: the step waits while every rank writes its shards into its node's staging directory (workload.storage) and
`publish` (Ray Train's report) uploads them to the storage path.

async (the default), as torchtitan's `async_mode = "async"` (torchtitan/components/checkpointer/dcp.py: a gloo group
of its own, `dcp.async_save`, and `maybe_wait_for_saving` before the next save): the step waits only while the rank's
shards are copied to host memory (HostStager: DCP's own copier, pinned buffers kept from one save to the next on a GPU). A
thread then has DCP write them to the staging directory, publishes them (the upload) and removes the local copy,
while training goes on. A new save first waits for the one in flight, so host memory holds one copy and the storage
path gets the saves in order. A failed write or upload is raised in the training loop at the next step
(`raise_if_failed`) or at the latest by the next save or `wait`: a run never goes on with a silent gap in its
checkpoints. The last save of a run is synchronous (torchtitan's `_save_last_step` too), and `wait` is called before
it, so the job reports success only with every checkpoint stored.

The files are the same in both modes (tests/runs/test_checkpoint_async.py compares them), so a resume and workload.export
read either. Imports torch and the storage layer, not Ray: `publish` is the caller's.
"""
from __future__ import annotations

import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint._state_dict_stager import StateDictStager  # DefaultStager's copier (both versions)
from torch.distributed.checkpoint.staging import AsyncStager

from workload import storage
from workload.checkpoint import sharded
from workload.checkpoint.state_map import StateMap
from workload.config import CHECKPOINT_MODES


class HostStager(AsyncStager):
    """The rank's shards copied to host memory in the call, into buffers allocated at the first save and reused
    (pinned on a GPU, so later copies run at the PCIe's rate): DCP's DefaultStager with use_async_staging=False,
    less one thing. torch 2.11's DefaultStager closes its StateDictStager after every stage (staging.py `_stage`,
    "release reference cycle"), dropping the buffers, and its next stage fails (`KeyError: <class 'type'>`, the
    closed dispatch table); 2.13 keeps them. This one closes its StateDictStager once, in `close`."""

    _synchronize_after_execute = False  # stage returns once the copy is complete: nothing left to wait for

    def __init__(self, pinned: bool) -> None:
        self._pinned = pinned
        self._copier = StateDictStager(pin_memory=pinned, share_memory=False)

    def stage(self, state_dict: dict) -> dict:
        staged = self._copier.stage(state_dict, non_blocking=self._pinned)
        if self._pinned:
            torch.cuda.synchronize()  # the non-blocking copies are complete before the model may change
        return staged

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        self._copier.close()


Publish = Callable[[dict, str, int], None]
"""publish(metrics, local directory, step): hand a written checkpoint to the storage path (ray.train.report)."""


class CheckpointSaver:
    """Every rank builds one (a collective in async mode: the gloo group) and calls `save` at the same steps."""

    def __init__(self, mode: str, publish: Publish, progress: Callable[[str], None] = lambda line: None,
                 group_backend: str = "gloo") -> None:
        """group_backend: the async write's group; bench/record/checkpoint_bench.py's one rank passes "fake"."""
        assert mode in CHECKPOINT_MODES, mode
        self.mode = mode
        self._publish = publish
        self._progress = progress
        self._pending: Future | None = None
        self._states: StateMap | None = None
        self._group = self._stager = self._thread = None
        if mode == "async":
            # The write's collectives on gloo: on the training's NCCL communicator they would be ordered among the
            # steps' collectives from another thread, and a CPU process group is what async_save requires.
            self._group = dist.new_group(backend=group_backend)
            cuda = torch.cuda.is_available()
            self._stager = HostStager(pinned=cuda)
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")

    def save(self, metrics: dict, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, tokenizer: str = "",
             chat_template: str = "", last: bool = False) -> float:
        """Save the model's and the optimizer's state at `step`; returns the seconds the caller was held (the
        previous save's wait included). `last`: synchronous in either mode, complete when this returns."""
        started = time.perf_counter()
        self.wait()
        directory = storage.staging_directory(f"checkpoint-{step:06d}-")
        if self.mode == "sync" or last:
            try:
                sharded.save(directory, model, optimizer, step, tokenizer=tokenizer, chat_template=chat_template,
                             state=self._state(model, optimizer))
                self._publish(metrics, directory, step)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            return time.perf_counter() - started
        try:
            written = sharded.async_save(directory, model, optimizer, step, self._group, self._stager,
                                         tokenizer=tokenizer, chat_template=chat_template,
                                         state=self._state(model, optimizer))
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        blocked = time.perf_counter() - started
        self._pending = self._thread.submit(self._finish, written, metrics, directory, step, started)
        return blocked

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """What the save writes: DCP's get_state_dict at the first save, then rebuilt from the same references."""
        if self._states is None or not self._states.serves(model, optimizer):
            self._states = StateMap(model, optimizer)
        return self._states.state()

    def _finish(self, written: Future, metrics: dict, directory: str, step: int, started: float) -> None:
        try:
            written.result()
            self._publish(metrics, directory, step)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        self._progress(f"step {step} checkpoint written and stored in the background in "
                       f"{time.perf_counter() - started:.1f}s")

    def raise_if_failed(self) -> None:
        """Raise the save in flight's error, if it has failed; nothing while it runs or once it has succeeded."""
        if self._pending is not None and self._pending.done():
            self.wait()

    def wait(self) -> None:
        """Until the save in flight is written and stored; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except Exception as error:
                raise RuntimeError(f"an asynchronous checkpoint save failed, so the run stops rather than go on "
                                   f"without it: {type(error).__name__}: {error}") from error

    def close(self) -> None:
        """Complete the save in flight (raising its error) and release the thread, the group and the host buffers."""
        try:
            self.wait()
        finally:
            if self._thread is not None:
                self._thread.shutdown(wait=True)
                self._stager.close()
                dist.destroy_process_group(self._group)
                self._thread = None
