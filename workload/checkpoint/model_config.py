"""A checkpoint's config.json, read as untrusted input before anything is built from it: `workload.export` builds the
model the file describes, and a crafted one (`{"model_type": "qwen2"}` alone: the class's defaults, some 7B
parameters) took the process to 13 GB before the shards were even looked at.

So, in order, with nothing allocated until the last step passes: the file is small; it is a JSON object naming a causal
LM architecture transformers knows; the fields that size a model are within bounds; and the model it describes, built
on the meta device (no memory), has exactly the tensors, by name and shape, that the checkpoint's verified `.metadata`
lists (workload/checkpoint/reader.py, which already bounds those by the bytes of its shard files). A refusal is a
CheckpointRefused: one line naming the file, exit 2.
"""
from __future__ import annotations

import os
import re
from typing import Any

from workload import cli
from workload.checkpoint.file_checks import CheckpointRefused
from workload.model import config_json
from workload.model.model_source import CONFIG_FILE, MAX_CONFIG_BYTES  # noqa: F401 - one bound for every reader

FIELD_BOUNDS = config_json.SIZE_FIELD_BOUNDS  # one table for every reader of a config.json
# Where the model's weights lie in a checkpoint's state: sharded.MODEL_KEY + "." + loss.LM_PREFIX (both modules import
# torch; tests/unit/test_export_before_imports.py holds the three equal).
MODEL_PREFIX = "model.lm."
NOT_CAUSAL_LM = "not a causal language model transformers builds (allowed: a model_type such as qwen2, llama, mistral)"


# A model_type as transformers names its architectures (qwen2, gpt_neox, deepseek_v3, xlm-roberta): checked before
# the imports, so a value that climbs out of the registry (`../../tmp/evil`) is refused in milliseconds.
_MODEL_TYPE = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def check_config_values(directory: str) -> dict[str, Any]:
    """config.json as a dict, refused when too large, not an object, with a model_type that is no plain identifier, or
    with a sizing field out of bounds: standard library only, so export runs it before torch and transformers load
    (read_config_file then checks the model_type against transformers' own list)."""
    path = os.path.join(directory, CONFIG_FILE)
    size = os.path.getsize(path)
    if size > MAX_CONFIG_BYTES:
        raise CheckpointRefused(f"checkpoint file {path} is {size:,} bytes; a model's config.json is a few KiB "
                                f"(allowed: at most {MAX_CONFIG_BYTES:,})")
    try:
        raw = config_json.load(path)
    except config_json.Refused as error:
        raise CheckpointRefused(f"checkpoint file {path} is {error}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointRefused(f"checkpoint file {path} is not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise CheckpointRefused(f"checkpoint file {path} holds a {type(raw).__name__}, not a JSON object")
    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not _MODEL_TYPE.fullmatch(model_type):
        raise CheckpointRefused(f"checkpoint file {path}: model_type {cli.shown(model_type)} is {NOT_CAUSAL_LM}")
    for field, bound in FIELD_BOUNDS.items():
        value = raw.get(field)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= bound):
            raise CheckpointRefused(f"checkpoint file {path}: {field} is {cli.shown(value)}; allowed: an integer "
                                    f"from 1 to {bound}")
    return raw


# The input embedding's name in transformers' decoder models (its rows are config.vocab_size: nn.Embedding(
# config.vocab_size, ...) in modeling_llama.py / qwen2 / mistral / gemma (embed_tokens), gpt2 (wte), gpt_neox
# (embed_in), bloom and falcon (word_embeddings)); a decoder layer's number in its name (model.layers.<i>., gpt2's
# transformer.h.<i>.), one per config.num_hidden_layers.
_EMBEDDING = re.compile(r"(?:^|\.)(?:embed_tokens|wte|embed_in|word_embeddings)\.weight$")
_LAYER = re.compile(r"\.(?:layers|h)\.([0-9]+)\.")


def claims_problem(raw: dict[str, Any], shapes: dict[str, tuple[int, ...]], prefix: str,
                   checkpoint: str = "the checkpoint") -> str | None:
    """Why config.json `raw` cannot describe the model whose tensors `.metadata` lists under `prefix` (their shapes
    read without torch: metadata_claims.tensor_shapes), said after the config's name ("gives vocab_size ..."), or
    None. Only what the checkpoint holds is compared: vocab_size against the embedding's rows where it holds the
    embedding, num_hidden_layers against its decoder layers. A whole model (--method full) holds every layer, so the
    counts are equal; a --method lora/qlora checkpoint holds the adapters alone (sharded._state: the frozen base, the
    embedding with it, is never saved), on the layers that have a target module (PEFT's inject_adapter_in_model), so
    its highest layer must exist, and a model with more layers (a hybrid's last layers without the target) may be the
    checkpoint's own. A checkpoint without an embedding the names below know is compared as adapters are: one way.
    Standard library only."""
    names = {name.removeprefix(prefix): shape for name, shape in shapes.items() if name.startswith(prefix)}
    embeddings = [(name, shape) for name, shape in names.items() if _EMBEDDING.search(name) and len(shape) == 2]
    vocab = raw.get("vocab_size")
    if len(embeddings) == 1 and isinstance(vocab, int) and vocab != embeddings[0][1][0]:
        name, shape = embeddings[0]
        return (f"gives vocab_size {vocab:,}, and {checkpoint} holds {shape[0]:,} rows in its {name} "
                f"({list(shape)})")
    layers = {int(match.group(1)) for name in names if (match := _LAYER.search(name))}
    count = raw.get("num_hidden_layers")
    if not layers or not isinstance(count, int) or isinstance(count, bool):
        return None
    if embeddings and count != max(layers) + 1:
        return f"gives num_hidden_layers {count:,}, and {checkpoint} holds {max(layers) + 1:,} decoder layers"
    if not embeddings and count <= max(layers):
        return (f"gives num_hidden_layers {count:,}, and {checkpoint} holds adapters of {max(layers) + 1:,} decoder "
                "layers")
    return None


def check_against_claims(checkpoint: str, raw: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                         prefix: str) -> None:
    """workload.export's use of claims_problem: a checkpoint's own config.json that is not the checkpoint's is refused
    before the seconds of imports; check_against_metadata compares the whole model after them."""
    if (why := claims_problem(raw, shapes, prefix)) is not None:
        raise CheckpointRefused(f"CHECKPOINT {checkpoint}: its file {CONFIG_FILE} {why}: the config is not the "
                                "checkpoint's own")


def read_config_file(directory: str) -> dict[str, Any]:
    """config.json as check_config_values gives it, its model_type one transformers builds as a causal LM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    raw = check_config_values(directory)
    if raw["model_type"] not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise CheckpointRefused(f"checkpoint file {os.path.join(directory, CONFIG_FILE)}: model_type "
                                f"{cli.shown(raw['model_type'])} is {NOT_CAUSAL_LM}")
    return raw


def check_against_metadata(directory: str, config: Any, metadata: Any, prefix: str) -> int:
    """The model `config` describes, built on the meta device, must have exactly the tensors the checkpoint's
    metadata lists under `prefix`, by name and shape: the checkpoint's own shards then bound its size in memory.
    Returns the model's number of parameters (its state dict's elements)."""
    import torch
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    listed = {name.removeprefix(prefix): tuple(item.size) for name, item in metadata.state_dict_metadata.items()
              if name.startswith(prefix) and isinstance(item, TensorStorageMetadata)}
    path = os.path.join(directory, CONFIG_FILE)
    for name, tensor in model.state_dict().items():
        if name not in listed:
            raise CheckpointRefused(f"checkpoint file {path} describes a model with {name}, which the checkpoint "
                                    "does not hold: the config is not the checkpoint's own")
        if tuple(tensor.shape) != listed[name]:
            raise CheckpointRefused(f"checkpoint file {path} gives {name} the shape {list(tensor.shape)}, and the "
                                    f"checkpoint holds {list(listed[name])}: the config is not the checkpoint's own")
    return sum(parameter.numel() for parameter in model.parameters())  # tied weights once, as they are allocated
