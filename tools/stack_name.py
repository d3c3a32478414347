"""The --stack flag every operator command takes (tools.job, tools.status, tools.doctor, tools.leftovers,
tools.capacity): a stack's name, as `pulumi stack select` takes it. The stack file's name given for it
(`--stack Pulumi.dev.yaml`, or its path) is refused with the name it holds. Standard library only."""
from __future__ import annotations

import argparse
import re
from typing import Any

# Pulumi.<stack>.yaml, as a file name or the end of a path: the stack is what stands between the dots.
_STACK_FILE = re.compile(r"(?:.*[/\\])?Pulumi\.(.+)\.ya?ml")


def stack_name(value: str) -> str:
    """argparse's type for --stack: the value, unless it is a stack file's name."""
    if (match := _STACK_FILE.fullmatch(value)) is not None:
        raise argparse.ArgumentTypeError(f"{value} is a stack file; did you mean --stack {match[1]}?")
    return value


def add_stack_flag(parser: Any, **kwargs: Any) -> None:
    """--stack on `parser` (an ArgumentParser or argument group), with `kwargs` as add_argument takes them."""
    parser.add_argument("--stack", type=stack_name, **kwargs)
