"""The tree a newcomer reads: packages by concern in layers, no module importing one that imports it back, no module
too long to read in one sitting, and every package saying what it holds and what it may import."""
from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("workload", "infra", "tools")  # and __main__.py, the composition root, over all three
MAX_LINES = 450
# infra/'s packages, lowest first: each may import those before it (and workload/), never one after it.
INFRA_ORDER = ("config", "aws", "kubernetes", "job", "preview")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    modules = {module_name(path): path for layer in LAYERS for path in (REPO / layer).rglob("*.py")}
    modules["__main__"] = REPO / "__main__.py"
    return modules


def imported(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project's modules that `name` imports anywhere in its file (inside functions too: a late import is still an
    import, and a cycle through one only waits for its first call)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            candidates = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {candidate for candidate in candidates if candidate in modules and candidate != name}
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported(path, name, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back(graph):
    assert cycles(graph) == [], "modules that import each other, directly or through others"


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_lower_layers_never_import_higher_ones(graph):
    wrong = []
    for name, targets in graph.items():
        for target in targets:
            layer, target_layer = name.split(".")[0], target.split(".")[0]
            if layer == "workload" and target_layer in ("infra", "tools", "__main__"):
                wrong.append((name, target))
            if layer == "infra" and target_layer in ("tools", "__main__"):
                wrong.append((name, target))
            if layer == target_layer == "infra" and len(name.split(".")) > 2 and len(target.split(".")) > 2:
                rank, target_rank = (INFRA_ORDER.index(n.split(".")[1]) for n in (name, target))
                if target_rank > rank:
                    wrong.append((name, target))
    assert wrong == [], "tools/ and __main__.py over infra/ (config, aws, kubernetes, job, preview) over workload/"


def test_every_package_says_what_it_holds_and_may_import():
    for init in (REPO / layer for layer in LAYERS):
        for path in init.rglob("__init__.py"):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert len(doc.split()) >= 12, f"{path.relative_to(REPO)}: a docstring saying what the package holds"
            first_lines = " ".join(doc.splitlines()[:3])
            assert "import" in first_lines.lower(), f"{path.relative_to(REPO)}: its first lines say what it may import"


def test_no_module_is_over_450_lines():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    long = {name: count for name in tracked.stdout.split()
            if (REPO / name).is_file() and (count := len((REPO / name).read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: split them by concern"
