"""A rule between settings quotes the values it compares (`--messages_field X names a field of --data_format chat
records ...`); every rule's refusal passes workload/config/rules.py first_broken, which repeats a value only when a
refusal may (workload/config/fields.py quotable: at most 100 printable characters, no token, no URI credentials), else
its length. The job's flags and the preview's stack keys say the same."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV
from workload.config import TrainConfig, rules
from workload.config.fields import quotable, shown_value

LONG_FIELD = "conversation_" + "turns_" * 30  # 193 characters: a field name within its own bounds, too long to repeat
TOKEN_FIELD = "ghp_" + "Q7" * 14  # shaped like a GitHub token


def test_a_rule_refusing_a_long_value_gives_its_length():
    with pytest.raises(ValueError) as refused:
        TrainConfig(messages_field=LONG_FIELD, data_format="text")
    message = str(refused.value)
    assert message.startswith("--messages_field (a value of 193 characters, not shown) names a field of --data_format "
                              "chat"), message
    assert LONG_FIELD[:40] not in message, message


def test_a_token_in_a_value_a_rule_compares_is_never_repeated():
    """Field bounds refuse a token before any rule runs; the bound holds on its own too (a rule given values that
    no field checked, as the preview's rules over stack keys are)."""
    assert rules._values_bounded(f"--messages_field {TOKEN_FIELD} names a field", {"messages_field": TOKEN_FIELD},
                                 ("messages_field",)) == "--messages_field (a value of 32 characters, not shown) names a field"


def test_the_preview_says_the_same_in_stack_keys():
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {"trainEnabled": True, "trainMessagesField": LONG_FIELD})
    message = str(refused.value)
    assert "trainMessagesField" in message and "a value of 193 characters, not shown" in message, message
    assert LONG_FIELD[:40] not in message, message


def test_a_short_value_is_still_quoted_as_typed():
    with pytest.raises(ValueError, match=r"^--messages_field conversation names a field of --data_format chat"):
        TrainConfig(messages_field="conversation", data_format="text")


def test_a_chat_template_that_is_no_template_is_named_by_its_length_when_long(tmp_path):
    with pytest.raises(ValueError) as refused:
        TrainConfig(chat_template=str(tmp_path / ("t" * 150)) + ".jinja")
    assert "got a value of" in str(refused.value) and "t" * 150 not in str(refused.value), refused.value


@pytest.mark.parametrize("value, shown", [("x" * 100, True), ("x" * 101, False), ("a\tb", False),
                                          ("https://user:pw@host/x", False), ("sk-" + "a" * 24, False),
                                          ("s3://bucket/runs", True)])
def test_quotable_values(value, shown):
    assert quotable(value) is shown
    assert (shown_value(value) == repr(value)) is shown



@pytest.mark.parametrize("template, repeated", [
    ("{% for m in messages %}\n{{ m['content'] }}{% endfor %}", False),  # over lines: never repeated
    ("{{ messages }}", True),  # a value as short and plain as a choice (fields.shown_choice): repeated
    ("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", False),  # longer than a choice's name
    ("{{ bos_token }}" + "{% for m in messages %}{{ m.content }}{% endfor %}" * 3, False),  # past 100 characters
])
def test_a_templates_text_given_as_chat_template_points_to_a_jinja_file(template, repeated):
    """TRL's --chat_template_path takes a file; a template's text pasted inline (over lines, or on one) is refused
    saying where the text goes, repeating it only as a choice's value is (short and plain)."""
    with pytest.raises(ValueError) as refused:
        TrainConfig(chat_template=template, data_format="chat", dataset="org/chats")
    message = str(refused.value)
    assert message.startswith("--chat_template ") and ".jinja file" in message and "template's text" in message, message
    assert ("messages" in message) is repeated, message
