"""A checkpoint's `.metadata` read with stand-ins for DCP's classes (workload/checkpoint/metadata_claims.py): the items
it places in the shard files are exactly those torch's classes read, and a shard cut short is refused by
workload.export before torch is imported, in the words of reader.check_storage."""
from __future__ import annotations

import os
import pickle

import pytest

from tests.support.cli_process import run_cli
from tests.unit.test_checkpoint_bounds import saved  # noqa: F401  (the fixture: a tiny Qwen2's DCP checkpoint)
from workload.checkpoint import reader
from workload.checkpoint.metadata_claims import stored_items


def _shard(directory: str) -> str:
    return os.path.join(directory, next(name for name in os.listdir(directory) if name.endswith(".distcp")))


def test_the_stand_ins_read_the_items_torchs_classes_read(saved):  # noqa: F811
    with open(os.path.join(saved, ".metadata"), "rb") as file:
        data = file.read()
    real = reader.read_metadata(saved)
    expected = [(info.relative_path, info.offset, info.length) for info in real.storage_data.values()]
    assert len(expected) > 10 and stored_items(data) == expected


@pytest.mark.parametrize("data", [b"", b"not a pickle", pickle.dumps({"storage_data": "x"}), pickle.dumps([1, 2])])
def test_what_the_stand_ins_cannot_read_is_left_to_torchs_reader(data):
    assert stored_items(data) is None


def test_a_shard_cut_short_is_refused_before_torch_is_imported(saved, tmp_path):  # noqa: F811
    shard = _shard(saved)
    size = os.path.getsize(shard)
    with open(shard, "r+b") as file:
        file.truncate(size - 1000)
    code, stderr, loaded, _ = run_cli("workload.export", [saved, str(tmp_path / "out")], watch=("torch",))
    assert (code, loaded) == (2, []), stderr
    assert f"error: checkpoint file {os.path.join(saved, '.metadata')} places an item at bytes " in stderr
    assert f"of {os.path.basename(shard)}, which holds {size - 1000}" in stderr, stderr
