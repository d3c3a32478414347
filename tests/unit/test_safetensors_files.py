"""A local model directory's weight files as untrusted input (workload/model/safetensors_files.py): a real file
passes; a sparse one, one cut short, one whose header is too long for it or is no JSON is refused naming what; and a
header's layout is refused exactly where the safetensors library itself refuses to open the file (a table of headers
held against safe_open)."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
from safetensors import safe_open
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
    assert "places its tensors in 16,384 bytes of data, and the file holds 16,284" in file_problem(str(path))
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


def _entry(dtype: str, shape: list, begin: int, end: int) -> str:
    return f'{{"dtype": "{dtype}", "shape": {shape}, "data_offsets": [{begin}, {end}]}}'


# Headers as raw JSON text (a name may be given twice), each with the data bytes after it.
HEADERS = {
    "two tensors in file order": ('{"w": ' + _entry("BF16", [3, 2], 0, 12) + ', "b": ' + _entry("I64", [1], 12, 20)
                                  + "}", 20),
    "listed out of file order": ('{"late": ' + _entry("U8", [5], 3, 8) + ', "early": ' + _entry("U8", [3], 0, 3)
                                 + "}", 8),
    "a name given twice": ('{"k": ' + _entry("F16", [2], 0, 4) + ', "k": ' + _entry("F16", [2], 4, 8) + "}", 8),
    "the same entry given twice": ('{"twin": ' + _entry("U8", [4], 0, 4) + ', "twin": ' + _entry("U8", [4], 0, 4)
                                   + "}", 4),
    "a gap between tensors": ('{"p": ' + _entry("I32", [1], 0, 4) + ', "q": ' + _entry("I32", [1], 8, 12) + "}", 12),
    "two tensors on the same bytes": ('{"p": ' + _entry("U16", [2], 0, 4) + ', "q": ' + _entry("U16", [2], 0, 4)
                                      + "}", 4),
    "a length its shape does not take": ('{"m": ' + _entry("F64", [3], 0, 16) + "}", 16),
    "an unknown dtype": ('{"m": ' + _entry("F128", [1], 0, 16) + "}", 16),
    "data past the last tensor": ('{"m": ' + _entry("I8", [4], 0, 4) + "}", 9),
    "a zero-length tensor": ('{"none": ' + _entry("F32", [0, 7], 0, 0) + ', "one": ' + _entry("F32", [1], 0, 4)
                             + "}", 4),
    "metadata beside the tensors": ('{"__metadata__": {"format": "pt"}, "v": ' + _entry("BOOL", [2], 0, 2) + "}", 2),
    "metadata holding a number": ('{"__metadata__": {"epoch": 3}, "v": ' + _entry("BOOL", [2], 0, 2) + "}", 2),
    "metadata that is a list": ('{"__metadata__": ["pt"], "v": ' + _entry("BOOL", [2], 0, 2) + "}", 2),
    "metadata that is null": ('{"__metadata__": null, "v": ' + _entry("BOOL", [2], 0, 2) + "}", 2),
}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_headers_layout_is_refused_where_the_library_refuses_it(tmp_path, name):
    text, data_bytes = HEADERS[name]
    header = text.encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(data_bytes))
    try:
        with safe_open(str(path), "np"):
            opened = True
    except Exception:  # noqa: BLE001  (safetensors' SafetensorError, whatever its class's home)
        opened = False
    if name == "the same entry given twice":  # the library keeps one; no writer names a tensor twice
        assert opened and "names twin twice in its header" in file_problem(str(path))
        return
    assert (file_problem(str(path)) is None) == opened, (name, opened, file_problem(str(path)))


@pytest.mark.parametrize("claim, refused", [
    (None, None), ("held", None), (0, None),
    ("held+1", "claims"), (2**62, "claims"), ("many", "no number of bytes"), (-8, "no number of bytes"),
])
def test_an_index_claiming_more_bytes_than_its_files_hold_is_refused(tmp_path, claim, refused):
    from workload.model.safetensors_index import claimed_size_problem

    shards = {"part-a.safetensors": np.ones((16, 4), dtype=np.float32), "part-b.safetensors": np.ones(9, np.int8)}
    for file_name, array in shards.items():
        save_file({file_name.split(".")[0]: array}, str(tmp_path / file_name))
    held = sum(os.path.getsize(tmp_path / file_name) for file_name in shards)
    total = held if claim == "held" else held + 1 if claim == "held+1" else claim
    metadata = {} if claim is None else {"total_size": total}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": metadata, "weight_map": {
        file_name.split(".")[0]: file_name for file_name in shards}}))
    problem = claimed_size_problem(str(tmp_path))
    assert (problem is None) == (refused is None), problem
    if refused:
        assert refused in problem and "model.safetensors.index.json" in problem
