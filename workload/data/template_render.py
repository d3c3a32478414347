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


# The most characters one `*` or `**` of a template may build (a conversation rendered whole is rarely a MiB):
# jinja2's sandbox bounds range() (MAX_RANGE) but not repetition, so `{{ 'x' * 10**9 }}` builds a gigabyte per record,
# in the job's tokenizer as here. Operators are intercepted through the sandbox's documented hook
# (jinja2/sandbox.py, SandboxedEnvironment.intercepted_binops and call_binop, jinja2 2.6 on); an intercepted
# operator is also never folded at compile time (nodes.BinExpr.as_const raises Impossible for it in a sandbox).
MAX_BUILT_CHARS = 1 << 20


class TooLarge(jinja2.sandbox.SecurityError):
    """A template's `*` or `**` would build more than MAX_BUILT_CHARS characters; nothing that large was built."""


def _built_chars(operator: str, left, right) -> int:
    """About how many characters `left operator right` builds (a sequence repeated, an integer's digits); 0 for
    anything else, which the operator builds in its operands' size."""
    def integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (str, bytes, list, tuple)) and integer(count):
                return len(sequence) * max(count, 0)
        if integer(left) and integer(right):
            return (left.bit_length() + right.bit_length()) * 3 // 10  # about 0.3 decimal digits a bit
    if operator == "**" and integer(left) and integer(right) and right > 0 and abs(left) > 1:
        return left.bit_length() * right * 3 // 10
    return 0


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """transformers' sandbox, with `*` and `**` refused (TooLarge) past MAX_BUILT_CHARS before they build it."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context, operator, left, right):
        if (size := _built_chars(operator, left, right)) > MAX_BUILT_CHARS:
            raise TooLarge(f"its {operator!r} builds a value of about {size:,} characters, past the "
                           f"{MAX_BUILT_CHARS:,} a chat template may build in one operation")
        return super().call_binop(context, operator, left, right)


def compile_template(text: str) -> jinja2.Template:
    """`text` compiled as transformers compiles a chat template; jinja2.TemplateSyntaxError when it cannot be. Its
    sandbox is BoundedSandbox: a template refused here for what it builds is one that builds that much there."""
    environment = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=list(EXTENSIONS))
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
