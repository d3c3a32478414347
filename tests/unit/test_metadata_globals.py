"""A checkpoint's `.metadata` pickle scanned for the globals it names, from its opcodes, before torch is imported
(workload/checkpoint/metadata_globals.py): a crafted one is refused by `workload.export` in the restricted
Unpickler's words without the seconds of imports, and a genuine DCP one passes."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from workload.checkpoint import metadata_globals

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Calls:
    """Unpickles into `function(*arguments)`: what a crafted checkpoint file holds."""

    def __init__(self, function, *arguments) -> None:
        self.function, self.arguments = function, arguments

    def __reduce__(self):
        return self.function, self.arguments


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_names_the_global_a_pickle_calls(protocol):
    # protocols 0-3 name it in GLOBAL's argument, 4 and 5 by STACK_GLOBAL over two pushed strings
    data = pickle.dumps({"storage_data": [Calls(shutil.rmtree, "/nonexistent")]}, protocol=protocol)
    assert metadata_globals.refused_global(data) == "shutil.rmtree", pickletools_listing(data)


def test_a_module_string_fetched_from_the_memo_is_followed():
    # the second function of one module reuses the memoized module string (BINGET), not a fresh push
    data = pickle.dumps([os.path.join, os.path.basename], protocol=4)
    assert "BINGET" in pickletools_listing(data), "the module string is pushed once"
    module = os.path.join.__module__
    assert metadata_globals.named_globals(data) == [(module, "join"), (module, "basename")], pickletools_listing(data)


def test_what_the_scan_cannot_name_is_left_to_the_unpickler():
    # garbage, and a STACK_GLOBAL over values it did not see pushed as strings: no refusal here (no false one)
    assert metadata_globals.named_globals(b"\x80\x04\x95garbage") == []
    assert metadata_globals.refused_global(b"\x80\x04N)\x93.") is None


def test_the_dtype_list_holds_every_dtype_of_the_installed_torch():
    torch = pytest.importorskip("torch")
    dtypes = {name for name in dir(torch) if isinstance(getattr(torch, name, None), torch.dtype)}
    assert dtypes <= metadata_globals.TORCH_DTYPES, f"add to TORCH_DTYPES: {sorted(dtypes - metadata_globals.TORCH_DTYPES)}"


def test_a_genuine_dcp_metadata_names_only_admitted_globals(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp

    state = {"model": {"weight": torch.ones(3, 2, dtype=torch.bfloat16)},
             "optimizer": {"param_groups": [{"lr": 0.5, "betas": (0.9, 0.95)}], "step": torch.tensor(3)}}
    dcp.save(state, checkpoint_id=str(tmp_path), no_dist=True)
    data = (tmp_path / ".metadata").read_bytes()
    named = metadata_globals.named_globals(data)
    assert ("torch.distributed.checkpoint.metadata", "Metadata") in named and ("torch", "bfloat16") in named, named
    assert metadata_globals.refused_global(data) is None, named


_EXPORT = r"""
import contextlib, io, json, os, pickle, sys
from workload import cli
from workload.checkpoint import export
root, marker = sys.argv[1], sys.argv[2]
class Calls:
    def __reduce__(self):
        return (eval, (f"open({marker!r}, 'w')",))
directory = os.path.join(root, "checkpoint_000004")
os.makedirs(directory)
with open(os.path.join(directory, ".metadata"), "wb") as handle:
    handle.write(pickle.dumps({"state_dict_metadata": Calls()}, protocol=2))
with open(os.path.join(directory, "config.json"), "w") as handle:
    handle.write(json.dumps({"model_type": "llama"}))
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = cli.run(export.main, [directory, os.path.join(root, "out")])
heavy = sorted(module for module in ("torch", "transformers") if module in sys.modules)
print(json.dumps({"code": code, "lines": err.getvalue().strip().splitlines(), "heavy": heavy, "path": directory}))
"""


def test_export_refuses_a_crafted_metadata_before_torch_in_the_unpicklers_words(tmp_path):
    marker = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-c", _EXPORT, str(tmp_path), str(marker)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    path = os.path.join(report["path"], ".metadata")
    assert report["code"] == 2 and report["lines"] == [
        "error: " + metadata_globals.refusal(path, "__builtin__.eval")], report
    assert report["heavy"] == [], f"refused only after importing {report['heavy']}"
    assert not marker.exists(), "the pickle's call ran"


def pickletools_listing(data: bytes) -> str:
    import io
    import pickletools

    listing = io.StringIO()
    pickletools.dis(data, out=listing)
    return listing.getvalue()
