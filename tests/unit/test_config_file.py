"""A run in one file: `--config run.yaml` gives the run the same flags would, flags win over the file, an unknown key is
refused as an unknown flag is, and `--print_config` writes a file that replays the run (workload/config_file.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support.docs_shell import REPO
from workload import cli, train
from workload.run import local

RUN_YAML = """\
model_config: tiny
steps: 12
batch_size: 4
learning_rate: 5e-3      # YAML 1.1 reads this as text; the flag's own parser makes it a float
dataset: ''
chunked_loss: false
compile: null
export: none
"""
SAME_FLAGS = ["--model_config", "tiny", "--steps", "12", "--batch_size", "4", "--learning_rate", "5e-3",
              "--dataset", "", "--no-chunked_loss", "--export", "none"]


def _with_run_name(argv: list[str]) -> list[str]:
    return [*argv, "--run_name", "same"]


def test_a_config_file_gives_the_same_run_as_the_same_flags(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RUN_YAML)
    from_file = local.parse_args(_with_run_name(["--config", str(path)]))
    from_flags = local.parse_args(_with_run_name(SAME_FLAGS))
    assert from_file == from_flags, "--config run.yaml must build the TrainConfig its flags build"
    assert from_file.learning_rate == 5e-3 and from_file.chunked_loss is False, from_file
    # And for the job's own command, whose defaults differ from the local run's.
    assert train.parse_args(["--config", str(path)])[0] == train.parse_args(SAME_FLAGS)[0]


def test_flags_win_over_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RUN_YAML)
    cfg = local.parse_args(["--steps", "5", "--config", str(path), "--chunked_loss"])
    assert (cfg.steps, cfg.chunked_loss, cfg.batch_size) == (5, True, 4), cfg


def test_a_flag_wins_over_the_files_key_by_another_of_its_names(tmp_path):
    """The documented precedence holds across names: a file's axolotl key under a flag of ours (and a file's key of
    ours under a TRL flag) is the flag's, not a setting given twice."""
    path = tmp_path / "run.yaml"
    path.write_text("micro_batch_size: 3\nsteps: 9\n")
    cfg = local.parse_args(["--config", str(path), "--batch_size", "6", "--max_steps", "12"])
    assert (cfg.batch_size, cfg.steps) == (6, 12), cfg


@pytest.mark.parametrize("text, words", [
    ("steps: 3\nstepz: 4\n", "unrecognized keys: stepz"),
    ("config: other.yaml\n", "config is a command-line flag, not a --config key: give --config on the command line"),
    ("steps: 3\nsteps: 30\n", "steps is given twice (lines 1 and 2); keep one"),
    ("steps: many\n", "steps: invalid int value: 'many'"),
    ("chunked_loss: 1\n", "chunked_loss must be true or false, got 1"),
    ("- steps\n", "a mapping of flag: value, got a list"),
    ("steps: [1\n", "not YAML (line 2)"),
    # A shell's variable no one substitutes: it made a directory named `${SCRATCH}` and a run named `$LOGNAME-sft`.
    ("storage_path: ${SCRATCH:-/tmp}/ckpt\n", "storage_path holds $SCRATCH, which is not expanded: a --config file "
     "is read as written; write the value out, or give --storage_path on the command line (the shell expands it "
     "there)"),
    *((f"{key}: {value}\n", f"{key} holds ${name}, which is not expanded: a --config file is read as written; write "
       f"the value out, or give --{key} on the command line (the shell expands it there)")
      for key, value, name in (("run_name", "$LOGNAME-sft", "LOGNAME"), ("eval_every", "${EVAL}", "EVAL"))),
])
def test_a_bad_file_is_refused_naming_the_key(tmp_path, capsys, text, words):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    assert cli.run(local.main, ["--config", str(path)]) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"error: --config {path}: {words}", err


def test_an_unknown_key_reads_as_an_unknown_flag_does(tmp_path):
    """The same two lines and exit 2, from the command itself (a subprocess: argparse's refusal exits)."""
    path = tmp_path / "run.yaml"
    path.write_text("stepz: 4\n")
    runs = [subprocess.run([sys.executable, "-m", "workload.local", *argv], cwd=REPO, capture_output=True, text=True,
                           timeout=60) for argv in (["--config", str(path)], ["--stepz", "4"])]
    assert [run.returncode for run in runs] == [cli.USAGE, cli.USAGE], runs
    file_error, flag_error = (run.stderr.splitlines() for run in runs)
    assert (len(file_error), len(flag_error)) == (2, 2) and file_error[0].endswith("unrecognized keys: stepz"), runs
    assert flag_error[0] == "error: unrecognized arguments: --stepz 4", flag_error
    assert file_error[1].startswith(flag_error[1]), (file_error, flag_error)


def test_print_config_replays_the_run(tmp_path, capsys):
    argv = ["--steps", "9", "--export", "none", "--dataset", "", "--run_name", "replayed"]
    assert local.main(argv + ["--print_config"]) == cli.OK
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed)["steps"] == 9, printed
    path = tmp_path / "run.yaml"
    path.write_text(printed)
    assert local.parse_args(["--config", str(path)]) == local.parse_args(argv), "the printed file is the run"
    # The local run's file replays on the job's command too: every field is in it, whatever that command's defaults.
    assert train.parse_args(["--config", str(path)])[0] == local.parse_args(argv)


def test_the_docs_sample_run_yaml_is_a_valid_run(tmp_path):
    """docs/tracking.md's run.yaml is a run `--config` accepts, with the values it shows."""
    import re

    from tests.support.docs_shell import page

    sample = re.search(r"```yaml\n(.*?)```", page("docs/tracking.md"), re.S).group(1)
    keys = yaml.safe_load(sample)
    path = tmp_path / "run.yaml"
    path.write_text(sample)
    cfg = local.parse_args(["--config", str(path)])
    assert cfg.data_format == "chat" and cfg.report_to == "tensorboard,mlflow" and cfg.learning_rate == 3e-3, cfg
    assert all(getattr(cfg, key) == value for key, value in keys.items() if key != "learning_rate"), (keys, cfg)


def test_every_key_that_is_not_ours_is_named_at_once_each_with_ours(tmp_path, capsys):
    """An axolotl file holds several: each refused one with what to give, each unknown one with its nearest, in the
    refusal's two lines; their switches (lora_target_linear, train_on_inputs) are taken as our values."""
    path = tmp_path / "axolotl.yml"
    path.write_text("evals_per_epoch: 4\nlogging_dir: ./tb\nwarmup_stepz: 10\nlr: 0.0003\nnum_epochs: 1\n")
    assert cli.run(local.main, ["--config", str(path)]) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    for words in ("evals_per_epoch is not this project's: give --eval_every", "logging_dir is not this project's",
                  "tensorboard", "unrecognized keys: warmup_stepz, lr"):
        assert words in err[0], (words, err)
    assert "warmup_stepz: did you mean --warmup_steps?" in err[1] and "lr: did you mean --learning_rate" in err[1], err
    path.write_text("adapter: qlora\nlora_target_linear: true\ndata_format: chat\ntrain_on_inputs: true\n")
    cfg = local.parse_args(["--config", str(path), "--run_name", "same"])
    assert (cfg.method, cfg.lora_targets, cfg.train_on_prompt) == ("qlora", "all-linear", True), cfg
    path.write_text("sample_packing: true\n")
    assert cli.run(local.main, ["--config", str(path)]) == cli.USAGE
    assert "packing is always on" in capsys.readouterr().err


@pytest.mark.parametrize("key, named", [
    ("gradient_checkpointing_kwargs", True),  # transformers' name: 29 characters, named as written
    ("save-total-limit", True),
    ("Zx81Qw7Lp3Vb5Nm2Kr9Tf4Hd", False),  # 24 characters of no words: perhaps a token pasted as a key
    ("hf_" + "Ab3" * 11, False),  # a Hub token's shape
    ("a" * 90, False),  # longer than a refusal repeats
])
def test_an_unknown_key_is_named_as_written_when_it_reads_as_a_settings_name(tmp_path, key, named):
    path = tmp_path / "run.yaml"
    path.write_text(f"{key}: 1\n")
    with pytest.raises(cli.UsageError) as refused:
        local.parse_args(["--config", str(path)])
    err = str(refused.value)
    assert (f"unrecognized keys: {key}" in err) is named and ("not shown" in err) is not named, err
