"""The spawned side of tests/runs/test_model_families.py: 2 gloo processes take tiny Llama, Mistral, Qwen3, Gemma 2, Gemma 3,
Phi-3 and OLMo 2 models (the published config.json of each family, shrunk) through the job's path in turn: the model's files fetched once per
node, built on the meta device, sharded with FSDP2, each rank's shards read from the safetensors files, trained,
checkpointed, resumed and exported. Rank 0 saves what they saw for the tests. Kept apart from the test module so
that each spawned process imports torch, transformers and the workload only, not Ray, Pulumi or pytest.
"""
from __future__ import annotations

import json
import os

import safetensors
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from workload.checkpoint import sharded as checkpoint
from workload.checkpoint.export import save_model_directory
from workload.config import TrainConfig
from workload.data.batches import random_batches
from workload.model import files as model_files
from workload.model.build import build_model, load_pretrained
from workload.model.loss import LM_PREFIX, loss_fn
from workload.model.optimizer import build_optimizer, learning_rate_at, set_learning_rate
from workload.model.sharding import build_mesh, reshard, shard_model
from workload.model.step import train_step

WORLD = 2
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, "workload", "model", "architectures", "configs")
# Published configs of families the project does not ship (tests/fixtures/model_configs/SOURCES.md).
FIXTURE_CONFIGS = os.path.join(REPO, "tests", "fixtures", "model_configs")
# family -> the published config.json it is shrunk from: the shipped ones, then the fixtures.
FAMILIES = {
    "llama": os.path.join(CONFIGS, "meta-llama--Llama-3.2-1B.json"),
    "mistral": os.path.join(CONFIGS, "mistralai--Mistral-7B-v0.3.json"),
    "qwen3": os.path.join(CONFIGS, "Qwen--Qwen3-0.6B.json"),
    "gemma2": os.path.join(FIXTURE_CONFIGS, "google--gemma-2-2b-it.json"),
    "gemma3": os.path.join(FIXTURE_CONFIGS, "google--gemma-3-1b-pt.json"),
    "phi3": os.path.join(FIXTURE_CONFIGS, "microsoft--Phi-3-mini-4k-instruct.json"),
    "olmo2": os.path.join(FIXTURE_CONFIGS, "allenai--OLMo-2-1124-7B.json"),
}
# A sliding window shorter than the tests' 16-token sequences, so that the windowed layers differ from the full ones.
SMALL_WINDOW = 8
VOCAB = 512
TRAINED_STEPS, RESUMED_STEPS = 3, 2


def published(family: str) -> dict:
    with open(FAMILIES[family]) as file:
        return json.load(file)


def shrink(config: dict) -> dict:
    """A published config.json at a size that trains in milliseconds, keeping what tells its family apart: the
    model type and architecture, grouped-query attention (fewer KV heads than query heads), an explicit head_dim
    that differs from hidden_size / heads where the family has one (Qwen3's 128 against 1024 / 16), rope_scaling
    (Llama 3's llama3 frequencies) and rope_theta, tied or untied embeddings, biases or none, and the q/k norms that
    Qwen3's model type implies, Gemma's soft-capping and query scale, sliding windows (shorter than a test sequence)
    and their layer pattern. Token ids move into the small vocabulary."""
    heads, kv_heads, hidden = 4, 2 if config["num_key_value_heads"] < config["num_attention_heads"] else 4, 64
    small = dict(config, hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                 intermediate_size=128, num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=256,
                 bos_token_id=1, eos_token_id=2)
    if "head_dim" in config:
        own = config["head_dim"] != config["hidden_size"] // config["num_attention_heads"]
        small["head_dim"] = 2 * hidden // heads if own else hidden // heads
        if config.get("query_pre_attn_scalar") == config["head_dim"]:  # Gemma scales queries by head_dim ** -0.5
            small["query_pre_attn_scalar"] = small["head_dim"]
    if config.get("pad_token_id") is not None:
        small["pad_token_id"] = 0
    if config.get("sliding_window"):
        small["sliding_window"] = SMALL_WINDOW
    if config.get("sliding_window_pattern"):
        small["sliding_window_pattern"] = 2  # one windowed layer, then one full, in the 2 layers
    if config.get("original_max_position_embeddings"):  # Phi-3's
        small["original_max_position_embeddings"] = small["max_position_embeddings"]
    if (config.get("rope_scaling") or {}).get("original_max_position_embeddings"):
        # Llama 3's frequencies are rescaled by wavelength against the pre-training context: a quarter of the small
        # one puts the tiny head's frequencies in all three of its bands (kept, smoothed, divided by the factor).
        small["rope_scaling"] = dict(config["rope_scaling"], original_max_position_embeddings=64)
    if "max_window_layers" in config:
        small["max_window_layers"] = small["num_hidden_layers"]
    return small


def save_tiny(family: str, directory: str, *, max_shard_size: str | None = None) -> None:
    """A random-weight model of the shrunk config, saved as published models are: bf16 safetensors, one file or
    (with max_shard_size) several with their model.safetensors.index.json."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = shrink(published(family))
    config = AutoConfig.for_model(raw.pop("model_type"), **raw)
    torch.manual_seed(len(family))
    lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(torch.bfloat16)
    lm.save_pretrained(directory, **({"max_shard_size": max_shard_size} if max_shard_size else {}))


class ReadRecorder:
    """Every tensor read out of a safetensors file while active: (name, bytes), through a wrapper of safe_open."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, int]] = []
        self._real = safetensors.safe_open

    def __enter__(self):
        recorder = self

        class Slice:
            def __init__(self, real, name):
                self.real, self.name = real, name

            def __getattr__(self, attribute):
                return getattr(self.real, attribute)

            def __getitem__(self, index):
                tensor = self.real[index]
                recorder.reads.append((self.name, tensor.numel() * tensor.element_size()))
                return tensor

        class Handle:
            def __init__(self, *args, **kwargs):
                self.real = recorder._real(*args, **kwargs)

            def __enter__(self):
                self.real.__enter__()
                return self

            def __exit__(self, *exc):
                return self.real.__exit__(*exc)

            def get_slice(self, name):
                return Slice(self.real.get_slice(name), name)

            def get_tensor(self, name):
                tensor = self.real.get_tensor(name)
                recorder.reads.append((name, tensor.numel() * tensor.element_size()))
                return tensor

            def keys(self):
                return self.real.keys()

        safetensors.safe_open = Handle
        return self

    def __exit__(self, *exc):
        safetensors.safe_open = self._real


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an operation allocated while active, below DTensor (its local tensors).

    Views are not allocations: safetensors' get_slice views the memory-mapped file (a view the size of the whole
    stored tensor, of which only the rows copied out are ever read from disk), and DTensor's sharding propagation
    runs on fake tensors, which hold no memory."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.distributed.tensor import DTensor

        if any(issubclass(kind, DTensor) for kind in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        if any(result.alias_info is not None for result in func._schema.returns):
            return out  # a view, or an in-place op's own output
        for tensor in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(tensor, torch.Tensor) and not isinstance(tensor, FakeTensor):
                self.numel = max(self.numel, tensor.numel())
        return out


def _sharded(cfg: TrainConfig, directory: str, mesh_shape=None):
    """The job's path: meta build, FSDP2 (fp32 compute, so the runs compare exactly), then this rank's shards."""
    cpu = torch.device("cpu")
    built = build_model(cfg, cpu, directory)
    sharded = shard_model(built, build_mesh(cpu, mesh_shape), cfg, param_dtype=torch.float32)
    load_pretrained(sharded, directory, cpu, cfg)
    return sharded


def _shard_sizes(sharded) -> dict[str, tuple[int, int]]:
    """name -> (elements of this rank's shard, elements of the full tensor), for what is read from the files."""
    from torch.distributed.tensor import DTensor

    persistent = set(sharded.state_dict())
    tensors = [*sharded.named_parameters(), *((n, b) for n, b in sharded.named_buffers() if n in persistent)]
    return {name.removeprefix(LM_PREFIX): (
        (tensor.to_local() if isinstance(tensor, DTensor) else tensor).numel(), tensor.numel())
        for name, tensor in tensors}


def _steps(sharded, optimizer, cfg: TrainConfig, first: int, count: int, rank: int) -> list[float]:
    batches = random_batches(cfg, VOCAB, rank)
    losses = []
    for step in range(first, first + count):
        set_learning_rate(optimizer, learning_rate_at(cfg, step))
        loss = train_step(sharded, optimizer, batches(step), cfg)
        dist.all_reduce(loss)
        losses.append(loss.item() / WORLD)
    return losses


def _family(name: str, model_id: str, work: str, rank: int) -> dict:
    cfg = TrainConfig(model_id=model_id, batch_size=2, seq_len=16, learning_rate=1e-2, steps=8, reduce_dtype="fp32",
                      compile=False)
    lines: list[str] = []
    directory = model_files.for_this_node(model_id, local_rank=rank, progress=lines.append)
    largest = LargestTensor()
    with ReadRecorder() as recorder:
        cpu = torch.device("cpu")
        built = build_model(cfg, cpu, directory)
        sharded = shard_model(built, build_mesh(cpu), cfg, param_dtype=torch.float32)
        with largest:
            load_pretrained(sharded, directory, cpu, cfg)
    result = {"directory": directory, "progress": lines, "reads": recorder.reads, "largest": largest.numel,
              "shards": _shard_sizes(sharded), "loaded": checkpoint.gather_full_weights(sharded, keep=rank == 0)}
    probe = random_batches(cfg, VOCAB, rank=99)(0)
    with torch.no_grad():
        result["untrained_loss"] = loss_fn(sharded, probe).item()
    reshard(sharded)

    optimizer = build_optimizer(sharded, cfg)
    result["losses"] = _steps(sharded, optimizer, cfg, 0, TRAINED_STEPS, rank)
    saved = os.path.join(work, f"{name}-checkpoint")
    checkpoint.save(saved, sharded, optimizer, TRAINED_STEPS, tokenizer="")
    result["checkpoint"], result["at_checkpoint"] = saved, checkpoint.gather_full_weights(sharded, keep=rank == 0)
    result["continued"] = _steps(sharded, optimizer, cfg, TRAINED_STEPS, RESUMED_STEPS, rank)
    result["final"] = checkpoint.gather_full_weights(sharded, keep=rank == 0)

    # A restarted attempt, as train_func does it: the pretrained weights first, then the checkpoint over them.
    resumed = _sharded(cfg, directory)
    resumed_optimizer = build_optimizer(resumed, cfg)
    result["resumed_at"] = checkpoint.load(saved, resumed, resumed_optimizer)
    result["resumed"] = _steps(resumed, resumed_optimizer, cfg, TRAINED_STEPS, RESUMED_STEPS, rank)
    result["resumed_final"] = checkpoint.gather_full_weights(resumed, keep=rank == 0)
    if rank == 0:  # the job's own export: the gathered weights as a Hugging Face directory
        result["exported"] = os.path.join(work, f"{name}-model")
        # A copy: save_pretrained empties the state dict it is given.
        save_model_directory(sharded.lm, result["exported"], state_dict=dict(result["final"]))
    return result


def worker(rank: int, port: int, models: dict[str, str], work: str, out: str) -> None:
    """models: family -> the model_id it is loaded from (a directory, or a file:// URI to copy once per node)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # 2 processes share the CI machine's 2 cores
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    results = {name: _family(name, model_id, work, rank) for name, model_id in models.items()}
    # A download that fails on the node's local rank 0 must fail its other ranks too, rather than leave them waiting.
    try:
        model_files.for_this_node(f"file://{work}/no-such-model", local_rank=rank, progress=lambda line: None)
    except (ValueError, RuntimeError) as error:
        results["failed_download"] = f"{type(error).__name__}: {error}"
    # HSDP's 2-D mesh (1 replica x 2 shards): the rows each rank reads come from the mesh's second dimension.
    llama = model_files.local_directory(models["llama"])
    hybrid = _sharded(TrainConfig(model_id=llama, reduce_dtype="fp32", compile=False), llama, mesh_shape=(1, 2))
    results["hybrid"] = checkpoint.gather_full_weights(hybrid, keep=rank == 0)
    if rank == 0:
        torch.save(results, out)
    else:
        torch.save({**{name: {key: result[key] for key in ("directory", "progress", "reads", "largest", "shards")}
                       for name, result in results.items() if name in models},
                    "failed_download": results.get("failed_download")}, out + ".rank1")
    dist.destroy_process_group()
