"""trainDataset's records at preview, checked by the job's own function (workload.data.validate) on what the
deployer can read, so a file the job would refuse is refused before `up` creates anything that bills.

- An s3:// file is read through the stack's AWS identity (infra.aws.identity.session), as model_config reads an
  s3:// model's config.json, with one ranged GET of at most PREVIEW_MAX_BYTES. A line format (.jsonl, .csv, .txt,
  and each .gz) larger than that has its records in those bytes checked (the last, possibly cut, line left out) and
  the preview says the rest is checked by the job's driver before any worker loads the model; a .json or .parquet
  larger than that cannot be read in part and is left to the job, with a warning.
- A local path is read whole (the preview refuses it earlier as a path the pods cannot read; the check is the same).
- A Hugging Face dataset id: its repo's files listed through the Hub API, and the first data file of
  trainDatasetSplit (trainDatasetConfig) read with one ranged GET of at most PREVIEW_MAX_BYTES and checked the same
  way (workload.data.hub_dataset, which the job's driver runs too), with trainSecretEnv's HF_TOKEN only (never the
  deployer's own), as model_config reads a Hub model's config.json. A dataset that does not exist, a split with no
  data file, a gated dataset without a token (HF_TOKEN named) or a bad record is refused; a Hub that does not
  answer is a warning ("not reachable"), as for the model's config.

A file that cannot be read (no network, access denied to the deployer) is a warning, as for the model's config; a
file that does not exist, or a record the job would refuse, is refused naming trainDataset.
"""
from __future__ import annotations

import io
from typing import Callable

import workload.config as workload_config
from infra.config import AwsIdentity, StackConfig, s3_location
from workload.config import is_local_dataset
from workload.data import shapes, validate

KEY = "trainDataset"
HUB_TOKEN = "HF_TOKEN"  # infra.config.train_keys.HUB_TOKEN: the only trainSecretEnv entry read here
# What the preview reads of a large file: 64 MiB parse in about a second, and are a few seconds' download on a
# deployer's link; the job's driver reads the whole file anyway, before any worker loads the model.
PREVIEW_MAX_BYTES = 64 * 2**20
# A refusal names the stack keys, not the job's flags (the declarations' table).
STACK_KEYS = workload_config.STACK_KEYS


def fields_of(cfg: StackConfig) -> shapes.Fields:
    train = cfg.train
    return shapes.Fields(train.data_format, train.text_field, train.messages_field, train.prompt_field,
                         train.completion_field, STACK_KEYS)


def check_train_dataset(cfg: StackConfig, *, identity: AwsIdentity | None = None, region: str | None = None,
                        warn: Callable[[str], None] | None = None) -> validate.Checked | None:
    if not cfg.train.dataset:
        return None
    if not is_local_dataset(cfg.train.dataset) and "://" not in cfg.train.dataset:
        return check_hub(cfg, warn=warn)
    return check_records(cfg.train.dataset, fields_of(cfg), identity=identity, region=region, warn=warn)


def check_hub(cfg: StackConfig, *, warn: Callable[[str], None] | None = None,
              limit: int = PREVIEW_MAX_BYTES) -> validate.Checked | None:
    """A Hub dataset's split, its first file checked (None: the Hub did not answer, warned)."""
    from workload.data import hub_dataset

    if warn is None:
        from infra.config.schema import warn
    train = cfg.train
    token = train.secret_env.reveal().get(HUB_TOKEN) or False
    try:
        found = hub_dataset.check_records(train.dataset, train.dataset_split, train.dataset_config, fields_of(cfg),
                                  subject=f"config key '{KEY}':", token=token, limit=limit,
                                  eval_split=train.eval_split,
                                  eval_subject="config key 'trainEvalSplit':",
                                  split_subject="config key 'trainDatasetSplit':",
                                  config_subject="config key 'trainDatasetConfig':")
    except hub_dataset.NotReachable as error:
        warn(f"{KEY} {train.dataset} is not reachable on the Hugging Face Hub ({error}), so its records are checked "
             "only by the job, before any worker loads the model")
        return None
    except validate.DataError as error:
        raise ValueError(str(error)) from None
    from infra.preview import template_records  # its first records against the chat template the job renders with

    template_records.check(cfg, f"{train.dataset}/{found.file}", found.head, fields_of(cfg))
    _warn_partial(found.checked, f"{train.dataset}/{found.file}", limit, warn, found.size,
                  "the job's driver checks the same part before loading the model, and the workers every record")
    return found.checked


def check_records(dataset: str, fields: shapes.Fields, *, identity: AwsIdentity | None = None,
                  region: str | None = None, warn: Callable[[str], None] | None = None,
                  limit: int = PREVIEW_MAX_BYTES) -> validate.Checked | None:
    """What the check found (None: not read here); ValueError naming trainDataset for a file the job refuses."""
    if warn is None:
        from infra.config.schema import warn
    subject = f"config key '{KEY}':"
    try:
        if is_local_dataset(dataset):
            return validate.check_file(dataset, fields, subject=subject)
        if not dataset.startswith("s3://"):
            return None
        found = _read_s3(dataset, identity or AwsIdentity(), region, limit, warn)
        if found is None:
            return None
        body, size = found
        checked = validate.check_file(dataset, fields, subject=subject, opener=lambda: io.BytesIO(body),
                                      complete=len(body) >= size)
    except validate.DataError as error:
        raise ValueError(str(error)) from None
    _warn_partial(checked, dataset, limit, warn, size)
    return checked


def _warn_partial(checked: validate.Checked, dataset: str, limit: int, warn: Callable[[str], None],
                  size: int, then: str = "the job checks every record before any worker loads the model") -> None:
    if not checked.complete:
        mib = limit / 2**20
        warn(f"{KEY} {dataset}: {size / 2**20:,.0f} MiB; the preview checked "
             + (f"the {checked.records} records in its first {mib:g} MiB" if checked.records else
                f"none of it (a {validate.suffix(dataset)} file cannot be read in part; the bound is {mib:g} MiB)")
             + f", and {then}")


def _read_s3(dataset: str, identity: AwsIdentity, region: str | None, limit: int,
             warn: Callable[[str], None]) -> tuple[bytes, int] | None:
    """(the first `limit` bytes, the object's size), or None (warned) when the deployer cannot read it."""
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.aws import identity as aws_identity

    bucket, key = s3_location(dataset, KEY)
    reader = f"as {aws_identity.describe(identity)}"
    try:
        response = aws_identity.session(identity, region).client("s3").get_object(
            Bucket=bucket, Key=key, Range=f"bytes=0-{limit - 1}")
        body = response["Body"].read()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404"):
            raise ValueError(f"config key '{KEY}': {dataset} does not exist; allowed: an existing s3://bucket/key "
                             "file, a Hugging Face dataset id, or empty for random tokens") from None
        if code == "NoSuchBucket":
            raise ValueError(f"config key '{KEY}': bucket {bucket} does not exist") from None
        if code == "InvalidRange":  # S3's answer to a range of a 0-byte object
            return b"", 0
        warn(f"{KEY} {dataset} could not be read {reader} ({code or 'error'}), so its records are checked only by "
             "the job, before any worker loads the model")
        return None
    except BotoCoreError as error:
        warn(f"{KEY} {dataset} could not be read {reader} ({type(error).__name__}), so its records are checked only "
             "by the job, before any worker loads the model")
        return None
    total = response.get("ContentRange", "").rpartition("/")[2]
    size = int(total) if total.isdigit() else len(body)
    return body, size
