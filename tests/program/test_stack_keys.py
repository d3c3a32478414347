"""One declaration per stack key: every train* key that sets a job flag is declared once, beside its flag
(workload/config/fields.py), and every rule between settings is written once (workload/config/rules.py). These tests
hold Pulumi.yaml, the declarations and both sides' refusals together, each case generated from the declarations and
the rule list themselves, so a new key or rule is covered without a new test."""
from __future__ import annotations

import dataclasses
import re

import pytest

from infra import config
from infra.config import settings as stack_settings_module
from infra.config.train_keys import STACK_ONLY_KEYS
from infra.job import job_config
from tests.support.pulumi_mocks import stack_settings
from workload.config import DECLARED, RULES, STACK_KEYS, TrainConfig, parse_args
from workload.config.fields import PULUMI_TYPES

SCHEMA = config.schema()
TRAIN_KEYS = {key for key in SCHEMA if key.startswith("train")}
STACK_ONLY = set(STACK_ONLY_KEYS)  # the train* keys only the stack has, declared in infra/config/train_keys.py
FLAG_OF = {key: name for name, key in STACK_KEYS.items()}
DECLARATION = {declared.name: declared for declared in DECLARED}


def test_every_train_key_is_declared_once_on_one_side_or_the_other():
    assert len(FLAG_OF) == len(STACK_KEYS), f"two flags claim one stack key: {STACK_KEYS}"
    undeclared = TRAIN_KEYS - set(FLAG_OF) - STACK_ONLY
    assert not undeclared, f"train* keys of Pulumi.yaml with neither a job flag's declaration nor a stack-only one: " \
                           f"{sorted(undeclared)}"
    unknown = (set(FLAG_OF) | STACK_ONLY) - TRAIN_KEYS
    assert not unknown, f"declared stack keys that Pulumi.yaml does not have: {sorted(unknown)}"
    assert not set(FLAG_OF) & STACK_ONLY, f"stack-only keys that also set a flag: {set(FLAG_OF) & STACK_ONLY}"


@pytest.mark.parametrize("key", sorted(FLAG_OF))
def test_a_keys_type_and_default_in_pulumi_yaml_are_its_flags(key):
    declared = DECLARATION[FLAG_OF[key]]
    spec = SCHEMA[key]
    assert spec["type"] == PULUMI_TYPES[declared.type], \
        f"{key}: Pulumi.yaml says {spec['type']}, --{declared.name} is {declared.type}"
    assert declared.from_stack(spec["default"]) == declared.default, \
        f"{key}: Pulumi.yaml's default {spec['default']!r}, --{declared.name}'s {declared.default!r}"


def test_stack_keys_and_flags_map_both_ways():
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    assert set(STACK_KEYS) <= fields and {FLAG_OF[key] for key in FLAG_OF} == set(STACK_KEYS)
    assert job_config.STACK_KEYS is STACK_KEYS, "infra's table is the declarations', not another copy"
    flags = config.parse(stack_settings("dev")).train.flags
    assert set(flags) == set(STACK_KEYS), f"the stack sets exactly the declared flags: {set(flags) ^ set(STACK_KEYS)}"
    assert not hasattr(stack_settings_module, "TrainConfig"), "one TrainConfig: the workload's"


def test_a_stack_value_becomes_its_flag_and_back():
    raw = stack_settings("dev") | {"trainLearningRate": "3e-4", "trainEvalFraction": "0.05", "trainDataset": "org/x",
                                   "trainStoragePath": "s3://my-bucket/ray-train", "trainSteps": 7}
    flags = config.parse(raw).train.flags
    assert flags["learning_rate"] == 3e-4 and flags["eval_fraction"] == 0.05 and flags["steps"] == 7, flags
    for name, value in flags.items():
        declared = DECLARATION[name]
        if declared.type.startswith("float"):
            assert float(declared.to_stack(value)) == value, name
        else:
            assert declared.to_stack(value) == raw[declared.stack_key] or name == "mlflow_tracking_uri", name


def _stack_values(flags: dict) -> dict:
    return {STACK_KEYS[name]: DECLARATION[name].to_stack(value) for name, value in flags.items()}


BOUNDED = [declared for declared in DECLARED if declared.choices or declared.pattern
           or any(bound is not None for bound in (declared.at_least, declared.above, declared.at_most, declared.below))]


def _out_of_bounds(declared):
    if declared.choices is not None:
        return "no-such-choice"
    if declared.pattern is not None:
        return "not a match"
    if declared.at_least is not None:
        return type(declared.default or 0)(declared.at_least - 1)
    if declared.above is not None:
        return type(declared.default or 0)(declared.above)
    return type(declared.default or 0)((declared.at_most or declared.below) + 1)


@pytest.mark.parametrize("declared", BOUNDED, ids=[declared.name for declared in BOUNDED])
def test_a_value_out_of_a_declared_bound_is_refused_on_both_sides(declared):
    value = _out_of_bounds(declared)
    with pytest.raises(ValueError, match=f"^--{declared.name} must be"):
        TrainConfig(**{declared.name: value})
    if declared.stack_key is None:
        return
    with pytest.raises(ValueError) as refused:
        config.parse(stack_settings("dev") | {declared.stack_key: declared.to_stack(value)})
    assert str(refused.value).startswith(f"config key {declared.stack_key!r}: must be"), refused.value
    assert "--" not in str(refused.value), f"the preview names keys, not flags: {refused.value}"


ALIASED = [declared for declared in DECLARED if declared.value_aliases]


@pytest.mark.parametrize("declared", ALIASED, ids=[declared.name for declared in ALIASED])
def test_another_tools_name_for_a_choice_is_taken_as_ours_on_both_sides(declared):
    for theirs, ours in declared.value_aliases.items():
        assert ours in declared.choices and theirs not in declared.choices, declared.name
        assert getattr(TrainConfig(**{declared.name: theirs}), declared.name) == ours
        assert getattr(parse_args([declared.flag, theirs]), declared.name) == ours
        flags = config.parse(stack_settings("dev") | {declared.stack_key: declared.to_stack(theirs)}).train.flags
        assert flags[declared.name] == ours, f"{declared.stack_key} {theirs}: the preview keeps {flags[declared.name]}"
        with pytest.raises(ValueError, match=f"{theirs} is taken as {ours}"):
            TrainConfig(**{declared.name: "no-such-choice"})


def test_trls_keep_start_is_truncate():
    assert ("truncation", "keep_start", "truncate") in [(declared.name, theirs, ours) for declared in ALIASED
                                                        for theirs, ours in declared.value_aliases.items()]


def _named(rule) -> str:
    return "-".join(rule.flags)


@pytest.mark.parametrize("rule", RULES, ids=[_named(rule) for rule in RULES])
def test_a_rule_is_kept_by_the_defaults(rule):
    values = {declared.name: declared.default for declared in DECLARED}
    assert rule.check(values) is None, f"the defaults break {_named(rule)}"
    assert rule.check(values | dict(rule.broken_by)) is not None, f"{_named(rule)}: broken_by does not break it"


@pytest.mark.parametrize("rule", RULES, ids=[_named(rule) for rule in RULES])
def test_the_job_refuses_a_broken_rule_naming_its_flags(rule):
    flags = {name: value for name, value in rule.broken_by.items()}
    with pytest.raises(ValueError) as refused:
        TrainConfig(**flags)
    message = str(refused.value)
    assert message == rule.check({d.name: d.default for d in DECLARED} | flags), message
    assert f"--{rule.flags[0]}" in message, f"the job's refusal names --{rule.flags[0]}: {message}"
    argv = [part for name, value in flags.items() for part in
            ([f"--{name}" if value else f"--no-{name}"] if isinstance(value, bool) else [f"--{name}", str(value)])]
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_args(argv)


@pytest.mark.parametrize("rule", RULES, ids=[_named(rule) for rule in RULES])
def test_the_preview_refuses_a_broken_rule_naming_its_stack_keys(rule):
    if not all(name in STACK_KEYS for name in rule.broken_by):
        job_only = sorted(set(rule.broken_by) - set(STACK_KEYS))
        assert job_only, rule
        pytest.skip(f"job-only flags {job_only}: the stack cannot break this rule")
    with pytest.raises(ValueError) as refused:
        config.parse(stack_settings("dev") | _stack_values(dict(rule.broken_by)))
    message = str(refused.value)
    first = STACK_KEYS[rule.flags[0]]
    assert message.startswith("config key") and first in message, f"the preview's refusal names {first}: {message}"
    assert "--" not in message, f"the preview names keys, not flags: {message}"
    expected = job_config.stack_message(rule.check({d.name: d.default for d in DECLARED} | dict(rule.broken_by)))
    assert message == expected, f"the job's rule, in the stack's words: {message!r} != {expected!r}"
