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


# What Pulumi allows in a stack name (pulumi/pulumi's validateStackName: ^[a-zA-Z0-9-_.]{1,100}$, "a stack name may
# only contain alphanumeric, hyphens, underscores, or periods"), less '..': Pulumi.<name>.yaml then stays a file of
# the project directory ('/' and '..' would read elsewhere).
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


def stack_name(value: str) -> str:
    """argparse's type for --stack: the value, unless it is a stack file's name or no stack's name at all."""
    if len(value) <= 300 and (match := _STACK_FILE.fullmatch(value)) is not None:
        raise argparse.ArgumentTypeError(f"{value} is a stack file; did you mean --stack {match[1]}?")
    if STACK_NAME.fullmatch(value) and ".." not in value:
        return value
    allowed = "a stack's name as `pulumi stack select` takes it: 1-100 letters, digits, '-', '_' or '.', such as dev"
    # A qualified name is quoted only when it reads as one (shown_stack): org/ghp_.../dev is refused by its length.
    qualified = "/" in value and ".." not in value and len(value) <= 300 and shown_stack(value) == value
    if qualified and STACK_NAME.fullmatch(last := value.rsplit("/", 1)[1]):
        raise argparse.ArgumentTypeError(f"{value!r} is a fully qualified stack; give its own name: --stack {last}")
    shown = repr(value) if shown_stack(value) == value else f"{len(value):,} characters (not shown)"
    raise argparse.ArgumentTypeError(f"must be {allowed}; got {shown}")


# A run of letters and digits this long is no name a person types for a stack (dev, p5-us-east-1, team_b.prod) and
# the shape of every API token: such a value is refused by its length only, never repeated.
_TOKEN_RUN = re.compile(r"[A-Za-z0-9]{20,}")


def shown_stack(value: str) -> str:
    """A --stack value as a refusal that cannot find its stack names it: as written when it reads as a name, else by
    its length (a token pasted into --stack; workload/config/fields.py's token shapes too)."""
    from workload.config.fields import looks_like_token

    if len(value) <= 100 and value.isprintable() and not _TOKEN_RUN.search(value) and not looks_like_token(value):
        return value
    return f"(a value of {len(value):,} characters, not shown: it may be a token)"


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
