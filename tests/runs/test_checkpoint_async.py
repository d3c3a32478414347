"""Asynchronous checkpoint saves (workload/checkpoint/saver.py, --checkpoint_mode async) write what a synchronous
save writes, bit for bit, while training goes on; one save is in flight at a time, a failed upload stops the run,
and a run resumes from an asynchronous save as from a synchronous one. Two gloo ranks on CPU
(tests/support/gloo_checkpoint_steps.py)."""
from __future__ import annotations

import filecmp
import os

import pytest
import torch

from tests.support import gloo_spawn
from tests.support.gloo_checkpoint_steps import WORLD, worker
from tests.support.gloo_layout_steps import free_port
from workload.checkpoint import reader


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoint-async")
    gloo_spawn.spawn(worker, args=(free_port(), str(root)), nprocs=WORLD)
    return torch.load(root / "results.pt", weights_only=False), root


def test_an_async_save_writes_the_sync_saves_files_bit_for_bit(run):
    results, root = run
    synchronous, asynchronous = root / "sync_1", root / "async_1"
    names = sorted(os.listdir(synchronous))
    assert names == sorted(os.listdir(asynchronous)), "the same files: every rank's shards and rank 0's record"
    assert [name for name in names if name.endswith(".distcp")] == ["__0_0.distcp", "__1_0.distcp"], names
    # .metadata names its own checkpoint_id and a save id; what it says of the state must be the same.
    same = [name for name in names if name != reader.METADATA_FILE]
    _, mismatch, errors = filecmp.cmpfiles(synchronous, asynchronous, same, shallow=False)
    assert not mismatch and not errors, f"files that differ between the sync and the async save: {mismatch + errors}"
    sync_metadata, async_metadata = reader.read_metadata(synchronous), reader.read_metadata(asynchronous)
    assert sync_metadata.state_dict_metadata == async_metadata.state_dict_metadata
    assert sync_metadata.storage_data == async_metadata.storage_data


def test_training_goes_on_during_the_save_without_reaching_it(run):
    results, root = run
    assert results["resumed_step"] == 1
    for name, saved in results["saved"].items():
        assert torch.equal(results["resumed"][name], saved), f"{name}: the async checkpoint holds the state at its save"
    # The resumed run's next step is the uninterrupted run's (the optimizer's moments came back too).
    assert results["resumed_loss"] == results["after"]


def test_one_save_is_in_flight_at_a_time(run):
    results, _ = run
    assert results["events"] == [("begin", 1), ("end", 1), ("begin", 2), ("end", 2)], results["events"]


def test_a_failed_upload_stops_the_run_with_its_reason(run):
    results, _ = run
    assert "asynchronous checkpoint save failed" in results.get("failure", ""), results.get("failure")
    assert "refused the upload" in results["failure"]


def test_the_host_buffers_are_kept_from_one_save_to_the_next():
    """A save copies into the buffers the first one allocated, and staging twice works: torch 2.11's DefaultStager
    closed its copier after every stage, so its second save failed (`KeyError: <class 'type'>`) and re-allocated."""
    from workload.checkpoint.saver import HostStager

    weights = {"model": {"w": torch.arange(6.0)}, "optimizer": {"state": {"step": torch.tensor(3.0)}, "lr": 0.1}}
    stager = HostStager(pinned=False)
    try:
        first = stager.stage(weights)
        weights["model"]["w"].add_(1)
        second = stager.stage(weights)
    finally:
        stager.close()
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr(), "the second save allocated anew"
    assert torch.equal(second["model"]["w"], torch.arange(6.0) + 1), "the buffer holds the second save's values"
    assert second["model"]["w"].data_ptr() != weights["model"]["w"].data_ptr(), "a copy, not the live tensor"
    assert second["optimizer"]["lr"] == 0.1
