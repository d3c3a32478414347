"""A --chat_template refused from the template alone (workload.data.template_render, template_check) for what the
sandbox refuses: an attribute jinja2's sandbox forbids (transformers renders in the same sandbox: its refusal in the
same words, before the imports), and what a template builds past MAX_BUILT_CHARS (and GROWTH times its
conversation): a `*` or `**`, a size argument, a format's width or a replace refused before it builds; a `+`, a `~`
loop, a filter's or a call's result and the output measured as built. Templates that repeat a little render as
before; a long conversation renders whole. The tokenizer directory's own template is checked as --chat_template is."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jinja2.sandbox
import pytest

from tests.unit.test_sft import DATA
from tests.unit.test_template_alone import _config, _tokenizer_refusal
from workload.data import chat, template_check
from workload.data.template_render import MAX_BUILT_CHARS, TemplateOnly, TooLarge, TooLong, compile_template

# Other values than any audit row: a list, a power, an integer product, and a string past the bound.
BUILDS_TOO_MUCH = {
    "a string": "{{ '=' * 3000000 }}",
    "a list": "{% set rows = [0, 1] * 900000 %}{{ rows | length }}",
    "a power": "{{ 9 ** 2000000 }}",
    "a variable's repetition": "{% set n = 40000 %}{{ 'abc' * (n * n) }}",
    "a '~' loop": "{% set ns = namespace(t='xyz') %}{% for _ in range(25) %}{% set ns.t = ns.t ~ ns.t %}{% endfor %}",
    "a '+' loop": "{% set ns = namespace(t=['k']) %}{% for _ in range(25) %}{% set ns.t = ns.t + ns.t %}{% endfor %}",
    "a width argument": "{{ '-'.ljust(5000000) }}",
    "a width filter": "{{ 'q' | center(3000000) }}",
    "a %-format's width": "{{ '%4000000d' % 7 }}",
    "a str.format width": "{{ '{:^4000000}'.format('z') }}",
    "a replace": "{{ ('ab' * 1000).replace('a', 'c' * 5000) }}",
    "a replace filter loop": ("{% set ns = namespace(t='o') %}{% for _ in range(30) %}{% set ns.t = ns.t | "
                              "replace('o', 'oo') %}{% endfor %}"),
    "the output": "{% for _ in range(90000) %}{{ 'seventeen letters' }}{% endfor %}",
    "lipsum": "{{ lipsum(50000) }}",
    "a macro's arguments": ("{% macro grow(t, n) %}{% if n %}{{ grow(t ~ t, n - 1) }}{% endif %}{% endmacro %}"
                            "{{ grow('pq', 30) }}"),
}
# What chat templates do with `*` and `**`: a rule line, an indent, a small power.
REPEATS_A_LITTLE = {
    "a rule line": ("{{ '-' * 80 }}", "-" * 80),
    "an indent": ("{% set depth = 3 %}{{ '  ' * depth }}x", "      x"),
    "a small power": ("{{ 2 ** 20 }}", str(2 ** 20)),
    "at the bound": ("{{ 'y' * %d }}" % MAX_BUILT_CHARS, "y" * MAX_BUILT_CHARS),
    "a join": ("{{ 'a' ~ 'b' ~ 3 }}", "ab3"),
    "a %-format": ("{{ '%-6s|%3d' % ('ab', 7) }}", "ab    |  7"),
    "a str.format": ("{{ '{:>6}|{:.2f}'.format('ab', 0.5) }}", "    ab|0.50"),
    "a replace": ("{{ 'aXa'.replace('X', '--') | replace('a', 'b') }}", "b--b"),
    "a centre": ("{{ 'ab' | center(6) }}", "  ab  "),
    "a growing namespace": ("{% set ns = namespace(t='') %}{% for i in range(4) %}{% set ns.t = ns.t + 'ab' %}"
                            "{% endfor %}{{ ns.t }}", "abababab"),
}


@pytest.mark.parametrize("name", sorted(BUILDS_TOO_MUCH))
def test_what_builds_past_the_bound_is_refused_unbuilt(name):
    template = compile_template(BUILDS_TOO_MUCH[name])  # not folded into a constant at compile time either
    with pytest.raises(TooLarge, match="a chat template may build in one operation"):
        template.render(messages=[])


def test_a_long_conversation_renders_whole_and_a_template_that_grows_it_is_still_refused():
    """The bound grows with the conversation (GROWTH times its text): a 3 MiB message renders through a shipped
    template's `+` joins; a template that doubles it again and again does not."""
    long = [{"role": "user", "content": "w" * (3 << 20)}, {"role": "assistant", "content": "ok"}]
    rendered = TemplateOnly(chat.template_text("qwen2.5")).apply_chat_template(long)
    assert long[0]["content"] in rendered
    doubling = ("{% set ns = namespace(t=messages[0].content) %}{% for _ in range(6) %}{% set ns.t = ns.t ~ ns.t %}"
                "{% endfor %}{{ ns.t | length }}")
    with pytest.raises(TooLarge, match="its '~' builds a value of about "):
        TemplateOnly(doubling).apply_chat_template(long)


@pytest.mark.parametrize("name", sorted(REPEATS_A_LITTLE))
def test_a_little_repetition_renders_as_the_plain_sandbox_renders_it(name):
    text, expected = REPEATS_A_LITTLE[name]
    plain = jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(text).render(messages=[])
    assert compile_template(text).render(messages=[]) == plain == expected


def test_a_forbidden_attribute_is_refused_before_the_imports_in_the_tokenizers_words(tmp_path):
    cfg = _config(tmp_path, "{{ joiner.__init__.__globals__ }}{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ValueError) as early:
        template_check.check_template_renders_turns(cfg)
    assert str(early.value).startswith(f"--chat_template {cfg.chat_template} cannot render --dataset {cfg.dataset} "
                                       "line 1 (access to attribute '__init__'"), early.value
    assert str(early.value) == _tokenizer_refusal(cfg), "the slow path (transformers' sandbox) says the same"


def test_a_gigabyte_repetition_is_refused_naming_the_template(tmp_path):
    cfg = _config(tmp_path, "{% for m in messages %}{{ m.content * 500000000 }}{% endfor %}")
    with pytest.raises(ValueError) as early:
        template_check.check_template_renders_turns(cfg)
    assert str(early.value).startswith(f"--chat_template {cfg.chat_template} cannot render --dataset {cfg.dataset} "
                                       "line 1 (its '*' builds a value of about "), early.value


def _tokenizer_with(tmp_path, **files) -> str:
    directory = tmp_path / "own-tokenizer"
    shutil.copytree(os.path.join(DATA, "tokenizer"), directory)
    for name, text in files.items():
        (directory / name.replace("_jinja", ".jinja").replace("_json", ".json")).write_text(text)
    return str(directory)


def test_the_tokenizer_directorys_own_template_is_bounded_as_a_chat_template_file_is(tmp_path):
    cfg = _config(tmp_path, "unused")
    cfg = dataclasses.replace(cfg, chat_template="", tokenizer=_tokenizer_with(
        tmp_path, chat_template_jinja="{% for m in messages %}{{ m.content.rjust(2000000) }}{% endfor %}"))
    with pytest.raises(ValueError) as early:
        template_check.check_template_renders_turns(cfg)
    assert str(early.value).startswith(f"the chat template of --tokenizer {cfg.tokenizer_name} cannot render "
                                       f"--dataset {cfg.dataset} line 1 (its call of rjust builds"), early.value
    assert str(early.value).endswith("name a template that renders it with --chat_template"), early.value


def test_the_tokenizer_configs_default_named_template_is_the_one_checked(tmp_path):
    named = [{"name": "tool_use", "template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
             {"name": "default", "template": "{% for m in messages if m.role == 'user' %}{{ m.content }}{% endfor %}"}]
    config = json.loads(open(os.path.join(DATA, "tokenizer", "tokenizer_config.json")).read())
    cfg = dataclasses.replace(_config(tmp_path, "unused"), chat_template="", tokenizer=_tokenizer_with(
        tmp_path, tokenizer_config_json=json.dumps({**config, "chat_template": named})))
    with pytest.raises(ValueError, match="renders no assistant turn .* give --chat_template a template that renders"):
        template_check.check_template_renders_turns(cfg)


# What transformers' sandbox raises for any record, whatever the tokens: refused from the template alone in its words.
RAISES_FOR_EVERY_RECORD = {
    "a macro that calls itself": ("{% macro echo(m) %}{{ echo(m) }}{% endmacro %}{% for m in messages %}{{ echo(m) }}"
                                  "{% endfor %}", "maximum recursion depth exceeded"),
    "a range past the sandbox's": ("{% for i in range(250000) %}{% endfor %}{% for m in messages %}{{ m.content }}"
                                   "{% endfor %}", "Range too big"),
    "an import": ("{% import 'turns.jinja' as turns %}{% for m in messages %}{{ m.content }}{% endfor %}",
                  "no loader for this environment specified"),
}


@pytest.mark.parametrize("name", sorted(RAISES_FOR_EVERY_RECORD))
def test_what_the_sandbox_raises_for_every_record_is_refused_before_the_imports(tmp_path, name):
    text, words = RAISES_FOR_EVERY_RECORD[name]
    cfg = _config(tmp_path, text)
    with pytest.raises(ValueError) as early:
        template_check.check_template_renders_turns(cfg)
    assert str(early.value).startswith(f"--chat_template {cfg.chat_template} cannot render --dataset {cfg.dataset} "
                                       "line 1 ("), early.value
    assert words in str(early.value)
    assert str(early.value) == _tokenizer_refusal(cfg), "the slow path (transformers' sandbox) says the same"


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_a_template_file_that_is_not_utf8_is_refused_naming_the_flag(tmp_path, encoding):
    path = tmp_path / "wide.jinja"
    path.write_bytes("{% for m in messages %}{{ m.content }}¶{% endfor %}".encode(encoding))
    with pytest.raises(ValueError) as refused:
        chat.template_text(str(path))
    assert str(refused.value).startswith(f"--chat_template {path} is not UTF-8 text (byte 0x"), refused.value
    assert str(refused.value).endswith("save it as UTF-8")


# Loops within loops that build nothing: each range() within jinja2's MAX_RANGE, together 10**10 steps or more.
SPINS = {
    "nested ranges": "{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}{{ messages }}",
    "a macro looping per call": ("{% macro spin(n) %}{% for i in range(n) %}{% for j in range(n) %}{% endfor %}"
                                 "{% endfor %}{% endmacro %}{{ spin(50000) }}{{ messages }}"),
    "a loop over a message's characters, nested": ("{% for m in messages %}{% for a in m.content %}"
                                                   "{% for b in m.content %}{% endfor %}{% endfor %}{% endfor %}"),
}


@pytest.mark.parametrize("name", sorted(SPINS))
def test_a_template_that_would_not_finish_is_refused_by_its_steps(name):
    # template_render._render_counted: the template's own lines, counted, bounded relative to the conversation.
    conversation = [{"role": "user", "content": "x" * 20000}]
    with pytest.raises(TooLong, match="steps of its own in one render"):
        TemplateOnly(SPINS[name]).apply_chat_template(conversation)


def test_a_shipped_template_renders_a_long_conversation_within_its_steps():
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(5000)]
    rendered = TemplateOnly(chat.template_text("qwen2.5")).apply_chat_template(turns)
    assert "turn 4999" in rendered


def test_a_spinning_template_file_is_refused_naming_the_flag_before_the_imports(tmp_path):
    cfg = _config(tmp_path, SPINS["nested ranges"])
    with pytest.raises(ValueError) as early:
        template_check.check_template_renders_turns(cfg)
    assert str(early.value).startswith(f"--chat_template {cfg.chat_template} cannot render --dataset {cfg.dataset} "
                                       "line 1 (it ran more than "), early.value
