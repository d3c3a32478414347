"""The tests' gloo ranks (tests/runs/test_parallel.py, test_model_families.py, test_adapters.py): processes forked from
multiprocessing's fork server, which loads torch and its distributed packages once for the pytest worker, instead of
each rank importing them afresh as a spawned process does (about 3 of a rank's 5 CPU-seconds of imports).

The fork server is a fresh process that has run nothing but those imports (no torch op, so no OpenMP pool; no Ray or
gRPC thread), which is what makes forking it safe where forking pytest's process is not. It was started with the
environment of its first use: each rank takes the environment of the test that starts it (HF_HOME, for one) before
it imports anything else.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
from typing import Callable

import torch.multiprocessing as mp

# What every rank imports first; nothing that reads the environment when imported (huggingface_hub reads HF_HOME).
PRELOAD = ["torch", "torch.distributed.checkpoint", "torch.distributed.fsdp", "torch.distributed.tensor"]


def _in_the_callers_environment(rank: int, environment: dict, module: str, name: str, *args) -> None:
    os.environ.clear()
    os.environ.update(environment)
    getattr(importlib.import_module(module), name)(rank, *args)  # imported only now, in that environment


def spawn(function: Callable, args: tuple, nprocs: int) -> None:
    """torch.multiprocessing.spawn's contract (function(rank, *args) in each of nprocs processes; raises what a rank
    raised), with the ranks forked from the preloaded fork server. `function` is passed by name: a rank imports its
    module once its environment is the caller's. `args` are plain values."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    mp.start_processes(_in_the_callers_environment, nprocs=nprocs, start_method="forkserver",
                       args=(dict(os.environ), function.__module__, function.__qualname__, *args))
