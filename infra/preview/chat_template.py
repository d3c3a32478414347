"""Whether chat and prompt-completion data can be rendered, at preview: the tokenizer must have a chat template, or
trainChatTemplate must name one.

The job renders every record with `tokenizer.apply_chat_template` (workload/data/chat.py), which transformers refuses
with "Cannot use chat template functions because tokenizer.chat_template is not set" when the tokenizer has none
(tokenization_utils_base.py); the job's driver refuses it before a worker starts, after the GPUs bill. A tokenizer's
template is what AutoTokenizer.from_pretrained loads (transformers tokenization_utils_base.py, utils/hub.py): the
repo's chat_template.jinja, or a *.jinja under additional_chat_templates/, else tokenizer_config.json's
"chat_template"; chat_template.json is a processor's (LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE) and is counted too, so that
nothing the job could load is refused. A tokenizer in workload.data.chat.KNOWN_CHAT_TEMPLATES is decided from that
table; any other Hub id with one bounded read of tokenizer_config.json and, when that has no template, the repo's file
list (one request each, trainSecretEnv's token only), a tokenizer_config.json that is not a JSON object refused as
every reader of it refuses it (tokenizer_size.json_object_problem); a gated repo is refused as every Hub read at preview refuses it
(hub_access.gated_refusal); an s3:// tokenizer or no answer is a warning, and the job checks it.
"""
from __future__ import annotations

import json

from infra.config import StackConfig
from infra.config.schema import warn
from infra.preview import hub_access
from workload.config import CHAT_TEMPLATES
from workload.data import tokenizer_fields, tokenizer_size
from workload.data.chat import KNOWN_CHAT_TEMPLATES
from workload.model import model_source

# The files that give a tokenizer its template besides tokenizer_config.json (transformers utils/hub.py
# CHAT_TEMPLATE_FILE, LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE, CHAT_TEMPLATE_DIR).
TEMPLATE_FILE, LEGACY_TEMPLATE_FILE, TEMPLATE_DIRECTORY = ("chat_template.jinja", "chat_template.json",
                                                           "additional_chat_templates/")
# A tokenizer_config.json is KiB to a few MiB (a long added_tokens_decoder); more than this is left to the job.
MAX_TOKENIZER_CONFIG_BYTES = 16 << 20


def check(cfg: StackConfig) -> None:
    """The refusal naming the tokenizer's key and trainChatTemplate when the tokenizer has no template and
    trainDataFormat needs one; a warning when that cannot be known here."""
    train = cfg.train
    if train.data_format == "text" or train.chat_template:
        return
    tokenizer = train.tokenizer or train.model_id
    key = "trainTokenizer" if train.tokenizer else "trainModelId"
    known = KNOWN_CHAT_TEMPLATES.get(tokenizer)
    if known is None and "://" not in tokenizer and not model_source.is_path(tokenizer):
        known = on_hub(tokenizer, key, train.secret_env.reveal().get(hub_access.HUB_TOKEN_VARIABLE))
    if known is False:
        raise ValueError(
            f"config key '{key}': the tokenizer {tokenizer} has no chat template, so trainDataFormat "
            f"{train.data_format} cannot render its records the way the model will see them; allowed: set "
            f"trainChatTemplate to one of {list(CHAT_TEMPLATES)}, or a tokenizer that has a template")
    if not isinstance(known, bool):
        why = f" ({known})" if known else ""
        warn(f"{key} {tokenizer}: whether its tokenizer has a chat template is not known before it is "
             f"downloaded{why}; the job checks it before any worker starts")


def on_hub(name: str, key: str, token: str | None) -> bool | str:
    """Whether the Hub tokenizer `name` has a chat template (see the module docstring); a str, why it is not known
    here, when the Hub did not say. ValueError naming `key` and trainSecretEnv for a gated repo."""
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError

    try:
        data = model_source.read_file(name, tokenizer_size.TOKENIZER_CONFIG_FILE, token or False,
                                      MAX_TOKENIZER_CONFIG_BYTES)
    except GatedRepoError:
        raise hub_access.gated_refusal(key, f"the tokenizer {name}", token) from None
    except EntryNotFoundError:
        data = b"{}"  # no tokenizer_config.json: no template there
    except (model_source.Unreachable, HfHubHTTPError) as error:  # no answer, or no such repo (said where it is sized)
        return f"its {tokenizer_size.TOKENIZER_CONFIG_FILE} could not be read from the Hub ({type(error).__name__})"
    if len(data) > MAX_TOKENIZER_CONFIG_BYTES:
        return f"its {tokenizer_size.TOKENIZER_CONFIG_FILE} is over {MAX_TOKENIZER_CONFIG_BYTES:,} bytes"
    if (why := tokenizer_size.json_object_problem(data)) is not None:  # AutoTokenizer's json.load would fail
        raise ValueError(f"config key '{key}': {name}'s {tokenizer_size.TOKENIZER_CONFIG_FILE} on the Hub is {why}; "
                         f"{tokenizer_size.JSON_NOT_LOADED}")
    config = json.loads(data)
    if (why := tokenizer_fields.problem(config)) is not None:  # a field AutoTokenizer reads with a type
        raise ValueError(f"config key '{key}': {name}'s {tokenizer_size.TOKENIZER_CONFIG_FILE} on the Hub: its {why}")
    if isinstance(config, dict) and config.get("chat_template"):
        return True
    try:
        files = model_source.hub_files(name, token or False)
    except (model_source.Unreachable, HfHubHTTPError) as error:
        return f"its file list could not be read from the Hub ({type(error).__name__})"
    if files is None:
        return "the Hub's answer listed no files"
    return any(file in (TEMPLATE_FILE, LEGACY_TEMPLATE_FILE)
               or (file.startswith(TEMPLATE_DIRECTORY) and file.endswith(".jinja")) for file in files)
