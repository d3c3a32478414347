"""A local model directory's weight shapes held against its config.json before any heavy import: where the config's
arithmetic is what transformers builds (workload.model.structure.arithmetic_linear_shapes: ARITHMETIC_FAMILIES,
dense, whole heads, checked against the meta-built model by tests/unit/test_arithmetic_shapes.py), the embedding
(model.embed_tokens.weight, [vocab_size, hidden_size]), each decoder layer's linear weights
(model.layers.{i}.{name}.weight, [out_features, in_features]: torch.nn.Linear's weight layout, torch docs) and an
untied lm_head.weight are compared with the safetensors headers' shapes (workload.model.safetensors_files.
tensor_entries: the header alone, huggingface/safetensors "Format"). A mismatch is what from_pretrained refuses
("size mismatch"), or the job's loader (workload.model.weights.check_files) after seconds of torch's imports: the
same words here in milliseconds. Tensors the files lack, other families and every other tensor are left to that
built model's check. Standard library only."""
from __future__ import annotations

import os

from workload.model import safetensors_files, safetensors_index, structure


def shape_problem(name: str, file_name: str, shape: tuple, expected: tuple) -> str | None:
    """Why a stored tensor of `shape` cannot fill the model's `name` of shape `expected` (after "{what}: "), or None:
    the job's loader's words (workload.model.weights.stored_problem)."""
    if tuple(shape) != tuple(expected):
        return f"{name} in {file_name} has shape {list(shape)}; the model's config.json gives {list(expected)}"
    return None


# Families whose config class gives head_dim a constant when config.json omits it, not hidden_size / heads
# (transformers' configuration_qwen3.py and configuration_glm4.py: 128; configuration_gemma2.py and
# configuration_gemma3.py: 256); and every family's num_key_value_heads default differs by class (8 for Mistral, 2 for
# GLM-4 and StarCoder2, 4 for Gemma 2/3 and SmolLM3, 32 for Qwen2/3, the query heads for Llama). The arithmetic
# (structure.widths) takes hidden_size / heads and the query heads, so a layer is compared only when config.json
# states what its widths rest on.
CONSTANT_HEAD_DIM = ("qwen3", "glm4", "gemma2", "gemma3_text")


def _widths_stated(config: dict) -> bool:
    return structure._positive(config.get("num_key_value_heads")) and (
        config.get("model_type") not in CONSTANT_HEAD_DIM or structure._positive(config.get("head_dim")))


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> the shape transformers builds from `config` (an untrusted config.json), in the built model's
    order (embedding, layers, lm_head), for the families the arithmetic covers (the layers' linears only where
    config.json states the widths they rest on: _widths_stated); None otherwise."""
    linears = structure.arithmetic_linear_shapes(config)
    if linears is None:
        return None
    embedding = structure.root_shapes(config)[0]
    shapes = {"model.embed_tokens.weight": embedding}
    for layer in range(config["num_hidden_layers"] if _widths_stated(config) else 0):
        shapes.update({f"model.layers.{layer}.{name}.weight": shape for name, shape in linears.items()})
    if not structure.tied_embeddings(config):
        shapes["lm_head.weight"] = embedding
    return shapes


def check_directory(config: dict, directory: str, what: str) -> None:
    """ValueError("{what}: ...") for the first tensor of `directory`'s safetensors files (the index's map, else
    model.safetensors; files that safetensors_files.file_problem passed) whose header shape is not the config's."""
    expected = expected_shapes(config)
    if expected is None:
        return
    files = safetensors_index.weight_map(directory, what)
    if files is None:
        single = os.path.join(directory, safetensors_index.SINGLE_FILE)
        files = dict.fromkeys(safetensors_files.tensor_entries(single), single)
    headers: dict[str, dict] = {}
    for name, shape in expected.items():
        path = files.get(name)
        if path is None or not os.path.isfile(path):
            continue
        if path not in headers:
            headers[path] = safetensors_files.tensor_entries(path)
        if name in headers[path] and (why := shape_problem(name, os.path.basename(path), headers[path][name][1],
                                                           shape)) is not None:
            raise ValueError(f"{what}: {why}")
