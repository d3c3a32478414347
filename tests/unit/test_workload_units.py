"""Workload pieces without a Ray cluster: flags, data packing and sharding, the chunked loss, FLOPs peaks and NCCL log
files. Runs in seconds."""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import ray
import torch
import torch.distributed as dist

from workload import train
from workload.config import TrainConfig, parse_args
from workload.data import batches as data
from workload.data.tokenizer import load_tokenizer
from workload.fabric import nccl_logs
from workload.model import loss as model_loss
from workload.model.build import build_model, hf_config, matmul_parameters
from workload.model.flops import flops_per_token, model_flops_utilization
from workload.model.loss import loss_fn
from workload.model.optimizer import learning_rate_at
from workload.model.sharding import TORCH_REDUCE_DTYPES
from workload.model.step import evaluate, peak_flops

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(REPO, "data", "corpus.txt")
CORPUS_JSONL = os.path.join(REPO, "data", "corpus.jsonl")
TOKENIZER = os.path.join(REPO, "data", "tokenizer")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--batch_size", "0"], "--batch_size"),
        (["--steps", "-3"], "--steps"),
        (["--learning_rate", "0"], "--learning_rate"),
        (["--learning_rate=-1e-4"], "--learning_rate"),
        (["--model_config", "gpt-17"], "--model_config"),
        (["--dataset", "/no/such/corpus.jsonl"], "--dataset"),
        (["--model_config", "tiny", "--seq_len", "4096"], "--seq_len"),
        (["--model_config", "tiny", "--checkpoint_every", "5"], "--checkpoint_every"),
        (["--sharding", "ring"], "--sharding must be one of auto, full, hybrid"),
        (["--reduce_dtype", "fp16"], "--reduce_dtype must be one of auto, fp32, bf16"),
        (["--grad_accum_steps", "3"], "--grad_accum_steps 3 must divide --batch_size 2"),
        (["--ranks_per_node", "-1"], "--ranks_per_node"),
        (["--num_workers", "6", "--ranks_per_node", "4"], "--ranks_per_node 4 must divide --num_workers 6"),
        (["--fabric_check_seconds", "0", "--min_bus_gbytes_per_s", "4"], "--min_bus_gbytes_per_s needs"),
        (["--lr_schedule", "step"], "--lr_schedule must be one of constant, linear, cosine"),
        (["--steps", "10", "--warmup_steps", "11"], "--warmup_steps 11 must be at most --steps 10"),
        (["--dataset", CORPUS, "--eval_fraction", "1"], "--eval_fraction must be at least 0 and below 1"),
        (["--eval_fraction", "0.1"], "--dataset is empty .* nothing to evaluate: set it, or leave --eval_fraction"),
        (["--dataset", CORPUS, "--eval_split", "validation"], "--eval_split names a split of a Hugging Face"),
        (["--dataset", "org/corpus", "--eval_split", "validation", "--eval_fraction", "0.1"], "give one"),
        (["--dataset", CORPUS, "--eval_every", "5"], "--eval_every needs an evaluation set"),
        (["--export", "hf"], "--export must be one of final, checkpoints, none"),
        (["--storage_path", "/tmp/x", "--export", "checkpoints"], "--export checkpoints needs --checkpoint_every"),
        (["--dataset", "s3://bucket/corpus.xlsx"], "a remote file must end in one of .txt, .jsonl, .json, .csv, .parquet"),
        (["--data_format", "sharegpt"], "--data_format must be one of text, chat, prompt-completion"),
        (["--data_format", "chat"], "--data_format chat needs a --dataset of records"),
        (["--data_format", "chat", "--dataset", CORPUS], "is plain text; records come from .jsonl"),
        (["--data_format", "chat", "--dataset", "org/chats", "--messages_field", ""], "--messages_field must name"),
        (["--data_format", "prompt-completion", "--dataset", "org/pairs", "--completion_field", "prompt"],
         "--prompt_field and --completion_field must differ"),
        (["--truncation", "drop"], "--truncation must be one of truncate, keep_end, split"),
        (["--chat_template", "zephyr"], "--chat_template must be empty .*, one of qwen2.5, llama3, or an existing"),
    ],
)
def test_bad_input_fails_before_ray_starts(argv, flag, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # as Ray's job supervisor sets it for the job's entrypoint
    with pytest.raises(ValueError, match=flag):
        train.main(argv)
    assert not ray.is_initialized(), f"bad {flag} must fail before ray.init, but Ray was started"


def test_flags_map_onto_the_config_and_back():
    cfg = parse_args(["--model_config", "tiny", "--steps", "7", "--learning_rate", "3e-4", "--no-chunked_loss",
                      "--compile", "--dataset", CORPUS])
    assert (cfg.steps, cfg.learning_rate, cfg.chunked_loss, cfg.compile) == (7, 3e-4, False, True), (
        f"TrainConfig from flags: expected steps 7, lr 3e-4, chunked_loss off, compile on; got {cfg}"
    )
    assert parse_args(cfg.to_args()) == cfg, "to_args() must rebuild the same TrainConfig"
    fabric = parse_args(["--fabric_check_seconds", "0.25", "--min_bus_gbytes_per_s", "4.5", "--sharding", "hybrid"])
    assert parse_args(fabric.to_args()) == fabric and fabric.fabric_check_seconds == 0.25, fabric.to_args()
    assert TrainConfig().compile is None, "compile must default to 'decide by device' (None)"


def test_every_config_field_has_a_flag_with_help():
    from workload.config import build_parser

    help_text = " ".join(build_parser().format_help().split())  # argparse wraps help; compare with spaces only
    for field in dataclasses.fields(TrainConfig):
        doc = field.metadata.get("help", "")
        assert doc and "\n" not in doc, f"field {field.name} needs flag(default, one-line help), got {doc!r}"
        assert f"--{field.name}" in help_text, f"flag --{field.name} missing from the CLI"
        assert doc in help_text, f"--{field.name}'s help text is not in --help"


def test_modules_a_benchmark_reuses_do_not_import_ray():
    code = ("import sys; import workload.model.build, workload.model.sharding, workload.model.optimizer, "
            "workload.model.loss, workload.model.step, workload.model.flops, workload.data.batches, "
            "workload.checkpoint.sharded, workload.config, workload.fabric.nccl_logs, workload.model.parallel, "
            "workload.fabric.bandwidth; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", \
        "workload.model's step modules, data, checkpoint, config, nccl_logs, parallel, fabric must not import ray"


def test_pack_concatenates_documents_with_separator_and_drops_the_tail():
    blocks = data.pack_documents([[1, 2, 3], [4, 5], [6]], seq_len=3, separator=0)
    assert blocks.tolist() == [[1, 2, 3], [0, 4, 5], [0, 6, 0]], f"packed blocks: got {blocks.tolist()}"
    assert data.pack_documents([[1, 2, 3, 4]], seq_len=3, separator=None).tolist() == [[1, 2, 3]], (
        "the tail shorter than a block must be dropped"
    )


def test_shards_are_disjoint_equal_and_cover_the_blocks():
    blocks = torch.arange(22 * 4).view(22, 4)
    shards = [data.shard(blocks, seed=3, rank=rank, world_size=4) for rank in range(4)]
    rows = [tuple(row.tolist()) for shard in shards for row in shard]
    assert [len(shard) for shard in shards] == [5] * 4, f"each of 4 ranks gets 22 // 4 = 5 blocks, got {shards}"
    assert len(set(rows)) == 20, "rank shards must not share a block"
    assert set(rows) <= {tuple(row.tolist()) for row in blocks}, "shards must hold only packed blocks"
    again = data.shard(blocks, seed=3, rank=2, world_size=4)
    assert torch.equal(again, shards[2]), "sharding must be deterministic for a seed"


def test_real_data_is_tokenized_packed_and_sharded(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    vocab = tokenizer.get_vocab()
    with open(CORPUS) as file:
        lines = [line.strip() for line in file if line.strip()]
    # Byte-level BPE as Qwen2's: a word after a space is one token spelt with the space's byte (Ġ) in front.
    words = [[vocab[word if index == 0 else "Ġ" + word] for index, word in enumerate(line.split())] for line in lines]
    stream = [token for ids in words for token in ids + [vocab["<|endoftext|>"]]]
    seq_len = 16
    expected_blocks = {tuple(stream[i : i + seq_len]) for i in range(0, len(stream) - seq_len + 1, seq_len)}

    cfg = TrainConfig(model_config="tiny", dataset=CORPUS, tokenizer=TOKENIZER, seq_len=seq_len, batch_size=4)
    seen: list[tuple[int, ...]] = []
    for rank in range(2):
        batches = data.dataset_batches(cfg, rank=rank, world_size=2)
        shard_rows = len(expected_blocks) // 2
        steps_per_epoch = shard_rows // cfg.batch_size
        rank_rows = [tuple(row.tolist()) for step in range(steps_per_epoch) for row in batches(step)]
        assert set(rank_rows) <= expected_blocks, f"rank {rank}: every row must be a block of the tokenized corpus"
        assert torch.equal(batches(0), data.dataset_batches(cfg, rank, 2)(0)), f"rank {rank}: step 0 not reproducible"
        wrapped = (shard_rows + cfg.batch_size - 1) // cfg.batch_size
        assert batches(wrapped).shape == (cfg.batch_size, seq_len), "batches must wrap around past the shard's end"
        seen += rank_rows
    assert len(seen) == len(set(seen)), "the two ranks must see disjoint blocks"


def test_jsonl_reads_the_text_field_and_names_a_missing_one():
    cfg = TrainConfig(model_config="tiny", dataset=CORPUS_JSONL, text_field="body", tokenizer=TOKENIZER)
    with open(CORPUS_JSONL) as file:
        expected = [json.loads(line)["body"] for line in file]
    assert data.load_documents(cfg) == expected, "documents of a .jsonl are its --text_field values, in order"
    with pytest.raises(ValueError, match="--text_field"):
        data.load_documents(TrainConfig(model_config="tiny", dataset=CORPUS_JSONL, tokenizer=TOKENIZER))


def test_hugging_face_dataset_reads_its_text_column(monkeypatch):
    import datasets

    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return datasets.Dataset.from_dict({"body": ["a b", "", "  ", "c d"], "id": [1, 2, 3, 4]})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    cfg = TrainConfig(model_config="tiny", dataset="org/corpus", dataset_config="v1", dataset_split="validation",
                      text_field="body", tokenizer=TOKENIZER)
    assert data.load_documents(cfg) == ["a b", "c d"], "documents: the non-blank values of --text_field"
    assert calls == [("org/corpus", "v1", "validation")], f"load_dataset must get --dataset/_config/_split: {calls}"
    with pytest.raises(ValueError, match="--text_field 'text'"):
        data.load_documents(TrainConfig(model_config="tiny", dataset="org/corpus", tokenizer=TOKENIZER))


def test_held_out_blocks_are_seeded_disjoint_and_shared_equally():
    cfg = TrainConfig(model_config="tiny", dataset=CORPUS, tokenizer=TOKENIZER, seq_len=16, batch_size=2,
                      eval_fraction=0.1)
    every = {tuple(row.tolist()) for row in data.text_blocks(dataclasses.replace(cfg, eval_fraction=0.0))[0]}
    train, held = data.text_blocks(cfg)
    assert len(held) == -(-len(every) // 10) and len(train) + len(held) == len(every), (
        f"a tenth of {len(every)} blocks (rounded up) is held out: {len(held)} held, {len(train)} left")
    assert {tuple(row.tolist()) for row in train} | {tuple(row.tolist()) for row in held} == every, \
        "the held-out and training blocks together are the packed corpus"
    assert torch.equal(held, data.text_blocks(cfg)[1]), "the held-out blocks are a function of the seed"
    assert not torch.equal(held, data.text_blocks(dataclasses.replace(cfg, seed=1))[1]), "and of the seed only"
    shares = [data.make_data(cfg, 512, rank, 3).eval for rank in range(3)]
    rows = [tuple(row.tolist()) for share in shares for batch in share for row in batch]
    assert [sum(len(batch) for batch in share) for share in shares] == [len(held) // 3] * 3, (
        "each of 3 ranks evaluates an equal share (the remainder is left out), so all run as many forwards")
    assert all(len(batch) <= cfg.batch_size for share in shares for batch in share), "in batches of --batch_size"
    assert len(set(rows)) == len(rows) and set(rows) <= {tuple(row.tolist()) for row in held}, "disjoint shares"
    with pytest.raises(ValueError, match="--eval_fraction 0.1 gives 3 evaluation blocks .* fewer than the 4"):
        data.make_data(dataclasses.replace(cfg, seq_len=64), 512, 0, 4)


def test_eval_split_packs_another_split_of_the_hugging_face_dataset(monkeypatch):
    import datasets

    splits = {"train": ["the cat sees the ball ."] * 20, "validation": ["the dog likes the tree ."] * 8}
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda name, config, split: datasets.Dataset.from_dict({"text": splits[split]}))
    cfg = TrainConfig(model_config="tiny", dataset="org/corpus", tokenizer=TOKENIZER, seq_len=7, batch_size=2,
                      eval_split="validation")
    train, held = data.text_blocks(cfg)
    tokenizer = load_tokenizer(TOKENIZER)
    line = tokenizer("the dog likes the tree .")["input_ids"] + [tokenizer.eos_token_id]
    assert held.tolist() == [line] * 8 and len(train) == 20, f"evaluation: the validation split's blocks {held}"


def test_learning_rates_follow_the_schedule_worked_by_hand():
    """Peak 1e-3, 4 warmup steps of 12: steps 0-3 climb by quarters; after them, progress (step - 4) / 8."""
    def rates(schedule):
        cfg = TrainConfig(learning_rate=1e-3, steps=12, warmup_steps=4, lr_schedule=schedule)
        return [learning_rate_at(cfg, step) for step in (0, 1, 3, 4, 8, 11)]

    warmup = [2.5e-4, 5e-4, 1e-3]
    # cos(pi * 7/8) = -0.9238795: 0.5 * (1 - 0.9238795) = 0.0380602 of the peak at the last step.
    assert rates("cosine") == pytest.approx(warmup + [1e-3, 5e-4, 3.80602e-5], rel=1e-5), rates("cosine")
    assert rates("linear") == pytest.approx(warmup + [1e-3, 5e-4, 1.25e-4], rel=1e-9), rates("linear")
    assert rates("constant") == pytest.approx(warmup + [1e-3] * 3, rel=1e-9), rates("constant")
    no_warmup = TrainConfig(learning_rate=1e-3, steps=12)
    assert learning_rate_at(no_warmup, 0) == 1e-3, "without warmup the first step takes the peak"


def test_evaluation_takes_the_loss_without_gradients_and_weighs_by_sequences(monkeypatch):
    monkeypatch.setattr(model_loss, "LOSS_CHUNK_TOKENS", 50)  # several chunks, one partial
    lm = build_model(TrainConfig(model_config="tiny"), torch.device("cpu"))
    batches = [data.random_batches(TrainConfig(batch_size=size, seq_len=32, seed=size), 512, 0)(0) for size in (3, 1)]
    plain = [lm.lm(input_ids=batch, labels=batch).loss.item() for batch in batches]
    assert evaluate(lm, batches).item() == pytest.approx((3 * plain[0] + plain[1]) / 4, rel=1e-5), (
        "the evaluation loss is the mean over sequences of the plain Hugging Face loss")
    assert all(parameter.grad is None for parameter in lm.parameters()), "evaluation computes no gradients"


def test_a_remote_dataset_is_read_through_pyarrow(tmp_path):
    """A file:// URI takes the same pyarrow path as s3:// (from_uri, then a stream), without S3."""
    uri = f"file://{os.path.abspath(CORPUS_JSONL)}"
    cfg = TrainConfig(model_config="tiny", dataset=uri, text_field="body", tokenizer=TOKENIZER)
    data.check_dataset(cfg)
    local = TrainConfig(model_config="tiny", dataset=CORPUS_JSONL, text_field="body", tokenizer=TOKENIZER)
    assert data.load_documents(cfg) == data.load_documents(local), "a remote file reads as the local one"
    with pytest.raises(ValueError, match="--dataset 'file:///no/such/corpus.jsonl' is not a file there"):
        data.check_dataset(dataclasses.replace(cfg, dataset="file:///no/such/corpus.jsonl"))


def test_metrics_reach_tensorboard_files_under_a_remote_run_directory_and_read_back(tmp_path):
    """Two attempts of one run, the second resumed at step 3 after the first had logged up to 6 (past its last
    checkpoint): TensorBoard's purge marker leaves steps 1-3 of the first and 4-5 of the second. A file:// URI takes
    the upload path an s3:// storage path takes."""
    from workload.metrics import tensorboard as metrics

    run = f"file://{tmp_path}/run"
    first = metrics.MetricsLog(run, start_step=0)
    for step in range(1, 7):
        first.scalars(step, {"train/loss": 10.0 - step})
    first.sync()
    assert glob.glob(str(tmp_path / "run" / "tensorboard" / metrics.EVENT_FILES)), "synced up before the end"
    second = metrics.MetricsLog(run, start_step=3)
    for step in (4, 5):
        second.scalars(step, {"train/loss": 100.0 + step, "eval/loss": 50.0})
    second.close()
    scalars = metrics.read_scalars(str(tmp_path / "run" / "tensorboard"))
    assert scalars["train/loss"] == [(1, 9.0), (2, 8.0), (3, 7.0), (4, 104.0), (5, 105.0)], scalars
    assert scalars["eval/loss"] == [(4, 50.0), (5, 50.0)], scalars


def test_a_directory_is_written_to_and_read_from_a_remote_path(tmp_path):
    from workload import storage

    destination = f"file://{tmp_path}/remote/model"
    with storage.writing(destination) as local:
        assert local != str(tmp_path / "remote" / "model"), "a remote destination is written locally first"
        (pathlib.Path(local) / "config.json").write_text("{}")
    assert (tmp_path / "remote" / "model" / "config.json").read_text() == "{}", "uploaded on success"
    with storage.local_copy(destination) as copy:
        assert os.listdir(copy) == ["config.json"], "and downloaded back"


def test_random_batches_are_seeded_per_step_and_rank():
    cfg = TrainConfig(model_config="tiny", batch_size=2, seq_len=8)
    rank0, rank1 = data.random_batches(cfg, 512, 0), data.random_batches(cfg, 512, 1)
    assert torch.equal(rank0(5), data.random_batches(cfg, 512, 0)(5)), "step 5's batch must not depend on history"
    assert not torch.equal(rank0(5), rank1(5)), "ranks must get different batches"
    assert not torch.equal(rank0(5), rank0(6)), "steps must get different batches"
    assert int(rank0(0).max()) < 512, "token ids must be below the vocabulary size"


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_chunked_loss_matches_the_plain_loss(monkeypatch, dtype, tolerance):
    # Small chunks, so the 2 x 255 predicted tokens span several of them, one partial.
    monkeypatch.setattr(model_loss, "LOSS_CHUNK_TOKENS", 100)
    batch = data.random_batches(TrainConfig(model_config="tiny", batch_size=2, seq_len=256), 512, 0)(0)
    results = {}
    for chunked in (False, True):
        cfg = TrainConfig(model_config="tiny", chunked_loss=chunked)
        lm = build_model(cfg, torch.device("cpu")).to(dtype)
        loss = loss_fn(lm, batch)
        loss.backward()
        results[chunked] = (loss.item(), lm.lm.model.embed_tokens.weight.grad.float().clone())
    (plain, plain_grad), (chunked, chunked_grad) = results[False], results[True]
    assert abs(plain - chunked) <= tolerance * abs(plain), f"{dtype} chunked loss {chunked} vs plain {plain}"
    atol = 10 * tolerance * plain_grad.abs().max()
    assert torch.allclose(plain_grad, chunked_grad, rtol=10 * tolerance, atol=atol), (
        f"{dtype}: the chunked loss's gradients must match the plain loss's"
    )


def test_activation_checkpointing_recomputes_the_same_gradients():
    batch = data.random_batches(TrainConfig(model_config="tiny", batch_size=2, seq_len=64), 512, 0)(0)
    grads = {}
    for recompute in (False, True):
        cfg = TrainConfig(model_config="tiny", activation_checkpointing=recompute)
        lm = build_model(cfg, torch.device("cpu"))
        lm.train()
        assert lm.lm.is_gradient_checkpointing == recompute, f"activation_checkpointing={recompute} not applied"
        loss_fn(lm, batch).backward()
        grads[recompute] = lm.layers[0].mlp.up_proj.weight.grad.clone()
    assert torch.allclose(grads[False], grads[True], rtol=1e-4, atol=1e-6), (
        "--activation_checkpointing must not change layer 0's gradients"
    )


def test_every_reduce_dtype_flag_has_a_torch_dtype():
    from workload.config import REDUCE_DTYPES

    assert set(TORCH_REDUCE_DTYPES) == set(REDUCE_DTYPES), "--reduce_dtype's choices and the dtypes they mean"


def test_peak_flops_lookup(monkeypatch):
    assert peak_flops(torch.device("cpu")) is None, "CPU has no MFU peak: null"
    for name, peak in [("NVIDIA H200", 989e12), ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA L40S", 362e12),
                       ("NVIDIA L4", 121e12), ("NVIDIA A100-SXM4-40GB", 312e12), ("Tesla T4", None)]:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, name=name: name)
        assert peak_flops(torch.device("cuda", 0)) == peak, f"peak of {name}: expected {peak}"


def test_mfu_is_achieved_flops_over_the_devices_peak():
    assert model_flops_utilization(1000.0, 1e9, 1e12, 2) == 0.5, "1e12 FLOP/s on 2 devices of 1e12 peak: 0.5"
    assert model_flops_utilization(1000.0, 1e9, None, 2) is None, "unknown peak (CPU): MFU null"


def test_flops_per_token_counts_weights_and_attention():
    config = hf_config(TrainConfig(model_config="tiny"))
    lm = build_model(TrainConfig(model_config="tiny"), torch.device("cpu"))
    params = matmul_parameters(lm)
    assert params == sum(p.numel() for p in lm.parameters()), "tied embeddings: the lm_head matmul counts them"
    assert flops_per_token(config.to_dict(), 128) - flops_per_token(config.to_dict(), 64) == (
        12 * config.num_hidden_layers * config.hidden_size * 64
    ), "attention FLOPs grow by 12 * layers * hidden per token of sequence"


def test_nccl_debug_file_expansion_follows_nccl():
    expand = nccl_logs.expand_debug_file
    assert expand("/tmp/nccl.%h.%p.log", "ip-10-0-1-5.ec2.internal", 42) == "/tmp/nccl.ip-10-0-1-5.42.log"
    assert expand("/x/100%%-%q", "host", 1) == "/x/100%-%q", "%% is a percent sign; unknown %q is kept"


def test_nccl_transport_lines_are_read_filtered_and_gathered(tmp_path, monkeypatch):
    pattern = str(tmp_path / "nccl-%h-%p.log")
    monkeypatch.setenv("NCCL_DEBUG_FILE", pattern)
    path = nccl_logs.expand_debug_file(pattern, socket.gethostname(), os.getpid())
    kept = "ip-10-0-1-5:42:43 [0] NCCL INFO Using network Libfabric"
    with open(path, "w") as file:
        file.write(f"some python warning\n{kept}\n")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        assert nccl_logs.gather_transport_lines(0, 1) == {"0": kept}, "rank 0 gathers its NCCL INFO lines only"
        monkeypatch.delenv("NCCL_DEBUG_FILE")
        assert nccl_logs.gather_transport_lines(0, 1) == {}, "no NCCL_DEBUG_FILE: empty nccl_logs"
    finally:
        dist.destroy_process_group()
