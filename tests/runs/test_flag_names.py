"""The names a TRL, transformers or axolotl user knows (workload/config/aliases.py): an alias with our meaning is taken
as ours, on the command line and in a --config file; one whose meaning differs is refused in one line naming ours; a
typo gets "did you mean"; argparse's abbreviations are off; dash forms read as underscores; --epochs is another way
to say how long to train; and docs/names.md's table is the aliases table."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.docs_shell import REPO
from workload import cli, config_file, train
from workload.config import DECLARED, TrainConfig, aliases
from workload.data.batches import steps_for_epochs
from workload.run import local

FIELDS = {declared.name for declared in DECLARED}


def _local(argv: list[str]) -> TrainConfig:
    return local.parse_args([*argv, "--run_name", "same"])


@pytest.mark.parametrize("theirs, ours", [
    (["--max_steps", "7"], ["--steps", "7"]),
    (["--max-steps", "7"], ["--steps", "7"]),
    (["--per_device_train_batch_size", "3"], ["--batch_size", "3"]),
    (["--per-device-train-batch-size=3"], ["--batch_size", "3"]),
    (["--batch-size", "3"], ["--batch_size", "3"]),
    (["--max_seq_length", "32"], ["--seq_len", "32"]),
    (["--max_length", "32"], ["--seq_len", "32"]),
    (["--lora_r", "8", "--method", "lora"], ["--lora_rank", "8", "--method", "lora"]),
    (["--lora_target_modules", "q_proj", "v_proj", "--method", "lora"],
     ["--lora_targets", "q_proj,v_proj", "--method", "lora"]),
    (["--gradient_checkpointing"], ["--activation_checkpointing"]),
    (["--gradient_checkpointing", "True"], ["--activation_checkpointing"]),
    (["--no-gradient_checkpointing"], ["--no-activation_checkpointing"]),
    (["--no-chunked-loss"], ["--no-chunked_loss"]),
    (["--dataset_text_field", "body", "--dataset", str(REPO / "data/corpus.jsonl")],
     ["--text_field", "body", "--dataset", str(REPO / "data/corpus.jsonl")]),
    (["--lr_scheduler_type", "linear"], ["--lr_schedule", "linear"]),
    (["--num_train_epochs", "2"], ["--epochs", "2"]),
    (["--report_to", "tensorboard", "mlflow"], ["--report_to", "tensorboard,mlflow"]),
    (["--block_size", "48"], ["--seq_len", "48"]),
])
def test_their_flag_is_ours(theirs, ours):
    assert _local(theirs) == _local(ours), f"{theirs} must build what {ours} builds"


def test_every_alias_names_a_field_and_no_alias_is_a_field():
    for theirs, (ours, whose) in aliases.ALIASES.items():
        assert ours in FIELDS and whose, f"alias {theirs} -> {ours}: no such TrainConfig field"
        assert theirs not in FIELDS, f"{theirs} is our own flag already"
    assert not set(aliases.DIFFERENT) & (FIELDS | set(aliases.ALIASES)), "a refused name is also taken"
    for theirs, (ours, *_) in aliases.SWITCH_ALIASES.items():
        assert ours in FIELDS and theirs not in FIELDS | set(aliases.ALIASES) | set(aliases.DIFFERENT), theirs


def test_axolotl_keys_in_a_config_file(tmp_path):
    path = tmp_path / "axolotl.yaml"
    path.write_text("base_model: org/model\nadapter: lora\nlora_r: 8\nlora_alpha: 16\n"
                    "lora_target_modules:\n  - q_proj\n  - v_proj\nsequence_len: 128\nmicro_batch_size: 2\n")
    cfg = _local(["--config", str(path)])
    assert (cfg.model_id, cfg.model_config, cfg.method, cfg.lora_rank, cfg.lora_alpha, cfg.lora_targets,
            cfg.seq_len, cfg.batch_size) == ("org/model", "", "lora", 8, 16.0, "q_proj,v_proj", 128, 2), cfg


@pytest.mark.parametrize("argv, words", [
    (["--gradient_accumulation_steps", "4"], "--grad_accum_steps"),
    (["--use_peft"], "--method lora"),
    (["--load_in_4bit"], "--method qlora"),
    (["--validation_split_percentage", "10"], "--eval_fraction 0.05"),
    (["--overwrite_output_dir"], "give another --run_name"),
    (["--bnb_4bit_quant_type", "fp4"], "NF4 always"),
    (["--log_level", "warning"], "--verbose"),
])
def test_their_flag_with_another_meaning_is_refused_naming_ours(argv, words, capsys):
    assert cli.run(local.main, argv) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {argv[0]} is not this project's") and words in err[0], err


def test_gradient_accumulation_names_the_equivalent_batch(capsys):
    assert cli.run(local.main, ["--gradient_accumulation_steps", "4", "--per_device_train_batch_size", "2"]) == \
        cli.USAGE
    assert "--batch_size 8 --grad_accum_steps 4" in capsys.readouterr().err


def test_a_typo_gets_the_nearest_flag_and_an_abbreviation_is_refused():
    """In a fresh process, as typed: argparse's refusal exits."""
    runs = {typo: subprocess.run([sys.executable, "-m", "workload.local", typo, "8"], cwd=REPO, capture_output=True,
                                 text=True, timeout=60) for typo in ("--lora_rnak", "--lora_ran", "--max_stesp")}
    for typo, run in runs.items():
        assert run.returncode == cli.USAGE and "Traceback" not in run.stderr, (typo, run.stderr)
        lines = run.stderr.splitlines()
        assert lines[0] == f"error: unrecognized arguments: {typo} 8", lines
    assert runs["--lora_rnak"].stderr.splitlines()[1].endswith("(did you mean --lora_rank?)")
    assert runs["--max_stesp"].stderr.splitlines()[1].endswith("(did you mean --steps?)"), "an alias's typo: ours"


def test_a_key_typo_in_a_config_file_gets_the_nearest_key(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("lora_rnak: 8\n")
    assert cli.run(local.main, ["--config", str(path)]) == cli.USAGE
    assert "(did you mean --lora_rank?)" in capsys.readouterr().err


def test_no_parser_abbreviates():
    """argparse took --lora_r as --lora_rank before any alias existed; now only the table's names are taken."""
    with pytest.raises(SystemExit):
        train.parse_args(["--lora_ran", "8"])
    with pytest.raises(SystemExit):
        train.parse_args(["--stp", "8"])


def test_steps_and_epochs_are_one_choice(tmp_path, capsys):
    assert cli.run(local.main, ["--steps", "5", "--num_train_epochs", "2"]) == cli.USAGE
    assert "--steps and --epochs" in capsys.readouterr().err
    assert cli.run(local.main, ["--epochs", "1", "--dataset", "", "--eval_fraction", "0"]) == cli.USAGE
    assert "random tokens" in capsys.readouterr().err
    # A printed file with --epochs holds no steps, so it replays; a flag wins over the file's epochs.
    assert local.main(["--epochs", "2", "--print_config"]) == cli.OK
    printed = capsys.readouterr().out
    assert "\nsteps:" not in printed and "epochs: 2.0" in printed, printed
    path = tmp_path / "run.yaml"
    path.write_text(printed)
    assert _local(["--config", str(path)]).epochs == 2
    over = _local(["--config", str(path), "--steps", "7"])
    assert (over.steps, over.epochs) == (7, 0), over
    assert "--steps" not in TrainConfig(epochs=2, steps=9, dataset="org/corpus").to_args()


@pytest.mark.parametrize("epochs, blocks, batch, world, steps", [
    (1, 100, 4, 2, 13), (2, 100, 4, 2, 25), (0.5, 10, 1, 1, 5), (1, 3, 4, 2, 1)])
def test_epochs_become_steps_once_the_blocks_are_counted(epochs, blocks, batch, world, steps):
    cfg = TrainConfig(model_config="tiny", dataset="org/corpus", epochs=epochs, batch_size=batch)
    resolved, line = steps_for_epochs(cfg, blocks, world)
    assert resolved.steps == steps and f"make {steps} steps" in line, (resolved.steps, line)
    assert steps_for_epochs(TrainConfig(), blocks, world) == (TrainConfig(), "")


def test_dash_forms_in_the_help_are_not_needed():
    assert config_file.command_line(["--max-steps", "3", "--no-chunked-loss", "--base_model=x"]) == \
        {"steps", "chunked_loss", "model_id"}


def test_docs_names_table_is_the_aliases_table():
    from tests.support.docs_shell import page

    text = page("docs/names.md")
    rows = dict(re.findall(r"^\| `--?([a-z0-9_]+)` \| (.+?) \|", text, re.M))
    for theirs, (ours, _) in aliases.ALIASES.items():
        assert f"`--{ours}`" in rows.get(theirs, ""), f"docs/names.md: no row {theirs} -> --{ours}"
    for theirs in aliases.DIFFERENT:
        assert theirs in rows and "refused" in rows[theirs], f"docs/names.md: {theirs} not shown as refused"
    for theirs, ours, _ in aliases.table_rows():
        if " " in theirs:  # a switch of theirs with its value: `--completion_only_loss false`
            assert re.search(rf"^\| `--{theirs}` \| `?{re.escape(ours.split(' (')[0])}", text, re.M) or (
                ours == "nothing to set" and f"`--{theirs}` | nothing to set" in text), f"docs/names.md: no row {theirs}"


@pytest.mark.parametrize("theirs, ours", [
    (["--data_format", "prompt-completion", "--completion_only_loss", "False"],
     ["--data_format", "prompt-completion", "--train_on_prompt"]),
    (["--data_format", "chat", "--assistant_only_loss=false"], ["--data_format", "chat", "--train_on_prompt"]),
    (["--data_format", "chat", "--assistant_only_loss"], ["--data_format", "chat"]),
    (["--data_format", "chat", "--train_on_inputs", "yes"], ["--data_format", "chat", "--train_on_prompt"]),
    (["--method", "qlora", "--lora_target_linear"], ["--method", "qlora", "--lora_targets", "all-linear"]),
    (["--method", "lora", "--lora_target_linear", "false", "--lora_r", "4"], ["--method", "lora", "--lora_rank", "4"]),
])
def test_their_switch_is_our_flag_and_value(theirs, ours):
    assert _local(theirs) == _local(ours), f"{theirs} must build what {ours} builds"


@pytest.mark.parametrize("argv, words", [
    (["--gradient_checkpointing", "offload"], ("--gradient_checkpointing offload", "--activation_checkpointing")),
    (["--gradient_checkpointing=reentrant"], ("--gradient_checkpointing reentrant", "--activation_checkpointing")),
    (["--completion_only_loss", "sometimes"], ("--completion_only_loss sometimes", "true or false")),
    (["--load_in_8bit", "True"], ("--load_in_8bit", "--method qlora")),
    (["--torch_dtype", "float16"], ("--torch_dtype", "bf16")),
    (["--fsdp", "shard_grad_op"], ("--fsdp", "--sharding")),
    (["--deepspeed", "zero2.json"], ("--deepspeed", "FSDP2", "--sharding")),
    (["--logging_dir", "/var/tb"], ("--logging_dir", "tensorboard/", "--storage_path")),
    (["--hub_token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"], ("--hub_token", "HF_TOKEN")),
])
def test_their_flag_with_no_same_meaning_is_answered_with_ours(argv, words, capsys):
    assert cli.run(local.main, argv) == cli.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and all(word in err for word in words), err
    assert "hf_AbCdEf" not in err, "a token is never echoed"


def test_a_shorthand_of_a_flags_initials_is_answered_with_the_flag(capsys):
    with pytest.raises(SystemExit):
        local.parse_args(["--bs", "8"])
    assert "(did you mean --batch_size?)" in capsys.readouterr().err


def test_the_tracking_round_trip_parses_and_passes_the_checks_before_ray(tmp_path):
    """docs/tracking.md: a stack's --print_config file replayed locally with the tiny model (its preflight, the
    checks before Ray, included: the stack's --seq_len 2048 was refused there before the page said --seq_len 64)."""
    import contextlib
    import io
    import shlex

    from tests.support.docs_shell import page
    from tools import job
    from workload.run import preflight

    lines = [line for line in page("docs/tracking.md").splitlines() if "--print_config > run.yaml" in line
             or line.startswith("python -m workload.local --config run.yaml --model_config tiny")]
    submit, replay = (shlex.split(line.split("#")[0]) for line in lines)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert job.main(submit[3:submit.index(">")]) == cli.OK
    (tmp_path / "run.yaml").write_text(printed.getvalue())
    argv = [str(tmp_path / "run.yaml") if arg == "run.yaml" else arg for arg in replay[3:]]
    preflight.validate(local.parse_args(argv))
