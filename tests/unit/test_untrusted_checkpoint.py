"""A checkpoint is untrusted input (workload/checkpoint/reader.py): a crafted one is refused, with one line naming
the file, and nothing in it runs, on the resume path (workload.checkpoint.sharded.load, which every resuming worker calls
under a process group) and through `python -m workload.export`. A genuine one still loads exactly.

The checkpoints are real DCP checkpoints of a small model and its AdamW state (the `{"model", "optimizer"}` layout
workload/checkpoint/sharded.py saves), then tampered with as an attacker who can write the storage prefix would: a
`.metadata` whose pickle calls os.system, or a non-tensor value (a param_group's lr) replaced by such a pickle.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import shlex
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict

from workload import cli
from workload.checkpoint import export
from workload.checkpoint import reader as checkpoint_reader
from workload.checkpoint import sharded as checkpoint
from workload.config import TINY


class RunsCommand:
    """Unpickles into os.system(command): what a crafted checkpoint file holds."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return model, optimizer


def _saved(directory: str) -> dict[str, torch.Tensor]:
    """A genuine checkpoint in workload/checkpoint/sharded.py's layout; returns the model weights it holds."""
    model, optimizer = _model_and_optimizer()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({checkpoint.MODEL_KEY: model_state, "optimizer": optimizer_state}, checkpoint_id=directory,
                 no_dist=True)
    with open(os.path.join(directory, checkpoint.STEP_FILE), "w") as file:
        json.dump({"step": 3, "tokenizer": ""}, file)
    return {name: tensor.detach().clone() for name, tensor in model_state.items()}


@pytest.fixture
def process_group(tmp_path):
    """One gloo rank: DCP then loads as on the cluster's workers, through its collectives."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _crafted_metadata(directory: str, marker: str) -> list[str]:
    """A `.metadata` whose pickle runs a command; returns what the refusal must name (the file, what it called)."""
    path = os.path.join(directory, checkpoint_reader.METADATA_FILE)
    with open(path, "wb") as file:
        pickle.dump(RunsCommand(f"touch {shlex.quote(marker)}"), file)
    return [path, "posix.system"]


def _crafted_value(directory: str, marker: str) -> list[str]:
    """Replace one non-tensor value (the optimizer's lr) by a torch.save'd object that runs a command when loaded
    with weights_only=False: appended to its shard file, and the (genuine) metadata pointed at it. Returns what the
    refusal must name (the checkpoint, the value)."""
    metadata = checkpoint_reader.read_metadata(directory)
    fqn = next(name for name, item in metadata.state_dict_metadata.items()
               if isinstance(item, BytesStorageMetadata) and name.endswith(".lr"))
    index = next(index for index in metadata.storage_data if index.fqn == fqn)
    payload = io.BytesIO()
    torch.save(RunsCommand(f"touch {shlex.quote(marker)}"), payload)
    info = metadata.storage_data[index]
    shard = os.path.join(directory, info.relative_path)
    offset = os.path.getsize(shard)
    with open(shard, "ab") as file:
        file.write(payload.getvalue())
    metadata.storage_data[index] = dataclasses.replace(info, offset=offset, length=len(payload.getvalue()))
    with open(os.path.join(directory, checkpoint_reader.METADATA_FILE), "wb") as file:
        pickle.dump(metadata, file)
    return [directory, fqn]


def test_a_genuine_checkpoint_loads_exactly(tmp_path):
    saved = _saved(str(tmp_path))
    loaded = checkpoint.read_model_state(str(tmp_path))
    assert loaded.keys() == saved.keys(), f"the model's weights, by name: {sorted(loaded)}"
    assert all(torch.equal(loaded[name], saved[name]) for name in saved), "weights must load exactly"


@pytest.mark.parametrize("craft", [_crafted_metadata, _crafted_value])
def test_resuming_from_a_crafted_checkpoint_is_refused_without_running_it(craft, tmp_path, process_group):
    directory, marker = str(tmp_path / "checkpoint_000003"), str(tmp_path / "ran")
    _saved(directory)
    words = craft(directory, marker)
    model, optimizer = _model_and_optimizer()
    with pytest.raises(checkpoint_reader.CheckpointRefused) as refusal:
        checkpoint.load(directory, model, optimizer)
    assert not os.path.exists(marker), f"{craft.__name__}: the crafted pickle must not run"
    message = str(refusal.value)
    assert all(word in message for word in words) and "\n" not in message, \
        f"one line naming {words}, not DCP's per-rank tracebacks: {message}"


def test_exporting_a_crafted_checkpoint_exits_2_with_one_line(tmp_path, capsys):
    from transformers import Qwen2Config

    directory, marker = str(tmp_path / "checkpoint_000003"), str(tmp_path / "ran")
    _saved(directory)
    Qwen2Config(**TINY).save_pretrained(directory)  # what export builds the model from, before it reads the shards
    path = _crafted_metadata(directory, marker)[0]
    code = cli.run(export.main, [directory, str(tmp_path / "model")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert not os.path.exists(marker), "workload.export must not run the checkpoint's pickle"
    assert code == cli.USAGE and len(lines) == 1 and path in lines[0], \
        f"exit 2 and one line naming {path}; got {code}: {lines}"
    assert not os.path.exists(tmp_path / "model"), "nothing is written from a refused checkpoint"
