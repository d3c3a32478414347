"""A Hub dataset's first records rendered with the chat template the job will use, at preview: a template that
refuses every one of them (Gemma's `raise_exception('System role not supported')` on data whose records all open
with a system turn) fails the job's first apply_chat_template on every worker (workload/data/chat.py), after the GPUs
bill.

The records are those dataset_records already read of trainDataset's first file (hub_dataset.HubChecked.head, no
further request); the template is trainChatTemplate's, else the Hub tokenizer's own as AutoTokenizer.from_pretrained
loads it (transformers tokenization_utils_base.py _from_pretrained: chat_template.jinja over tokenizer_config.json's
"chat_template", whose list form renders with the entry named "default"), read with one bounded request each, with
trainSecretEnv's HF_TOKEN only. It is rendered by the template alone (workload.data.template_render.TemplateOnly)
with the special tokens tokenizer_config.json names, and refused only when every record checked is refused in the
template's own words (workload.data.template_check.refused_by_every): what the template alone cannot say, a
tokenizer repo with other templates (additional_chat_templates/, a processor's chat_template.json), an s3:// or
local tokenizer, or a Hub that does not answer are left to the job, silently (the records were checked already).
"""
from __future__ import annotations

import io
import json

from infra.config import StackConfig
from infra.preview import hub_access
from workload.data import shapes, validate
from workload.model import model_source

# The records rendered: a template that refuses the first few of a file whose records share a shape refuses the
# job's first batch on every worker.
RENDER_RECORDS = 8
TEMPLATE_FILE, TOKENIZER_CONFIG_FILE = "chat_template.jinja", "tokenizer_config.json"
MAX_FILE_BYTES = 16 << 20  # as chat_template.MAX_TOKENIZER_CONFIG_BYTES


def check(cfg: StackConfig, dataset_file: str, head: bytes, fields: shapes.Fields) -> None:
    """ValueError naming trainDataset and the template's key when the template refuses every record checked."""
    train = cfg.train
    if train.data_format == "text" or not head:
        return
    found = template_of(cfg)
    if found is None:
        return
    text, tokens, named = found
    conversations = []
    try:
        shape = None
        for where, record in validate.records(dataset_file, io.BytesIO(head), complete=False):
            shape = shape or shapes.detect(record, fields)
            turns, _ = shapes.conversation(record, shape, fields)
            conversations.append((where, turns))
            if len(conversations) >= RENDER_RECORDS:
                break
    except Exception:  # noqa: BLE001  (the records were checked by validate: not expected here)
        return
    from workload.data.template_check import refused_by_every
    from workload.data.template_render import TemplateOnly

    try:
        template = TemplateOnly(text, tokens)
    except Exception:  # noqa: BLE001  (one that does not compile is the job's compile check's to name)
        return
    refused = refused_by_every(template, conversations) if conversations else None
    if refused is not None:
        where, said = refused
        fix = ("set trainChatTemplate to one that renders them" if not train.chat_template else
               "give trainChatTemplate a template that renders them")
        raise ValueError(f"config key 'trainDataset': {dataset_file} {where}: {named} cannot render it ({said}), nor "
                         f"any of the first {len(conversations)} records; {fix}, or a dataset whose records it renders")


def template_of(cfg: StackConfig) -> tuple[str, dict[str, str], str] | None:
    """(the template's text, the special tokens known, the words naming it), or None when not known here."""
    from workload.data import chat

    train = cfg.train
    if train.chat_template:
        try:
            return chat.template_text(train.chat_template), {}, f"trainChatTemplate {train.chat_template}"
        except (ValueError, OSError):
            return None
    name = train.tokenizer or train.model_id
    key = "trainTokenizer" if train.tokenizer else "trainModelId"
    if not name or "://" in name or model_source.is_path(name):
        return None
    token = train.secret_env.reveal().get(hub_access.HUB_TOKEN_VARIABLE) or False
    try:
        files = model_source.hub_files(name, token)
        if files is None or any(file == "chat_template.json" or file.startswith("additional_chat_templates/")
                                for file in files):
            return None
        config = (json.loads(model_source.read_file(name, TOKENIZER_CONFIG_FILE, token, MAX_FILE_BYTES))
                  if TOKENIZER_CONFIG_FILE in files else {})
        text = (model_source.read_file(name, TEMPLATE_FILE, token, MAX_FILE_BYTES).decode("utf-8")
                if TEMPLATE_FILE in files else None)
    except Exception:  # noqa: BLE001  (no answer, or a file the other checks name: left to the job)
        return None
    if not isinstance(config, dict):
        return None
    if text is None:
        text = config.get("chat_template")
        if isinstance(text, list):
            text = next((entry.get("template") for entry in text
                         if isinstance(entry, dict) and entry.get("name") == "default"), None)
    if not isinstance(text, str) or not text:
        return None
    from workload.data.template_render import special_tokens

    return text, special_tokens(config), f"the chat template of {key} {name}"
