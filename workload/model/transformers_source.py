"""transformers' own source files, read without importing transformers (seconds of imports, torch's among them): the
facts the checks before the heavy imports take from it (its model types and tokenizer classes: remote_code.py; its
activation names: activations.py; its auto tables and config classes: model_kinds.py). Where transformers is not
installed, or a file is not there or not Python, each answer is empty and those checks refuse nothing. Standard
library only."""
from __future__ import annotations

import ast
import functools
import importlib.util
import os


@functools.lru_cache(maxsize=1)
def package() -> str | None:
    """transformers' package directory, found without importing it; None where it is not installed."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def text(relative: str) -> str:
    """The text of the package's file at `relative` ("" where it cannot be read)."""
    return _text(package(), relative)


def tree(relative: str) -> ast.Module | None:
    """The parsed module of the package's file at `relative` (None where it cannot be read or parsed)."""
    return _tree(package(), relative)


@functools.lru_cache(maxsize=64)
def _text(directory: str | None, relative: str) -> str:
    if directory is None:
        return ""
    try:
        with open(os.path.join(directory, relative), encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError, ValueError):
        return ""


@functools.lru_cache(maxsize=64)
def _tree(directory: str | None, relative: str) -> ast.Module | None:
    source = _text(directory, relative)
    try:
        return ast.parse(source) if source else None
    except (SyntaxError, ValueError):
        return None
