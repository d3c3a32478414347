"""The architecture of the stack's model, at preview: what the memory plan and the sequence-length check read.

In order: a random-weight architecture (trainModelConfig); the published config.json the project ships
(workload/architectures); for any other Hugging Face id, its config.json from the Hub (huggingface_hub's
hf_hub_download, which honours HF_ENDPOINT and HF_HUB_OFFLINE, with trainSecretEnv's HF_TOKEN for a gated or private
model), and its file list, which must hold the safetensors weights the job loads (with every shard its
model.safetensors.index.json names, the index read once, bounded, before the gate); for an s3://bucket/prefix/ model
directory, its config.json through boto3 as the stack's AWS identity.

A model that cannot exist for the job (no such repo, a gated one without a token that has access, no config.json) or
that the job could not train is refused here, naming trainModelId: a config.json read from the Hub or S3 goes through
the job's own model gate (workload.model.compatibility: built on the meta device, refused unless it is a dense,
text-only decoder whose layers and buffers the job shards and loads), so what the preview accepts, the job loads; one that cannot be read from this machine
(no network, S3 access denied to the deployer) is `Unknown` with the reason, and the preview warns as it did before.
The token is handed to huggingface_hub and never printed: refusals name HF_TOKEN, not its value.
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Callable

from infra.config import AwsIdentity, s3_location
from infra.preview import hub_access
from workload.config import ARCHITECTURES
from workload.data import tokenizer_size
from workload.model import architectures, compatibility, config_json, model_source, safetensors_index

CONFIG_FILE = "config.json"
HUB_TOKEN_VARIABLE = "HF_TOKEN"
# What workload.model.memory reads of a config; a config without them (a multimodal wrapper with text_config, an
# encoder) is not a decoder the memory model knows.
REQUIRED_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class Known:
    """An architecture, and where it came from (for the preview's messages)."""

    config: dict
    source: str
    warning: str = ""
    """What could not be checked at preview (a Hub repo whose file list could not be had), for the preview to warn."""


@dataclass(frozen=True)
class Unknown:
    """Not readable from this machine; why."""

    reason: str


def resolve(model_id: str, model_config: str = "", *, hub_token: str | None = None,
            identity: AwsIdentity | None = None, region: str | None = None,
            check_first: Callable[[dict], None] | None = None, offline: bool = False) -> Known | Unknown:
    """The architecture of trainModelId / trainModelConfig (see the module docstring). ValueError for a model the
    job could not load either. `check_first`, given, runs on every config.json read (a dict) before the model gate:
    the preview's checks that need only its fields (the tokenizer's size against vocab_size) refuse in milliseconds,
    not after the gate's seconds of torch and transformers imports. A shipped config sizes its model, and the Hub is
    still asked once whether trainSecretEnv's token may download it (hub_access.check_download: a gated repo without
    access is refused, no answer is the Known's warning), unless `offline` (what `tools.job submit` decides)."""
    first = check_first or (lambda config: None)
    if model_config:
        first(ARCHITECTURES[model_config])
        return Known(dict(ARCHITECTURES[model_config]), f"trainModelConfig {model_config}")
    if (shipped := architectures.published(model_id)) is not None:
        warning = "" if offline else hub_access.check_download(model_id, CONFIG_FILE, "trainModelId", hub_token)
        first(shipped)
        return Known(shipped, f"the published config.json shipped in {architectures.file_for(model_id).name}",
                     warning)
    if s3_location(model_id, "trainModelId") is not None:
        return _from_s3(model_id, identity or AwsIdentity(), region, first)
    return _from_hub(model_id, hub_token, first)


def check_decoder(config: Any, where: str) -> dict:
    """A config.json read from storage is untrusted input: a JSON object with the decoder fields, as integers."""
    if not isinstance(config, dict):
        raise ValueError(f"config key 'trainModelId': {where} is not a JSON object; allowed: a model whose "
                         f"{CONFIG_FILE} describes a decoder (hidden_size, num_hidden_layers, ...)")
    missing = [name for name in REQUIRED_FIELDS if not isinstance(config.get(name), int) or config[name] < 1]
    if missing:
        raise ValueError(f"config key 'trainModelId': {where} has no positive integer {', '.join(missing)}, so it is "
                         "not a decoder-only causal LM this job trains; allowed: a decoder such as Qwen2.5, Qwen3, "
                         "Llama or Mistral")
    return config


def _trainable(config: Any, model_id: str, where: str, source: str, first: Callable[[dict], None]) -> Known:
    """The job's model gate on a config.json read at preview, then the fields the memory plan reads; the config
    carries the meta-built model's structure (workload.model.structure), so the plan counts what transformers builds.
    The shipped configs are not gated here (no torch at preview for them): tests/unit/test_model_gate.py passes each of
    them through the gate, and tests/runs/test_family_methods.py checks their derived structure against the built model."""
    if isinstance(config, dict):
        first(config)
    built = compatibility.gate(config, f"config key 'trainModelId': {model_id}")
    check_decoder(config, where)
    return Known(built, source)


# ---- the Hub -----------------------------------------------------------------------------------------------------

def _from_hub(model_id: str, token: str | None, first: Callable[[dict], None]) -> Known | Unknown:
    """config.json with one request and no retries (workload.model.model_source.get_file: an unreachable Hub is
    Unknown at once, not after huggingface_hub's five retries over 23 s), with trainSecretEnv's token only (never
    the deployer's own HF_TOKEN). huggingface_hub turns the Hub's answers into its errors (utils/_http.py
    hf_raise_for_status): X-Error-Code RepoNotFound (401 unauthenticated, 404 authenticated) ->
    RepositoryNotFoundError, GatedRepo (401 without a token, 403 with one not granted) -> GatedRepoError,
    EntryNotFound -> EntryNotFoundError. Only no answer, or a 5xx, 429 or a proxy's refusal, is not an answer about
    the model."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    key = "config key 'trainModelId'"
    try:
        text = model_source.read_file(model_id, CONFIG_FILE, token or False, model_source.MAX_CONFIG_BYTES)
    except model_source.Unreachable as error:
        return Unknown(f"its {CONFIG_FILE} could not be read from the Hub ({error})")
    except GatedRepoError:
        raise hub_access.gated_refusal("trainModelId", model_id, token) from None
    except RepositoryNotFoundError:
        hint = ("or private, and trainSecretEnv's HF_TOKEN cannot see it" if token else
                f"or private (then set trainSecretEnv {HUB_TOKEN_VARIABLE})")
        raise ValueError(f"{key}: {model_id} is not a model on the Hugging Face Hub ({hint}); allowed: a Hub "
                         "model id such as Qwen/Qwen2.5-7B, or s3://bucket/prefix/ holding a model directory") from None
    except (EntryNotFoundError, RevisionNotFoundError):
        raise ValueError(f"{key}: {model_id} has no {CONFIG_FILE} on the Hub, so transformers cannot load it; "
                         "allowed: a transformers model repo") from None
    except HfHubHTTPError as error:  # 5xx, 429, a proxy's refusal
        return Unknown(f"its {CONFIG_FILE} could not be read from the Hub ({type(error).__name__})")
    if (why := model_source.config_size_problem(len(text))) is not None:
        raise ValueError(f"{key}: {model_id}'s {CONFIG_FILE} on the Hub {why}")
    try:
        config = config_json.loads(text)
    except config_json.Refused as error:
        raise ValueError(f"{key}: {model_id}'s {CONFIG_FILE} on the Hub is {error}") from None
    except ValueError:
        raise ValueError(f"{key}: {model_id}'s {CONFIG_FILE} on the Hub is not JSON") from None
    listing = _hub_listing(model_id, token)
    shards_warning: list[str] = []

    def cheap(raw: dict) -> None:  # before the gate's imports: the tokenizer's size, the weights, the index's shards
        first(raw)
        _weights_on_hub(model_id, listing)  # from the listing in hand: milliseconds, not the gate's torch import
        if not isinstance(listing, str) and safetensors_index.INDEX_FILE in listing:
            shards_warning.append(_shards_on_hub(model_id, token, listing))

    held = _LISTING.set((model_id, listing) if not isinstance(listing, str) else None)
    try:  # the tokenizer check inside `cheap` reads the model's own tokenizer files from this listing
        known = _trainable(config, model_id, f"{model_id}'s {CONFIG_FILE}", f"{model_id}'s {CONFIG_FILE} on the Hub",
                           cheap)
    finally:
        _LISTING.reset(held)
    return replace(known, warning=_weights_on_hub(model_id, listing) or "".join(shards_warning))


def _hub_listing(model_id: str, token: str | None) -> list[str] | str:
    """The repo's file list (model_source.hub_files: one request, the config's token and time limit), or the warning
    that it cannot be had (no answer, a 5xx), as for config.json."""
    from huggingface_hub.errors import HfHubHTTPError

    unchecked = "so whether it holds safetensors weights is checked only on the cluster"
    try:
        names = model_source.hub_files(model_id, token or False)
    except model_source.Unreachable as error:
        return f"trainModelId {model_id}: its file list could not be read from the Hub ({error}), {unchecked}"
    except HfHubHTTPError as error:
        return (f"trainModelId {model_id}: its file list could not be read from the Hub ({type(error).__name__}), "
                f"{unchecked}")
    if names is None:
        return f"trainModelId {model_id}: the Hub's answer listed no files, {unchecked}"
    return names


def _weights_on_hub(model_id: str, listing: list[str] | str) -> str:
    """The file list against the weights the job loads: ValueError naming trainModelId for a repo without safetensors
    weights (pytorch_model.bin alone), "" when they are there, the warning when the list could not be had."""
    if isinstance(listing, str):
        return listing
    if (why := model_source.weights_problem(listing)) is not None:
        raise ValueError(f"config key 'trainModelId': {model_id} on the Hub {why}")
    return ""


def _shards_on_hub(model_id: str, token: str | None, names: list[str]) -> str:
    """A sharded repo's model.safetensors.index.json (one bounded read) against its file list: every shard the index
    names must be there, or from_pretrained fails on every rank at the first missing one (the rule the local run
    applies to a model directory: workload.model.safetensors_index). A warning when the index cannot be read."""
    from huggingface_hub.errors import HfHubHTTPError

    key, index = "config key 'trainModelId'", safetensors_index.INDEX_FILE
    try:
        data = model_source.read_file(model_id, index, token or False, safetensors_index.MAX_INDEX_BYTES)
    except (model_source.Unreachable, HfHubHTTPError) as error:
        return (f"trainModelId {model_id}: its {index} could not be read from the Hub ({type(error).__name__}), so "
                "whether it names only files the repo holds is checked only on the cluster")
    missing = safetensors_index.missing_shards(data, names, f"{key}: {model_id} on the Hub")
    if missing:
        raise ValueError(f"{key}: {model_id} on the Hub: its {index} names {safetensors_index.shown(missing)}, which "
                         "the repo does not hold, so every rank's load fails; allowed: a repo holding every shard its "
                         "index names (upload each file save_pretrained wrote)")
    return ""


# ---- the tokenizer -------------------------------------------------------------------------------------------------

# The model repo's file list _from_hub already fetched, while its checks run: (repo id, file names).
_LISTING: ContextVar[tuple[str, list[str]] | None] = ContextVar("hub_listing", default=None)


def _tokenizer_listing(name: str, hub_token: str | None) -> list[str] | None:
    """The tokenizer repo's file names: the model's listing when it is that repo, else one request
    (model_source.hub_files); None when not had (the reads that follow then say what the Hub answered)."""
    from huggingface_hub.errors import HfHubHTTPError

    if (held := _LISTING.get()) is not None and held[0] == name:
        return held[1]
    try:
        return model_source.hub_files(name, hub_token or False)
    except (model_source.Unreachable, HfHubHTTPError):
        return None


def tokenizer_tokens(name: str, key: str, hub_token: str | None = None) -> int | Unknown:
    """len(tokenizer) of trainTokenizer (or trainModelId's own tokenizer), `key` naming which: a shipped model's
    from workload.data.tokenizer_size.KNOWN_SIZES, any other Hub id's from its tokenizer.json in one bounded request
    with trainSecretEnv's token only (the answers mapped as `_from_hub` maps them), else from its vocab.json
    (tokenizer_size.size_on_hub). Unknown for an s3:// tokenizer (the job sizes it, with the pods' role), a repo
    with neither file, or no answer; ValueError naming `key` for a tokenizer that is not there, is gated, whose
    files are not what their names say, or a repo whose file list (the model's own, else one request) holds no
    tokenizer file at all (tokenizer_size.has_tokenizer)."""
    if name in tokenizer_size.KNOWN_SIZES:
        return tokenizer_size.KNOWN_SIZES[name]
    if "://" in name or model_source.is_path(name):
        return Unknown(f"the tokenizer {name} is read by the job")
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    files = _tokenizer_listing(name, hub_token)
    if files is not None and not tokenizer_size.has_tokenizer(files):
        raise ValueError(f"config key '{key}': {name} on the Hub holds no tokenizer (no "
                         f"{tokenizer_size.TOKENIZER_FILE}, {tokenizer_size.TOKENIZER_CONFIG_FILE}, "
                         f"{tokenizer_size.VOCAB_FILE} or tokenizer.model), so "
                         "AutoTokenizer.from_pretrained fails in the data stage; allowed: a repo with the tokenizer's "
                         "files (tokenizer.save_pretrained writes them)"
                         + ("" if key == "trainTokenizer" else ", or trainTokenizer naming one"))
    try:
        return tokenizer_size.size_on_hub(name, hub_token or False, files)
    except (tokenizer_size.NotSized, model_source.Unreachable) as error:
        return Unknown(str(error))
    except GatedRepoError:
        raise hub_access.gated_refusal(key, f"the tokenizer {name}", hub_token) from None
    except RepositoryNotFoundError:
        raise ValueError(f"config key '{key}': the tokenizer {name} is not a repo on the Hugging Face Hub (or "
                         f"private: then set trainSecretEnv {HUB_TOKEN_VARIABLE}); allowed: a Hub id such as "
                         "Qwen/Qwen2.5-7B, or empty for trainModelId's own") from None
    except HfHubHTTPError as error:  # 5xx, 429, a proxy's refusal
        return Unknown(f"its {tokenizer_size.TOKENIZER_FILE} could not be read from the Hub ({type(error).__name__})")
    except ValueError as error:
        raise ValueError(f"config key '{key}': {error}") from None


# ---- S3 ------------------------------------------------------------------------------------------------------------

def _from_s3(model_id: str, identity: AwsIdentity, region: str | None, first: Callable[[dict], None]
             ) -> Known | Unknown:
    """s3://bucket/prefix/config.json as the stack's identity (infra.aws.identity.session)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from infra.aws import identity as aws_identity

    bucket, prefix = s3_location(model_id, "trainModelId")
    key = f"{prefix}/{CONFIG_FILE}" if prefix else CONFIG_FILE
    where = f"s3://{bucket}/{key}"
    try:
        # One byte past the bound, so that a larger file is known without reading it whole.
        body = aws_identity.session(identity, region).client("s3").get_object(
            Bucket=bucket, Key=key, Range=f"bytes=0-{model_source.MAX_CONFIG_BYTES}")["Body"].read()
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("NoSuchKey", "404"):
            raise ValueError(f"config key 'trainModelId': {where} does not exist; allowed: s3://bucket/prefix/ of a "
                             f"model directory (its {CONFIG_FILE} and safetensors files)") from None
        if code == "NoSuchBucket":
            raise ValueError(f"config key 'trainModelId': bucket {bucket} does not exist; allowed: s3://bucket/prefix/ "
                             "of a model directory in an existing bucket") from None
        return Unknown(f"{where} could not be read as {aws_identity.describe(identity)} ({code or 'error'})")
    except BotoCoreError as error:
        return Unknown(f"{where} could not be read as {aws_identity.describe(identity)} ({type(error).__name__})")
    if len(body) > model_source.MAX_CONFIG_BYTES:
        raise ValueError(f"config key 'trainModelId': {where} is larger than {model_source.MAX_CONFIG_BYTES:,} bytes; "
                         f"a model's {CONFIG_FILE} is a few KiB")
    try:
        config = config_json.loads(body)
    except config_json.Refused as error:
        raise ValueError(f"config key 'trainModelId': {where} is {error}") from None
    except ValueError:
        raise ValueError(f"config key 'trainModelId': {where} is not JSON") from None
    return _trainable(config, model_id, where, where, first)
