"""The tokenizer of a run: by Hub id, local directory or s3:// model, and for chat data with the chat template the
examples are rendered with."""
from __future__ import annotations

import os

from workload.config import TrainConfig
from workload.data import chat


def load_tokenizer(name: str):
    """A Hugging Face tokenizer by Hub id, local directory, or remote directory (an s3:// model's own tokenizer:
    its files are copied into this machine's cache first, workload.model.files)."""
    from transformers import AutoTokenizer

    from workload import storage
    from workload.model import files as model_files
    from workload.model import model_source

    if model_source.missing_directory(name):  # a path, not a Hub id
        raise ValueError(f"--tokenizer {name}: {model_source.NO_TOKENIZER_DIRECTORY}")
    try:
        if storage.is_remote(name):
            name = model_files.fetch(name, patterns=model_files.TOKENIZER_PATTERNS, required=None)
        try:
            return AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError):
            raise
        except Exception as error:  # noqa: BLE001 - tokenizers raises a plain Exception for a file it cannot build
            raise _NotBuilt(_one_line(error)) from error  # only the load's: the s3:// copy's set-up errors are its own
    except _NotBuilt as error:
        raise ValueError(f"--tokenizer {name!r} (default: --model_id) cannot be loaded ({error})") from error.__cause__
    except (OSError, ValueError) as error:
        from workload.model.model_source import offline_variable

        offline = offline_variable()
        if offline and "://" not in name and not os.path.isdir(os.path.expanduser(name)):
            # transformers' paragraph on offline mode, in one line
            raise ValueError(f"--tokenizer {name!r} (default: --model_id) is not in this machine's Hub cache and "
                             f"{offline} is set; unset it to download, or download it first") from error
        raise ValueError(f"--tokenizer {name!r} (default: --model_id) cannot be loaded ({error})") from error


class _NotBuilt(Exception):
    """tokenizers or transformers could not build the tokenizer from its files (their error, in one line)."""


def _one_line(error: Exception) -> str:
    """A library's error in one line for a refusal: its type and first line, capped, the names it quotes in
    backticks (tokenizers' "Token `...` out of vocabulary": the file's own text) left out."""
    import re

    text = re.sub(r"`[^`\n]*`", "`...`", str(error).strip().split("\n", 1)[0])[:300]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def load_chat_tokenizer(cfg: TrainConfig):
    """The tokenizer with the chat template the examples are rendered with (--chat_template, or its own)."""
    tokenizer = load_tokenizer(cfg.tokenizer_name)
    chat.apply_template(tokenizer, cfg.chat_template, cfg.tokenizer_name)
    if not tokenizer.is_fast:
        raise ValueError(f"--tokenizer {cfg.tokenizer_name!r} is a slow (Python) tokenizer; the assistant tokens are "
                         "found through a fast tokenizer's character offsets")
    return tokenizer
