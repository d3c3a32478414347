"""What the local run does with settings the user never typed, beside those they did: a local default that a short
run, random tokens or a --print_config file would make wrong gives way (warmup, intervals, the sample tokenizer), and
one the user typed is kept and refused if it cannot work (workload/run/local.py parse_command)."""
from __future__ import annotations

import pytest

from workload import cli
from workload.run import local


def test_an_explicit_model_config_over_a_model_id_is_said(capsys):
    """As --help says, a --model_config typed beside a --model_id wins; the local run says so in one line."""
    cfg = local.parse_args(["--model_config", "tiny", "--model_id", "Qwen/Qwen2.5-0.5B", "--run_name", "x"])
    assert cfg.model_config == "tiny"
    err = capsys.readouterr().err.splitlines()
    assert err == [("note: --model_config tiny wins over --model_id Qwen/Qwen2.5-0.5B: a random-weight tiny model is "
                    "trained, not Qwen/Qwen2.5-0.5B")], err


def test_a_short_run_keeps_the_warmup_it_can_hold():
    """`--steps 3` alone runs: the local default's 4 warmup steps, never typed, give way; typed, they are refused."""
    assert local.parse_command(["--steps", "3", "--run_name", "x"])[0].warmup_steps == 0
    assert local.parse_command(["--steps", "40", "--run_name", "x"])[0].warmup_steps == 4
    with pytest.raises(ValueError, match="--warmup_steps 4 must be at most --steps 3"):
        local.parse_command(["--steps", "3", "--warmup_steps", "4", "--run_name", "x"])


def test_a_print_config_file_of_the_defaults_takes_a_short_run(tmp_path, capsys):
    """A --print_config file replays every default (warmup 4, the adapters' settings): `--config run.yaml --steps 2`
    runs as `--steps 2` alone does, and the adapters' defaults in it are not taken as typed."""
    assert local.main(["--print_config", "--run_name", "x"]) == cli.OK
    (tmp_path / "run.yaml").write_text(capsys.readouterr().out)
    cfg = local.parse_command(["--config", str(tmp_path / "run.yaml"), "--steps", "2", "--run_name", "x"])[0]
    assert (cfg.steps, cfg.warmup_steps, cfg.method) == (2, 0, "full"), cfg
    with pytest.raises(ValueError, match="--lora_rank 16 sets the adapters"):
        local.parse_command(["--config", str(tmp_path / "run.yaml"), "--lora_rank", "16", "--run_name", "x"])


def test_a_short_run_drops_the_default_intervals_it_would_outlast():
    """`--steps 8` alone runs: the local defaults' --checkpoint_every 20 and --eval_every 10, never typed, act as 0
    and are 0; typed, an interval longer than the run is refused (workload/config/rules.py)."""
    short = local.parse_command(["--steps", "8", "--run_name", "x"])[0]
    assert (short.checkpoint_every, short.eval_every) == (0, 0), short
    long = local.parse_command(["--steps", "30", "--run_name", "x"])[0]
    assert (long.checkpoint_every, long.eval_every) == (20, 10), long
    with pytest.raises(ValueError, match="--eval_every 12 is more than --steps 8: the run ends before the first; give "
                                         "at most 8, or 0 for after the last step only"):
        local.parse_command(["--steps", "8", "--eval_every", "12", "--run_name", "x"])
    by_epochs = local.parse_command(["--epochs", "2", "--checkpoint_every", "500", "--run_name", "x"])[0]
    assert by_epochs.checkpoint_every == 500, "with --epochs the steps are known once the data is packed"


def test_an_offline_hub_without_the_model_is_one_line_before_ray(monkeypatch):
    """HF_HUB_OFFLINE=1 and a model this machine's Hub cache lacks: Unreachable (exit 3) in one line, not
    transformers' paragraph after the imports."""
    from workload.model import model_source

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(model_source.Unreachable, match="not in this machine's Hub cache and HF_HUB_OFFLINE is set"):
        model_source.check_hub_reachable("nobody-here/no-such-model-r46")


def test_random_tokens_alone_drop_the_sample_tokenizer_never_typed():
    """`--dataset ''` is the recipe's random tokens: the local default's sample tokenizer, never typed, gives way
    (the rule refuses only a typed --tokenizer that would do nothing)."""
    cfg = local.parse_args(["--dataset", "", "--steps", "3", "--run_name", "x"])
    assert (cfg.dataset, cfg.tokenizer) == ("", "")
    assert local.parse_args(["--run_name", "x"]).tokenizer.endswith("tokenizer")
