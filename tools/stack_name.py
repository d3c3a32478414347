"""The --stack flag every operator command takes (tools.job, tools.status, tools.doctor, tools.leftovers,
tools.capacity): a stack's name, as `pulumi stack select` takes it. The stack file's name given for it
(`--stack Pulumi.dev.yaml`, or its path) is refused with the name it holds. Standard library only."""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

# Pulumi.<stack>.yaml, as a file name or the end of a path: the stack is what stands between the dots.
PROJECT_DIR = Path(__file__).resolve().parents[1]  # Pulumi.yaml and the stack files
_STACK_FILE = re.compile(r"(?:.*[/\\])?Pulumi\.(.+)\.ya?ml")


def stack_name(value: str) -> str:
    """argparse's type for --stack: the value, unless it is a stack file's name."""
    if (match := _STACK_FILE.fullmatch(value)) is not None:
        raise argparse.ArgumentTypeError(f"{value} is a stack file; did you mean --stack {match[1]}?")
    return value


def stack_word_hint(word: str) -> str | None:
    """A bare word that is a stack of this project (`tools.doctor dev`): the flag it needs, or None."""
    if _STACK_FILE.fullmatch(word) or not (PROJECT_DIR / f"Pulumi.{word}.yaml").is_file():
        return None
    return f"did you mean --stack {word}? the stack is given by its flag"


def add_stack_flag(parser: Any, **kwargs: Any) -> None:
    """--stack on `parser` (an ArgumentParser or argument group), with `kwargs` as add_argument takes them; a
    parser's bare word that names a stack is answered with the flag (workload/cli.py's _Parser.error)."""
    parser.add_argument("--stack", type=stack_name, **kwargs)
    parser.bare_word_hint = stack_word_hint
