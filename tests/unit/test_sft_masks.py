"""Masks exact on every shape of conversation: the trained tokens, run by run, equal a reference derived by hand from
each published template (what follows the assistant header, through the end-of-turn token) on conversations that
open with the assistant, end with the user, hold tool calls and have empty turns; examples left without a trained
token are dropped and counted, and keep_end keeps the end."""
from __future__ import annotations

import pytest

from tests.unit.test_sft import tiny_tokenizer
from workload.data import chat, packing

TOOL_CALL = [{"role": "user", "content": "weather in paris ?"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"type": "function", "function": {"name": "weather", "arguments": {"city": "paris"}}}]},
             {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "it is sunny ."}]
# (conversation, {template: the trained text, run by run, written from the template by hand})
CASES = {
    "opens with the assistant": (
        [{"role": "assistant", "content": "hello , ask me ."}, {"role": "user", "content": "the cat ?"},
         {"role": "assistant", "content": "the ball ."}],
        {"qwen2.5": ["hello , ask me .<|im_end|>", "the ball .<|im_end|>"],
         "llama3": ["hello , ask me .<|eot_id|>", "the ball .<|eot_id|>"]}),
    "ends with the user": (
        [{"role": "system", "content": "be brief ."}, {"role": "user", "content": "the cat ?"},
         {"role": "assistant", "content": "the ball ."}, {"role": "user", "content": "and the dog ?"}],
        {"qwen2.5": ["the ball .<|im_end|>"], "llama3": ["the ball .<|eot_id|>"]}),
    "empty turns": (
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": "the cat ?"},
         {"role": "assistant", "content": "the ball ."}],
        {"qwen2.5": ["<|im_end|>", "the ball .<|im_end|>"], "llama3": ["<|eot_id|>", "the ball .<|eot_id|>"]}),
    "tool calls": (
        TOOL_CALL,
        {"qwen2.5": ['<tool_call>\n{"name": "weather", "arguments": {"city": "paris"}}\n</tool_call><|im_end|>',
                     "it is sunny .<|im_end|>"]}),
}


def _runs(tokenizer, example: chat.Example) -> list[str]:
    """The trained tokens as runs of consecutive positions, each decoded."""
    runs, current = [], []
    for token, label in zip(example.input_ids, example.labels):
        if label != chat.IGNORE_INDEX:
            assert label == token, "a trained token's label is itself"
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(run) for run in runs]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("template", ["qwen2.5", "llama3"])
def test_the_trained_tokens_are_the_hand_derived_ones(case, template):
    turns, expected = CASES[case]
    tokenizer = tiny_tokenizer(template)
    trained = [index for index, turn in enumerate(turns) if turn["role"] == "assistant"]
    if template not in expected:  # Llama 3's template has no tool calls: refused, not trained as an empty turn
        with pytest.raises(ValueError, match="does not render turn 2's tool_calls"):
            chat.tokenize_conversation(tokenizer, turns, trained, False, "record 1")
        return
    example = chat.tokenize_conversation(tokenizer, turns, trained, False, "record 1")
    assert example.input_ids == tokenizer.apply_chat_template(turns, tokenize=True)["input_ids"], case
    assert _runs(tokenizer, example) == expected[template], f"{template}, {case}"


def test_an_opening_assistant_turn_does_not_train_the_default_system_prompt():
    """Qwen2.5's template puts its default system prompt before a conversation without one: none of it is trained."""
    tokenizer = tiny_tokenizer("qwen2.5")
    turns = CASES["opens with the assistant"][0][:1]
    example = chat.tokenize_conversation(tokenizer, turns, [0], False, "record 1")
    text = tokenizer.decode(example.input_ids)
    assert text.startswith("<|im_start|>system\nYou are Qwen"), text
    assert _runs(tokenizer, example) == ["hello , ask me .<|im_end|>"]


def _example(ids: list[int], trained_from: int) -> chat.Example:
    return chat.Example(ids, [chat.IGNORE_INDEX] * trained_from + ids[trained_from:])


def test_examples_without_a_trained_token_are_dropped_and_counted():
    prompt_only = _example(list(range(10, 20)), 10)        # no assistant turn: nothing trained
    late_answer = _example(list(range(30, 50)), 16)         # trained tokens only past the 8th
    short = _example(list(range(60, 66)), 3)
    truncated = packing.pack([prompt_only, late_answer, short], 8, 0, "truncate")
    assert (truncated.examples, truncated.untrained, truncated.cut, truncated.over_long) == (1, 1, 1, 1), truncated
    kept = packing.pack([prompt_only, late_answer, short], 8, 0, "keep_end")
    assert (kept.examples, kept.untrained, kept.cut) == (2, 1, 0), kept
    first = kept.blocks[0]
    assert first[0].tolist()[:8] == list(range(42, 50)), "keep_end keeps the last seq_len tokens"
    assert first[1].tolist()[1:8] == [chat.IGNORE_INDEX] * 3 + list(range(46, 50)), "and their labels"
