"""Values a checkpoint gives that reach the user's screen or the exported directory, as untrusted input: whoever can
write the storage prefix writes them.

- A source the record names (train_step.json's tokenizer, an adapter config's base model) is quoted as every refusal
  quotes a URI (workload/config/fields.py shown_uri: never its user information, query or fragment), and one that
  breaks the rule every free-text setting follows (text_problem: credentials in a URI, a token, a control
  character, a megabyte) is neither loaded nor quoted.
- The keys of a config that name code outside transformers and PEFT (config.json's auto_map and custom_pipelines,
  adapter_config.json's auto_mapping) are dropped from what export writes, with one note naming them: the job never
  runs remote code, and built its model from the config's model_type alone; kept, `from_pretrained(OUT,
  trust_remote_code=True)` would import and run the code they name.

Standard library only.
"""
from __future__ import annotations

from typing import Any

from workload.config.fields import URI_MAX_LENGTH, has_credentials, shown_uri, text_problem
from workload.config.numeric_bounds import MAX_STEPS

REMOTE_CODE_KEYS = ("auto_map", "custom_pipelines", "auto_mapping")
# What a note quotes of a library's error about a source: one line, this many characters at most.
ERROR_SHOWN_CHARS = 300


def source_problem(source: str) -> str | None:
    """Why a source the checkpoint names (a Hub id, a directory, an s3:// URI) is not loaded, or None."""
    if not isinstance(source, str):
        return f"is a {type(source).__name__}, not a string"
    return text_problem(source, URI_MAX_LENGTH)


def shown_source(source: Any) -> str:
    """`source` as a message may quote it: a URI as shown_uri gives it (scheme://host/path), a plain Hub id or path as
    repr, and nothing of any other value that breaks text_problem."""
    if isinstance(source, str) and len(source) <= URI_MAX_LENGTH and "://" in source:
        return shown_uri(source)
    if source_problem(source) is not None:
        return f"a value of {len(str(source)):,} characters (not shown)"
    return repr(source)


def shown_error(error: BaseException) -> str:
    """A library's error about a source, as one line a note may quote: nothing of it when it holds credentials."""
    text = " ".join(str(error).split())
    if has_credentials(text) or text_problem(text, len(text)) is not None:
        return f"{type(error).__name__}, its message not shown"
    return text if len(text) <= ERROR_SHOWN_CHARS else text[:ERROR_SHOWN_CHARS] + "..."


def tokenizer_note(tokenizer: str, out: str, error: BaseException | None = None) -> str:
    """The note for a recorded tokenizer that was not saved into `out`: refused by source_problem, or `error`."""
    why = f"it {source_problem(tokenizer)}" if error is None else shown_error(error)
    return (f"the tokenizer the checkpoint records, {shown_source(tokenizer)}, was not saved ({why}); save it into "
            f"{out} with AutoTokenizer.from_pretrained(...).save_pretrained(...)")


def drop_remote_code(config: dict, file_name: str) -> list[str]:
    """Remove REMOTE_CODE_KEYS from `config` (a config's dict, changed in place); the note naming them, if any."""
    dropped = [key for key in REMOTE_CODE_KEYS if key in config]
    for key in dropped:
        del config[key]
    if not dropped:
        return []
    return [f"{', '.join(dropped)} dropped from {file_name}: the checkpoint's config named code outside transformers "
            "(another repository's), which from_pretrained(..., trust_remote_code=True) would run; the model is "
            "transformers' own class for its model_type, as the job built it"]


def record_problem(record: dict) -> str | None:
    """Why the checkpoint's train_step.json holds what the job never writes (workload/checkpoint/sharded.py
    write_record: a step number, the --tokenizer it trained with, the chat template's text), or None. A tokenizer out
    of --tokenizer's own bounds (a megabyte, a token's shape) is a record someone else wrote."""
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        return f"its step is {shown_source(step) if isinstance(step, str) else type(step).__name__}, not a step number"
    # The job saves step k of at most --steps (workload/trainer.py), and --steps is at most MAX_STEPS
    # (workload/config/numeric_bounds.py): a step outside 0..MAX_STEPS is no record it wrote.
    if not 0 <= step <= MAX_STEPS:
        return (f"its step is {'negative' if step < 0 else f'past {MAX_STEPS:,}'}; allowed: 0 to {MAX_STEPS:,} "
                "(--steps' bound)")
    tokenizer = record.get("tokenizer", "")
    if tokenizer and (why := source_problem(tokenizer)) is not None:
        return f"its tokenizer {why}"
    if not isinstance(record.get("chat_template", ""), str):
        return f"its chat_template is a {type(record['chat_template']).__name__}, not a template's text"
    return None
