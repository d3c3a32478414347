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


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]] | None:
    """Tensor name -> the shape transformers builds from `config` (an untrusted config.json), in the built model's
    order (embedding, layers, lm_head), for the families the arithmetic covers (a width config.json omits read as the
    family's config class reads it: structure.HEAD_DIM_DEFAULTS, KV_HEADS_DEFAULTS); None otherwise."""
    linears = structure.arithmetic_linear_shapes(config)
    if linears is None:
        return None
    embedding = structure.root_shapes(config)[0]
    shapes = {"model.embed_tokens.weight": embedding}
    for layer in range(config["num_hidden_layers"]):
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
