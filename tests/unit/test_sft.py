"""Supervised fine-tuning data without a Ray cluster: exactly the assistant tokens carry loss under two published chat
templates, packed batches give each example the loss it has alone, the loss over uneven micro-batches and ranks is
the global mean over trained tokens, and bad records or templates are refused naming the flag.

The two templates are the published Qwen2.5-Instruct and Llama 3 Instruct ones (workload/data/templates/, with their
provenance), attached to tiny tokenizers built from the repository's sample BPE (data/tokenizer) with each model's
special tokens added, as their tokenizer_config.json declares them.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from workload.config import TrainConfig
from workload.data import chat, packing, records
from workload.model import loss as model_loss
from workload.model.build import build_model
from workload.model.loss import loss_fn
from workload.model.step import train_step

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data")
CONVERSATION = [
    {"role": "system", "content": "answer in one line ."},
    {"role": "user", "content": "the cat sees what ?"},
    {"role": "assistant", "content": "the cat sees the ball ."},
    {"role": "user", "content": "and the dog ?"},
    {"role": "assistant", "content": "the dog sees the tree ."},
]
# (template, special tokens as the model's tokenizer_config.json declares them, bos, the assistant header's tokens
# that precede a turn, the token that ends it)
TEMPLATES = {
    "qwen2.5": (["<|im_start|>", "<|im_end|>"], None, "<|im_start|>assistant\n", "<|im_end|>"),
    "llama3": (["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|begin_of_text|>",
               "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
}


def tiny_tokenizer(template: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(DATA, "tokenizer"))
    special, bos, _, _ = TEMPLATES[template]
    tokenizer.add_special_tokens({"additional_special_tokens": special})
    if bos:
        tokenizer.bos_token = bos
    tokenizer.chat_template = chat.template_text(template)
    return tokenizer


def _after_each_header(ids: list[int], header: list[int], end: int) -> list[int]:
    """The oracle: positions from after each assistant header through the end-of-turn token that follows it."""
    trained, index = [], 0
    while index < len(ids):
        if ids[index:index + len(header)] == header:
            index += len(header)
            while ids[index] != end:
                trained.append(index)
                index += 1
            trained.append(index)
        index += 1
    return trained


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_exactly_the_assistant_tokens_carry_loss_under_a_published_template(template):
    tokenizer = tiny_tokenizer(template)
    _, _, header_text, end_token = TEMPLATES[template]
    example = chat.tokenize_conversation(tokenizer, CONVERSATION, [2, 4], train_on_prompt=False, where="test")

    assert example.input_ids == tokenizer.apply_chat_template(CONVERSATION, tokenize=True)["input_ids"], (
        f"{template}: the training ids must be apply_chat_template's, what the model sees at inference")
    header = tokenizer(header_text, add_special_tokens=False).input_ids
    expected = _after_each_header(example.input_ids, header, tokenizer.convert_tokens_to_ids(end_token))
    trained = [index for index, label in enumerate(example.labels) if label != chat.IGNORE_INDEX]
    assert trained == expected, f"{template}: trained positions {trained}, expected {expected}"
    assert all(example.labels[index] == example.input_ids[index] for index in trained)
    assert tokenizer.decode([example.input_ids[i] for i in trained]) == (
        f"the cat sees the ball .{end_token}the dog sees the tree .{end_token}"), template
    everything = chat.tokenize_conversation(tokenizer, CONVERSATION, [2, 4], train_on_prompt=True, where="test")
    assert everything.labels == everything.input_ids, f"{template}: --train_on_prompt trains on every token"
    assert chat.end_of_turn_token(tokenizer) == tokenizer.convert_tokens_to_ids(end_token), template


def test_a_prompt_completion_record_trains_on_the_completion_only():
    tokenizer = tiny_tokenizer("qwen2.5")
    cfg = TrainConfig(model_config="tiny", dataset=os.path.join(DATA, "instructions.jsonl"),
                      data_format="prompt-completion", prompt_field="q", completion_field="a")
    few_shot = [{"role": "user", "content": "the cat sees what ?"}, {"role": "assistant", "content": "the ball ."},
                {"role": "user", "content": "the dog sees what ?"}]
    for record, answer in (({"q": "the dog sees what ?", "a": "the tree ."}, "the tree ."),
                           ({"q": few_shot, "a": [{"role": "assistant", "content": "the tree ."}]}, "the tree .")):
        (turns, trained), = records.conversations(cfg, [record])
        example = chat.tokenize_conversation(tokenizer, turns, trained, False, "test")
        learnt = tokenizer.decode([t for t, label in zip(example.input_ids, example.labels) if label != -100])
        assert learnt == answer + "<|im_end|>", f"only the completion is learnt, not the few-shot answer: {learnt!r}"


def test_a_tokenizer_without_a_template_is_refused_unless_one_is_named():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(DATA, "tokenizer"))
    with pytest.raises(ValueError, match="has no chat template.*--chat_template"):
        chat.apply_template(tokenizer, "", "data/tokenizer")
    chat.apply_template(tokenizer, "llama3", "data/tokenizer")
    assert tokenizer.chat_template == chat.template_text("llama3")


def test_a_template_using_a_token_the_tokenizer_lacks_names_the_token_and_the_fix():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(DATA, "tokenizer"))  # it defines no bos_token
    chat.apply_template(tokenizer, "llama3", "data/tokenizer")
    with pytest.raises(ValueError, match=r"record 2 .*uses the tokenizer's bos_token, which .*tokenizer does not "
                                         r"define; give the model's own tokenizer with --tokenizer"):
        chat.tokenize_conversation(tokenizer, CONVERSATION, [2, 4], False, "record 2 of data.jsonl")


def test_a_template_that_rewrites_earlier_turns_is_refused():
    """Llama 3's template as first published appends the assistant header after every conversation, so a turn's
    rendering is not a prefix of the conversation's (ggml-org/llama.cpp tests/test-chat-template.cpp, "Llama-3")."""
    tokenizer = tiny_tokenizer("llama3")
    tokenizer.chat_template = chat.template_text("llama3").replace("{% if add_generation_prompt %}", "").removesuffix(
        "{% endif %}")
    assert tokenizer.chat_template.endswith("<|end_header_id|>\n\n' }}"), tokenizer.chat_template
    with pytest.raises(ValueError, match="record 3 .*does not render this conversation turn by turn"):
        chat.tokenize_conversation(tokenizer, CONVERSATION, [2, 4], False, "record 3 of data.jsonl")


def test_records_are_read_from_parquet_and_bad_ones_are_named(tmp_path):
    import pyarrow
    import pyarrow.parquet

    path = tmp_path / "chat.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"conversation": CONVERSATION}]), path)
    cfg = TrainConfig(model_config="tiny", dataset=str(path), data_format="chat", messages_field="conversation")
    (turns, trained), = records.conversations(cfg, records.read_records(cfg))
    assert [turn["content"] for turn in turns] == [turn["content"] for turn in CONVERSATION] and trained == [2, 4]

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversation": CONVERSATION}) + "\n" + json.dumps({"conversation": "hi"}) + "\n")
    cfg = TrainConfig(model_config="tiny", dataset=str(bad), data_format="chat", messages_field="conversation")
    with pytest.raises(ValueError, match='bad.jsonl record 2: conversation is "hi"; allowed: a non-empty list'):
        records.conversations(cfg, records.read_records(cfg))
    cfg = TrainConfig(model_config="tiny", dataset=str(bad), data_format="chat")
    with pytest.raises(ValueError, match='record 1: no field "messages" .*--messages_field'):
        records.conversations(cfg, records.read_records(cfg))


def _examples(lengths, seed=1) -> list[chat.Example]:
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for length in lengths:
        ids = torch.randint(0, 300, (length,), generator=generator).tolist()
        examples.append(chat.Example(ids, [chat.IGNORE_INDEX] * (length // 2) + ids[length // 2:]))
    return examples


def test_over_long_examples_are_truncated_or_split_and_counted():
    examples = _examples([5, 23, 9])
    truncated, over_long = packing.fit(examples, 10, "truncate")
    assert over_long == 1 and [len(e.input_ids) for e in truncated] == [5, 10, 9]
    split, over_long = packing.fit(examples, 10, "split")
    assert over_long == 1 and [len(e.input_ids) for e in split] == [5, 10, 10, 3, 9]
    assert sum((e.input_ids for e in split[1:4]), []) == examples[1].input_ids, "the pieces are the example, in order"


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("chunked", [True, False])
def test_a_packed_batch_gives_each_example_its_loss_alone(attention, chunked):
    """Positions restart per example and transformers masks attention between them (its packed-sequence detection
    from position_ids), with the attention implementations the job may run on."""
    torch.manual_seed(0)
    lm = build_model(TrainConfig(model_config="tiny", chunked_loss=chunked), torch.device("cpu"))
    lm.lm.set_attn_implementation(attention)
    examples = _examples([7, 12, 5, 9, 16])
    blocks = packing.pack_examples(examples, 20, pad_id=0)
    assert blocks.shape == (3, 3, 20), f"first fit in order: [7, 12] [5, 9] [16], got {blocks.shape}"
    batch = packing.TokenBatch.of(blocks)
    with torch.no_grad():
        packed = loss_fn(lm, batch, divisor=1.0).item()
        alone = [loss_fn(lm, packing.TokenBatch.of(packing.pack_examples([e], len(e.input_ids), 0)),
                               divisor=1.0).item() for e in examples]
        leaky = loss_fn(lm, packing.TokenBatch(batch.input_ids, batch.labels,
                                                     torch.arange(20).expand(3, 20)), divisor=1.0).item()
    assert packed == pytest.approx(sum(alone), rel=1e-5), f"{attention}: packed {packed} vs one at a time {alone}"
    assert abs(leaky - packed) > 1e-3, "without restarted positions the examples would see each other"
    assert int(batch.trained_tokens()) == sum(len(e.input_ids) - len(e.input_ids) // 2 for e in examples)
    assert int(batch.examples()) == len(examples)


def _gradients(lm, batches, cfg) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    lm.zero_grad()
    total = torch.zeros(())
    for batch in batches:
        divisor = model_loss.loss_divisor(batch) if cfg is None else None
        loss = loss_fn(lm, batch, divisor)
        loss.backward()
        total += loss.detach()
    return total, {name: parameter.grad.clone() for name, parameter in lm.named_parameters()}


def test_the_loss_is_the_mean_over_trained_tokens_however_micro_batches_and_ranks_split_them(monkeypatch):
    """Uneven micro-batches (one holds most of the trained tokens) and two ranks: each rank's summed loss over the
    global count, with FSDP's mean of the ranks' gradients, is the global batch's mean over its trained tokens."""
    torch.manual_seed(0)
    cfg = TrainConfig(model_config="tiny", batch_size=4, grad_accum_steps=2, learning_rate=1e-3)
    lm = build_model(cfg, torch.device("cpu"))
    blocks = packing.pack_examples(_examples([19, 3, 4, 5, 18, 2, 17, 20, 6]), 20, pad_id=0)
    batch = packing.TokenBatch.of(blocks)
    assert len(batch) == 6
    reference, expected = _gradients(lm, [batch], None)  # the whole global batch at once: its mean

    counted = batch.trained_tokens().float()
    rank_halves = [packing.TokenBatch(*(t[:3] for t in vars(batch).values())),
                   packing.TokenBatch(*(t[3:] for t in vars(batch).values()))]
    world_size = 2
    # What the all-reduce in loss_divisor gives each rank: the count over both ranks, per rank.
    monkeypatch.setattr(model_loss, "loss_divisor", lambda batch: counted.clamp(min=1) / world_size)
    losses, gradients = zip(*(_gradients(lm, half.chunk(2), None) for half in rank_halves))
    mean_gradient = {name: sum(g[name] for g in gradients) / world_size for name in expected}  # FSDP's averaging
    assert sum(losses) / world_size == pytest.approx(reference.item(), rel=1e-5), (
        "the mean over ranks of the reported losses is the global mean over trained tokens")
    for name in expected:
        assert torch.allclose(mean_gradient[name], expected[name], rtol=1e-4, atol=1e-7), name


def test_accumulated_micro_batches_give_the_step_of_the_whole_batch():
    """train_step itself: --grad_accum_steps 2 on uneven micro-batches updates the weights as one batch does."""
    blocks = packing.pack_examples(_examples([19, 3, 4, 5, 18, 2, 17, 20]), 20, pad_id=0)[:4]
    results = []
    for accumulate in (1, 2):
        torch.manual_seed(0)
        cfg = TrainConfig(model_config="tiny", batch_size=4, grad_accum_steps=accumulate, max_grad_norm=0)
        lm = build_model(cfg, torch.device("cpu"))
        # SGD: the update is the gradient itself (AdamW's first step is about its sign, which float noise flips
        # where a gradient is near 0).
        optimizer = torch.optim.SGD(lm.parameters(), lr=1.0)
        loss = train_step(lm, optimizer, packing.TokenBatch.of(blocks), cfg)
        results.append((loss.item(), [p.detach().clone() for p in lm.parameters()]))
    (whole, whole_weights), (accumulated, accumulated_weights) = results
    assert accumulated == pytest.approx(whole, rel=1e-5), f"loss: {accumulated} accumulated vs {whole} whole"
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(accumulated_weights, whole_weights)), (
        "the accumulated step must move the weights as the whole batch's step does")


def test_the_exported_tokenizer_keeps_the_training_template_and_generation_stops_at_the_end_of_a_turn(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workload.checkpoint.export import save_model_directory

    lm = build_model(TrainConfig(model_config="tiny"), torch.device("cpu")).lm
    notes = save_model_directory(lm, str(tmp_path), tokenizer=os.path.join(DATA, "chat-tokenizer"),
                                 chat_template=chat.template_text("llama3"))
    assert notes == []
    exported = AutoTokenizer.from_pretrained(tmp_path)
    assert exported.chat_template == chat.template_text("llama3"), "the template training named goes with the model"
    training = AutoTokenizer.from_pretrained(os.path.join(DATA, "chat-tokenizer"))
    assert training.chat_template != exported.chat_template, "the named template, not the tokenizer's own"
    # A base model's tokenizer with ChatML (Qwen2.5-1.5B's arrangement): its eos is <|endoftext|>, not <|im_end|>.
    base = tiny_tokenizer("qwen2.5")
    base.save_pretrained(tmp_path / "base")
    lm = build_model(TrainConfig(model_config="tiny"), torch.device("cpu")).lm
    save_model_directory(lm, str(tmp_path / "own"), tokenizer=str(tmp_path / "base"))
    own = AutoTokenizer.from_pretrained(tmp_path / "own")
    assert own.apply_chat_template(CONVERSATION, tokenize=True)["input_ids"] == base.apply_chat_template(
        CONVERSATION, tokenize=True)["input_ids"], "the export renders conversations exactly as training did"
    stops = AutoModelForCausalLM.from_pretrained(tmp_path / "own").generation_config.eos_token_id
    assert sorted(stops) == sorted([own.convert_tokens_to_ids("<|im_end|>"), own.eos_token_id]), (
        f"generate() must stop at the end of a turn (<|im_end|>) and at the end of text: {stops}")
