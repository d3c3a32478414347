"""Every numeric setting has a lower and an upper bound, declared once beside its flag (workload/config/__init__.py,
reasons in workload/config/numeric_bounds.py): one rule, walked over every declaration, so a new numeric flag without
an upper bound fails here rather than letting 1e300 epochs or a seed of 2**70 through to torch."""
from __future__ import annotations

import math

import pytest
import torch

from workload.config import DECLARED, TrainConfig, numeric_bounds
from workload.data.batches import _step_seed

NUMERIC = [declared for declared in DECLARED if declared.type.split(" | ")[0] in ("int", "float")]


def _past_the_top(declared) -> float | int:
    top = declared.at_most if declared.at_most is not None else declared.below
    if declared.type.startswith("int"):
        return int(top) + (1 if declared.at_most is not None else 0) + 7
    return top * 3 + 1.5 if declared.at_most is not None else top + 0.25


def test_every_numeric_setting_is_declared_with_both_bounds():
    assert len(NUMERIC) >= 15, [declared.name for declared in NUMERIC]
    unbounded = [declared.flag for declared in NUMERIC
                 if (declared.at_least is None and declared.above is None)
                 or (declared.at_most is None and declared.below is None)]
    assert unbounded == [], f"numeric flags without a lower and an upper bound: {unbounded}"


@pytest.mark.parametrize("declared", NUMERIC, ids=lambda declared: declared.name)
def test_a_value_past_the_upper_bound_is_refused_naming_the_flag_and_the_bound(declared):
    value = _past_the_top(declared)
    with pytest.raises(ValueError) as refused:
        TrainConfig(**{declared.name: value})
    message = str(refused.value)
    assert message.startswith(declared.flag + " ") and "\n" not in message, message
    assert "at most" in message or "below" in message, message
    top = declared.at_most if declared.at_most is not None else declared.below
    assert str(top) in message, message
    if declared.at_most is not None:  # the bound itself is allowed by the declaration
        assert declared.problem(type(value)(declared.at_most)) is None


@pytest.mark.parametrize("huge", [10 ** 300, float("1e300"), 2 ** 70])
def test_huge_values_are_refused_by_each_numeric_flag(huge):
    for declared in NUMERIC:
        value = int(huge) if declared.type.startswith("int") else float(huge)
        assert declared.problem(value) is not None, f"{declared.flag} {value!r} accepted"


def test_the_seed_bound_is_the_largest_whose_step_seeds_torch_takes():
    # torch.Generator.manual_seed takes at most 2**64 - 1; _step_seed puts the seed above 40 bits of step and rank.
    largest = _step_seed(numeric_bounds.MAX_SEED, numeric_bounds.MAX_STEPS, numeric_bounds.MAX_RANKS - 1)
    torch.Generator().manual_seed(largest)
    assert numeric_bounds.MAX_STEPS < 1 << 24, "a step must stay inside its 24 bits of the step seed"
    with pytest.raises(ValueError, match="Overflow"):
        torch.Generator().manual_seed(_step_seed(numeric_bounds.MAX_SEED + 1, 0, 0))
    assert TrainConfig(seed=numeric_bounds.MAX_SEED).seed == numeric_bounds.MAX_SEED
    with pytest.raises(ValueError, match=r"^--seed must be at least 0 and at most 16777215"):
        TrainConfig(seed=-5)


def test_epochs_cannot_ask_for_more_steps_than_any_run_takes():
    assert numeric_bounds.MAX_EPOCHS <= numeric_bounds.MAX_STEPS
    assert math.isfinite(numeric_bounds.MAX_FABRIC_CHECK_SECONDS)
    # The fabric check fits many times over in the stack's longest job (30 days).
    assert numeric_bounds.MAX_FABRIC_CHECK_SECONDS * 100 < 30 * 24 * 3600


def test_the_lora_bounds_are_the_adapters_own():
    from workload.model import adapters

    most_rank, most_alpha = numeric_bounds.MAX_LORA_RANK, numeric_bounds.MAX_LORA_ALPHA
    adapters.check_settings("lora", most_rank, most_alpha, 0.0, "all-linear")
    for rank, alpha, dropout in ((most_rank + 1, 8.0, 0.0), (8, most_alpha * 1.01, 0.0), (8, 8.0, 1.0)):
        with pytest.raises(ValueError):
            adapters.check_settings("lora", rank, alpha, dropout, "all-linear")
