"""A local model directory's weight files as untrusted input (workload/model/safetensors_files.py): a real file
passes; a sparse one, one cut short, one whose header is too long for it or is no JSON is refused naming what."""
from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from workload.model.safetensors_files import file_problem


def test_a_file_the_library_wrote_passes(tmp_path):
    save_file({"embed.weight": np.ones((4, 8), dtype=np.float32), "norm.weight": np.zeros(8, dtype=np.float32)},
              str(tmp_path / "model.safetensors"))
    assert file_problem(str(tmp_path / "model.safetensors")) is None


def test_a_file_cut_short_or_not_safetensors_is_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"embed.weight": np.ones((64, 64), dtype=np.float32)}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    assert "places its tensors up to byte 16,384 of its data, and the file holds 16,284" in file_problem(str(path))
    path.write_bytes((10**9).to_bytes(8, "little") + b"{}")
    assert "claims a header of 1,000,000,000 bytes in a file of 10" in file_problem(str(path))
    path.write_bytes((4).to_bytes(8, "little") + b"\xff\xfe{]")
    assert "not JSON" in file_problem(str(path))


@pytest.mark.skipif(not hasattr(os, "SEEK_HOLE"), reason="needs lseek SEEK_HOLE")
def test_a_sparse_file_is_measured_by_its_blocks(tmp_path):
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as file:
        file.truncate(2**40)  # a TiB claimed, nothing stored
    assert "is a sparse file: it claims 1,099,511,627,776 bytes" in file_problem(str(path))
