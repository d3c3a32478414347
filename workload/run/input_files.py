"""Every file on this machine that a run reads from the user's flags, measured before anything reads it: the --model_id
directory's JSON files and weights, the tokenizer's files (--tokenizer's directory, or the model's), a --chat_template
file and a --dataset file. One rule (workload/user_files.py): a regular file (a FIFO would have the reader wait for a
writer forever; a device or a directory is no such file), within the bound of its kind by the size it claims, and
without holes (a 2 GiB `truncate -s` tokenizer_config.json is 2 GiB of zeros that transformers' json.load allocates
whole). A refusal is one line naming the flag and the file, before the dataset is tokenized and before any heavy
import; --config files are read through the same rule (workload/config_file.py read_document).

Standard library only (and modules that are).
"""
from __future__ import annotations

import fnmatch
import os

from workload import user_files
from workload.config import CHAT_TEMPLATES, TrainConfig, is_file_dataset
from workload.data.chat import MAX_TEMPLATE_BYTES
from workload.data.tokenizer_size import MAX_TOKENIZER_BYTES
from workload.model.model_source import MAX_CONFIG_BYTES
from workload.model.safetensors_index import MAX_INDEX_BYTES

# The files of a model directory the run reads, and the most bytes each may claim: its config (a few KiB), its
# generation config, its weights' index (a few MiB), its weights (bounded by their headers: workload/model/
# safetensors_files.py).
MODEL_FILES = (("config.json", MAX_CONFIG_BYTES), ("generation_config.json", MAX_CONFIG_BYTES),
               ("model.safetensors.index.json", MAX_INDEX_BYTES), ("*.safetensors", user_files.UNBOUNDED))
# The files transformers' AutoTokenizer reads of a directory (tokenization_utils_base's file names, the
# sentencepiece and tiktoken models, and config.json for the tokenizer's class): the largest published tokenizer.json
# is some 30 MiB, and no tokenizer file is larger.
TOKENIZER_FILES = (("tokenizer.json", MAX_TOKENIZER_BYTES), ("tokenizer_config.json", MAX_TOKENIZER_BYTES),
                   ("special_tokens_map.json", MAX_TOKENIZER_BYTES), ("added_tokens.json", MAX_TOKENIZER_BYTES),
                   ("chat_template.jinja", MAX_TEMPLATE_BYTES), ("chat_template.json", MAX_TEMPLATE_BYTES),
                   ("vocab.json", MAX_TOKENIZER_BYTES), ("vocab.txt", MAX_TOKENIZER_BYTES),
                   ("merges.txt", MAX_TOKENIZER_BYTES), ("*.model", MAX_TOKENIZER_BYTES),
                   ("*.tiktoken", MAX_TOKENIZER_BYTES), ("config.json", MAX_CONFIG_BYTES))


def directory_problem(directory: str, kinds: tuple[tuple[str, int], ...]) -> str | None:
    """Why a file of `directory` that matches one of `kinds` (name pattern, bound) is not read: "NAME WHY", or None.
    The first pattern a name matches gives its bound."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None  # not a directory here: the flag's own checks say what it is
    for name in names:
        bound = next((limit for pattern, limit in kinds if fnmatch.fnmatchcase(name, pattern)), None)
        if bound is None:
            continue
        try:
            why = user_files.problem(os.path.join(directory, name), bound)
        except OSError as error:  # a dangling link, a link loop, no permission: the reader could not read it either
            why = f"cannot be read ({error.strerror})"
        if why is not None:
            return f"{name} {why}"
    return None


def _local_directory(name: str) -> str | None:
    path = os.path.expanduser(name) if name and "://" not in name else ""
    return path if path and os.path.isdir(path) else None


def _file_problem(path: str, bound: int) -> str | None:
    try:
        return user_files.problem(path, bound)
    except OSError:
        return None  # absent: the flag's own check names it


def check(cfg: TrainConfig) -> None:
    """Each local file the run reads from its flags passes user_files.problem; ValueError naming the flag otherwise."""
    if not cfg.model_config and (directory := _local_directory(cfg.model_id)) is not None:
        if (why := directory_problem(directory, MODEL_FILES)) is not None:
            raise ValueError(f"--model_id {cfg.model_id}: {why}; a model directory holds the regular files "
                             "save_pretrained wrote")
    if (directory := _local_directory(cfg.tokenizer_name)) is not None:
        if (why := directory_problem(directory, TOKENIZER_FILES)) is not None:
            flag = "--tokenizer" if cfg.tokenizer else "--model_id"
            raise ValueError(f"{flag} {cfg.tokenizer_name}: {why}; a tokenizer directory holds the regular files "
                             "save_pretrained wrote")
    if cfg.chat_template and cfg.chat_template not in CHAT_TEMPLATES and "://" not in cfg.chat_template:
        if (why := _file_problem(os.path.expanduser(cfg.chat_template), MAX_TEMPLATE_BYTES)) is not None:
            raise ValueError(f"--chat_template {cfg.chat_template} {why}; a chat template is a few KiB of text")
    if cfg.dataset and is_file_dataset(cfg.dataset) and "://" not in cfg.dataset:
        if (why := _file_problem(os.path.expanduser(cfg.dataset), user_files.UNBOUNDED)) is not None:
            raise ValueError(f"--dataset {cfg.dataset} {why}")
