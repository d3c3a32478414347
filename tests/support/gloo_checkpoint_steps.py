"""The spawned side of tests/runs/test_checkpoint_async.py: 2 gloo ranks train the tiny model (full, FSDP2) a step, then
save the same state twice, synchronously (sharded.save) and through the CheckpointSaver's asynchronous path, and
train on while the second is written. They then check the saver's contract: one save in flight (a second save waits
for the first's publish), a failed publish raised in the loop, and a resume from the asynchronous save. Rank 0 writes
what it saw to `out`; the test compares the directories. Kept apart so that each rank imports torch and the workload
only.
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import torch
import torch.distributed as dist

from tests.support.gloo_adapter_steps import full
from workload.checkpoint import sharded as checkpoint
from workload.checkpoint.saver import CheckpointSaver
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model.build import build_model
from workload.model.optimizer import build_optimizer
from workload.model.sharding import build_mesh, shard_model
from workload.model.step import train_step

WORLD = 2
CFG = TrainConfig(model_config="tiny", batch_size=2, seq_len=32, learning_rate=1e-2, steps=4)
# How long the slow publish takes: long enough that a save which did not wait for it would start inside it.
SLOW_PUBLISH_S = 0.5


def build():
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    sharded = shard_model(build_model(CFG, cpu), build_mesh(cpu), CFG, param_dtype=torch.float32)
    return sharded, build_optimizer(sharded, CFG)


def step(model, optimizer, rank: int, index: int) -> float:
    return train_step(model, optimizer, random_batches(CFG, 512, rank)(index), CFG).item()


def parameters(model) -> dict:
    return {name: full(parameter).detach().clone() for name, parameter in model.named_parameters()}


def worker(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    results: dict = {}
    events: list = []
    lock = threading.Lock()

    def publish(metrics: dict, directory: str, at: int) -> None:
        """As Ray Train's report does: copy the rank's files to the storage path (here a shared directory)."""
        with lock:
            events.append(("begin", at))
        if metrics.get("slow"):
            time.sleep(SLOW_PUBLISH_S)
        if metrics.get("fail"):
            raise OSError("the storage path refused the upload (stand-in)")
        shutil.copytree(directory, os.path.join(root, f"async_{at}"), dirs_exist_ok=True)
        with lock:
            events.append(("end", at))

    model, optimizer = build()
    step(model, optimizer, rank, 0)
    checkpoint.save(os.path.join(root, "sync_1"), model, optimizer, 1)
    results["saved"] = parameters(model)
    saver = CheckpointSaver("async", publish)
    saver.save({"step": 1, "slow": True}, model, optimizer, 1)
    # Training goes on while the save is written: what it changes must not reach the checkpoint.
    results["after"] = step(model, optimizer, rank, 1)
    saver.save({"step": 2}, model, optimizer, 2)  # waits for step 1's publish first
    saver.wait()
    results["events"] = list(events)

    saver.save({"step": 3, "fail": True}, model, optimizer, 3)
    for _ in range(200):  # the failure surfaces at a step's check once the thread is done
        try:
            saver.raise_if_failed()
        except RuntimeError as error:
            results["failure"] = str(error)
            break
        time.sleep(0.05)
    saver.close()

    dist.barrier()
    resumed, resumed_optimizer = build()
    results["resumed_step"] = checkpoint.load(os.path.join(root, "async_1"), resumed, resumed_optimizer)
    results["resumed"] = parameters(resumed)
    results["resumed_loss"] = step(resumed, resumed_optimizer, rank, 1)
    if rank == 0:
        torch.save(results, os.path.join(root, "results.pt"))
    dist.destroy_process_group()
