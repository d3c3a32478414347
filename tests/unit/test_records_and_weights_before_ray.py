"""Mistakes a fresh audit found reaching Ray, answered by the local run before it starts (the table and the fixture of
test_mistakes_before_ray.py): a prompt or system part longer than --seq_len that --truncation truncate leaves no
trained token of, a chat template that raises on records past the first few, a model directory whose index names
shards it lacks (or files outside it), a reward model's or classifier's config.json as the model to fine-tune; and
data files: an --eval_fraction that leaves the workers fewer training or evaluation blocks than one each, a .csv
whose header is split by another delimiter or names a column twice, TRL's preference records (DPO's pairs, KTO's
labelled completions) given to SFT, a file whose bytes are of another format than its name says (gzip, Parquet,
JSON Lines under .json, Python's repr of dicts), and turns stored as JSON text, or a number, where a prompt or
completion goes; a turn marked untrained with axolotl's switch, half a UTF-16 surrogate pair."""
from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from tests.unit.test_mistakes_before_ray import LOCAL, _run, here  # noqa: F401  (here: the fixture)
from workload import cli
from workload.config import TrainConfig
from workload.data import template_check
from workload.data.tokenizer import load_chat_tokenizer
from workload.model import compatibility
from workload.run.local import REPO

SYSTEM = "Answer in the voice of a ship's log, with the date, the weather and the crew's mood first. " * 12
NO_SYSTEM = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
             "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TINY_QWEN2 = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}


def _lines(records) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def _chat(number: int, system: str = "") -> dict:
    turns = [{"role": "user", "content": f"where are we on day {number}?"},
             {"role": "assistant", "content": f"day {number}: calm seas"}]
    return {"messages": ([{"role": "system", "content": system}] if system else []) + turns}


NO_TENSORS = (2).to_bytes(8, "little") + b"{}"  # a safetensors file of no tensors: its header length, then "{}"
FILES = {
    "logbook.jsonl": _lines(_chat(number, SYSTEM) for number in range(30)),
    "briefs.jsonl": _lines({"prompt": f"Brief {number}: " + SYSTEM, "completion": f"noted {number}"}
                           for number in range(25)),
    # system turns from line 14 on, which the template refuses
    "watch.jsonl": _lines(_chat(number, "keep watch" if number >= 13 else "") for number in range(16)),
    "nosystem.jinja": NO_SYSTEM.encode(),
    "three-shards/config.json": b'{"model_type": "llama"}',
    "three-shards/model-00001-of-00003.safetensors": NO_TENSORS,
    "three-shards/model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00003.safetensors",
        "model.layers.0.mlp.up_proj.weight": "model-00002-of-00003.safetensors",
        "lm_head.weight": "model-00003-of-00003.safetensors"}}).encode(),
    "climbing/config.json": b'{"model_type": "llama"}',
    "climbing/model.safetensors": NO_TENSORS,
    "climbing/model.safetensors.index.json": json.dumps(
        {"weight_map": {"lm_head.weight": "../stolen/model.safetensors"}}).encode(),
    "listed/config.json": b'{"model_type": "llama"}',
    "listed/model.safetensors": NO_TENSORS,
    "listed/model.safetensors.index.json": b'["model.safetensors"]',
    "unindexed/config.json": b'{"model_type": "llama"}',
    "unindexed/model-00001-of-00002.safetensors": NO_TENSORS,
    "unindexed/model-00002-of-00002.safetensors": NO_TENSORS,
    "rm-qwen/config.json": json.dumps({**TINY_QWEN2, "architectures": ["Qwen2ForSequenceClassification"],
                                       "num_labels": 1, "pad_token_id": 0}).encode(),
    "rm-qwen/model.safetensors": NO_TENSORS,
    "rm-qwen/tokenizer.json": Path(REPO, "data", "tokenizer", "tokenizer.json").read_bytes(),  # tokenizers builds it
    "deck.jsonl": _lines({"prompt": f"knots at bell {number}?", "completion": f"{number % 9} knots"}
                         for number in range(30)),
    "almanac.txt": b"".join(f"tide tables for the harbour, week {week}, high water at dawn\n".encode()
                            for week in range(40)),
    "verdicts.jsonl": _lines({"prompt": f"log entry {number}", "completion": f"entry {number} filed",
                              "label": number % 3 > 0} for number in range(12)),
    "ranked.json": json.dumps([{"chosen": _chat(number)["messages"], "rejected": _chat(number + 1)["messages"]}
                               for number in range(6)]).encode(),
    "soundings.csv": gzip.compress(b"text\n" + b"fathoms at the bar: 4\n" * 20),  # gzip without its .gz
    "cargo.txt": b"PAR1" + bytes(64),  # a Parquet file's first bytes, under a text name
    "watchlog.json": _lines({"text": f"watch {number}: all quiet"} for number in range(5)),  # Dataset.to_json's
    "orders.csv": b'prompt,completion\n' + b'"[{""role"": ""user"", ""content"": ""heading?""}]",due north\n' * 8,
    "bearings.jsonl": _lines({"prompt": f"bearing at bell {number}?", "completion": 270 + number}
                             for number in range(8)),
    "crew.csv": b"prompt,completion,completion\n" + b"who has the watch?,the mate,the bosun\n" * 10,
    "muster.jsonl": b"".join(f"{ {'text': f'hand {number} aboard', 'present': True} }\n".encode()
                             for number in range(6)),
    "rota.jsonl": _lines({"conversations": [{"from": "human", "value": f"who steers at bell {number}?"},
                                            {"from": "gpt", "value": "not me", "training": False},
                                            {"from": "human", "value": "then who?"},
                                            {"from": "gpt", "value": f"the mate, bell {number}"}]}
                         for number in range(20)),
    # Half an emoji on line 4 (its high surrogate alone), a whole one (both halves) on line 2: only the first refused.
    "signals.jsonl": b"".join(b'{"text": "flag ' + str(number).encode() + (b' \\ud83c\\udff4' if number == 1 else
                                                                         b' \\ud83c' if number == 3 else b'') + b'"}\n'
                              for number in range(30)),
    "ledger.csv": b"text|source\n" + b"".join(f"cargo manifest {day}|purser\n".encode() for day in range(20)),
}

MISTAKES = [
    ("a system prompt longer than --seq_len", ["--data_format", "chat", "--dataset", "logbook.jsonl"],
     ("--seq_len 128 with --truncation truncate: 8 of the first 8 records of --dataset ", "logbook.jsonl checked lose "
      "all their trained tokens", "give --truncation keep_end or split, or a larger --seq_len")),
    ("prompts longer than --seq_len", ["--data_format", "prompt-completion", "--dataset", "briefs.jsonl",
                                       "--seq_len", "96"],
     ("--seq_len 96 with --truncation truncate: 8 of the first 8 records", "briefs.jsonl checked")),
    ("a template that raises on later records", ["--data_format", "chat", "--dataset", "watch.jsonl",
                                                 "--chat_template", "nosystem.jinja"],
     ("nosystem.jinja cannot render --dataset ", "watch.jsonl line 14 (System role not supported)")),
    ("an index naming absent shards", ["--model_id", "three-shards"],
     "--model_id three-shards: its model.safetensors.index.json names model-00002-of-00003.safetensors, "
     "model-00003-of-00003.safetensors, which the directory lacks"),
    ("an index naming a file outside", ["--model_id", "climbing"],
     "puts lm_head.weight in '../stolen/model.safetensors', outside the model directory"),
    ("an index that is a list", ["--model_id", "listed"],
     "--model_id listed: model.safetensors.index.json is not a safetensors index"),
    ("shards without their index", ["--model_id", "unindexed"],
     "without a model.safetensors.index.json, the job loads model.safetensors, which the directory lacks"),
    ("a reward model as the model", ["--model_id", "rm-qwen"],
     "--model_id rm-qwen: its config.json's architectures is Qwen2ForSequenceClassification: a reward model's or "
     "classifier's head (a score head of num_labels 1, no lm_head), not a causal LM; give the base model"),
    # the blocks the workers get, counted (examples) or bounded (text's bytes) from the records before Ray: the data
    # stage refused these on the cluster
    ("an evaluation share that leaves too few to train", ["--data_format", "prompt-completion", "--dataset",
                                                          "deck.jsonl", "--eval_fraction", "0.95"],
     ("deck.jsonl holds 1 training examples (a block holds one or more) once --eval_fraction 0.95 holds out 29, "
      "fewer than the 2 workers", "give a smaller --eval_fraction")),
    ("an evaluation share smaller than the workers", ["--data_format", "prompt-completion", "--dataset", "deck.jsonl",
                                                      "--eval_fraction", "0.03"],
     ("--eval_fraction 0.03 holds out 1 evaluation examples of --dataset ", "deck.jsonl, fewer than the 2 workers")),
    ("a text evaluation share smaller than the workers", ["--dataset", "almanac.txt", "--eval_fraction", "0.01"],
     ("--eval_fraction 0.01 holds out at most 1 evaluation blocks of --dataset ", "almanac.txt, fewer than the 2 "
      "workers")),
    ("a turn marked untrained, axolotl's way", ["--data_format", "chat", "--dataset", "rota.jsonl"],
     ("rota.jsonl line 1: conversations[1].training is false: a turn's own loss switch (axolotl's) is not read here, "
      "and every assistant turn is trained")),
    ("half a surrogate pair", ["--dataset", "signals.jsonl"],
     ("signals.jsonl line 4 holds \\ud83c, half of a UTF-16 surrogate pair", "which no tokenizer takes")),
    ("a .csv split by another delimiter", ["--dataset", "ledger.csv"],
     ("ledger.csv line 1: the header is one column, \"text|source\", its names split by '|'; allowed: "
      "comma-separated values")),
    ("gzip under a plain name", ["--dataset", "soundings.csv"],
     "soundings.csv is gzip-compressed (its first bytes say so), not the .csv text its name says: name it "
     "soundings.csv.gz"),
    ("Parquet under a text name", ["--dataset", "cargo.txt"],
     "cargo.txt is a Parquet file (its first bytes say so), not the .txt text its name says: name it cargo.parquet"),
    ("JSON Lines under .json", ["--dataset", "watchlog.json"],
     "watchlog.json holds one JSON record a line (JSON Lines: line 2 begins another), not a JSON list; name it .jsonl"),
    ("a prompt of JSON turns as text", ["--data_format", "prompt-completion", "--dataset", "orders.csv"],
     ("orders.csv line 2: prompt is \"[{\\\"role\\\": \\\"user\\\"", "the JSON text of a list of turns; allowed: a "
      "string, or the list itself")),
    ("a number as the completion", ["--data_format", "prompt-completion", "--dataset", "bearings.jsonl"],
     "bearings.jsonl line 1: completion is 270; allowed: a string, or a non-empty list of turns"),
    ("a .csv header naming a column twice", ["--data_format", "prompt-completion", "--dataset", "crew.csv"],
     'crew.csv line 1: the header names "completion" more than once; allowed: one column a name'),
    ("records written with str() of a dict", ["--dataset", "muster.jsonl"],
     ("muster.jsonl line 1 is not JSON (Expecting property name enclosed in double quotes at column 2): ",
      "(Python's repr of a dict, not JSON: write each record with json.dumps)")),
    ("KTO's labelled completions as prompt-completion", ["--data_format", "prompt-completion", "--dataset",
                                                         "verdicts.jsonl"],
     ("verdicts.jsonl line 1: the record is an unpaired preference (completion with a true or false label: TRL's "
      "KTOTrainer's), and this job trains on every completion, those labelled false too")),
    ("DPO's pairs of conversations as chat", ["--data_format", "chat", "--dataset", "ranked.json"],
     ("ranked.json record 1: the record is a preference pair (chosen, rejected: TRL's DPOTrainer's), and this job "
      "fine-tunes on one answer; give --data_format chat --messages_field chosen to train on the chosen ones")),
]


@pytest.fixture
def files(request):
    directory = request.getfixturevalue("here")  # the table's: its files, no AWS, and Ray forbidden
    for name, data in FILES.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


@pytest.mark.parametrize("case, argv, words", MISTAKES, ids=[case[0] for case in MISTAKES])
def test_a_mistake_is_one_line_before_ray(files, capsys, case, argv, words):
    _run(LOCAL, argv)  # the first call pays for the imports; the second is what the user waits for
    capsys.readouterr()
    started = time.monotonic()
    code = _run(LOCAL, argv)
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == cli.USAGE, f"{case}: exited {code}, not {cli.USAGE}:\n{err}"
    for part in (words,) if isinstance(words, str) else words:
        assert part in err, f"{case}: the error must say {part!r}:\n{err}"
    lines = err.splitlines()
    at = next(index for index, line in enumerate(lines) if line.startswith("error:"))
    assert len(lines[at:]) <= 2 and "Traceback" not in err, f"{case}: one line and a hint at most:\n{err}"
    assert took < 1, f"{case}: answered in {took:.1f} s"


def _chat_config(dataset: str, **settings) -> TrainConfig:
    return TrainConfig(model_config="tiny", tokenizer=os.path.join(REPO, "data", "chat-tokenizer"), data_format="chat",
                       dataset=dataset, **settings)


def test_keep_end_or_a_longer_seq_len_keeps_the_long_prompted_records(files):
    dataset = str(files / "logbook.jsonl")
    tokenizer = load_chat_tokenizer(_chat_config(dataset))
    for settings in ({"truncation": "keep_end"}, {"truncation": "split"}, {"seq_len": 4096}):
        template_check.check_template_trains(_chat_config(dataset, **{"seq_len": 128, **settings}), tokenizer)
    with pytest.raises(ValueError, match="8 of the first 8 records .* lose all their trained tokens"):
        template_check.check_template_trains(_chat_config(dataset, seq_len=128), tokenizer)


def test_the_template_renders_records_far_past_the_sample_and_stops_at_its_bound(tmp_path):
    dataset = tmp_path / "long.jsonl"
    records = [_chat(number) for number in range(template_check.RENDER_RECORDS + 500)]
    records[1499] = _chat(1499, "keep watch")
    dataset.write_bytes(_lines(records))
    (tmp_path / "nosystem.jinja").write_text(NO_SYSTEM)
    cfg = _chat_config(str(dataset), chat_template=str(tmp_path / "nosystem.jinja"))
    tokenizer = load_chat_tokenizer(cfg)
    with pytest.raises(ValueError, match=r"cannot render --dataset .*long.jsonl line 1500 \(System role not supported"):
        template_check.check_template_trains(cfg, tokenizer)
    records[1499] = _chat(1499)
    records[template_check.RENDER_RECORDS + 100] = _chat(0, "keep watch")  # past the bound: the job's to find
    dataset.write_bytes(_lines(records))
    template_check.check_template_trains(cfg, tokenizer)


@pytest.mark.parametrize("architectures, accepted", [
    (["Qwen2ForSequenceClassification"], False), (["Qwen2ForTokenClassification"], False), (["Qwen2Model"], False),
    (["Qwen2ForCausalLM"], True), (None, True),
])
def test_the_model_gate_takes_causal_lm_architectures_only(architectures, accepted):
    raw = {**TINY_QWEN2, **({"architectures": architectures} if architectures else {})}
    if accepted:
        compatibility.gate(raw, "trainModelId: team/model")
        return
    with pytest.raises(ValueError, match=rf"trainModelId: team/model: its config.json's architectures is "
                                         rf"{architectures[0]}: .* not a causal LM; give the base model"):
        compatibility.gate(raw, "trainModelId: team/model")
