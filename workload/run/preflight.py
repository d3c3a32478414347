"""The job's checks before any worker starts, cheapest first: `validate` is what the job's driver
(`python -m workload.train`) and `python -m workload.local` run once the flags have parsed.

What needs only the flags and a config known without a download (--model_config's, or the config.json the project
ships for a --model_id, workload.model.architectures) answers before torch, transformers and Ray load: a --seq_len
above the model's positions is one line in a fraction of a second, not after seconds of imports. Then the data files
(standard library), then the services the run will use, one short request each (workload.run.services: the Hub for
a Hub model or dataset, S3 for an s3:// --storage_path, the free disk for the checkpoints), then what needs
transformers: the model's own config.json and the model gate, the tokenizer.
"""
from __future__ import annotations

import glob
import os
from urllib.parse import urlsplit

from workload import cli
from workload.config import CHAT_TEMPLATES, TrainConfig, parse_report_to
from workload.config.special_names import never_resolved
from workload.data import hub_dataset, template_check, tokenizer_fields, tokenizer_size
from workload.data import validate as records_check
from workload.model import (
    adapters,
    compatibility,
    config_json,
    header_shapes,
    model_source,
    remote_code,
    safetensors_files,
    safetensors_index,
    structure,
)
from workload.run import (
    credential_files,
    credential_values,
    input_files,
    push_access,
    services,
    variable_values,
    writable,
)

# A tokenizer directory holds at least one of these (what transformers' tokenizers load their vocabulary from: the
# fast tokenizer's file, a sentencepiece model (tokenizer.model, spiece.model, sentencepiece.bpe.model), BPE's or
# WordPiece's vocabulary, tiktoken's ranks).
TOKENIZER_FILES = ("tokenizer.json", "*.model", "vocab.json", "vocab.txt", "*.tiktoken")


def check_positions(cfg: TrainConfig, max_positions: int) -> None:
    """--seq_len against the model's maximum positions (config.json's max_position_embeddings)."""
    if cfg.seq_len > max_positions:
        raise ValueError(f"--seq_len {cfg.seq_len} is above the model's maximum of {max_positions} positions "
                         f"({cfg.model_config or cfg.model_id})")


def check_credentials(cfg: TrainConfig) -> None:
    """The keys a run needs only at its end or on rank 0 (W&B's, the Hub's token for --push_to_hub), checked before
    anything starts: without them W&B warned after the first steps and the upload failed after the whole run.
    Exit 3, naming the variable, never its value; W&B switched off by WANDB_MODE is exit 2, as a flag that does
    nothing (wandb.init then records nothing, silently)."""
    credential_files.check()  # before _wandb_key and _hub_token read them: a FIFO would wait forever
    credential_values.check_credential_values()
    variable_values.check_variable_values()  # WANDB_MODE=offlin is named as such, not as a missing W&B key
    if "wandb" in parse_report_to(cfg.report_to) and os.environ.get("WANDB_MODE", "").lower() == "disabled":
        raise cli.UsageError("--report_to wandb records nothing with WANDB_MODE=disabled",
                             hint="leave wandb out of --report_to, or unset WANDB_MODE (offline records locally)")
    if cfg.push_to_hub and (offline := model_source.offline_variable()):
        raise cli.UsageError(f"--push_to_hub {cfg.push_to_hub} cannot upload with {offline}=1: the Hub is offline",
                             hint=f"unset {offline} for this run, or leave --push_to_hub out and upload the export "
                                  "later")
    if "wandb" in parse_report_to(cfg.report_to) and not _wandb_key():
        raise cli.EnvironmentProblem(
            "--report_to wandb: no W&B API key: set WANDB_API_KEY (https://wandb.ai/authorize) or run `wandb login`",
            hint="or WANDB_MODE=offline to record the run locally, or leave wandb out of --report_to")
    if cfg.push_to_hub and not _hub_token():
        raise cli.EnvironmentProblem(
            f"--push_to_hub {cfg.push_to_hub}: no Hugging Face token: set HF_TOKEN (a write token, "
            "https://huggingface.co/settings/tokens) or run `hf auth login`")
    tracking_uri = cfg.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    check_tracking_host(cfg, tracking_uri)
    if "mlflow" in parse_report_to(cfg.report_to) and tracking_uri.split(":", 1)[0].lower() == "databricks" and not (
            os.environ.get("DATABRICKS_HOST") and (os.environ.get("DATABRICKS_TOKEN") or os.environ.get(
                "DATABRICKS_CLIENT_SECRET")) or os.path.isfile(os.path.expanduser("~/.databrickscfg"))):
        # MLflow's Databricks store reads the workspace and its credentials from these, or ~/.databrickscfg
        # (mlflow/utils/databricks_utils.py, the Databricks SDK's unified authentication).
        where = "--mlflow_tracking_uri" if cfg.mlflow_tracking_uri else "MLFLOW_TRACKING_URI"
        raise cli.EnvironmentProblem(
            f"--report_to mlflow: {where} is databricks, and nothing says which workspace or with which "
            "credentials: set DATABRICKS_HOST and DATABRICKS_TOKEN, or write ~/.databrickscfg (`databricks configure`)")


def check_tracking_host(cfg: TrainConfig, tracking_uri: str) -> None:
    """An http(s) MLflow server under a special-use domain that no resolver answers anywhere (.onion, .invalid:
    workload/config/special_names.py): the MLflow client would fail at the run's start. Names the flag (exit 2) or
    the variable (exit 3) and the domain, never the URI."""
    if "mlflow" not in parse_report_to(cfg.report_to) or not tracking_uri.lower().startswith(("http://", "https://")):
        return
    try:
        host = urlsplit(tracking_uri).hostname or ""
    except ValueError:
        return  # services' request names a URI it cannot parse
    if (special := never_resolved(host)) is None:
        return
    words = (f"the MLflow server's host is under the special-use domain {special}, which no DNS resolver answers; "
             "give the server's address on a public or your own network")
    if cfg.mlflow_tracking_uri:
        raise cli.UsageError(f"--mlflow_tracking_uri: {words}")
    raise cli.EnvironmentProblem(f"MLFLOW_TRACKING_URI: {words}")


def _wandb_key() -> bool:
    # wandb reads WANDB_API_KEY, else the key `wandb login` wrote to ~/.netrc (machine api.wandb.ai); offline and
    # disabled modes need none (https://docs.wandb.ai/guides/track/environment-variables).
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in ("offline", "disabled", "dryrun"):
        return True
    try:
        import netrc

        return netrc.netrc(os.environ.get("NETRC") or None).authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _hub_token() -> bool:
    # huggingface_hub reads HF_TOKEN, else the file `hf auth login` writes: $HF_TOKEN_PATH, else $HF_HOME/token
    # (~/.cache/huggingface/token) (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return True
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        with open(os.path.expanduser(path)) as file:
            return bool(file.read().strip())
    except OSError:
        return False


def check_local_files(cfg: TrainConfig) -> dict | None:
    """The directories on this machine that the run reads, checked for the files it will read before anything heavy
    loads (a refusal in well under a second, not after seconds of torch's imports or inside Ray): a --model_id
    directory's readable config.json and its *.safetensors weights (model.safetensors, or every shard its index
    names, inside it), and the tokenizer's files in the --tokenizer directory (or the model's own, for a dataset).
    Returns a --model_id directory's config.json (a dict, through the gate's checks that need no transformers), else
    None."""
    raw = None
    input_files.check(cfg)  # each a regular file within its bound (the job's driver checks here too)
    if not cfg.model_config and model_source.missing_directory(cfg.model_id):
        raise ValueError(f"--model_id {cfg.model_id}: {model_source.NO_MODEL_DIRECTORY}")
    if cfg.dataset and model_source.missing_directory(cfg.tokenizer):
        raise ValueError(f"--tokenizer {cfg.tokenizer}: {model_source.NO_TOKENIZER_DIRECTORY}")
    directory = os.path.expanduser(cfg.model_id)
    if not cfg.model_config and "://" not in cfg.model_id and os.path.isdir(directory):
        what = f"--model_id {cfg.model_id}"
        raw = config_json.load_model_config(directory, what)
        compatibility.check_raw(raw, what)  # before the imports
        weights = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
        if not weights:
            raise ValueError(f"{what}: the directory holds no *.safetensors weights; give the directory save_pretrained "
                             "wrote (config.json and model*.safetensors)")
        if missing := safetensors_index.missing_files(directory, what):  # what the job's loader would open
            named = safetensors_index.shown(missing)
            source = (f"its {safetensors_index.INDEX_FILE} names" if missing != [safetensors_index.SINGLE_FILE]
                      else f"without a {safetensors_index.INDEX_FILE}, the job loads")
            raise ValueError(f"{what}: {source} {named}, which the directory lacks; copy every file save_pretrained "
                             "wrote (each weight shard and the index)")
        if (why := safetensors_index.claimed_size_problem(directory)) is not None:
            raise ValueError(f"{what}: {why}")
        for path in weights:  # untrusted: a sparse file, or a header pointing past the file's end
            if (why := safetensors_files.file_problem(path)) is not None:
                raise ValueError(f"{what}: {os.path.basename(path)} {why}")
        header_shapes.check_directory(raw, directory, what)  # the headers' shapes, where the arithmetic is exact
    tokenizer = os.path.expanduser(cfg.tokenizer_name)
    flag = "--tokenizer" if cfg.tokenizer else "--model_id"
    if cfg.dataset and "://" not in cfg.tokenizer_name and os.path.isdir(tokenizer) and not any(
            glob.glob(os.path.join(tokenizer, pattern)) for pattern in TOKENIZER_FILES):
        raise ValueError(f"{flag} {cfg.tokenizer_name}: no tokenizer files in {cfg.tokenizer_name} (one of "
                         f"{', '.join(TOKENIZER_FILES)}); give the directory the tokenizer's save_pretrained wrote"
                         + ("" if cfg.tokenizer else ", or --tokenizer"))
    if cfg.dataset and "://" not in cfg.tokenizer_name and os.path.isdir(tokenizer) and (
            why := remote_code.tokenizer_problem(tokenizer)) is not None:  # AutoTokenizer's refusal, before its import
        raise ValueError(f"{flag} {cfg.tokenizer_name}: {why}; give a tokenizer transformers loads with its own "
                         "classes" + ("" if cfg.tokenizer else ", or --tokenizer"))
    if cfg.dataset and "://" not in cfg.tokenizer_name and os.path.isdir(tokenizer) and (
            why := tokenizer_fields.directory_problem(tokenizer)) is not None:  # a field transformers reads typed
        raise ValueError(f"{flag} {cfg.tokenizer_name}: {why}")
    if cfg.dataset and "://" not in cfg.tokenizer_name and (why := tokenizer_size.file_load_problem(tokenizer)):
        raise ValueError(f"{flag} {cfg.tokenizer_name}: {why}; give the directory the tokenizer's save_pretrained "
                         "wrote")
    return raw


def check_targets(cfg: TrainConfig, architecture: dict) -> None:
    """--lora_targets against the model's linear layers (workload.model.adapters.resolve): one line naming the flag
    and the names the model has; with --method qlora, their NF4 shards on --num_workers ranks (the check each
    worker would make after loading)."""
    targets = adapters.resolve(cfg.lora_targets, structure.linear_names(architecture))
    if (why := adapters.rank_problem(structure.linear_shapes(architecture), targets, cfg.lora_rank)) is not None:
        raise ValueError(why)
    if cfg.method == "qlora" and cfg.num_workers and (why := adapters.qlora_shards_problem(
            structure.linear_shapes(architecture), targets, cfg.num_workers)) is not None:
        raise ValueError(f"--method qlora on --num_workers {cfg.num_workers}: {why}; use --method lora or another "
                         "number of workers")


def tokenizer_tokens(cfg: TrainConfig) -> int | None:
    """len(tokenizer) of --tokenizer (or --model_id's own) from its tokenizer.json, without transformers
    (workload.data.tokenizer_size): a shipped model's from the table, a directory's from its file, a Hub id's from
    this machine's Hub cache or one bounded request with no retries. None where it cannot be read that way (s3://, no
    tokenizer.json, no answer): transformers' check after the imports then says."""
    name = cfg.tokenizer_name
    flag = "--tokenizer" if cfg.tokenizer else "--model_id"
    try:
        if name in tokenizer_size.KNOWN_SIZES:
            return tokenizer_size.KNOWN_SIZES[name]
        if model_source.is_path(name):
            return tokenizer_size.size_in_directory(name)
        if "://" in name or model_source.problem(name):
            return None
        return _hub_tokenizer_tokens(name)
    except (tokenizer_size.NotSized, model_source.Unreachable):
        return None  # the tokenizer's own load names what is missing or unreachable
    except ValueError as error:
        raise ValueError(f"{flag} {name}: {error}") from None


def _hub_tokenizer_tokens(name: str) -> int | None:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError

    cached = try_to_load_from_cache(name, tokenizer_size.TOKENIZER_FILE)
    if isinstance(cached, str):
        return tokenizer_size.size_in_directory(os.path.dirname(cached))
    if model_source.offline_variable():
        return None
    try:
        return tokenizer_size.size_on_hub(name, None)
    except HfHubHTTPError:  # gated, not there, a 5xx: the tokenizer's own load says it in its words
        return None


def check_tokenizer_vocabulary(cfg: TrainConfig, vocab_size: int | None, *, defer_unreadable: bool = False) -> None:
    """With --dataset, the tokenizer's ids must fit the model's embedding: one line naming both flags and both
    sizes, before Ray starts (the preview applies the same rule to trainTokenizer and trainModelId). With
    `defer_unreadable`, tokenizer files that cannot be read are left to the checks after the model gate, which say
    first what is wrong with the model directory itself (an encoder, a reward model)."""
    if not cfg.dataset or not vocab_size:
        return
    try:
        tokens = tokenizer_tokens(cfg)
    except ValueError:
        if defer_unreadable:
            return
        raise
    if tokens is None:
        return
    if (why := tokenizer_size.vocabulary_problem(tokens, vocab_size)) is not None:
        model = f"--model_config {cfg.model_config}" if cfg.model_config else f"--model_id {cfg.model_id}"
        tokenizer = f"--tokenizer {cfg.tokenizer}" if cfg.tokenizer else f"--model_id {cfg.model_id}'s tokenizer"
        raise ValueError(f"{tokenizer}: the tokenizer {why.replace('the model', model)}; give a tokenizer of at most "
                         f"{vocab_size:,} tokens, such as the model's own (no --tokenizer)")


def check_template_compiles(cfg: TrainConfig) -> None:
    """A --chat_template FILE.jinja that Jinja cannot compile, refused with its line before any worker renders it."""
    if cfg.chat_template.endswith(".jinja") and cfg.chat_template not in CHAT_TEMPLATES:
        from workload.data import chat

        if (wrong := chat.syntax_problem(chat.template_text(cfg.chat_template))) is not None:
            raise ValueError(f"--chat_template {cfg.chat_template}: not a Jinja template it can compile ({wrong})")


def validate(cfg: TrainConfig) -> None:
    """The checks that need the model's config or the tokenizer, and every record of a --dataset file
    (workload.data.validate) or the first file of a Hub --dataset's split, before any worker loads the model."""
    writable.check_cache_directories()  # the driver's own environment (a pod's is not the submitting machine's)
    check_credentials(cfg)
    push_access.check_push_access(cfg.push_to_hub)  # the upload is after the last step: its token asked now
    check_template_compiles(cfg)
    local_config = check_local_files(cfg)
    known = cfg.architecture  # a dict, without transformers: --model_config's, or a shipped --model_id's
    if known and "max_position_embeddings" in known:
        check_positions(cfg, known["max_position_embeddings"])
    if known and cfg.method != "full":
        check_targets(cfg, known)
    services.check_s3_reachable(cfg)  # before an s3:// --dataset file is read below
    # Refusals only: the local run has said what the file holds, and on a cluster rank 0's data line says it.
    records_check.check_dataset(cfg, say=lambda line: None)
    services.check_hub_model(cfg)
    if known:
        services.check_disk(cfg, known)
    try:
        hub_dataset.check_dataset(cfg)  # a Hub dataset's split: its first file, bounded (workload.data.hub_dataset)
    except hub_dataset.NotReachable as error:
        offline = "OFFLINE is set" in str(error)  # model_source.offline_variable's, named in the error
        raise cli.EnvironmentProblem(f"--dataset {cfg.dataset}: {error}", hint="" if offline else
                                     "HF_HUB_OFFLINE=1 reads the dataset from this machine's cache") from None
    # The tokenizer's files against the shipped, random-weight or model directory's config.json: no transformers yet.
    if known is not None:
        check_tokenizer_vocabulary(cfg, known.get("vocab_size"))
    elif local_config is not None:
        check_tokenizer_vocabulary(cfg, local_config.get("vocab_size"), defer_unreadable=True)

    # A --chat_template that renders no assistant turn, from the template alone (the tokenizer's load is seconds).
    template_check.check_template_renders_turns(cfg)

    # Seconds of imports from here on: torch and transformers. The model's build imports torchao where installed,
    # whose import logs (torch's deprecation notices, extensions for other machines): imported quietly first, so a
    # refusal below is alone on stderr.
    from workload.model.adapters.nf4 import import_torchao_quietly

    import_torchao_quietly()
    from workload.data.batches import check_dataset, check_tokenizer
    from workload.model.build import hf_config

    check_dataset(cfg)  # a remote --dataset file, with the driver's credentials
    config = hf_config(cfg)
    if not cfg.model_config:  # a --model_config is the project's own: its targets and disk were checked above
        # The model gate, as the preview ran it and every worker will: the model on the meta device, whose linear
        # layers --lora_targets must name (PEFT would fail inside Ray otherwise, with NoMatchingPeftModuleError).
        built = compatibility.build(config, f"--model_id {cfg.model_id}")
        if cfg.method != "full" or not known:
            attached = structure.attach(config.to_dict(), built)
            if cfg.method != "full":
                check_targets(cfg, attached)
            if not known:
                services.check_disk(cfg, attached)
    check_positions(cfg, config.max_position_embeddings)
    if not known:  # the model's own config.json, now read: the same rule before the tokenizer loads
        check_tokenizer_vocabulary(cfg, config.vocab_size)
    if cfg.dataset:  # the tokenizer is loaded for a dataset only (random tokens need none)
        try:  # one request first: transformers would retry an unreachable Hub for a minute
            model_source.check_hub_reachable(cfg.tokenizer_name)
        except (model_source.Unreachable, model_source.NeedsToken) as error:
            flag = "--tokenizer" if cfg.tokenizer else "--model_id"
            raise cli.EnvironmentProblem(f"{flag} {cfg.tokenizer_name} (its tokenizer): {error}") from None
    check_tokenizer(cfg, config.vocab_size)
    if not cfg.model_config and os.path.isdir(os.path.expanduser(cfg.model_id)):
        from workload.model import weights

        # The workers' load's refusals (a tensor missing, of another shape, or quantized), from the files' headers.
        weights.check_files(built, os.path.expanduser(cfg.model_id), f"--model_id {cfg.model_id}")
