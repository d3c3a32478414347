"""A local --dataset file's records against the chat template and --seq_len, before Ray starts: what the job would
otherwise find only once its workers tokenize the examples (a refusal there, or every example dropped and nothing
to learn).

- Every record rendered with the template (jinja only, no tokenization: some 70 µs a record), up to RENDER_RECORDS
  records or RENDER_SECONDS: a template that raises on some records (`raise_exception('System role not supported')`
  on the records with a system turn) is refused naming the record's line and the template's message.
- The first SAMPLE_RECORDS records with a turn to train, tokenized and masked as the job does
  (chat.tokenize_conversation), then truncated as it does (packing.fit): when none of them keeps a trained token, the
  template renders no assistant turn ({{ 'hello' }}, a template that drops the messages), or --truncation cuts every
  trained token away (a prompt or system part longer than --seq_len, with --truncation truncate keeping the start).
- Before either, `check_template_renders_turns`: a --chat_template that renders no assistant turn, found with the
  template alone (workload.data.template_render), in a fraction of a second instead of after the imports of torch
  and transformers that loading the tokenizer takes. It refuses only what the tokenizer would: anything the template
  alone cannot render is left to the checks above.
"""
from __future__ import annotations

import os
import re
import time

from workload.config import TRUNCATIONS, TrainConfig, is_file_dataset
from workload.data import chat, shapes, validate
from workload.data.tokenizer_size import MAX_TOKENIZER_BYTES

# Records tokenized before Ray: a template (or a truncation) that trains none of the first few trains none.
SAMPLE_RECORDS = 8
# Records rendered before Ray, whichever bound comes first: a whole file of a few thousand records in a fraction of
# a second; a larger one's first part (the job renders the rest).
RENDER_RECORDS = 2000
RENDER_SECONDS = 1.0


# What a chat template writes as its turns' markers: ChatML's and Llama 3's <|im_start|>, <|eot_id|>, Gemma's
# <start_of_turn>. Each is one token of the family's tokenizer; another tokenizer splits it into pieces of text, and the
# model learns no end-of-turn token to stop at.
MARKER = re.compile(r"<\|[\w.\-]{1,40}\|>|<(?:start|end)_of_turn>")


def _template(cfg: TrainConfig) -> str:
    return (f"--chat_template {cfg.chat_template}" if cfg.chat_template else
            f"the chat template of --tokenizer {cfg.tokenizer_name}")


def rendered_sample(cfg: TrainConfig, tokenizer) -> list[tuple[str, list[dict], list[int]]]:
    """The file's records rendered with the template, within the bounds above, or ValueError naming the first that
    it cannot render; returns the first SAMPLE_RECORDS that have a turn to train, as (where, turns, trained turns)."""
    fields = shapes.Fields.of(cfg)
    shape, sample = None, []
    deadline = time.monotonic() + RENDER_SECONDS
    with validate.open_binary(cfg.dataset) as raw:
        for count, (where, record) in enumerate(validate.records(cfg.dataset, raw), 1):
            try:
                shape = shape or shapes.detect(record, fields)
                turns, trained = shapes.conversation(record, shape, fields)
            except shapes.RecordError as error:  # the records were checked already: not expected here
                raise ValueError(f"--dataset {cfg.dataset} {where}: {error}") from None
            try:
                chat.render(tokenizer, turns)
            except Exception as error:  # jinja2's TemplateError and whatever a template's raise_exception() raises
                raise _cannot_render(cfg, where, error, chat.missing_token(tokenizer, error)) from None
            if (trained or cfg.train_on_prompt) and len(sample) < SAMPLE_RECORDS:
                sample.append((where, turns, trained))
            if count >= RENDER_RECORDS or time.monotonic() > deadline:
                break
    return sample


def _cannot_render(cfg: TrainConfig, where: str, error: Exception, missing_token: str = "") -> ValueError:
    fix = ("give a template that renders every record, or leave --chat_template out for the tokenizer's own"
           if cfg.chat_template else "name a template that renders it with --chat_template")
    # the template's own message (raise_exception's), bounded: a TypeError's may quote the record; Python's words for
    # a recursion vary with where the limit struck
    said = ("maximum recursion depth exceeded: a macro that calls itself without end" if isinstance(
        error, RecursionError) else str(error)[:200])
    return ValueError(f"{_template(cfg)} cannot render --dataset {cfg.dataset} {where} ({said})"
                      f"{missing_token}; {fix}")


def check_template_trains(cfg: TrainConfig, tokenizer) -> None:
    """A local --dataset file's records rendered (rendered_sample), and the sample tokenized and truncated as the job
    will: refused when none of them keeps a trained token, naming the template, or --seq_len and --truncation."""
    from workload.data import packing  # torch's: after the checks that answer without it

    if not is_file_dataset(cfg.dataset) or "://" in cfg.dataset:
        return  # a Hub or remote dataset: not downloaded for this
    sample = rendered_sample(cfg, tokenizer)
    if sample and (why := marker_problem(tokenizer, sample[0][1])) is not None:
        raise ValueError(f"{_template(cfg)} {why}; give the template and the tokenizer of one model (leave "
                         "--chat_template out for the tokenizer's own, or --tokenizer the template's model's)")
    untruncated = 0  # records whose trained tokens --truncation cuts away
    for where, turns, trained in sample:
        example = chat.tokenize_conversation(tokenizer, turns, trained, cfg.train_on_prompt,
                                             f"--dataset {cfg.dataset} {where}")
        if not packing.trains(example):
            continue
        pieces, _ = packing.fit([example], cfg.seq_len, cfg.truncation)
        if any(packing.trains(piece) for piece in pieces):
            return
        untruncated += 1
    if not sample:
        return
    if untruncated:
        others = " or ".join(name for name in TRUNCATIONS if name != cfg.truncation)
        raise ValueError(f"--seq_len {cfg.seq_len} with --truncation {cfg.truncation}: {untruncated} of the first "
                         f"{len(sample)} records of --dataset {cfg.dataset} checked lose all their trained tokens (the "
                         f"{cfg.seq_len} tokens it keeps of each hold none: a prompt or system part that long) and "
                         "none keeps one, so the job would have nothing to train on; give --truncation "
                         f"{others}, or a larger --seq_len")
    raise _no_assistant_turn(cfg, len(sample))


def _no_assistant_turn(cfg: TrainConfig, checked: int) -> ValueError:
    fix = ("give a template that renders each message (the assistant's turns among them), or leave --chat_template "
           "out for the tokenizer's own" if cfg.chat_template else
           "give --chat_template a template that renders each message (the assistant's turns among them)")
    return ValueError(f"{_template(cfg)} renders no assistant turn of --dataset {cfg.dataset}: none of its first "
                      f"{checked} conversations keeps a token to train on; {fix}")


# jinja2's words for an {% include %}, {% import %} or {% extends %} in an environment without a loader
# (jinja2/environment.py _load_template), as transformers' is: a chat template is one self-contained text.
NO_LOADER = "no loader for this environment specified"


def own_template_text(directory: str) -> str | None:
    """The chat template a local tokenizer directory renders with, as transformers loads it (tokenization_utils_base
    from_pretrained: chat_template.jinja over tokenizer_config.json's `chat_template`, whose list form renders with
    the entry named "default"), or None: none, or not read here (the tokenizer's load names the rest)."""
    import json

    from workload import user_files

    try:
        return user_files.read_bytes(os.path.join(directory, "chat_template.jinja"), chat.MAX_TEMPLATE_BYTES
                                     ).decode("utf-8")
    except (OSError, UnicodeDecodeError, user_files.Refused):
        pass
    try:
        config = json.loads(user_files.read_bytes(os.path.join(directory, "tokenizer_config.json"),
                                                  MAX_TOKENIZER_BYTES))
    except (OSError, ValueError, RecursionError, user_files.Refused):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):
        template = next((entry.get("template") for entry in template
                         if isinstance(entry, dict) and entry.get("name") == "default"), None)
    return template if isinstance(template, str) and template else None


def own_special_tokens(directory: str) -> dict[str, str]:
    """The special tokens a local tokenizer directory's tokenizer_config.json names (template_render.special_tokens);
    empty when it cannot be read here."""
    import json

    from workload import user_files
    from workload.data.template_render import special_tokens

    try:
        config = json.loads(user_files.read_bytes(os.path.join(directory, "tokenizer_config.json"),
                                                  MAX_TOKENIZER_BYTES))
    except (OSError, ValueError, RecursionError, user_files.Refused):
        return {}
    return special_tokens(config) if isinstance(config, dict) else {}


def _first_conversations(cfg: TrainConfig, fields: shapes.Fields) -> list[tuple[str, list[dict]]]:
    """(where, turns) of the first SAMPLE_RECORDS records of the local --dataset file; fewer where one is not a
    conversation (the record checks name it)."""
    found, shape = [], None
    with validate.open_binary(cfg.dataset) as raw:
        for where, record in validate.records(cfg.dataset, raw):
            try:
                shape = shape or shapes.detect(record, fields)
                found.append((where, shapes.conversation(record, shape, fields)[0]))
            except shapes.RecordError:
                return []
            if len(found) >= SAMPLE_RECORDS:
                break
    return found


def refused_by_every(template, conversations: list[tuple[str, list[dict]]]) -> tuple[str, str] | None:
    """(where, the template's words) of the first of `conversations` when the template alone (a TemplateOnly)
    refuses every one of them as the tokenizer's own render would: its raise_exception (jinja2's TemplateError
    itself, as transformers' raise_exception raises it), what the sandbox refuses, a macro recursing without end, a
    range past the sandbox's bound, an include with no loader. None when any renders, or fails otherwise (what the
    template alone cannot tell is left to the job). The words bounded: a template's message may quote the record."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import SecurityError

    first = None
    for where, turns in conversations:
        try:
            chat.render(template, turns)
            return None
        except (SecurityError, RecursionError, OverflowError) as error:
            said = error
        except TemplateError as error:
            if type(error) is not TemplateError:  # a syntax or undefined error: not raise_exception's
                return None
            said = error
        except TypeError as error:
            if str(error) != NO_LOADER:
                return None
            said = error
        except Exception:  # noqa: BLE001  (what the template alone cannot render, the tokenizer's checks name)
            return None
        first = first or (where, "maximum recursion depth exceeded: a macro that calls itself without end"
                          if isinstance(said, RecursionError) else str(said)[:200])
    return first


def check_template_renders_turns(cfg: TrainConfig) -> None:
    """The chat template (--chat_template, else a local tokenizer directory's own) that renders no assistant turn of
    the first SAMPLE_RECORDS conversations of a local --dataset file with one, refused as check_template_trains
    refuses it, from the template alone: the assistant turns' spans (workload.data.chat's, from rendered prefixes)
    are all empty; and one the sandbox refuses (a forbidden attribute, what it builds: template_render.TooLarge)."""
    if (cfg.data_format == "text" or cfg.train_on_prompt
            or not is_file_dataset(cfg.dataset) or "://" in cfg.dataset):
        return
    from jinja2.sandbox import SecurityError

    from workload.data.template_render import TemplateOnly

    directory = os.path.expanduser(cfg.tokenizer_name)
    try:
        text = (chat.template_text(cfg.chat_template) if cfg.chat_template else
                own_template_text(directory) if os.path.isdir(directory) else None)
        if text is None:
            return
        template = TemplateOnly(text, own_special_tokens(directory) if os.path.isdir(directory) else None)
    except Exception:  # noqa: BLE001  (a template that does not compile is the compile check's to name)
        return
    fields = shapes.Fields.of(cfg)
    if os.path.isdir(directory) and (refused := refused_by_every(template, _first_conversations(cfg, fields))):
        # raise_exception on every record checked, with the tokenizer's own special tokens: what the slow path
        # (rendered_sample) would say after the tokenizer's imports, now
        raise _cannot_render(cfg, refused[0], Exception(refused[1]))
    shape, checked = None, 0
    with validate.open_binary(cfg.dataset) as raw:
        for count, (where, record) in enumerate(validate.records(cfg.dataset, raw), 1):
            try:
                shape = shape or shapes.detect(record, fields)
                turns, trained = shapes.conversation(record, shape, fields)
                if not trained:
                    continue
                text = chat.render(template, turns)
                if any(end > start for start, end in (chat.turn_span(template, turns, index, text, where)
                                                      for index in trained)):
                    return  # a turn with text to train: the tokenizer's checks say the rest
            except (SecurityError, RecursionError, OverflowError) as error:
                # The sandbox refused an attribute (transformers renders in the same ImmutableSandboxedEnvironment,
                # so it refuses it too) or a range past its MAX_RANGE (OverflowError), a macro recursed without end,
                # or BoundedSandbox refused what an operation builds: the slow path's words, now.
                raise _cannot_render(cfg, where, error) from None
            except TypeError as error:
                if str(error) != NO_LOADER:
                    return  # what the template alone cannot render, the tokenizer's checks name
                raise _cannot_render(cfg, where, error) from None
            except Exception:  # noqa: BLE001  (what the template alone cannot render, the tokenizer's checks name)
                return
            checked += 1
            if checked >= SAMPLE_RECORDS or count >= RENDER_RECORDS:
                break
    if checked:
        raise _no_assistant_turn(cfg, checked)


def marker_problem(tokenizer, turns: list[dict]) -> str | None:
    """Why the turn markers the template writes around `turns` (a record's, its contents replaced, so that a record
    about tokens is not taken for the template) are not the tokenizer's (after the template's name), or None: the
    first MARKER that the tokenizer does not encode as one token."""
    plain = [{**turn, "content": "hi"} if isinstance(turn.get("content"), str) else turn for turn in turns]
    try:
        text = chat.render(tokenizer, plain)
    except Exception:  # noqa: BLE001  (the records themselves rendered: the job's checks say the rest)
        return None
    for marker in dict.fromkeys(MARKER.findall(text)):
        pieces = tokenizer(marker, add_special_tokens=False)["input_ids"]
        if len(pieces) != 1:
            return (f"writes {marker}, which the tokenizer {tokenizer.name_or_path or ''} splits into {len(pieces)} "
                    "tokens (it is not one of its tokens: another model family's marker)")
    return None
