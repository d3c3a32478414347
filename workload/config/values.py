"""Checks of single values that need more than a bound or a pattern: a Hub repo id, a dataset split's slice, a W&B
project name. Each returns why a value is refused (its "must be ..."), or None; the declarations in __init__.py
attach them as `check=`. Standard library and workload.model's model_source only (the Pulumi program imports it)."""
from __future__ import annotations

import re

from workload.config.rules import DATASET_FILE_SUFFIXES
from workload.model import model_source


def repo_id_problem(value: str) -> str | None:
    """The Hub's repo-id rule for a setting that may name a Hub repo (--tokenizer, --dataset; --model_id's is
    model_source.problem, in its own words): a value that is no path, URI or dataset file names a repo, and must be
    one huggingface_hub takes (validate_repo_id, which its downloads apply only once the job runs); None otherwise."""
    if model_source.is_path(value) or "://" in value or value.endswith(DATASET_FILE_SUFFIXES):
        return None
    why = model_source.hub_id_problem(value)
    return f"{why} (neither a Hugging Face Hub id nor a path or URI)" if why else None


# datasets' split syntax (ReadInstruction): name[from:to] with either end absolute or a percent, parts joined by +.
_SPLIT_PART = re.compile(r"\s*[\w.-]+\s*(?:\[\s*(?P<start>-?[\d_]+)?\s*(?P<start_pct>%)?\s*:"
                         r"\s*(?P<end>-?[\d_]+)?\s*(?P<end_pct>%)?\s*\])?\s*(?:\([\w]+\))?\s*")


def split_problem(value: str) -> str | None:
    """A split (--dataset_split, --eval_split) whose every part is a slice that selects nothing whatever the split's
    size: an end of 0 (train[:0%], train[:0]), a start of 100% or more, or a start at or past the end in the same
    unit and sign; None for anything else (the job's datasets judges the rest)."""
    parts = [_SPLIT_PART.fullmatch(part) for part in value.split("+")]
    if not parts or not all(parts):
        return None
    if all(_selects_nothing(part) for part in parts):
        return (f"must be a split or a slice that selects examples, and {value!r} selects none whatever the split's "
                "size (an end of 0, or a start at or past the end)")
    return None


def _selects_nothing(part: re.Match) -> bool:
    start, end = (None if part[name] is None else int(part[name].replace("_", "")) for name in ("start", "end"))
    if end == 0 or (start is not None and part["start_pct"] and start >= 100):
        return True
    return (start is not None and end is not None and bool(part["start_pct"]) == bool(part["end_pct"])
            and (start < 0) == (end < 0) and start >= end)


# W&B's rule for a project name: at most 128 characters, none of / \ # ? % : (wandb's sdk refuses them at init, after
# the cluster has started the job).
WANDB_PROJECT_MAX_LENGTH = 128
_WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def wandb_project_problem(value: str) -> str | None:
    """Why W&B refuses the project name `value` (its 'must be ...'), or None."""
    bad = sorted({char for char in value if char in _WANDB_PROJECT_FORBIDDEN})
    return (f"must be a W&B project name without {' '.join(_WANDB_PROJECT_FORBIDDEN)}, got one with {' '.join(bad)}"
            if bad else None)
