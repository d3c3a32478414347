"""A chat template rendered without transformers (workload.data.template_render) renders what the tokenizer renders,
and the refusal it allows before the imports (a --chat_template that renders no assistant turn) is the tokenizer's
own refusal, word for word, and never refuses what the tokenizer would train."""
from __future__ import annotations

import json
import os

import pytest

from tests.support.cli_process import run_cli
from tests.unit.test_sft import CONVERSATION, DATA, tiny_tokenizer
from workload.config import TrainConfig
from workload.data import chat, template_check
from workload.data.template_render import SPECIAL_TOKENS, TemplateOnly

# Templates that render no assistant turn: users' turns only; a fixed text; every turn's role but no content.
UNTRAINED = {
    "users only": "{% for m in messages if m.role == 'user' %}{{ m.content }}\n{% endfor %}",
    "a fixed text": "{{ 'hello there' }}",
    "the system turn only": "{% for m in messages if m.role == 'system' %}[{{ m.content }}]{% endfor %}",
}
# Templates the tokenizer trains with, or that only it can judge: the template alone refuses none of them.
LEFT_TO_THE_TOKENIZER = {
    "the end token alone for an assistant turn": ("{% for m in messages %}{% if m.role == 'assistant' %}{{ eos_token }}"
                                                  "{% else %}{{ m.content }}\n{% endif %}{% endfor %}"),
    "a generation block": ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                           "{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}"),
    "a template that raises on the assistant's turn": ("{% for m in messages %}{% if m.role == 'assistant' %}"
                                                       "{{ raise_exception('no assistants here') }}{% endif %}"
                                                       "{{ m.content }}{% endfor %}"),
    "the reasoning under its old name": ("{% for m in messages %}{% if m.role == 'assistant' %}"
                                         "{{ m.reasoning_content }}{% else %}{{ m.content }}\n{% endif %}{% endfor %}"),
}


def _rendered_by_the_tokenizer(tokenizer, turns, generation_prompt):
    return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt)


def _tokens_in(text: str, tokenizer) -> str:
    for name in SPECIAL_TOKENS:
        text = text.replace(f"<{name}>", getattr(tokenizer, name, None) or "")
    return text


@pytest.mark.parametrize("template", ["qwen2.5", "llama3"])
def test_the_template_alone_renders_what_the_tokenizer_renders(template):
    tokenizer = tiny_tokenizer(template)
    alone = TemplateOnly(chat.template_text(template))
    for end in range(1, len(CONVERSATION) + 1):
        for generation_prompt in (False, True):
            turns = CONVERSATION[:end]
            assert (_tokens_in(alone.apply_chat_template(turns, add_generation_prompt=generation_prompt), tokenizer)
                    == _rendered_by_the_tokenizer(tokenizer, turns, generation_prompt))


def _config(tmp_path, template_text: str, **settings) -> TrainConfig:
    data = tmp_path / "chats.jsonl"
    records = [{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"ask {i}"},
                             {"role": "assistant", "content": f"answer {i}", "thinking": f"think {i}"}]}
               for i in range(12)]
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    (tmp_path / "mine.jinja").write_text(template_text)
    return TrainConfig(model_config="tiny", dataset=str(data), data_format="chat",
                       chat_template=str(tmp_path / "mine.jinja"), tokenizer=os.path.join(DATA, "tokenizer"),
                       **settings)


def _tokenizer_refusal(cfg: TrainConfig) -> str | None:
    tokenizer = tiny_tokenizer("qwen2.5")
    chat.apply_template(tokenizer, cfg.chat_template, cfg.tokenizer_name)
    try:
        template_check.check_template_trains(cfg, tokenizer)
    except ValueError as error:
        return str(error)
    return None


@pytest.mark.parametrize("name", sorted(UNTRAINED))
def test_a_template_with_no_assistant_turn_is_refused_as_the_tokenizer_refuses_it(tmp_path, name):
    cfg = _config(tmp_path, UNTRAINED[name])
    with pytest.raises(ValueError) as refused:
        template_check.check_template_renders_turns(cfg)
    assert str(refused.value) == _tokenizer_refusal(cfg)
    assert "renders no assistant turn" in str(refused.value)


@pytest.mark.parametrize("name", sorted(LEFT_TO_THE_TOKENIZER))
def test_the_template_alone_refuses_nothing_it_cannot_be_sure_of(tmp_path, name):
    cfg = _config(tmp_path, LEFT_TO_THE_TOKENIZER[name])
    try:
        template_check.check_template_renders_turns(cfg)
        fast = None
    except ValueError as error:  # only what the tokenizer refuses too, in the same words (refused_by_every)
        fast = str(error)
    refusal = _tokenizer_refusal(cfg)
    assert refusal is None or "renders no assistant turn" not in refusal, refusal
    assert fast is None or fast == refusal, (fast, refusal)


def test_training_on_the_prompt_trains_whatever_the_template_renders(tmp_path):
    template_check.check_template_renders_turns(_config(tmp_path, UNTRAINED["users only"], train_on_prompt=True))


def test_the_refusal_comes_before_torch_and_transformers_are_imported(tmp_path):
    cfg = _config(tmp_path, UNTRAINED["users only"])
    code, stderr, loaded, _ = run_cli("workload.local", [
        "--data_format", "chat", "--dataset", cfg.dataset, "--chat_template", cfg.chat_template,
        "--storage_path", str(tmp_path / "runs")])
    assert (code, loaded) == (2, []), stderr
    assert "renders no assistant turn" in stderr
