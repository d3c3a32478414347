"""A value of one of our choices as another tool or habit writes it (workload/config/aliases.py VALUE_ALIASES,
workload/config/fields.py Declaration.canonical): any letter case and '_' for '-' is the choice, and FSDP1's sharding
strategies are ours; anything else (axolotl's dataset types among them) is refused, naming the flag and the choices."""
from __future__ import annotations

import pytest

from workload.config import TrainConfig
from workload.run import local


def test_their_spellings_of_our_choices_are_ours():
    cfg = local.parse_command(["--lr_schedule", "Cosine", "--method", "LoRA", "--sharding", "FULL_SHARD",
                               "--reduce_dtype", "BF16", "--truncation", "Keep_End", "--data_format", "Chat",
                               "--run_name", "x"])[0]
    assert (cfg.lr_schedule, cfg.method, cfg.sharding, cfg.reduce_dtype, cfg.truncation) == (
        "cosine", "lora", "full", "bf16", "keep_end"), cfg


def test_a_choice_in_capitals_in_a_config_file_and_with_underscores_is_ours(tmp_path):
    (tmp_path / "run.yaml").write_text("method: LoRA\nlr_schedule: LINEAR\n")
    cfg = local.parse_command(["--config", str(tmp_path / "run.yaml"), "--data_format", "prompt_completion",
                               "--run_name", "x"])[0]
    assert (cfg.method, cfg.lr_schedule, cfg.data_format) == ("lora", "linear", "prompt-completion"), cfg
    assert cfg.dataset.endswith("data/instructions.jsonl"), "the format's own sample data, as for prompt-completion"


@pytest.mark.parametrize("flag, value", [("sharding", "no_shard"), ("method", "dora"), ("lr_schedule", "cosine-ish"),
                                         ("data_format", "sharegpt")])
def test_a_value_that_is_no_choice_is_refused_naming_the_choices(flag, value):
    with pytest.raises(ValueError, match=rf"--{flag} must be one of .*got '{value}'"):
        TrainConfig(**{flag: value})
