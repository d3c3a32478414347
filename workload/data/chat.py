"""Conversations rendered with the model's chat template, and which of their tokens the model should learn.

The text is the template's, exactly what `tokenizer.apply_chat_template` gives at inference; its token ids are the
tokenizer's on that whole text (so they equal `apply_chat_template(..., tokenize=True)`), and a token is trained when
it starts inside an assistant turn's span of characters.

The spans come from rendering prefixes, as TRL's prompt-completion path does (render the prompt with the generation
prompt, then prompt + completion, and train on the difference), turn by turn: assistant turn i spans from the end of
`render(turns[:i], add_generation_prompt=True)` to the end of `render(turns[:i + 1])`, less trailing whitespace (the
newline ChatML puts after `<|im_end|>` is never generated: generation stops at the end-of-turn token). A conversation
that opens with the assistant's turn trains only that turn's content and its end-of-turn token: its span starts after
the template's generation prompt (the assistant header), not at the start of the text, where a default system prompt
and BOS stand. An assistant turn's tool_calls are part of its span, and a template that does not render them is
refused rather than training an empty turn. TRL's other way,
`return_assistant_tokens_mask`, needs `{% generation %}` tags that neither Qwen2.5's nor Llama 3's published template
has. A template that does not render a conversation as the concatenation of its turns (one that rewrites earlier
turns once later ones follow) is refused, naming the record, instead of guessing.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence

from workload import user_files
from workload.config import CHAT_TEMPLATES
from workload.data.shapes import ROLES, call_name, show  # noqa: F401  (ROLES: the roles a turn may have, the README's)

TEMPLATES_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
# Published chat templates are a few KiB (those with tool calls some 20 KiB); a MiB bounds what is read and compiled.
MAX_TEMPLATE_BYTES = 1 << 20
IGNORE_INDEX = -100  # the label of a token that carries no loss: torch's cross_entropy default, and Hugging Face's
# Hub tokenizers whose tokenizer_config.json is known here, and whether it has a chat_template: the Pulumi preview
# refuses a chat format with one that has none (and no trainChatTemplate) before any GPU bills; any other Hub tokenizer
# it asks the Hub about (infra/preview/chat_template.py), and the job's driver checks every one again. Sources:
# Qwen2.5-0.5B-Instruct's template as huggingface/swift-jinja's tests copy it, Meta-Llama-3-8B-Instruct's as
# llama.cpp's do (templates/README.md); GPT-2's tokenizer_config.json is {"model_max_length": 1024}, and transformers
# has had no class-default templates since 4.43.
KNOWN_CHAT_TEMPLATES = {
    "Qwen/Qwen2.5-0.5B-Instruct": True,
    "meta-llama/Meta-Llama-3-8B-Instruct": True,
    "gpt2": False,
    "openai-community/gpt2": False,
}


@dataclass(frozen=True)
class Example:
    """One tokenized example: its token ids, and for each the label it is trained towards (itself, or IGNORE_INDEX)."""

    input_ids: list[int]
    labels: list[int]


def template_text(name: str) -> str:
    """--chat_template's text: a shipped template by name, or a .jinja file's contents, read as workload/user_files.py
    reads a file the user names (a regular file within MAX_TEMPLATE_BYTES: a FIFO or a sparse 1 GiB file is refused
    unread); ValueError naming the flag otherwise."""
    path = os.path.join(TEMPLATES_DIRECTORY, f"{name}.jinja") if name in CHAT_TEMPLATES else os.path.expanduser(name)
    try:
        text = user_files.read_bytes(path, MAX_TEMPLATE_BYTES).decode("utf-8")
    except user_files.Refused as error:
        raise ValueError(f"--chat_template {name} {error.why}; a chat template is a few KiB of text") from None
    except UnicodeDecodeError as error:  # transformers reads a template as UTF-8 text: a UTF-16 file (with its BOM
        # 0xff 0xfe, as Windows editors save "Unicode") or a Latin-1 one is no template it can read
        raise ValueError(f"--chat_template {name} is not UTF-8 text (byte 0x{error.object[error.start]:02x} at "
                         f"offset {error.start}); save it as UTF-8") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as a file opened in text mode reads it


def syntax_problem(text: str) -> str | None:
    """Why jinja2 cannot compile a chat template's text ("line 3: unexpected '}'"), or None: the check before Ray,
    which transformers would otherwise make only when the first example is rendered. Its tags as transformers
    compiles them: loop controls, and {% generation %} blocks."""
    import jinja2

    from workload.data.template_render import EXTENSIONS

    environment = jinja2.Environment(extensions=list(EXTENSIONS))
    try:
        environment.parse(text)
    except jinja2.TemplateSyntaxError as error:
        return f"line {error.lineno}: {error.message}"
    return None


def apply_template(tokenizer, chat_template: str, tokenizer_name: str) -> None:
    """Give `tokenizer` --chat_template when named, else require its own: a chat dataset cannot be rendered without."""
    if chat_template:
        tokenizer.chat_template = template_text(chat_template)
    elif not tokenizer.chat_template:
        raise ValueError(f"the tokenizer {tokenizer_name!r} has no chat template, so conversations cannot be rendered "
                         f"the way the model will see them; name one with --chat_template (one of "
                         f"{', '.join(CHAT_TEMPLATES)}, or a .jinja file)")
    elif isinstance(tokenizer.chat_template, dict) and "default" not in tokenizer.chat_template:
        # Named templates (tokenizer_config.json's list of {name, template}): transformers renders with the one
        # named "default" and refuses, in a paragraph, a set without it.
        named = ", ".join(sorted(map(str, tokenizer.chat_template)))[:200]
        raise ValueError(f"the tokenizer {tokenizer_name!r} has named chat templates ({named}) and none named "
                         "'default', so none says how to render a conversation; save the one to train with as a "
                         "FILE.jinja and give --chat_template FILE.jinja")


def render(tokenizer, turns: Sequence[dict], add_generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(list(turns), tokenize=False, add_generation_prompt=add_generation_prompt)


def tokenize_conversation(tokenizer, turns: Sequence[dict], trained_turns: Sequence[int], train_on_prompt: bool,
                          where: str) -> Example:
    """`turns` rendered and tokenized; the tokens of the turns indexed by `trained_turns` (assistant turns) are
    labelled with themselves, all others IGNORE_INDEX unless `train_on_prompt`. `where` names the record in errors."""
    try:
        text = render(tokenizer, turns)
        spans = [turn_span(tokenizer, turns, index, text, where) for index in trained_turns]
    except ValueError:
        raise
    except Exception as error:  # jinja2's TemplateError and whatever a template's raise_exception() raises
        raise ValueError(f"{where}: the chat template cannot render it ({error}){missing_token(tokenizer, error)}"
                         ) from error
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoding["input_ids"]
    if train_on_prompt:
        return Example(ids, list(ids))
    labels = [token if any(start <= begin < end for start, end in spans) else IGNORE_INDEX
              for token, (begin, _) in zip(ids, encoding["offset_mapping"])]
    return Example(ids, labels)


def missing_token(tokenizer, error: Exception) -> str:
    """Why a template's special token is undefined (Llama 3's uses bos_token): the tokenizer defines none."""
    found = re.fullmatch(r"'(\w+_token)' is undefined", str(error))
    if found is None:
        return ""
    return (f": the template uses the tokenizer's {found[1]}, which {tokenizer.name_or_path or 'the tokenizer'} does "
            "not define; give the model's own tokenizer with --tokenizer, or a --chat_template that does not use it")


def turn_span(tokenizer, turns: Sequence[dict], index: int, text: str, where: str) -> tuple[int, int]:
    through = render(tokenizer, turns[:index + 1])
    before = (render(tokenizer, turns[:index], add_generation_prompt=True) if index
              else through[:_opening_turn_start(tokenizer, through, where)])
    if not (through.startswith(before) and text.startswith(through)):
        raise ValueError(
            f"{where}: the chat template does not render this conversation turn by turn (turn {index + 1} renders "
            "differently once later turns follow), so its assistant tokens cannot be found exactly; name a template "
            "that does with --chat_template")
    for call in turns[index].get("tool_calls") or ():
        name = call_name(call) or ""
        if name not in through[len(before):]:
            raise ValueError(f"{where}: the chat template does not render turn {index + 1}'s tool_calls (no "
                             f"{show(name)} in it), so the model would learn a turn without its calls; name a template "
                             "that renders them with --chat_template (qwen2.5 does)")
    return len(before), len(through.rstrip())


def _opening_turn_start(tokenizer, through: str, where: str) -> int:
    """Where the assistant's turn starts in a conversation that opens with it: after whatever the template puts first
    (BOS, a default system prompt) and the assistant's header. The header is the template's generation prompt (what
    `add_generation_prompt` adds after a user turn), and the turn starts after its first occurrence: rendering no turn
    at all with the generation prompt, as the other turns' spans do, fails in templates that read messages[0]."""
    probe = [{"role": "user", "content": "x"}]
    header = render(tokenizer, probe, add_generation_prompt=True)[len(render(tokenizer, probe)):]
    found = through.find(header) if header.strip() else -1
    if found < 0:
        raise ValueError(f"{where}: the conversation opens with the assistant's turn, and the chat template's "
                         "assistant header (its generation prompt) is not found before it, so its tokens cannot be "
                         "found exactly; start it with a user or system turn, or name a template with --chat_template")
    return found + len(header)


def end_of_turn_token(tokenizer) -> int | None:
    """The token an assistant turn ends with under the tokenizer's template (<|im_end|>, <|eot_id|>): where generate()
    must stop. None without a template, or when the turn ends in ordinary text."""
    if not tokenizer.chat_template:
        return None
    probe = tokenize_conversation(tokenizer, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                                  [1], False, "probe")
    trained = [token for token in probe.labels if token != IGNORE_INDEX]
    last = trained[-1] if trained else None
    return last if last in tokenizer.all_special_ids else None
