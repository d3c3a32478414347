"""The activation names transformers builds a model with, read from its source text without importing it (seconds,
with torch), so that a config.json naming another is refused before the imports, in the gate's own words.

A decoder's MLP looks its activation up as `ACT2FN[config.hidden_act]` (transformers models/llama/modeling_llama.py
LlamaMLP, and every family alike; Gemma's `hidden_activation`, GPT-2's `activation_function`): ACT2FN is
ClassInstantier(ACT2CLS) (transformers/activations.py), an OrderedDict, so a name that is no key of ACT2CLS raises
KeyError('<name>') when the model is built. ACT2CLS is a dict literal in activations.py; its keys are read here with
ast. Where transformers is not installed or that literal is not found, nothing is refused here (the build says it).

Standard library only.
"""
from __future__ import annotations

import ast
import functools
from typing import Any

from workload.model import transformers_source

ACTIVATIONS_SOURCE = "activations.py"
TABLE_NAME = "ACT2CLS"
# The config.json fields a decoder's modeling code looks up in ACT2FN (grep ACT2FN\[config\. in transformers/models:
# hidden_act in most families, hidden_activation in Gemma's, activation_function in GPT-2's and OPT's).
ACTIVATION_FIELDS = ("hidden_act", "hidden_activation", "activation_function")


@functools.lru_cache(maxsize=1)
def known_activations() -> frozenset[str] | None:
    """ACT2CLS's keys in the installed transformers; None where they cannot be read here."""
    tree = transformers_source.tree(ACTIVATIONS_SOURCE)
    if tree is None:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(target, ast.Name) and target.id == TABLE_NAME for target in node.targets)):
            keys = [key.value for key in node.value.keys if isinstance(key, ast.Constant)]
            return frozenset(key for key in keys if isinstance(key, str)) or None
    return None


def activation_problem(config: dict, model_type: str) -> str | None:
    """Why `config` (config.json's top-level object) does not build: an ACTIVATION_FIELDS value that is no ACT2CLS key,
    in the words of the gate's build refusal (workload.model.compatibility.build); None otherwise or when unknown."""
    known = known_activations()
    if known is None:
        return None
    for field in ACTIVATION_FIELDS:
        value: Any = config.get(field)
        if isinstance(value, str) and value not in known:
            shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
            return (f"its config.json does not build a {model_type} model (KeyError: {shown}): its {field} is no "
                    f"activation transformers has (it has {', '.join(sorted(known))})")
    return None
