"""bench/'s rooms as bench/README.md describes them: every benchmark of record and exploration says what it is, is in
the README's table, and parses --help without a GPU; the step-time model imports no benchmark, and no benchmark
imports an exploration; only the benchmarks that run the job under Ray Train, or the data stage under Ray Data, import ray."""
from __future__ import annotations

import ast
import contextlib
import importlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
ROOMS = ("model", "record", "explore")
# What each room may import of bench/: the model is the floor, common sits on it, the benchmarks on both.
MAY_IMPORT = {"model": {"model"}, "common": {"model"}, "record": {"model", "common", "record"},
              "explore": {"model", "common", "record", "explore"}}
# They run the job under Ray Train, or (data_scale) the data stage, Ray Data on a local cluster.
RAY_USERS = {"bench.record.scaling", "bench.record.emulate", "bench.record.data_scale"}


def modules(*rooms: str) -> list[str]:
    return [f"bench.{room}.{path.stem}" for room in rooms for path in sorted((BENCH / room).glob("*.py"))
            if path.stem != "__init__"]


def source(name: str) -> ast.Module:
    return ast.parse((REPO / (name.replace(".", "/") + ".py")).read_text())


def imports(tree: ast.Module) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def room(name: str) -> str:
    return name.split(".")[1]


def test_every_room_says_what_it_holds_and_may_import():
    for name in ROOMS:
        doc = ast.get_docstring(ast.parse((BENCH / name / "__init__.py").read_text())) or ""
        assert len(doc.split()) >= 12 and "import" in doc, f"bench/{name}/__init__.py: what it holds and may import"


def test_every_benchmark_and_exploration_has_a_docstring_and_a_row_in_the_readme():
    readme = (BENCH / "README.md").read_text()
    rows = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| `")}
    listed = {part.strip(" `") for row in rows for part in row.split(",")}
    for name in modules("record", "explore"):
        doc = ast.get_docstring(source(name)) or ""
        assert len(doc.split()) >= 12, f"{name}: a docstring saying what it measures and how to run it"
        short = name.removeprefix("bench.")
        assert short in listed, f"bench/README.md's table has no row for `{short}`"
        assert f"python -m {name}" in readme, f"bench/README.md gives no command for {name}"
    assert listed <= {name.removeprefix("bench.") for name in modules(*ROOMS)}, f"rows for no module: {listed}"


def test_the_rooms_import_downwards_only():
    names = modules(*ROOMS) + ["bench.common"]
    for name in names:
        here = "common" if name == "bench.common" else room(name)
        for target in imports(source(name)):
            if target.startswith("bench.") and target in names:
                there = "common" if target == "bench.common" else room(target)
                assert there in MAY_IMPORT[here], f"{name} imports {target}: bench/{here} may not import bench/{there}"
        ray = {target for target in imports(source(name)) if target == "ray" or target.startswith("ray.")}
        assert not ray or name in RAY_USERS, f"{name} imports ray; only {sorted(RAY_USERS)} run the job or the data stage under Ray"


@pytest.mark.parametrize("name", modules("record", "explore"))
def test_help_parses_without_a_gpu(name):
    module = importlib.import_module(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        module.build_parser().parse_args(["--help"])
    assert done.value.code == 0, f"python -m {name} --help exited {done.value.code}"
    assert "usage:" in out.getvalue(), f"python -m {name} --help printed no usage"


def test_what_a_benchmark_reuses_does_not_import_ray():
    code = ("import sys; import bench.common, bench.model.step_model, bench.record.step_bench, "
            "bench.record.memory_cap; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "bench.common, the step-time model and step_bench must not import ray"
