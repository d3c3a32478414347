"""The stack keys that set a numeric job flag get the flag's own bounds at preview, both of them (one declaration,
workload/config/__init__.py; reasons in workload/config/numeric_bounds.py): a value past the upper bound is refused
under the mocks with nothing registered, naming the key and the bound."""
from __future__ import annotations

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from workload.config import DECLARED

NUMERIC_KEYS = [declared for declared in DECLARED
                if declared.stack_key and declared.type.split(" | ")[0] in ("int", "float")]


def _stack_value(declared):
    """Past the upper bound, as Pulumi.yaml types the key: an integer, or a decimal string (Pulumi has no float)."""
    top = declared.at_most if declared.at_most is not None else declared.below
    if declared.type.startswith("int"):
        return int(top) + 11
    return str(top * 5 + 2.5)


def test_every_numeric_stack_key_is_walked():
    assert {"trainSeqLen", "trainLearningRate", "trainNumWorkers", "trainGradAccumSteps", "trainLoraRank",
            "trainMinBusBandwidthGBps"} <= {declared.stack_key for declared in NUMERIC_KEYS}


@pytest.mark.parametrize("declared", NUMERIC_KEYS, ids=lambda declared: declared.stack_key)
def test_a_numeric_key_past_its_upper_bound_is_refused_at_preview(declared):
    message = program_refusal({"trainEnabled": True, declared.stack_key: _stack_value(declared)})
    assert message.startswith(f"config key {declared.stack_key!r}: "), message
    top = declared.at_most if declared.at_most is not None else declared.below
    assert ("at most" in message or "below" in message) and str(top) in message, message
