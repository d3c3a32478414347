"""A split's slice as datasets reads it (datasets/arrow_reader.py ReadInstruction.from_spec: `name[from:to]` with the
':' required, each end an int or a percent within -100%..100%, an optional (closest) or (pct1_dropremainder) after a
percent slice, parts joined by '+'): workload.config.values.split_problem refuses what from_spec refuses, as one rule,
and these values are held against this venv's datasets itself, so the rule cannot drift from the library the job
loads with."""
from __future__ import annotations

import pytest

from workload.config.values import split_problem

# Values datasets reads (and that select examples): none may be refused.
READ = ["train", "validation", "test.v2", "train[:5000]", "train[-100%:]", "train[:100%]", "validation[-250:]",
        "train[1_000:2_000]", "train[25%:75%](pct1_dropremainder)", "train[:33%](closest)", "train[:10%] + test",
        "train+validation[:40%]", "train[7:-3]"]
# Values from_spec refuses: each must be refused, naming the form.
NOT_READ = ["train[:101%]", "validation[-150%:]", "test[300%:]", "train[:10%]+validation[:250%]", "train[12]",
            "train[:7.5%]", "train[ :9]", "train[:2e4]", "train[:9](closest)", "train[:9%](floor)", "train+",
            "train[__:]", "dev-clean[:5]", "train[:50%", "[:50%]"]


def _datasets_reads(value: str) -> bool:
    from datasets import ReadInstruction

    try:
        ReadInstruction.from_spec(value)
    except (ValueError, AssertionError):
        return False
    return True


@pytest.mark.parametrize("value", READ)
def test_a_slice_datasets_reads_is_accepted(value):
    assert _datasets_reads(value), f"{value!r}: this venv's datasets no longer reads it: update READ"
    assert split_problem(value) is None, f"{value!r} is refused: {split_problem(value)}"


@pytest.mark.parametrize("value", NOT_READ)
def test_a_slice_datasets_cannot_read_is_refused_with_the_form(value):
    assert not _datasets_reads(value), f"{value!r}: this venv's datasets reads it: it must not be refused"
    why = split_problem(value)
    assert why is not None and why.startswith("must be a split or datasets' slice of one"), f"{value!r}: {why}"
    assert "-100%..100%" in why, f"{value!r}: the allowed form names the percent bounds: {why}"


def test_a_percent_past_100_is_named_as_such_and_a_token_is_not_quoted():
    assert split_problem("train[:140%]").endswith("'train[:140%]' has a percent bound outside -100%..100%")
    token = "hf_" + "Q" * 34
    why = split_problem(f"{token}[:5")
    assert token not in why and "not shown" in why, why
