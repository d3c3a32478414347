"""A local tokenizer directory's own chat template whose raise_exception refuses every record checked of a local
--dataset (workload.data.template_check.refused_by_every, rendered by the template alone with the directory's special
tokens): refused by workload.local naming the template and the record, in the template's words, before torch or
transformers is imported; one that renders a record, or whose refusal the tokenizer's own tokens avoid, is not."""
from __future__ import annotations

import json
import shutil

from tests.support.cli_process import REPO, run_cli
from workload.config import TrainConfig
from workload.data import template_check

# Refuses a conversation whose last turn is not the assistant's (a template for prompts only would say so).
ASSISTANT_LAST = ("{% if messages[-1]['role'] != 'assistant' %}{{ raise_exception('The last turn must be the "
                  "assistant\\'s') }}{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                  "<|im_end|>\n{% endfor %}")
SYSTEM_BANNED = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('This model takes no system prompt') }}"
                 "{% endif %}{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}")
# Refuses unless the tokenizer's pad token is ChatML's <|endoftext|>: the directory's own tokens decide.
PAD_GUARD = ("{% if pad_token != '<|endoftext|>' %}{{ raise_exception('needs the ChatML pad token') }}{% endif %}"
             "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}")


def _tokenizer(tmp_path, template: str):
    shutil.copytree(REPO / "data" / "chat-tokenizer", tmp_path / "tok")
    (tmp_path / "tok" / "chat_template.jinja").write_text(template)
    return tmp_path / "tok"


def _records(tmp_path, last_user: bool):
    lines = (REPO / "data" / "conversations.jsonl").read_text().splitlines()[:10]
    records = [json.loads(line) for line in lines]
    if last_user:
        for record in records:
            record["messages"].append({"role": "user", "content": "and then ?"})
    path = tmp_path / "dialogues.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_a_template_refusing_every_record_is_refused_before_the_heavy_imports(tmp_path):
    tokenizer = _tokenizer(tmp_path, SYSTEM_BANNED)
    code, stderr, loaded, _ = run_cli("workload.local", [
        "--tokenizer", str(tokenizer), "--data_format", "chat", "--dataset", str(REPO / "data" / "conversations.jsonl"),
        "--storage_path", str(tmp_path / "runs")])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) <= 2, stderr
    for words in (f"--tokenizer {tokenizer}", "line 1", "This model takes no system prompt"):
        assert words in stderr, f"{words!r} in {stderr}"
    assert loaded == [], f"refused before {loaded} were imported"


def test_records_the_template_renders_are_not_refused(tmp_path):
    cfg = TrainConfig(model_config="tiny", tokenizer=str(_tokenizer(tmp_path, ASSISTANT_LAST)), data_format="chat",
                      dataset=str(_records(tmp_path, last_user=False)))
    template_check.check_template_renders_turns(cfg)
    (tmp_path / "other").mkdir()
    refused = TrainConfig(model_config="tiny", tokenizer=cfg.tokenizer, data_format="chat",
                          dataset=str(_records(tmp_path / "other", last_user=True)))
    try:
        template_check.check_template_renders_turns(refused)
    except ValueError as error:
        assert "The last turn must be the assistant's" in str(error) and "--dataset" in str(error), error
    else:
        raise AssertionError("a template refusing every record passed")


def test_the_directory_own_special_tokens_decide(tmp_path):
    cfg = TrainConfig(model_config="tiny", tokenizer=str(_tokenizer(tmp_path, PAD_GUARD)), data_format="chat",
                      dataset=str(REPO / "data" / "conversations.jsonl"))
    template_check.check_template_renders_turns(cfg)  # data/chat-tokenizer's pad_token is <|endoftext|>
