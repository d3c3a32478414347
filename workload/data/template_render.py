"""A chat template rendered as transformers renders it, without importing transformers (or torch): for the checks
that answer before the imports, in a fraction of a second.

transformers compiles a template (utils/chat_template_utils.py, `_cached_compile_jinja_template`, in 4.4x to 5.x) in a
jinja2 ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loop-controls extension and its own
`{% generation %}` tag, a `tojson` filter that does not escape HTML, and the globals `raise_exception` and
`strftime_now`; it renders with `messages`, `tools`, `documents`, `add_generation_prompt` and the tokenizer's special
tokens, the older reasoning names copied to `reasoning_content` (`_alias_reasoning_fields`). `TemplateOnly` does the
same, its `apply_chat_template` being the one call workload.data.chat makes of a tokenizer to render.

The special tokens are the tokenizer's, which only the tokenizer knows: here each is a placeholder of its own name
(`<eos_token>`), so text a template writes with one is never taken for no text. A check built on this renderer may
only conclude what holds whatever the tokens are (a template that renders no assistant turn renders none with the
real tokens either); anything this renderer cannot render is left to the tokenizer's own.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

# tokenizer_config.json's special tokens, each given to a template under its name (transformers' special_tokens_map).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The names a message's reasoning is given under; a template reads the first (transformers' _REASONING_FIELDS).
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class Generation(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` block: its body, rendered in place."""

    tags = frozenset({"generation"})

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


EXTENSIONS = (jinja2.ext.loopcontrols, Generation)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(text: str) -> jinja2.Template:
    """`text` compiled as transformers compiles a chat template; jinja2.TemplateSyntaxError when it cannot be."""
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                               extensions=list(EXTENSIONS))
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = lambda form: datetime.now().strftime(form)
    return environment.from_string(text)


class TemplateOnly:
    """A chat template standing in for a tokenizer that would render with it (see the module's note)."""

    def __init__(self, text: str):
        self._template = compile_template(text)

    def apply_chat_template(self, conversation: Sequence[dict], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> str:
        assert not tokenize, "a template alone renders text; tokens need the tokenizer"
        messages = [_aliased(dict(message)) for message in conversation]
        tokens = {name: f"<{name}>" for name in SPECIAL_TOKENS}
        return self._template.render(messages=messages, tools=None, documents=None,
                                     add_generation_prompt=add_generation_prompt, **tokens)


def _aliased(message: dict) -> dict:
    given = next((message[name] for name in REASONING_FIELDS if message.get(name) is not None), None)
    if given is not None:
        for name in REASONING_FIELDS:
            message.setdefault(name, given)
    return message
