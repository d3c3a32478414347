"""The variables the job's libraries parse at import or start (workload/run/parsed_variables.py), held to the
libraries: the table is complete for every parse of the environment found in their sources, each refused value
really fails (or is misread) by the library's own parser and each allowed one passes, TORCH_LOGS's mirror agrees with
torch._logging's parser, and the local run refuses such a value before torch is imported, naming the variable."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workload.run import parsed_variables, variable_values

REPO = Path(__file__).resolve().parents[2]


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module.split(".")[0])
    assert spec and spec.submodule_search_locations, f"{module} is not installed"
    return (Path(next(iter(spec.submodule_search_locations))) / (module.split(".", 1)[1].replace(".", "/") + ".py")
            ).read_text()


# Every way these files parse a variable: a numeric parse or _is_true of os.environ.get / os.getenv, or a variable read
# into a name and compared, upper-cased, against ENV_VARS_TRUE_VALUES.
_PARSED = re.compile(r"\b(?:int|float|_as_int|_is_true)\(\s*os\.(?:environ\.get|getenv)\(\s*\"([A-Z0-9_]+)\"")
_COMPARED = re.compile(
    r"os\.(?:environ\.get|getenv)\(\s*\"([A-Z0-9_]+)\"[^)\n]*\)\s*\.upper\(\)\s*in\s+ENV_VARS_TRUE_VALUES")
_NAMED = re.compile(r"(\w+)\s*=\s*os\.(?:environ\.get|getenv)\(\s*\"([A-Z0-9_]+)\"\s*\)")
SOURCES = ("huggingface_hub.constants", "datasets.config", "transformers.utils.hub",
           "torch.distributed.distributed_c10d")


def _parsed_names(text: str) -> set[str]:
    names = set(_PARSED.findall(text)) | set(_COMPARED.findall(text))
    for variable, name in _NAMED.findall(text):  # _offline = os.environ.get(...); ... _offline.upper() in ENV_VARS...
        if re.search(rf"\b{re.escape(variable)}\.upper\(\)\s*in\s+ENV_VARS_TRUE", text):
            names.add(name)
    return names


@pytest.mark.parametrize("module", SOURCES)
def test_the_table_holds_every_variable_the_libraries_parse(module):
    found = _parsed_names(_source(module))
    assert found, f"{module}: no parse of the environment found; the patterns no longer match its source"
    missing = sorted(found - set(parsed_variables.VARIABLES))
    assert not missing, f"{module} parses {missing}, which workload/run/parsed_variables.py VARIABLES lacks"


def _import_fails(module: str, name: str, value: str) -> bool:
    env = {key: val for key, val in os.environ.items() if key != name} | {name: value}
    done = subprocess.run([sys.executable, "-c", f"import {module}"], env=env, capture_output=True, timeout=120)
    return done.returncode != 0


@pytest.mark.parametrize("module, name, refused, allowed", [
    ("huggingface_hub.constants", "HF_HUB_DOWNLOAD_TIMEOUT", "later", "30"),
    ("huggingface_hub.constants", "HF_HUB_ETAG_TIMEOUT", "1.5", "-0"),
    ("datasets.config", "HF_DATASETS_IN_MEMORY_MAX_SIZE", "2GB", "1e9"),
])
def test_a_refused_number_fails_the_librarys_import_and_an_allowed_one_passes(module, name, refused, allowed):
    assert parsed_variables.problem(name, refused) is not None, f"{name}={refused}: the rule passed it"
    assert parsed_variables.problem(name, allowed) is None, f"{name}={allowed}: the rule refused it"
    assert _import_fails(module, name, refused), f"import {module} passed with {name}={refused}"
    assert not _import_fails(module, name, allowed), f"import {module} failed with {name}={allowed}"


@pytest.mark.parametrize("value", ["enabled", "y", " 1", "True ", "2", "TRUE", "off", "No"])
def test_a_switch_is_refused_exactly_where_huggingface_hub_reads_neither_meaning(value):
    """_is_true's words (and their false counterparts) pass; any other word, which _is_true reads as off, is refused."""
    from huggingface_hub.constants import ENV_VARS_TRUE_VALUES, _is_true

    falses = {"0", "OFF", "NO", "FALSE"}
    why = parsed_variables.problem("HF_HUB_DISABLE_XET", value)
    assert (why is None) == (value.upper() in ENV_VARS_TRUE_VALUES | falses), f"{value!r}: {why}"
    if why is not None:
        assert not _is_true(value) and "neither on nor off" in why, f"{value!r}: {why}"


@pytest.mark.parametrize("value", ["VERBOSE", "detail", "Info", "off", "DETAIL ", "2", "OFF,INFO"])
def test_distributed_debug_agrees_with_c10d(monkeypatch, value):
    dist = pytest.importorskip("torch.distributed")
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", value)
    try:
        dist.set_debug_level_from_env()
        torch_refuses = False
    except (ValueError, RuntimeError):
        torch_refuses = True
    finally:
        monkeypatch.delenv("TORCH_DISTRIBUTED_DEBUG")
        dist.set_debug_level_from_env()
    assert (parsed_variables.problem("TORCH_DISTRIBUTED_DEBUG", value) is not None) == torch_refuses, value


@pytest.mark.parametrize("value", [
    "quietest", "+dynamo,graph_breaks", "-inductor", "all", "+all", "dynamo, recompiles", "help", "+help",
    "dynamo,,graph", "dynamo;graph", "torch._dynamo", "+torch.distributed.fsdp", "json", "graph_breaks,verbose",
    "dynamo.", "+", "recompiles_verbose,-dtensor,+fsdp",
])
def test_torch_logs_mirror_agrees_with_torchs_parser(value):
    internal = pytest.importorskip("torch._logging._internal")
    try:
        internal._parse_log_settings(value)
        torch_refuses = False
    except (ValueError, ModuleNotFoundError):
        torch_refuses = True
    assert parsed_variables.torch_logs_accepts(value) != torch_refuses, (
        f"TORCH_LOGS={value!r}: torch {'refuses' if torch_refuses else 'accepts'} it, the mirror does not")


def test_torch_logs_names_are_torchs_registry():
    """In a fresh process: parsing a module name (above) registers it as a log in this one."""
    pytest.importorskip("torch")
    script = ("import json, torch._logging._internal as i; r = i.log_registry; "
              "print(json.dumps([sorted(r.log_alias_to_log_qnames), sorted(r.artifact_names)]))")
    env = {key: val for key, val in os.environ.items() if key != "TORCH_LOGS"}
    names, artifacts = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                                 timeout=120, env=env, check=True).stdout)
    assert set(names) == parsed_variables.TORCH_LOG_NAMES, "torch's registered log names"
    assert set(artifacts) == parsed_variables.TORCH_LOG_ARTIFACTS, "torch's registered artifact names"


@pytest.mark.parametrize("name, value", [("TORCH_DIST_INIT_BARRIER", "yes"), ("TORCH_LOGS", "everything"),
                                         ("HF_HUB_DOWNLOAD_TIMEOUT", "a minute")])
def test_the_local_run_refuses_before_torch_is_imported(tmp_path, name, value):
    """A fresh process: exit 3 (this machine's set-up), one line naming the variable, torch never imported."""
    script = ("import sys\nfrom workload import cli\nfrom workload.run.local import main\n"
              "code = cli.run(main, ['--steps', '2', '--storage_path', 'runs'])\n"
              "print('torch imported' if 'torch' in sys.modules else 'torch not imported', code)\n")
    env = {key: val for key, val in os.environ.items() if key not in parsed_variables.VARIABLES}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env | {name: value, "PYTHONPATH": str(REPO)})
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.stdout.strip().endswith("torch not imported 3"), f"{name}={value}: {done.stdout!r}"
    assert len(lines) == 1 and name in lines[0], f"{name}={value}: {done.stderr[-400:]!r}"


def test_variable_values_applies_the_table():
    assert variable_values.problem({"HF_HUB_ETAG_TIMEOUT": "ten"}).startswith("HF_HUB_ETAG_TIMEOUT=ten: ")
    assert variable_values.problem({"HF_HUB_ETAG_TIMEOUT": "10", "TORCH_LOGS": "+dynamo"}) is None
