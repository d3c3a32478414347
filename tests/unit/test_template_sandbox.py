"""A --chat_template refused from the template alone (workload.data.template_render, template_check) for what the
sandbox refuses: an attribute jinja2's sandbox forbids (transformers renders in the same sandbox: its refusal in the
same words, before the imports), and a `*` or `**` that would build more than MAX_BUILT_CHARS (nothing that large is
built: the sandbox's binary-operator hook refuses it first). Templates that repeat a little render as before."""
from __future__ import annotations

import jinja2.sandbox
import pytest

from tests.unit.test_template_alone import _config, _tokenizer_refusal
from workload.data import template_check
from workload.data.template_render import MAX_BUILT_CHARS, TooLarge, compile_template

# Other values than any audit row: a list, a power, an integer product, and a string past the bound.
BUILDS_TOO_MUCH = {
    "a string": "{{ '=' * 3000000 }}",
    "a list": "{% set rows = [0, 1] * 900000 %}{{ rows | length }}",
    "a power": "{{ 9 ** 2000000 }}",
    "a variable's repetition": "{% set n = 40000 %}{{ 'abc' * (n * n) }}",
}
# What chat templates do with `*` and `**`: a rule line, an indent, a small power.
REPEATS_A_LITTLE = {
    "a rule line": ("{{ '-' * 80 }}", "-" * 80),
    "an indent": ("{% set depth = 3 %}{{ '  ' * depth }}x", "      x"),
    "a small power": ("{{ 2 ** 20 }}", str(2 ** 20)),
    "at the bound": ("{{ 'y' * %d }}" % MAX_BUILT_CHARS, "y" * MAX_BUILT_CHARS),
}


@pytest.mark.parametrize("name", sorted(BUILDS_TOO_MUCH))
def test_what_builds_past_the_bound_is_refused_unbuilt(name):
    template = compile_template(BUILDS_TOO_MUCH[name])  # not folded into a constant at compile time either
    with pytest.raises(TooLarge, match="a chat template may build in one operation"):
        template.render(messages=[])


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
