"""What `python -m workload.local` checks before it starts Ray: the files the job will read, where it will write,
whether its workers fit the local cluster, and what an existing run of the same name was started with.

Each check raises `cli.UsageError` naming the flag and what would work, so a mistake is one `error:` line and exit
2 in a second, instead of a job that fails on every worker (four tracebacks) or waits for CPUs that never come.
Standard library only (pyarrow for a .parquet file): nothing heavy has loaded when these run.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import re
import sys
import tempfile

from workload import cli
from workload.checkpoint import run_directory
from workload.checkpoint.file_checks import CheckpointRefused
from workload.config import (
    CPU_WORKERS_WITHOUT_GPUS,
    DATASET_FILE_SUFFIXES,
    TrainConfig,
    is_file_dataset,
    parse_report_to,
    rules,
)
from workload.data import validate
from workload.run import credential_files, input_files, resumed_model, variable_values, writable
from workload.s3_names import s3_hint

FLAGS_FILE = run_directory.FLAGS_FILE
# Flags that change what is saved or checked, not what is trained: a resumed run may set them differently.
RESUMABLE_CHANGES = frozenset({"run_name", "storage_path", "export", "checkpoint_every", "eval_every",
                               "max_failures", "fabric_check_seconds", "min_bus_gbytes_per_s", "log_every"})


def local_cpus() -> int:
    """CPUs the local cluster offers (`ray start --num-cpus`): this machine's cores, at least 2 (two CPU workers
    must fit even on a one-core machine; Ray oversubscribes the core)."""
    return max(2, os.cpu_count() or 1)


def check_dataset(cfg: TrainConfig) -> None:
    """A folder given as --dataset (datasets would load every file in it as a dataset of its own making), and every
    record of a local file (workload.data.validate): a bad one is named by its line, instead of failing each worker
    after Ray started."""
    folder = os.path.expanduser(cfg.dataset)
    if cfg.dataset and "://" not in cfg.dataset and os.path.isdir(folder):
        raise cli.UsageError(directory_refusal(cfg.dataset))
    if cfg.dataset and "://" not in cfg.dataset and os.path.isfile(folder) and not is_file_dataset(cfg.dataset):
        # A file here whose suffix is none of ours (data.tsv, corpus.JSONL) would be taken for a Hub dataset's id.
        raise cli.UsageError(f"--dataset {cfg.dataset} is a file of no format the job reads; allowed: a file ending in "
                             f"{', '.join(DATASET_FILE_SUFFIXES)} (lower case), or a Hugging Face dataset id")
    if cfg.dataset and not is_file_dataset(cfg.dataset) and not os.path.exists(folder):
        # corpus for corpus.jsonl: read as a Hugging Face id, it was the Hub's answer (exit 3, or none offline).
        beside = [cfg.dataset + suffix for suffix in DATASET_FILE_SUFFIXES if os.path.isfile(folder + suffix)]
        if beside:
            raise cli.UsageError(f"--dataset {cfg.dataset} is no file here, and {', '.join(beside)} is: a name without "
                                 f"its suffix is read as a Hugging Face dataset id; did you mean --dataset {beside[0]}?")
    if not is_file_dataset(cfg.dataset) or "://" in cfg.dataset:
        return  # a remote file or a Hugging Face dataset: the job's own checks read it (workload.run.preflight.validate)
    try:
        validate.check_dataset(cfg, say=lambda line: print(line, flush=True))
    except validate.DataError as error:
        raise cli.UsageError(str(error)) from None


def check_blocks(cfg: TrainConfig) -> None:
    """Fewer training or evaluation blocks than workers, when that is certain without the tokenizer (the job's data
    stage refused it on the cluster, after Ray started), said as soon as the records are read. Text: a token covers at
    least one byte, so with an end-of-text token (and a tokenizer's leading one) a document, twice the bytes and two a
    document bound the tokens, and the blocks, from above. Examples: each trained record is one, and a block holds
    one or more (but with --truncation split, which cuts one into several). --eval_fraction then holds out
    max(1, ceil(n x fraction)) of the n blocks or examples, and both what it holds out and what it leaves grow with
    n: the bound's split bounds both sets."""
    if not is_file_dataset(cfg.dataset) or "://" in cfg.dataset:
        return
    if cfg.seq_len > (cfg.architecture or {}).get("max_position_embeddings", cfg.seq_len):
        return  # the model's own limit is the thing to say (preflight.check_positions), not the blocks it leaves
    checked = validate.check_dataset(cfg, say=lambda line: None)  # the check above's result, kept
    if checked is None or not checked.complete:
        return
    exact = checked.text_bytes < 0  # examples are counted; the text's blocks only bounded
    if not exact:
        most, unit = (2 * checked.text_bytes + 2 * checked.records) // cfg.seq_len, "blocks"
    elif cfg.truncation != "split":
        most, unit = checked.records - checked.untrained, "examples"
    else:
        return
    # The local cluster has no GPUs: --num_workers 0 is its CPU workers (workload.trainer.worker_count).
    workers = cfg.num_workers or CPU_WORKERS_WITHOUT_GPUS
    held = max(1, math.ceil(most * cfg.eval_fraction)) if cfg.eval_fraction and most else 0
    train = most - held
    bound = "" if exact else "at most "
    if train < workers:
        gives = (f"packs into {bound if train else ''}{train} training blocks of --seq_len {cfg.seq_len} tokens"
                 if not exact else f"holds {train} training examples (a block holds one or more)")
        after = f" once --eval_fraction {cfg.eval_fraction} holds out {held}" if held else ""
        raise cli.UsageError(f"--dataset {cfg.dataset} {gives}{after}, fewer than the {workers} workers",
                             hint=("give a smaller --eval_fraction (0: none), more data" if held else "give more data")
                             + ("" if exact else ", or a smaller --seq_len"))
    if held and held < workers:
        raise cli.UsageError(f"--eval_fraction {cfg.eval_fraction} holds out {bound}{held} evaluation {unit} of "
                             f"--dataset {cfg.dataset}, fewer than the {workers} workers (each evaluates an equal "
                             "share)", hint=f"give a larger --eval_fraction, --eval_fraction 0 for none, or --num_workers {held}")


def directory_refusal(dataset: str) -> str:
    folder = os.path.expanduser(dataset)
    files = sorted(name for name in os.listdir(folder) if name.endswith(DATASET_FILE_SUFFIXES))
    return (f"--dataset {dataset} is a directory; give one file in it"
            + (f": {', '.join(os.path.join(dataset, name) for name in files)}" if files
               else f" ({', '.join(DATASET_FILE_SUFFIXES)})"))


def check_storage(cfg: TrainConfig) -> None:
    """A local --storage_path, and the run's directory under it (--run_name), must be a directory this user can
    write in, or be creatable (workload.run.writable, the rule the caches are held to)."""
    path = cfg.storage_path
    if not path or "://" in path:
        return
    # s3:/bucket (one slash) would be a folder named s3: under the current directory (the local run made it absolute).
    if (scheme := re.search(r"(?:^|/)([A-Za-z][A-Za-z0-9+.-]+):/", path)) is not None:
        raise cli.UsageError(f"--storage_path {path}: {scheme[1]}:/ is a URI with one slash; a URI takes two "
                             f"({scheme[1]}://bucket/prefix), a local directory none")
    if (why := writable.problem(path)) is not None:
        raise cli.UsageError(f"--storage_path {path}" + (": " if "is a file" in why else " ") + why)
    # The run's own directory is held to the same rule: a file of that name under it was a FileExistsError.
    if (why := writable.problem(os.path.join(path, cfg.run_name))) is not None:
        raise cli.UsageError(f"--run_name {cfg.run_name}: {why}",
                             hint="give another --run_name, or move the file away")


def check_workers(cfg: TrainConfig, cpus: int) -> None:
    """Each CPU worker takes one of the local cluster's CPUs; more would wait for CPUs until the job's time limit."""
    if cfg.num_workers > cpus:
        raise cli.UsageError(f"--num_workers {cfg.num_workers}: the local cluster has {cpus} CPUs (one per core "
                             f"of this machine), one per worker; give at most {cpus}, or 0 for 2")


def check_schemes(cfg: TrainConfig) -> None:
    """A location given as a URI is one the local run reads and writes: s3:// or file:// (storage.COPIED_SCHEMES);
    gs://, https:// and the like reached pyarrow, whose GCS client waits minutes on credentials and whose https://
    is no filesystem. A Hub id or a local path is no URI."""
    from workload import storage

    for flag, value in (("--storage_path", cfg.storage_path), ("--dataset", cfg.dataset), ("--tokenizer", cfg.tokenizer),
                        ("--model_id", "" if cfg.model_config else cfg.model_id)):
        scheme = value.split("://", 1)[0].lower() if "://" in value else ""
        if scheme and scheme not in storage.COPIED_SCHEMES:
            hub = "" if flag == "--storage_path" else ", a Hub id (owner/name)"
            raise cli.UsageError(f"{flag}: a {scheme[:16]}:// location is not read here; allowed: a local path{hub}, "
                                 f"or s3://BUCKET/PREFIX (file:// for a local one){s3_hint(value)}")


def typed_without_effect_here(cfg: TrainConfig, typed: set[str]) -> str | None:
    """rules.typed_without_effect, and the flags for a cluster's GPUs that the local run (CPU workers only: its Ray
    cluster advertises no GPU) would take and do nothing with."""
    if (inert := rules.typed_without_effect(vars(cfg), typed)) is not None:
        return inert
    if "report_to" in typed and not cfg.storage_path and "tensorboard" in parse_report_to(cfg.report_to):
        # (On a cluster the job reports the run to W&B or MLflow as well, and the stack says where its files go.)
        return ("--report_to tensorboard writes its event files under --storage_path/--run_name/tensorboard, and "
                "without --storage_path none are written: give --storage_path DIR, or leave tensorboard out")
    if "gpu_memory_mib" in typed and cfg.gpu_memory_mib:
        return (f"--gpu_memory_mib {cfg.gpu_memory_mib} plans each GPU's memory, and the local run trains on CPU "
                "workers, where it does nothing: leave it out (a stack passes its instance's figure)")
    return None


def check_fp8(cfg: TrainConfig) -> None:
    """--fp8 on a machine whose GPUs have no fp8 tensor cores (or that has none): the local cluster's workers would
    run on the CPU, where fp8 is emulated for minutes; the flag does not fit the command, as more workers than CPUs
    does not."""
    from workload.model import fp8

    if cfg.fp8 and (why := fp8.local_gpus_problem()) is not None:
        raise cli.UsageError(f"--fp8 needs a GPU with fp8 tensor cores (compute capability 8.9+: "
                             f"{', '.join(fp8.FP8_GPUS)}); {why}",
                             hint="leave --fp8 off here, or set trainFp8 on a stack of such GPUs")


def resume_step(cfg: TrainConfig) -> int | None:
    """The step the run named --run_name under a local --storage_path resumes from (None: a new run): its latest
    checkpoint as Ray Train's own snapshot lists it (run_directory.resumed; one it does not list is refused), after
    checking what it resumes from as export checks a checkpoint (workload/checkpoint/run_directory.py: its records,
    its latest checkpoint's files, its recorded flags) and that it was started with the same training flags:
    resuming with others would silently mix two runs (another --learning_rate, another schedule length, another
    dataset) into one; and that the model it builds has the checkpoint's vocabulary and layers
    (workload/run/resumed_model.py)."""
    if not cfg.storage_path or "://" in cfg.storage_path:
        return None
    directory = os.path.join(cfg.storage_path, cfg.run_name)
    if not os.path.isdir(directory):
        _not_a_run_directory(cfg)
        return None
    resumed = resumed_model.checked_resume(cfg, directory)  # the checkpoint Ray Train resumes from, by its snapshot
    if resumed is None:
        return None  # nothing to resume: the run starts afresh, whatever it was started with before
    step, checkpoint = resumed
    try:
        before = run_directory.recorded_flags(directory)
    except (CheckpointRefused, OSError) as error:
        raise resumed_model.refusal(cfg, error) from None
    if before is not None:
        now = dataclasses.asdict(cfg)
        # A field newer than the recorded run (--epochs) had its default then.
        before = {**{field.name: field.default for field in dataclasses.fields(TrainConfig)}, **before}
        changed = [name for name in now if name not in RESUMABLE_CHANGES and before.get(name) != now[name]]
        if changed:
            shown = "; ".join(f"--{name} {before.get(name)!r} then, {now[name]!r} now" for name in changed)
            raise cli.UsageError(f"--run_name {cfg.run_name} exists under {cfg.storage_path} with other flags: {shown}",
                                 hint="give the same flags to resume it, or a new --run_name for a new run")
    # Where no flags were recorded (a run copied from a cluster, an older one) nothing above compared the model; and
    # a --model_id directory may hold another model under the same name: its config against the checkpoint's shapes.
    resumed_model.check(cfg, checkpoint)
    return step


def _not_a_run_directory(cfg: TrainConfig) -> None:
    """A --storage_path that is itself a run's directory (it holds checkpoint_<step>/ or the run's recorded flags)
    would start a new run inside it, --storage_path/--run_name, where resuming that run was meant."""
    marks = sorted(glob.glob(os.path.join(glob.escape(cfg.storage_path), "checkpoint_*" + os.sep)))
    if marks or os.path.lexists(os.path.join(cfg.storage_path, FLAGS_FILE)):
        parent, run = os.path.split(os.path.normpath(cfg.storage_path))
        raise cli.UsageError(f"--storage_path {cfg.storage_path} is a run's own directory (it holds "
                             f"{os.path.basename(marks[-1].rstrip(os.sep)) + '/' if marks else FLAGS_FILE}), and "
                             f"--run_name {cfg.run_name} would start a new run inside it",
                             hint=f"to resume that run give --storage_path {parent or '.'} --run_name {run}; for a "
                                  "new run, a --storage_path of runs")


def record_flags(cfg: TrainConfig) -> None:
    """Write the run's flags beside its checkpoints, for a new run (a resumed one keeps its first flags)."""
    if not cfg.storage_path or "://" in cfg.storage_path:
        return
    directory = os.path.join(cfg.storage_path, cfg.run_name)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, FLAGS_FILE), "w") as file:
        json.dump(dataclasses.asdict(cfg), file, indent=1)


def check_before_ray(cfg: TrainConfig) -> int | None:
    """Every check above, in the order a user would want to hear of them; returns the step a resumed run starts
    after (None: a new run)."""
    writable.check_cache_directories()  # HF_HOME and the like: this machine's set-up, said before any flag's check
    writable.check_tracker_directories(cfg.report_to, cfg.mlflow_tracking_uri)  # WANDB_DIR, a local MLflow store
    variable_values.check_variable_values()  # HF_HUB_OFFLINE=maybe and the like: before the Hub is asked anything
    credential_files.check()  # a FIFO at $NETRC would hang the first request to the Hub (requests reads it)
    check_socket_room()
    check_schemes(cfg)
    input_files.check(cfg)  # every local file the flags name: a regular file within its bound, before any is read
    check_storage(cfg)
    check_workers(cfg, local_cpus())
    check_fp8(cfg)
    check_dataset(cfg)  # last of the three: it reads the whole file, and says so once it has
    check_blocks(cfg)  # from what it read: too few blocks for the workers, when that is certain
    return resume_step(cfg)


# What torchrun (torch.distributed.run) and `torch.distributed.launch` set in each process they start.
LAUNCHER_VARIABLES = ("LOCAL_RANK", "TORCHELASTIC_RUN_ID", "GROUP_RANK")


def check_not_under_a_launcher() -> None:
    """The local run starts its own workers through Ray: under torchrun each of its processes would start a Ray
    cluster of its own and train the same run, all writing one --run_name."""
    found = [name for name in LAUNCHER_VARIABLES if name in os.environ]
    if found or ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        names = ", ".join(found or ["RANK", "WORLD_SIZE"])
        raise cli.UsageError(f"python -m workload.local runs under a launcher ({names} set, as torchrun sets them): it "
                             "starts its own workers through Ray, and each launched copy would start a cluster of its "
                             "own; run it once, without torchrun (--num_workers sets the workers)")


# A Unix socket's path holds at most 107 bytes (sockaddr_un's sun_path, 108 with its NUL, on Linux). Ray puts its
# sockets at <temp dir>/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store; the local run's temp dir is
# <TMPDIR>/ray-local-<8 characters> (workload/run/local.py local_cluster).
SOCKET_PATH_MAX = 107
RAY_SOCKET_TAIL = len("/ray-local-abcdefgh/session_2026-12-06_11-21-59_264090_4194304/sockets/plasma_store")


def ray_temp_base() -> str:
    """Where the local cluster's temp dir goes: TMPDIR's, unless Ray's sockets under it would pass a Unix socket's
    path limit (a deep TMPDIR failed inside `ray start` with its traceback); then /tmp."""
    temp = tempfile.gettempdir()
    if len(temp.encode()) + RAY_SOCKET_TAIL <= SOCKET_PATH_MAX:
        return temp
    if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK | os.X_OK):
        return "/tmp"
    raise cli.EnvironmentProblem(f"TMPDIR={temp} is {len(temp.encode())} bytes long, and the local Ray cluster's "
                                 f"sockets under it would pass the {SOCKET_PATH_MAX}-byte limit of a Unix socket's "
                                 f"path; give a TMPDIR of at most {SOCKET_PATH_MAX - RAY_SOCKET_TAIL} bytes")


def check_socket_room() -> None:
    """Said before Ray: where the cluster's files go when TMPDIR is too deep for its sockets, or that none will do."""
    if (base := ray_temp_base()) != tempfile.gettempdir():
        print(f"note: TMPDIR is too long a path for Ray's sockets under it; the local cluster's files go under {base}",
              file=sys.stderr, flush=True)
