"""A value that is not one of a key's or flag's choices is quoted only when short (16 characters) and not shaped like a
token (workload/config/fields.py shown_choice): every choice key of the stack (infra/config/rules.py require_choice),
every choice flag through its declaration (the stack keys that set them included), and argparse's own choices."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV, program_refusal
from workload import cli
from workload.config.fields import shown_choice

# Shaped like an AWS secret access key (40 characters of base64, no prefix a token rule knows).
SECRET_LIKE = "Zq3xV8pL2mN7rT4wY9bC1dF6gH0jK5sA/uE+iO2p"
JOB = {"trainEnabled": True}


@pytest.mark.parametrize("key", ["trainWait", "trainExpectTransport", "gpuPlacement", "ncclDebug", "monitoring",
                                 "experimentTracking", "trainLrSchedule", "trainCheckpointMode"])
def test_a_long_value_of_a_choice_key_is_refused_by_its_length(key):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | JOB | {key: SECRET_LIKE})
    message = str(refused.value)
    assert f"'{key}'" in message and "a value of 40 characters (not shown)" in message, message
    assert SECRET_LIKE not in message and SECRET_LIKE[:12] not in message, message


def test_the_whole_program_says_the_same():
    message = program_refusal(JOB | {"trainWait": SECRET_LIKE})
    assert message == ("config key 'trainWait': a value of 40 characters (not shown) is not one of "
                       "['finish', 'transport']"), message


def test_a_short_mistyped_choice_is_still_quoted():
    with pytest.raises(ValueError, match=r"'trainWait': 'finsh' is not one of"):
        config.parse(DEV | JOB | {"trainWait": "finsh"})
    assert shown_choice("x" * 16) == repr("x" * 16)
    assert shown_choice("x" * 17) == "a value of 17 characters (not shown)"
    assert shown_choice("xoxb-1234567890") == "a value of 15 characters (not shown)"  # a Slack token's shape
    assert shown_choice("a\nb") == "a value of 3 characters (not shown)"


def test_argparse_choices_follow_the_same_rule():
    said = cli._bounded(f"argument --dtype: invalid choice: '{SECRET_LIKE}' (choose from 'float32', 'bfloat16')")
    assert SECRET_LIKE not in said and "a value of 40 characters (not shown)" in said and "'bfloat16'" in said, said
    assert "invalid choice: 'bf16'" in cli._bounded("argument --dtype: invalid choice: 'bf16' (choose from "
                                                     "'float32', 'bfloat16')")


@pytest.mark.parametrize("key, kind", [("trainOnPrompt", "boolean"), ("gpuNodeRepair", "boolean"),
                                       ("trainGradAccumSteps", "integer"), ("gpuNodeCount", "integer")])
def test_a_value_of_another_type_is_never_repeated_when_long(key, kind):
    """Pulumi's typed reads (get_bool, get_int) say "Configuration 'project:key' value '<the value>' is not a valid
    'bool'": a secret pasted into the wrong key would be repeated whole. The refusal names the key and the type, and
    quotes the value only as a choice's refusal does (short, no token)."""
    from tests.program.test_refusals_at_preview import load_refusal

    message = load_refusal({key: SECRET_LIKE})
    assert message == (f"config key {key!r}: must be of type {kind} "
                       f"{'(true or false)' if kind == 'boolean' else '(a whole number, such as 4)'}, "
                       "got a value of 40 characters (not shown)"), message
    assert "'yes'" in load_refusal({key: "yes"}) if kind == "integer" else "'maybe'" in load_refusal({key: "maybe"})


def test_every_choice_and_list_key_quotes_an_unknown_item_as_a_choice():
    """Each train* key whose flag takes a choice or a comma list of choices (one declaration each, workload/config/),
    and trainChatTemplate: an unknown item of 27 random lower-case letters and digits (which the generic masking
    lets through) is refused by its length, a list's valid items still quoted."""
    import random
    import string

    from workload.config import DECLARED

    declared = [each for each in DECLARED if each.stack_key and (each.choices or each.comma_list)]
    assert {"trainReportTo", "trainLoraTargets", "trainSharding"} <= {each.stack_key for each in declared}
    for key, first in [(each.stack_key, str(each.default) if each.comma_list else None) for each in declared] + [
            ("trainChatTemplate", None)]:
        item = "ak_" + "".join(random.choices(string.ascii_lowercase + string.digits, k=24))
        value = f"{first},{item}" if first else item
        with pytest.raises(ValueError) as refused:
            config.parse(DEV | JOB | {"trainMethod": "lora", key: value})
        message = str(refused.value)
        assert f"'{key}'" in message and "a value of 27 characters (not shown)" in message, message
        assert item not in message and item[3:15] not in message, message
