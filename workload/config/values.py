"""Checks of single values that need more than a bound or a pattern: a Hub repo id, a dataset split's slice, a W&B
project name, a --dataset that is an archive or a directory. Each returns why a value is refused (its "must be ..."), or None; the declarations in __init__.py
attach them as `check=`. Standard library, workload.config.fields and workload.model's model_source only (the Pulumi program imports it)."""
from __future__ import annotations

import os
import re

from workload.config.fields import shown_value
from workload.config.rules import DATASET_FILE_SUFFIXES
from workload.model import model_source


def repo_id_problem(value: str) -> str | None:
    """The Hub's repo-id rule for a setting that may name a Hub repo and never a file (--tokenizer; --model_id's is
    model_source.problem, in its own words): a value that is no path or URI names a repo, and must be one
    huggingface_hub takes (validate_repo_id, which its downloads apply only once the job runs); None otherwise. A
    file inside a repo (Qwen/Qwen2.5-1.5B/tokenizer.json) is refused with the repo it is in: the tokenizer is read
    whole, from its repo or directory."""
    if model_source.is_path(value) or "://" in value:
        return None
    why = model_source.hub_id_problem(value)
    return f"{why} (neither a Hugging Face Hub id nor a path or URI)" if why else None


def dataset_id_problem(value: str) -> str | None:
    """repo_id_problem for --dataset, which also takes a data file by its name (corpus.jsonl, data/chats.json.gz)."""
    return None if value.endswith(DATASET_FILE_SUFFIXES) else repo_id_problem(value)


# datasets' split syntax, as ReadInstruction.from_spec parses it (datasets/arrow_reader.py: _ADDITION_SEP_RE splits on
# `\s*\+\s*`, then each part must match _SUB_SPEC_RE: `split[from:to](rounding)`, the ':' required inside brackets,
# no other spaces; an end with '%' makes both percents; _RelativeInstruction.__post_init__ then refuses a percent
# bound past 100 either way ("Percent slice boundaries must be > -100 and < 100.", though -100% and 100% pass), a
# rounding other than closest or pct1_dropremainder, and any rounding on an absolute slice). load_dataset's split
# reaches it through builder._build_single_dataset -> ArrowReader.read. A split's name is naming.py's _split_re,
# `\w+(\.\w+)*`: dev-1 is "Unrecognized instruction format" there too.
_BOUND = r"-?\d+(?:_\d+)*"  # what int() takes, as _str_to_read_instruction calls it
_SPLIT_PART = re.compile(rf"\w+(?:\.\w+)*(?:\[(?P<start>{_BOUND})?(?P<start_pct>%)?:"
                         rf"(?P<end>{_BOUND})?(?P<end_pct>%)?\])?(?:\((?P<rounding>[^)]*)\))?")
_SPLIT_SEPARATOR = re.compile(r"\s*\+\s*")
SPLIT_ROUNDINGS = ("closest", "pct1_dropremainder")
SPLIT_FORM = ("a split or datasets' slice of one: a name of letters, digits, '_' and '.', or name[from:to] with each end "
              "a count or a percent in -100%..100% (train[:5000], train[-10%:]), parts joined by +")


def split_problem(value: str) -> str | None:
    """Why a split (--dataset_split, --eval_split) is refused: a character outside ASCII (a Cyrillic 'а' in 'trаin'),
    anything ReadInstruction.from_spec refuses (see _SPLIT_PART: train[:abc], train[5], train[:200%],
    train[:10](closest)), or every part a slice that selects nothing whatever the split's size: an end of 0
    (train[:0%], train[:0]), a start of 100% or more, or a start at or past the end in the same unit and sign; None
    for anything else. The value is quoted only when fields.shown_value may (never a token pasted here)."""
    if not value:
        return None
    if not value.isascii():
        return f"must be a split name in ASCII letters, digits, '_' or '.', and {shown_value(value)} has others"
    parts = [_SPLIT_PART.fullmatch(part) for part in _SPLIT_SEPARATOR.split(value)]
    if not all(parts) or any(_slice_problem(part) for part in parts):
        why = next((why for part in parts if part and (why := _slice_problem(part))), "is not one")
        return f"must be {SPLIT_FORM}, and {shown_value(value)} {why}"
    if all(_selects_nothing(part) for part in parts):
        return (f"must be a split or a slice that selects examples, and {shown_value(value)} selects none whatever the "
                "split's size (an end of 0, or a start at or past the end)")
    return None


def _slice_problem(part: re.Match) -> str | None:
    percent = bool(part["start_pct"] or part["end_pct"])
    if percent and any(part[end] and abs(int(part[end].replace("_", ""))) > 100 for end in ("start", "end")):
        return "has a percent bound outside -100%..100%"
    if part["rounding"] is not None and (not percent or part["rounding"] not in SPLIT_ROUNDINGS):
        return f"has a rounding other than ({') or ('.join(SPLIT_ROUNDINGS)}) after a percent slice"
    return None


def _selects_nothing(part: re.Match) -> bool:
    start, end = (None if part[name] is None else int(part[name].replace("_", "")) for name in ("start", "end"))
    if end == 0 or (start is not None and part["start_pct"] and start >= 100):
        return True
    return (start is not None and end is not None and bool(part["start_pct"]) == bool(part["end_pct"])
            and (start < 0) == (end < 0) and start >= end)


# A Hugging Face dataset's configuration name (wikitext-2-raw-v1): letters, digits, '.', '_', '-', never '..' (a
# path's way up: the name becomes part of a cache directory's path).
DATASET_CONFIG = (re.compile(r"(?!.*\.\.)[A-Za-z0-9._-]+"),
                  "a dataset configuration name of letters, digits, '.', '_' or '-', without '..'")


# The schemes MLflow's tracking store registry takes (mlflow/tracking/_tracking_service/utils.py registers "", file,
# databricks, http, https and mlflow.store.db.db_types.DATABASE_ENGINES); a database's may carry a driver
# (postgresql+psycopg2). Any other, `localhost:5000` read as scheme 'localhost' among them, fails once the job runs.
MLFLOW_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")


def mlflow_uri_problem(value: str) -> str | None:
    """Why MLflow takes no tracking store at `value` (its 'must be ...'), or None; a path (no ':') is a local file
    store, as is bare `databricks` MLflow's default Databricks workspace."""
    if ":" not in value or value.startswith(("/", "./", "../", "~")) or value == "databricks":
        return None
    scheme = value.split(":", 1)[0].split("+", 1)[0].lower() if ":" in value else ""
    if scheme in MLFLOW_SCHEMES and value[len(value.split(":", 1)[0]):].startswith(":"):
        return _network_uri_problem(value) if "://" in value else None
    return (f"must be a tracking URI with a scheme MLflow takes ({', '.join(MLFLOW_SCHEMES)}) or a local path, e.g. "
            "http://localhost:5000")


def _network_uri_problem(value: str) -> str | None:
    """Why urllib (MLflow's client parses the tracking URI with urllib.parse, then requests with urllib3) cannot read
    `value`'s server, or None: urlsplit raises for an unclosed '[' of an IPv6 host ("Invalid IPv6 URL"), `.port` for
    a port that is no number of 0..65535. Said in words, the value not quoted (it may hold a token)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        return ("must be a URI whose server urllib can read (an IPv6 host in closed brackets, a port from 0 to 65535), "
                "e.g. https://mlflow.example.com; its value is not shown")
    if parts.scheme.lower() in ("http", "https") and not parts.hostname:
        return "must name its server, e.g. https://mlflow.example.com"
    return None


# W&B's rule for a project name: at most 128 characters, none of / \ # ? % : (wandb's sdk refuses them at init, after
# the cluster has started the job).
WANDB_PROJECT_MAX_LENGTH = 128
_WANDB_PROJECT_FORBIDDEN = "/\\#?%:"


def wandb_project_problem(value: str) -> str | None:
    """Why W&B refuses the project name `value` (its 'must be ...'), or None."""
    bad = sorted({char for char in value if char in _WANDB_PROJECT_FORBIDDEN})
    return (f"must be a W&B project name without {' '.join(_WANDB_PROJECT_FORBIDDEN)}, got one with {' '.join(bad)}"
            if bad else None)


# Archives of files, which no dataset loader here opens (a .gz of one file is read, as datasets reads it), and the
# other compressions of one file, which are not read either.
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst", ".7z", ".rar")
COMPRESSED_SUFFIXES = {".zst": "zstd", ".bz2": "bzip2", ".xz": "xz", ".lz4": "LZ4", ".snappy": "Snappy"}


def directory_dataset_problem(directory: str, shown: str) -> str:
    """The refusal of a --dataset that is a directory: datasets' save_to_disk output named as such."""
    if any(os.path.isfile(os.path.join(directory, name)) for name in ("dataset_info.json", "dataset_dict.json",
                                                                      "state.json")):
        return (f"--dataset {shown} is a dataset datasets' save_to_disk wrote (Arrow files), which is not read: write "
                "it as one file (ds.to_json('data.jsonl') or ds.to_parquet('data.parquet')), or push it to the Hub")
    return f"--dataset {shown} is a directory; give one {', '.join(DATASET_FILE_SUFFIXES)} file in it"


def packed_dataset_problem(dataset: str, shown: str) -> str | None:
    """The refusal of a --dataset that is an archive or a compression no loader here reads, or None."""
    lower = dataset.lower()
    if lower.endswith(ARCHIVE_SUFFIXES):
        return (f"--dataset {shown} is an archive of files, which is not read: unpack it and give the data file "
                f"inside (one of {', '.join(DATASET_FILE_SUFFIXES)})")
    if (suffix := next((each for each in COMPRESSED_SUFFIXES if lower.endswith(each)), None)) is not None:
        return (f"--dataset {shown} is {COMPRESSED_SUFFIXES[suffix]}-compressed, which is not read: decompress it, or "
                "compress it with gzip (.jsonl.gz, .json.gz, .txt.gz, .csv.gz are read)")
    return None


# The least memory a GPU the job runs on has, in MiB: NVIDIA's smallest data-centre card on EC2 (T4) has 16 GiB; a
# figure below this is another unit (80 for an 80 GB card), which would plan the memory for a card that cannot exist.
GPU_MEMORY_MIB_LEAST = 4096


def gpu_memory_problem(value: int) -> str | None:
    """Why a --gpu_memory_mib is refused: a GPU's memory given in GB (or GiB) where MiB is asked for."""
    if 0 < value < GPU_MEMORY_MIB_LEAST:  # (below 0: the bound says so)
        return (f"is in MiB, as EC2 gives it, and {value} MiB is no GPU's memory: a card of {value} GiB is "
                f"--gpu_memory_mib {value * 1024} (0 reads it from the device)")
    return None
