"""One form for every refusal of the stack's config: `config key 'X': ...` (or `config keys 'X', 'Y': ...`), as
infra.config.config_error writes it. The program's refusals are held to it where they are caught
(tests/program/test_refusals_at_preview.py program_refusal, which every program-refusal table goes through); this
walks every `raise ValueError(...)` in infra/ so a refusal no table reaches yet cannot start another form, such as
`rayNamespace: ...`, `gpuInstanceType g6e...: ...` or `config keys ['rayVersion']: ...`."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from infra.config import REFUSAL_FORM, config_error

REPO = Path(__file__).resolve().parents[2]
STACK_KEYS = set(yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"])


def template(node: ast.expr) -> str | None:
    """The message's text with each placeholder as 'X' (repr) or X; None when it is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else
                       ("'X'" if part.conversion == ord("r") else "X") for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template(node.left)
    return None


def refusals() -> list[tuple[str, str]]:
    found = []
    for path in sorted((REPO / "infra").rglob("*.py")):
        tree = ast.parse(path.read_text())
        # config_error itself writes the form from its arguments.
        writer = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
                  and function.name == "config_error" for node in ast.walk(function)}
        for node in ast.walk(tree):
            if (id(node) not in writer and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ValueError"
                    and node.args and (text := template(node.args[0])) is not None):
                found.append((f"{path.relative_to(REPO)}:{node.lineno}", text))
    return found


def test_the_walk_finds_the_refusals():
    texts = [text for _, text in refusals()]
    assert len(texts) > 50 and any(text.startswith("config key 'X': ") for text in texts), len(texts)


@pytest.mark.parametrize("where, text", refusals(), ids=[where for where, _ in refusals()])
def test_every_refusal_in_infra_has_the_common_form(where, text):
    if text.startswith("config key"):
        assert REFUSAL_FORM.match(text), f"{where}: {text[:80]!r} is not config_error's form"
        return
    first = text.split(":")[0].split(" ")[0]
    assert first not in STACK_KEYS, f"{where}: {text[:80]!r} names {first} outside the common form (config_error)"


def test_config_error_writes_the_form():
    assert str(config_error("rayNamespace", "bad")) == "config key 'rayNamespace': bad"
    assert str(config_error(("rayVersion",), "bad")) == "config key 'rayVersion': bad"
    assert str(config_error(("gpuAvailabilityZone", "gpuInstanceType"), "bad")) == (
        "config keys 'gpuAvailabilityZone', 'gpuInstanceType': bad")
    for key in ("rayNamespace", ("a", "b")):
        assert REFUSAL_FORM.match(str(config_error(key, "x")))
    assert not REFUSAL_FORM.match("rayNamespace: 'x' must be a DNS-1123 label")
    assert not REFUSAL_FORM.match("config keys ['rayVersion', 'imageCudaVersion']: x")
    assert not REFUSAL_FORM.match("config keys 'trainTokenizer' and 'trainModelId': x")
