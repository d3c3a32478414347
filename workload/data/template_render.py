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

import functools
import json
import re
import string
import sys
from datetime import datetime
from typing import Sequence

import jinja2
import jinja2.compiler
import jinja2.ext
import jinja2.nodes
import jinja2.runtime
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


# The most characters one operation of a template may build, past GROWTH times its conversation's own text (set per
# render): jinja2's sandbox bounds range() (MAX_RANGE) but nothing a template builds, so `{{ 'x' * 10**9 }}`, a loop
# doubling a namespace's string with `~` or `+`, `'x'.center(10**9)` or `'%999999999s' % ''` builds a gigabyte per
# record, in the job's tokenizer as here. A long conversation is rendered whole whatever its length; a template
# that builds more than a few times its conversation is one that grows without end. What can build many times its
# operands (repetition, powers, a size argument, a format's width, replace) is refused before it builds; every other
# operator, call, filter, `~` and the rendered output are measured as built. Through the sandbox's documented hooks
# (jinja2/sandbox.py: intercepted_binops and call_binop, jinja2 2.6 on; `call`, every call a sandboxed template makes),
# the environment's `concat` (every template, macro and block body's join), its filters, and the code generator's `~`;
# an intercepted operator is never folded at compile time (nodes.BinExpr.as_const raises Impossible in a sandbox).
MAX_BUILT_CHARS = 1 << 20
GROWTH = 4


class TooLarge(jinja2.sandbox.SecurityError):
    """A template's operation would build more than its bound; nothing much past it was built."""


# The most lines of a template's own compiled code one render may run, past STEPS_PER_MESSAGE times its conversation's
# turns: jinja2's sandbox bounds each range() (MAX_RANGE, 100,000) but not loops inside loops, so two nested
# `range(100000)` run 10**10 iterations building nothing (no size bound sees them) and the render never returns, in
# the job's tokenizer as here. A template's work grows with its conversation: some tens of lines a turn for the
# templates models ship; a million lines is a template looping without end. Counted with a trace function on the
# template's frames alone (its compiled code's file is "<template>"; jinja2/environment.py from_string), in this
# thread, the previous tracer restored after.
MAX_TEMPLATE_STEPS = 1_000_000
STEPS_PER_MESSAGE = 10_000


class TooLong(jinja2.sandbox.SecurityError):
    """A template ran more steps than its bound in one render (loops within loops): it would not finish."""


def _render_counted(template: jinja2.Template, budget: int, **context) -> str:
    """template.render(**context), refused (TooLong) once the template's own code has run `budget` lines."""
    steps = 0

    def local_trace(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
            if steps > budget:
                raise TooLong(f"it ran more than {budget:,} steps of its own in one render (loops within loops), "
                              "and would not finish")
        return local_trace

    def global_trace(frame, event, arg):
        return local_trace if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    sys.settrace(global_trace)
    try:
        return template.render(**context)
    finally:
        sys.settrace(previous)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _built_chars(operator: str, left, right) -> int:
    """About how many characters `left operator right` builds, before it is built: a sequence repeated, an integer's
    digits, a %-format's widths; 0 for anything else (measured once built)."""
    if operator == "*":
        for sequence, count in ((left, right), (right, left)):
            if isinstance(sequence, (str, bytes, list, tuple)) and _integer(count):
                return len(sequence) * max(count, 0)
        if _integer(left) and _integer(right):
            return (left.bit_length() + right.bit_length()) * 3 // 10  # about 0.3 decimal digits a bit
    if operator == "**" and _integer(left) and _integer(right) and right > 0 and abs(left) > 1:
        return left.bit_length() * right * 3 // 10
    if operator == "%" and isinstance(left, str):
        return _widest(PERCENT_WIDTHS.findall(left))
    return 0


# A %-format's width and precision (printf-style, Python's `%` on a string and jinja2's `format` filter), and the
# numbers in a str.format field's spec ({:>80}, {:.3f}).
PERCENT_WIDTHS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d*))?")
SPEC_NUMBERS = re.compile(r"\d+")


def _widest(found) -> int:
    numbers = [int(text) for item in found for text in ((item,) if isinstance(item, str) else item) if text]
    return max(numbers, default=0)


def _asked_chars(name: str, args: tuple, kwargs: dict) -> int:
    """About how many characters a call or filter asks to build, before it builds: its largest integer argument (a
    width, a count: center, ljust, indent, lipsum), a format string's widths, or what a replace grows its string to."""
    values = [value for value in (*args, *kwargs.values())
              if not isinstance(value, (jinja2.Environment, jinja2.nodes.EvalContext, jinja2.runtime.Context))]
    asked = max((value for value in values if _integer(value)), default=0)
    subject = values[0] if values and isinstance(values[0], str) else None
    if subject is not None and name in ("format", "format_map"):
        try:
            specs = [spec for _, _, spec, _ in string.Formatter().parse(subject) if spec]
        except ValueError:  # not a format string: the call's own error
            specs = []
        asked = max(asked, _widest(SPEC_NUMBERS.findall(" ".join(specs))), _widest(PERCENT_WIDTHS.findall(subject))
                    if name == "format" else 0)
    if name == "generate_lorem_ipsum":  # jinja2's lipsum(n=5, html=True, min=20, max=100): n paragraphs of words
        words = kwargs.get("max", args[3] if len(args) > 3 else 100)
        count = kwargs.get("n", args[0] if args else 5)
        asked = max(asked, count * words * 12 if _integer(count) and _integer(words) else 0)
    if subject is not None and name == "replace" and len(values) >= 3 and all(isinstance(v, str) for v in values[1:3]):
        old, new = values[1], values[2]
        asked = max(asked, len(subject) + (subject.count(old) if old else len(subject) + 1) * len(new))
    return asked


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """transformers' sandbox, where no operation builds more than `limit` characters (TooLarge): see MAX_BUILT_CHARS."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    limit = MAX_BUILT_CHARS

    def check(self, what: str, size: int) -> None:
        if size > self.limit:
            raise TooLarge(f"its {what} builds a value of about {size:,} characters, past the {self.limit:,} a chat "
                           "template may build in one operation")

    def built(self, what: str, value):
        self.check(what, _size(value))
        return value

    def call_binop(self, context, operator, left, right):
        self.check(repr(operator), _built_chars(operator, left, right))
        return self.built(repr(operator), super().call_binop(context, operator, left, right))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - the sandbox's own signature
        name = getattr(__obj, "__name__", "")
        # a str method's string; str.format comes wrapped by the sandbox (wrap_str_format, functools.update_wrapper)
        subject = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        what = f"call of {name or 'a function'}"
        __self.check(what, _asked_chars(name, (subject, *args) if isinstance(subject, str) else args, kwargs))
        return __self.built(what, super().call(__context, __obj, *args, **kwargs))

    def joined(self, parts) -> str:
        """`a ~ b`: jinja2's str_join, measured before it joins."""
        parts = [str(part) for part in parts]
        self.check("'~'", sum(map(len, parts)))
        return "".join(parts)

    def concat(self, parts) -> str:
        """A template's, macro's or block's output, joined as it comes and refused once past the bound."""
        out, size = [], 0
        for part in parts:
            size += len(part)
            self.check("output", size)
            out.append(part)
        return "".join(out)


class _BoundedCodeGenerator(jinja2.compiler.CodeGenerator):
    """jinja2's code generator, with `~` joined by the environment's `joined` (jinja2/compiler.py visit_Concat writes
    the runtime's str_join, which no sandbox hook sees)."""

    def visit_Concat(self, node, frame):
        self.write("environment.joined((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


BoundedSandbox.code_generator_class = _BoundedCodeGenerator


def _bounded_filter(environment: BoundedSandbox, name: str, function):
    @functools.wraps(function)  # keeps jinja2's pass_context / pass_eval_context / pass_environment marks
    def bounded(*args, **kwargs):
        environment.check(f"filter {name!r}", _asked_chars(name, args, kwargs))
        return environment.built(f"filter {name!r}", function(*args, **kwargs))
    return bounded


def compile_template(text: str) -> jinja2.Template:
    """`text` compiled as transformers compiles a chat template; jinja2.TemplateSyntaxError when it cannot be. Its
    sandbox is BoundedSandbox: a template refused here for what it builds is one that builds that much there."""
    environment = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=list(EXTENSIONS))
    environment.filters["tojson"] = _tojson
    environment.filters = {name: _bounded_filter(environment, name, function)
                           for name, function in environment.filters.items()}
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = lambda form: datetime.now().strftime(form)
    return environment.from_string(text)


def special_tokens(config: dict) -> dict[str, str]:
    """The special tokens tokenizer_config.json's object `config` names (a string, or a saved AddedToken's content),
    for TemplateOnly: those it lacks stay placeholders."""
    tokens = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            tokens[name] = value
    return tokens


class TemplateOnly:
    """A chat template standing in for a tokenizer that would render with it (see the module's note)."""

    def __init__(self, text: str, tokens: dict[str, str] | None = None):
        self._template = compile_template(text)
        # the tokenizer's special tokens where the caller read them (tokenizer_config.json's), else placeholders
        self._tokens = {**{name: f"<{name}>" for name in SPECIAL_TOKENS}, **(tokens or {})}

    def apply_chat_template(self, conversation: Sequence[dict], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> str:
        assert not tokenize, "a template alone renders text; tokens need the tokenizer"
        messages = [_aliased(dict(message)) for message in conversation]
        tokens = self._tokens
        own_text = sum(len(str(value)) for message in messages for value in message.values())
        self._template.environment.limit = MAX_BUILT_CHARS + GROWTH * own_text
        return _render_counted(self._template, MAX_TEMPLATE_STEPS + STEPS_PER_MESSAGE * len(messages),
                               messages=messages, tools=None, documents=None,
                               add_generation_prompt=add_generation_prompt, **tokens)


def _aliased(message: dict) -> dict:
    given = next((message[name] for name in REASONING_FIELDS if message.get(name) is not None), None)
    if given is not None:
        for name in REASONING_FIELDS:
            message.setdefault(name, given)
    return message
