"""The shapes a record of a dataset comes in, each read as a conversation: its turns, and the indices of the turns
trained on. Records are untrusted input: a record that is not of its file's shape raises RecordError, one line
naming the field (as a path: `messages[2].role`), the bad value and the allowed values; the caller adds the file
and the line.

- text (--data_format text): a string in --text_field.
- messages (chat): OpenAI's and TRL's `{"messages": [{"role": ..., "content": ...}, ...]}`; an assistant turn may
  hold `"tool_calls"` with `"content": null` (OpenAI's tool-call turn), a tool's answer is a `"tool"` turn. Every
  assistant turn is trained.
- ShareGPT (chat): `{"conversations": [{"from": "human", "value": ...}, ...]}`, FastChat's shape that axolotl and
  torchtune read; `from` human/gpt/system/tool becomes role user/assistant/system/tool. Read when the records have
  no --messages_field (default `messages`) but a `conversations` field, or when --messages_field names a list of
  from/value turns.
- prompt-completion: TRL's `{"prompt": ..., "completion": ...}`, each a string (a user turn, an assistant turn) or a
  list of turns; only the completion is trained.
- Alpaca (prompt-completion): Stanford Alpaca's `{"instruction", "input" (optional), "output"}`, read when the
  records have `instruction` and no `prompt` (a record without its `output` is refused as Alpaca's): the user turn is the instruction, then a blank line and
  the input when there is one (how Alpaca's own prompt joins them), the assistant turn the output; rendered with the
  chat template, not Alpaca's "Below is an instruction..." text, as TRL renders any prompt-completion record.

TRL's preference records are refused as such (detect): DPO's pairs (chosen, rejected), whose answer to train on is
named with --completion_field or --messages_field chosen, and KTO's completions labelled true or false, which would
train on those labelled false too.

A file's shape is taken from its first record, and every record must be of that shape. Standard library only (with
workload.config.fields' rule for a quoted value): the local run checks every record with this before anything heavy
loads.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from workload.config.fields import SHOWN_VALUE_CHARS, looks_like_token
from workload.config.uri_credentials import has_credentials

ROLES = ("system", "user", "assistant", "tool")  # workload.data.chat's, here so this module imports nothing
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "tool": "tool"}
SHAREGPT_FIELD = "conversations"
ALPACA_FIELDS = ("instruction", "input", "output")
SHOWN_CHARACTERS = 40  # of a bad value, in a refusal
SHOWN_FIELD_NAMES = 20  # of a record's fields, in a refusal


class RecordError(ValueError):
    """One record not of its file's shape: the field, the value, what is allowed (without the file and line)."""


@dataclass(frozen=True)
class Fields:
    """What the run reads from a record: --data_format and the fields it names, and how to name those settings in a
    refusal (flags locally, stack keys at preview)."""

    data_format: str
    text_field: str = "text"
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    completion_field: str = "completion"
    names: dict = field(default_factory=dict)
    """Setting names by flag name (messages_field -> trainMessagesField); default --messages_field."""

    @classmethod
    def of(cls, settings, names: dict | None = None) -> "Fields":
        """From a TrainConfig (or anything with the same field names)."""
        return cls(settings.data_format, getattr(settings, "text_field", "text"), settings.messages_field,
                   settings.prompt_field, settings.completion_field, names or {})

    def setting(self, name: str) -> str:
        return self.names.get(name, f"--{name}")


@dataclass(frozen=True)
class Shape:
    """A file's shape: its name and the record field it reads for chat records."""

    name: str  # text, messages, sharegpt, prompt-completion, alpaca
    messages_field: str = ""

    def describe(self) -> str:
        return {"text": "text records",
                "messages": f"chat records ({self.messages_field} of role/content turns)",
                "sharegpt": (f"ShareGPT records ({self.messages_field} of from/value turns, read as chat: "
                             "human/gpt/system/tool become user/assistant/system/tool)"),
                "prompt-completion": "prompt-completion records",
                "alpaca": ("Alpaca records (instruction, input, output, read as prompt-completion: the user turn is "
                           "the instruction and its input, the assistant turn the output)")}[self.name]


def show(value: object) -> str:
    """A record's value as every refusal quotes it: its JSON, cut at SHOWN_CHARACTERS, under workload.config.fields'
    rule for a quoted value (fields.quotable): one that holds something shaped like a token, or a URI's credentials,
    within its first SHOWN_VALUE_CHARS (room for a token that the cut would halve) only by its length; a hidden
    character (U+202E, U+2028) escaped."""
    try:
        text = json.dumps(value[:SHOWN_VALUE_CHARS] if isinstance(value, str) else value, ensure_ascii=False,
                          default=str)
    except (RecursionError, ValueError):  # nested deeper than the encoder goes
        return f"a {type(value).__name__} nested too deep to show"
    window = text[:SHOWN_VALUE_CHARS]
    if looks_like_token(window) or has_credentials(window):
        length = len(value) if isinstance(value, str) else len(text)
        return f"a value of {length:,} characters (not shown: it holds something shaped like a token)"
    shown = text[:SHOWN_CHARACTERS]
    if not shown.isprintable():
        shown = shown.encode("ascii", "backslashreplace").decode("ascii")
    return shown if len(text) <= SHOWN_CHARACTERS else shown + "..."


def _fields_of(record: dict) -> str:
    return shown_names(record)


def shown_names(names) -> str:
    """Field or column names (a record's, a dataset's) as a refusal lists them: each as show() would quote it, the
    first SHOWN_FIELD_NAMES."""
    names = sorted(map(str, names))
    shown = [name if show(name) == json.dumps(name, ensure_ascii=False) else show(name)
             for name in names[:SHOWN_FIELD_NAMES]]
    more = f" and {len(names) - SHOWN_FIELD_NAMES:,} more" if len(names) > SHOWN_FIELD_NAMES else ""
    return ", ".join(shown) + more or "none"


def _format_of(record: dict, fields: Fields) -> str:
    """When a record missing its format's field has another format's fields (chat turns read as text, the sample's
    prompt-completion file read as chat): "; its fields are a chat record's: give --data_format chat"."""
    if isinstance(record.get("messages", record.get(SHAREGPT_FIELD)), list):
        other = "chat"
    elif ("prompt" in record and "completion" in record) or ("instruction" in record and "output" in record):
        other = "prompt-completion"
    elif isinstance(record.get("text"), str):
        other = "text"
    else:
        return ""
    if other == fields.data_format:
        return ""
    return f"; its fields are a {other} record's: give {fields.setting('data_format')} {other}"


def _preference(record: dict, fields: Fields) -> str | None:
    """Why a record of TRL's preference shapes is refused, or None: a pair (prompt, chosen, rejected: DPOTrainer's)
    has no field this job reads unless one is named chosen, and an unpaired one (prompt, completion, label: KTO's)
    would be read as prompt-completion, training on the completions labelled undesirable too."""
    if "chosen" in record and "rejected" in record and "chosen" not in (
            fields.text_field, fields.messages_field, fields.completion_field):
        whole = isinstance(record["chosen"], list) and "prompt" not in record  # conversations, the prompt in them
        fix = (f"{fields.setting('data_format')} chat {fields.setting('messages_field')} chosen" if whole else
               f"{fields.setting('data_format')} prompt-completion {fields.setting('completion_field')} chosen")
        return ("the record is a preference pair (chosen, rejected: TRL's DPOTrainer's), and this job fine-tunes on "
                f"one answer; give {fix} to train on the chosen ones")
    if (fields.data_format == "prompt-completion" and isinstance(record.get("label"), bool)
            and fields.completion_field in record):
        return (f"the record is an unpaired preference ({fields.completion_field} with a true or false label: TRL's "
                "KTOTrainer's), and this job trains on every completion, those labelled false too; keep the records "
                "labelled true")
    return None


def detect(record: object, fields: Fields) -> Shape:
    """The shape of a file whose first record is `record`."""
    if not isinstance(record, dict):
        raise RecordError(f"the record is {show(record)}, not a JSON object; allowed: one object a record")
    if (preference := _preference(record, fields)) is not None:
        raise RecordError(preference)
    if fields.data_format == "text":
        return Shape("text")
    if fields.data_format == "chat":
        name = fields.messages_field
        if name not in record and name == "messages" and SHAREGPT_FIELD in record:
            name = SHAREGPT_FIELD
        if name not in record:
            raise RecordError(f"no field {json.dumps(name)} (the record's fields: {_fields_of(record)}); allowed: the "
                              f"field of its turns named with {fields.setting('messages_field')}, or ShareGPT's "
                              f"{SHAREGPT_FIELD}{_format_of(record, fields)}")
        turns = record[name]
        first = turns[0] if isinstance(turns, list) and turns else None
        sharegpt = isinstance(first, dict) and "from" in first and "role" not in first
        return Shape("sharegpt" if sharegpt else "messages", name)
    # A shape is recognised by the field only it has (Alpaca's instruction, as ShareGPT's conversations above): a
    # record of it that lacks another of its fields is refused in its shape's words ('no field "output"'), not as a
    # prompt-completion record without "prompt".
    if fields.prompt_field not in record and fields.prompt_field in ("prompt", "instruction") and "instruction" in record:
        return Shape("alpaca")
    if fields.prompt_field == "instruction" and "instruction" in record and "input" in record:
        return Shape("alpaca")  # --prompt_field instruction on an Alpaca file: its input is part of the prompt
    return Shape("prompt-completion")


def text(record: object, shape: Shape, fields: Fields) -> str:
    value = _field(record, fields.text_field, fields.setting("text_field"), fields)
    if not isinstance(value, str):
        raise RecordError(f"{fields.text_field} is {show(value)}; allowed: a string")
    return value


def conversation(record: object, shape: Shape, fields: Fields) -> tuple[list[dict], list[int]]:
    """(turns, indices of the turns trained on) of a record of `shape`; no turn to train on is no error (the example
    is dropped and counted later), a malformed record is."""
    if shape.name in ("messages", "sharegpt"):
        name = shape.messages_field
        turns = _turns(_field(record, name, fields.setting("messages_field")), name, shape.name == "sharegpt")
        return turns, [index for index, turn in enumerate(turns) if turn["role"] == "assistant"]
    if shape.name == "alpaca":
        return _alpaca(record)
    prompt = _field(record, fields.prompt_field, fields.setting("prompt_field"), fields)
    completion = _field(record, fields.completion_field, fields.setting("completion_field"))
    for name, value in ((fields.prompt_field, prompt), (fields.completion_field, completion)):
        if _encoded_turns(value):  # a string, so it would train as a user's or assistant's literal JSON text
            raise RecordError(f"{name} is {show(value)}, the JSON text of a list of turns; allowed: a string, or the "
                              "list itself (store it as json.loads gives it)")
    prompt_turns = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                    else _turns(prompt, fields.prompt_field, False, or_string=True))
    completion_turns = ([{"role": "assistant", "content": completion}] if isinstance(completion, str)
                        else _turns(completion, fields.completion_field, False, or_string=True))
    for index, turn in enumerate(completion_turns):
        if turn["role"] != "assistant":
            raise RecordError(f"{fields.completion_field}[{index}].role is {show(turn['role'])}; allowed: assistant "
                              "(a completion is the assistant's)")
    start = len(prompt_turns)
    return prompt_turns + completion_turns, list(range(start, start + len(completion_turns)))


def _encoded_turns(value: object) -> bool:
    """A string that is json.dumps of a list of turns (how a CSV cell or a DataFrame column stores one)."""
    if not isinstance(value, str) or not value.lstrip().startswith("[") or '"role"' not in value:
        return False
    try:
        decoded = json.loads(value)
    except ValueError:
        return False
    return isinstance(decoded, list) and bool(decoded) and all(isinstance(turn, dict) and "role" in turn
                                                               for turn in decoded)


def _field(record: object, name: str, setting: str, fields: Fields | None = None) -> object:
    if not isinstance(record, dict):
        raise RecordError(f"the record is {show(record)}, not a JSON object; allowed: one object a record")
    if name not in record:
        raise RecordError(f"no field {json.dumps(name)} (the record's fields: {_fields_of(record)}); allowed: a record with "
                          f"{json.dumps(name)} ({setting}){_format_of(record, fields) if fields else ''}")
    return record[name]


def _alpaca(record: dict) -> tuple[list[dict], list[int]]:
    values = {}
    for name in ALPACA_FIELDS:
        value = record.get(name, "" if name == "input" else None)
        if value is None and name == "input":
            value = ""
        if not isinstance(value, str):
            missing = name not in record
            raise RecordError(f"no field {json.dumps(name)} (the record's fields: {_fields_of(record)}); an Alpaca "
                              "record holds instruction, input (optional) and output" if missing else
                              f"{name} is {show(value)}; allowed: a string")
        values[name] = value
    prompt = values["instruction"] + (f"\n\n{values['input']}" if values["input"] else "")
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": values["output"]}], [1]


def _turns(value: object, name: str, sharegpt: bool, or_string: bool = False) -> list[dict]:
    """A non-empty list of turns, as {role, content} (other keys, such as tool_calls or a turn's name, kept for the
    template). `or_string`: a string was taken too (a prompt or completion), and the refusal says so. A string of
    JSON turns (a list written with json.dumps, as a CSV or a DataFrame column holds it) is named as text."""
    shape = ('{"from": one of ' + ", ".join(SHAREGPT_ROLES) + ', "value": a string}' if sharegpt else
             '{"role": one of ' + ", ".join(ROLES) + ', "content": a string}')
    if not isinstance(value, list) or not value:
        encoded = isinstance(value, str) and value.lstrip().startswith("[")  # a chat field's JSON text
        raise RecordError(f"{name} is {show(value)}; allowed: {'a string, or ' if or_string else ''}a non-empty list "
                          f"of turns {shape}" + (" (this is the JSON text of a list: store the list itself, as "
                                                 "json.loads gives it)" if encoded else ""))
    return [_sharegpt_turn(turn, f"{name}[{index}]", shape) if sharegpt else _turn(turn, f"{name}[{index}]", shape)
            for index, turn in enumerate(value)]


def _turn(turn: object, path: str, shape: str) -> dict:
    if not isinstance(turn, dict):
        raise RecordError(f"{path} is {show(turn)}; allowed: a turn {shape}")
    role = turn.get("role")
    if role not in ROLES:
        raise RecordError(f"{path}.role is {show(role)}; allowed: {', '.join(ROLES)}"
                          + (f" (ShareGPT's {role} is {SHAREGPT_ROLES[role]})" if role in SHAREGPT_ROLES else ""))
    _check_turn_switch(turn, role, path)
    content = turn.get("content")
    tool_calls = turn.get("tool_calls")
    if tool_calls is not None:
        if role != "assistant" or not isinstance(tool_calls, list) or not tool_calls or not all(
                isinstance(call_name(call), str) for call in tool_calls):
            raise RecordError(f"{path}.tool_calls is {show(tool_calls)}; allowed: on an assistant turn, a non-empty "
                              'list of {"function": {"name": a string, "arguments": ...}}')
        if content is None:
            return dict(turn)  # OpenAI's tool-call turn: the calls are its content
    if not isinstance(content, str):
        raise RecordError(f"{path}.content is {show(content)}; allowed: a string"
                          + (" (or null with tool_calls)" if role == "assistant" else ""))
    return dict(turn)


# A turn's own loss switch, as axolotl's chat_template datasets and FastChat-style ShareGPT files mark a turn to leave
# untrained (axolotl: message_field_training `training`, or a turn's `weight` of 0). Not read here: each assistant turn
# is trained, so a turn marked off would be trained silently.
TURN_SWITCHES = ("weight", "training", "train")


def _check_turn_switch(turn: dict, role: str, path: str) -> None:
    for key in TURN_SWITCHES:
        if key in turn and role == "assistant" and turn[key] in (0, False, "0", "false", "False"):
            raise RecordError(f"{path}.{key} is {show(turn[key])}: a turn's own loss switch (axolotl's) is not read "
                              "here, and every assistant turn is trained; remove the turns not to train on, or "
                              "fold them into the prompt")


def call_name(call: object) -> str | None:
    """A tool call's function name: OpenAI's {"function": {"name": ...}}, or {"name": ...} as some datasets write it."""
    if not isinstance(call, dict):
        return None
    inner = call.get("function", call)
    return inner.get("name") if isinstance(inner, dict) else None


def _sharegpt_turn(turn: object, path: str, shape: str) -> dict:
    if not isinstance(turn, dict):
        raise RecordError(f"{path} is {show(turn)}; allowed: a turn {shape}")
    speaker = turn.get("from")
    if speaker not in SHAREGPT_ROLES:
        raise RecordError(f"{path}.from is {show(speaker)}; allowed: {', '.join(SHAREGPT_ROLES)}")
    _check_turn_switch(turn, SHAREGPT_ROLES[speaker], path)
    value = turn.get("value")
    if not isinstance(value, str):
        raise RecordError(f"{path}.value is {show(value)}; allowed: a string")
    return {"role": SHAREGPT_ROLES[speaker], "content": value}
