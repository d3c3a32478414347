"""Environment values the job's processes refuse where they start (workload/run/variable_values.py AT_START and
workload/run/allocator_settings.py): the interpreter's PYTHONHASHSEED, PYTHONUTF8, PYTHONTRACEMALLOC and
PYTHONIOENCODING, and torch's PYTORCH_CUDA_ALLOC_CONF. Each rule is held to the program that refuses: this machine's
own Python started with the value, and torch's own parser of the allocator's common options. The local run refuses
them before Ray starts, exit 3, naming the variable."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.test_mistakes_before_ray import LOCAL, _run, here  # noqa: F401  (here: the fixture)
from workload import cli
from workload.run import allocator_settings, variable_values


@pytest.mark.parametrize("name, value", [
    ("PYTHONHASHSEED", "4294967296"), ("PYTHONHASHSEED", "-3"), ("PYTHONHASHSEED", "0x1f"), ("PYTHONHASHSEED", "Random"),
    ("PYTHONHASHSEED", "12seeds"), ("PYTHONHASHSEED", "4294967295"), ("PYTHONHASHSEED", "random"),
    ("PYTHONHASHSEED", " 7"), ("PYTHONHASHSEED", "+12"), ("PYTHONHASHSEED", "0"),
    ("PYTHONUTF8", "true"), ("PYTHONUTF8", "2"), ("PYTHONUTF8", " 1"), ("PYTHONUTF8", "on"), ("PYTHONUTF8", "1"),
    ("PYTHONUTF8", "0"),
    ("PYTHONTRACEMALLOC", "many"), ("PYTHONTRACEMALLOC", "65536"), ("PYTHONTRACEMALLOC", "-2"),
    ("PYTHONTRACEMALLOC", "65535"), ("PYTHONTRACEMALLOC", "25"), ("PYTHONTRACEMALLOC", "0"),
    ("PYTHONIOENCODING", "utf-9"), ("PYTHONIOENCODING", "latin-1"), ("PYTHONIOENCODING", "utf-8:surrogateescape"),
    ("PYTHONIOENCODING", ":replace"),
])
def test_the_rule_agrees_with_the_interpreter(name, value):
    """The rule refuses exactly what this machine's Python refuses at start (a Fatal Python error)."""
    started = subprocess.run([sys.executable, "-c", "pass"], env={**os.environ, name: value}, capture_output=True,
                             timeout=30)
    why = variable_values.start_problem(name, value)
    assert (why is not None) == (started.returncode != 0), (
        f"{name}={value!r}: Python exited {started.returncode} ({started.stderr[:120]!r}), the rule said {why!r}")
    if why is not None:
        assert why.startswith(name) and "Python refuses to start" in why, why


COMMON_OPTIONS = [
    "expandable_segments:yes", "expandable_segments:false", "expandable_segments:True", "expandable_segments:False",
    "garbage_collection_threshold:0", "garbage_collection_threshold:1", "garbage_collection_threshold:0.95",
    "garbage_collection_threshold:2e-1", "garbage_collection_threshold:half",
    "max_split_size_mb:19", "max_split_size_mb:20", "max_split_size_mb:1024", "max_split_size_mb:big",
    "max_non_split_rounding_mb:8", "max_non_split_rounding_mb:64",
    "roundup_power2_divisions:6", "roundup_power2_divisions:8", "roundup_power2_divisions:[128:2,>:8]",
    "roundup_power2_divisions:[100:2]", "roundup_power2_divisions:[64:3,>:4]", "roundup_power2_divisions:[256:0,>:1]",
    "expandable_segments:False, max_split_size_mb:256", "max_split_size_mb:128,garbage_collection_threshold:0.7",
    "max_split_size_mb:128;garbage_collection_threshold:0.7",
]


@pytest.mark.parametrize("value", COMMON_OPTIONS)
def test_the_allocator_rule_agrees_with_torchs_parser(value):
    """torch's own parser of the options every accelerator shares (c10/core/AllocatorConfig.cpp), in this process."""
    torch = pytest.importorskip("torch")
    parse = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if parse is None:
        pytest.skip("this torch has no accelerator allocator settings")
    try:
        parse(value)
        refused = None
    except (RuntimeError, ValueError, IndexError) as error:
        refused = str(error).splitlines()[0]
    finally:
        parse("")
    why = allocator_settings.problem(value)
    assert (why is None) == (refused is None), f"{value!r}: torch said {refused!r}, the rule said {why!r}"


@pytest.mark.parametrize("value, words", [
    ("backend:jemalloc", "backend takes native or cudaMallocAsync, got 'jemalloc'"),
    ("pinned_num_register_threads:256", "a power of 2 up to 128"),
    ("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb takes a whole number above 0"),
    ("expandable_segment:True", "'expandable_segment' is not one of torch's allocator options"),
    ("expandable_segments", "expandable_segments has no value"),
    ("expandable_segments=True", "is not one of torch's allocator options"),
])
def test_the_cuda_only_options_and_the_form(value, words):
    """What only the CUDA build checks (c10/cuda/CUDAAllocatorConfig.cpp): the backend, the pinned options, a key it
    does not know; and the option:value form."""
    why = allocator_settings.problem(value)
    assert why is not None and words in why, f"{value!r}: {why!r}"


@pytest.mark.parametrize("name, value, words", [
    ("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:1.2",
     "PYTORCH_CUDA_ALLOC_CONF (32 characters): torch's CUDA allocator refuses it"),
    ("PYTORCH_ALLOC_CONF", "expandable_segments:on", "expandable_segments takes True or False, got 'on'"),
    ("PYTHONHASHSEED", "seed42", 'PYTHONHASHSEED=seed42: Python refuses to start with it: set "random" or an integer'),
])
def test_the_local_run_refuses_them_before_ray(here, capsys, monkeypatch, name, value, words):  # noqa: F811
    monkeypatch.setenv(name, value)
    code = _run(LOCAL, ["--steps", "3"])
    err = capsys.readouterr().err
    assert code == cli.ENVIRONMENT and words in err and len(err.splitlines()) <= 2, f"{name}: exited {code}:\n{err}"
