"""The services and the disk a run will use, checked before any worker starts (workload.run.preflight.validate, which
the job's driver and `python -m workload.local` both run), one short request each: a Hub model that the Hub cannot
serve, an s3:// location (--storage_path, --dataset, --model_id, --tokenizer) that does not answer or that this
machine has no credentials for, a storage path's disk too small for one checkpoint, a server the run reports to or
uploads to (MLflow, W&B, the Hub for --push_to_hub) that does not answer. Each is exit 3 (cli.EnvironmentProblem) naming the flag, in a few seconds, where
the run used to fail inside Ray after 40-80 s, with traceback frames.

What the libraries would do otherwise, and so what each check stands in for:
- transformers' from_pretrained asks the Hub through huggingface_hub, which retries a refused connection five times
  (utils/_http.py http_backoff), then falls back to this machine's Hub cache; so a model in that cache, or
  HF_HUB_OFFLINE set, is not asked about.
- Ray Train writes its checkpoints through pyarrow's S3 filesystem with the machine's (the pod's) AWS identity; the
  AWS SDK's defaults retry and time out over tens of seconds. One HeadBucket (boto3, which reads the same
  credentials chain and AWS_ENDPOINT_URL_S3) answers in seconds; the pods' IAM policy allows it
  (infra/aws/pod_identity.py).
- A checkpoint is torch.distributed.checkpoint's shards of the whole training state: fp32 weights and AdamW's two
  fp32 moments, 12 bytes a trained parameter, whatever the number of ranks (each writes its share); a full disk
  fails the first save after minutes of training.
"""
from __future__ import annotations

import os
import shutil

from workload import cli
from workload.config import TrainConfig
from workload.model import adapters, model_source, structure
from workload.s3_access import check_s3_locations

# One bounded request to an MLflow server before the run: an answering server replies to /health in milliseconds.
TRACKING_TIMEOUT_S = 3
# A gateway's answers for a server behind it that does not answer (RFC 9110 15.6.3-5).
GATEWAY_STATUSES = (502, 503, 504)
# fp32 weights (4) + AdamW's exp_avg and exp_avg_sq (4 + 4): a checkpoint's bytes per trained parameter.
STATE_BYTES_PER_PARAMETER = 12
# The model directory --export writes beside the checkpoints: the fp32 master weights (workload.checkpoint.export).
EXPORT_BYTES_PER_PARAMETER = 4
# Free space within this fraction above the need is warned about: the logs, the metrics and the data cache share it.
DISK_MARGIN = 0.10


def check_hub_model(cfg: TrainConfig) -> None:
    """A --model_id on the Hub: one request for its config.json (workload.model.model_source.check_hub_reachable),
    skipped for a local directory, s3://, a model in this machine's Hub cache, and with HF_HUB_OFFLINE set."""
    if cfg.model_config or model_source.is_path(cfg.model_id) or "://" in cfg.model_id:
        return
    try:
        model_source.check_hub_reachable(cfg.model_id, model_source.CONFIG_FILE)
    except (model_source.Unreachable, model_source.NeedsToken) as error:
        raise cli.EnvironmentProblem(f"--model_id {cfg.model_id}: {error}",
                                     hint="HF_HUB_OFFLINE=1 loads a model this machine's Hub cache holds") from None


# The flags that may name an s3:// location: what the run does there, and the one request that asks for it, the one
# the pods' IAM policy allows for it (infra/aws/pod_identity.py: HeadBucket, authorized as s3:ListBucket with no
# prefix, on the storage bucket only; GetObject on a dataset file; ListBucket under a model's prefix).
S3_FLAGS = (("storage_path", "write checkpoints to", "bucket"), ("dataset", "read it from", "file"),
            ("model_id", "read it from", "directory"), ("tokenizer", "read it from", "directory"))


def check_s3_reachable(cfg: TrainConfig) -> None:
    """Every s3:// location the flags name (S3_FLAGS: --storage_path, --dataset, --model_id, --tokenizer), asked once
    with this machine's credentials: the storage path's bucket (HeadBucket), a dataset file (HeadObject), a model's
    or tokenizer's directory (one ListObjectsV2 key). No credentials, no answer within the timeouts, or a refusal
    (403) is exit 3; a bucket or file that does not exist is exit 2. Before a remote --dataset file is read: pyarrow's
    S3 retried for 13 s before its raw error. Skipped where boto3 is not installed (the job's image carries it; the
    libraries' own reads say the rest)."""
    check_s3_locations([(f"--{name} {getattr(cfg, name)}", getattr(cfg, name), purpose, kind)
                        for name, purpose, kind in S3_FLAGS if str(getattr(cfg, name)).startswith("s3://")])


# W&B's and the Hub's addresses when their variables are unset (wandb's and huggingface_hub's own defaults).
WANDB_DEFAULT_URL = "https://api.wandb.ai"
HUB_DEFAULT_URL = "https://huggingface.co"
# WANDB_MODE values in which wandb talks to no server (https://docs.wandb.ai/guides/track/environment-variables).
WANDB_LOCAL_MODES = ("offline", "dryrun", "disabled")


def services_to_reach(cfg: TrainConfig) -> list[tuple[str, str, str, str, str]]:
    """The servers the run will talk to, each as (the flag that makes it, what it is, the variable or flag that names
    its address, the address when that is set (else ""), the URL to ask): an MLflow server (its /health) for
    --report_to mlflow with an http(s) tracking URI; W&B's API for --report_to wandb unless WANDB_MODE keeps the run
    local; the Hub for --push_to_hub (it uploads at the end, after the whole run). A file or database MLflow store,
    and W&B offline, need no server."""
    from workload.config import parse_report_to

    trackers, servers = parse_report_to(cfg.report_to), []
    uri = cfg.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if "mlflow" in trackers and uri.lower().startswith(("http://", "https://")):
        where = "--mlflow_tracking_uri" if cfg.mlflow_tracking_uri else "MLFLOW_TRACKING_URI"
        servers.append(("--report_to mlflow", "the MLflow tracking server", where, uri, uri.rstrip("/") + "/health"))
    if "wandb" in trackers and os.environ.get("WANDB_MODE", "").lower() not in WANDB_LOCAL_MODES:
        url = os.environ.get("WANDB_BASE_URL", "")
        servers.append(("--report_to wandb", "W&B's server", "WANDB_BASE_URL", url, url or WANDB_DEFAULT_URL))
    if cfg.push_to_hub and not model_source.offline_variable():
        url = os.environ.get("HF_ENDPOINT", "")
        servers.append((f"--push_to_hub {cfg.push_to_hub}", "the Hugging Face Hub", "HF_ENDPOINT", url,
                        (url or HUB_DEFAULT_URL).rstrip("/") + "/api/whoami-v2"))
    return servers


# How to do without each server, for the refusal's hint.
WITHOUT = {"--report_to mlflow": "leave mlflow out of --report_to (without a URI the run keeps an MLflow store in its "
                                 "run directory)",
           "--report_to wandb": "WANDB_MODE=offline records the run locally (`wandb sync` uploads it later)",
           "--push_to_hub": "leave --push_to_hub out and upload the exported model later"}


def check_services_reachable(cfg: TrainConfig, timeout_s: float = TRACKING_TIMEOUT_S) -> None:
    """Each server the run will talk to (`services_to_reach`), asked once with one bounded GET before the run starts.
    Any HTTP answer but a gateway's 502-504 (even a 401, or a 404 from a proxy's path) is a server that answers; no
    answer is exit 3 naming the flag, the server and where its address came from. The trackers' warnings stay for a
    server that goes away mid-run."""
    import http.client
    import urllib.error
    import urllib.request

    for flag, what, where, address, url in services_to_reach(cfg):
        try:
            with urllib.request.urlopen(url, timeout=timeout_s):
                continue
        except urllib.error.HTTPError as error:
            if error.code not in GATEWAY_STATUSES:
                continue  # it answered
            why = f"HTTP {error.code} from a proxy in front of it"
        except (OSError, ValueError, http.client.HTTPException) as error:  # InvalidURL: a URI it cannot parse
            reason = getattr(error, "reason", error)
            why = f"{reason if isinstance(reason, str) and not cli.shown(reason).startswith('a value') else type(reason).__name__}, within {timeout_s:g} s"
        if address:
            shown = address if cli.shown(address) == repr(address) else "its URI (not shown: it may hold a token)"
            named = f"{where} names, {shown},"
        else:
            named = f"{url.removesuffix('/api/whoami-v2')} ({where} unset: the default)"
        raise cli.EnvironmentProblem(f"{flag}: {what} {named} does not answer ({why})",
                                     hint=f"check the network, or set {where} to one that answers; or "
                                          f"{WITHOUT[flag.split()[0] if flag.startswith('--push') else flag]}")


def planned_bytes(cfg: TrainConfig, architecture: dict) -> tuple[int, int]:
    """(one checkpoint's bytes: the trained parameters' state, the exported model's bytes) for `architecture` (a
    config.json as a dict). With --method lora/qlora only the adapters train: rank x (in + out) per targeted linear
    layer; the export is the merged model's size either way."""
    parameters = structure.parameter_count(architecture)
    if cfg.method == "full":
        trained = parameters
    else:
        names = adapters.resolve(cfg.lora_targets, structure.linear_names(architecture))
        shapes = [shape for name, shape in structure.linear_shapes(architecture).items()
                  if name.rsplit(".", 1)[-1] in names]
        trained = architecture["num_hidden_layers"] * sum(cfg.lora_rank * (out + into) for out, into in shapes)
    exported = parameters * EXPORT_BYTES_PER_PARAMETER if cfg.export != "none" else 0
    return trained * STATE_BYTES_PER_PARAMETER, exported


def check_disk(cfg: TrainConfig, architecture: dict, *, say=print) -> None:
    """A local --storage_path's filesystem has room for one checkpoint and the export (`planned_bytes`): exit 3 with
    both sizes when it clearly has not, a warning when the room is within DISK_MARGIN of the need (each further
    checkpoint needs as much again)."""
    path = cfg.storage_path
    if not path or "://" in path:
        return
    existing = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    checkpoint, exported = planned_bytes(cfg, architecture)
    need = checkpoint + exported
    sizes = f"{_size(free)} free at {existing}, one checkpoint and the exported model need {_size(need)}"
    if free < need:
        raise cli.EnvironmentProblem(f"--storage_path {path}: {sizes}",
                                     hint="free space there, or give a --storage_path on a larger disk")
    if free < need * (1 + DISK_MARGIN):
        say(f"warning: --storage_path {path}: {sizes}; each further checkpoint needs {_size(checkpoint)} more")


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
