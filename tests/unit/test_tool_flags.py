"""What the operator's commands share about their flags: --stack is a stack's name, and a stack file's name given for
it is answered with the name (tools/stack_name.py), for every command that takes one; kubectl's `--output json` is
answered with --json (workload/cli.py); a stack's name given bare is answered with --stack; a command given none
lists its commands; a one-letter flag is answered with the one flag of that letter; a folder of run directories given
to tools.loss_curve names the runs inside; a stack file Pulumi would refuse is named by every command; a path with a
`~` no shell expanded is the home directory; a blank JOB is refused; an SVG --out that cannot be written is refused
first; a directory inside a run given to tools.loss_curve names the run; a blank --profile is refused; a
project key in another namespace is refused."""
from __future__ import annotations

import os

import pytest

from workload import cli


@pytest.mark.parametrize("module, argv", [
    ("tools.job", ["list", "--stack", "Pulumi.p4d.yaml"]),
    ("tools.job", ["--stack", "./Pulumi.p4d.yml", "list"]),
    ("tools.status", ["--stack", "Pulumi.p4d.yaml"]),
    ("tools.doctor", ["--stack", "stacks/Pulumi.p4d.yaml"]),
    ("tools.leftovers", ["--stack", "Pulumi.p4d.yaml"]),
    ("tools.capacity.cli", ["--instance-type", "p4d.24xlarge", "--count", "1", "--stack", "Pulumi.p4d.yaml"]),
])
def test_a_stack_file_for_stack_is_answered_with_its_name(module, argv, capsys):
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USAGE and "did you mean --stack p4d?" in err[0] and len(err) <= 2, (module, err)


@pytest.mark.parametrize("module, argv", [("tools.doctor", ["p4d"]), ("tools.status", ["p4d"]),
                                          ("tools.job", ["--kubeconfig", "k.yaml", "list", "p4d"])])
def test_a_stack_given_bare_is_answered_with_the_flag(module, argv, capsys):
    import importlib

    with pytest.raises(SystemExit) as exited:
        importlib.import_module(module).main(argv)
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USAGE and err == ["error: unrecognized arguments: p4d",
                                                      "did you mean --stack p4d? the stack is given by its flag"], err


def test_a_bare_word_that_is_no_stack_gets_no_stack_guess(capsys):
    from tools import doctor

    with pytest.raises(SystemExit):
        doctor.main(["Pulumi.p4d.yaml"])  # a stack file, not a stack's name: --stack answers that one
    with pytest.raises(SystemExit):
        doctor.main(["p9z"])
    assert "--stack" not in capsys.readouterr().err


def test_a_command_given_none_lists_its_commands_and_a_letter_flag_its_flag(capsys):
    from tools import job

    for argv, said in (([], "commands: list, logs, summary, stop, submit; "),
                       (["logs", "-q"], "`python -m tools.job --help` lists every flag\n"),
                       (["stop", "-k", "k.yaml"], "(did you mean --kubeconfig?)")):
        with pytest.raises(SystemExit) as exited:
            job.main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == cli.USAGE and said in err, (argv, err)
    assert job.parse_args(["logs", "-f", "--stack", "dev"]).follow, "-f is --follow, as in `ray job logs -f`"


@pytest.mark.parametrize("value, said", [("s" * 1_000_000, "got 1,000,000 characters (not shown)"),
                                         ("acme/raytrain-eks/p4d", "is a fully qualified stack; give its own name: "
                                                                   "--stack p4d"),
                                         ("../dev", "1-100 letters, digits, '-', '_' or '.', such as dev; got '../dev'")])
def test_no_stack_name_is_one_line_by_every_command(value, said, capsys):
    from tools import doctor, job

    for main, argv in ((job.main, ["submit", "--stack", value]), (doctor.main, ["--stack", value])):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == cli.USAGE and said in err and len(err) < 600, err[:600]


@pytest.mark.parametrize("argv", [["--output", "json"], ["--output=json"]])
def test_a_flags_value_that_is_a_flag_here_is_the_guess(argv, capsys):
    from tools import status

    with pytest.raises(SystemExit):
        status.main(["--stack", "dev", *argv])
    assert "(did you mean --json?)" in capsys.readouterr().err


def test_loss_curve_given_the_folder_of_runs_names_the_runs_inside(tmp_path, capsys):
    from tools import loss_curve

    for run in ("local/local-20261130-101500", "local/local-20261201-090000"):
        (tmp_path / "runs" / run / "tensorboard").mkdir(parents=True)
    for folder in ("runs", "runs/local"):
        code = cli.run(loss_curve.main, [str(tmp_path / folder), "--out", str(tmp_path / "curve.svg")])
        (line,) = capsys.readouterr().err.splitlines()
        assert code == cli.USAGE and "is a folder of run directories" in line and "local-20261201-090000" in line, line
    assert not (tmp_path / "curve.svg").exists()


def test_loss_curve_reads_a_runs_event_files_as_untrusted(tmp_path, capsys):
    """A FIFO among the event files is refused unread (it waited for a writer forever), and a record claiming more
    bytes than its file holds ends the file, as a record cut off mid-write does, instead of being allocated."""
    import struct

    from tools import loss_curve

    events = tmp_path / "run" / "tensorboard"
    events.mkdir(parents=True)
    os.mkfifo(events / "events.out.tfevents.1.host")
    code = cli.run(loss_curve.main, [str(tmp_path / "run"), "--out", str(tmp_path / "curve.svg")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and "events.out.tfevents.1.host is a FIFO (named pipe)" in err, err
    os.remove(events / "events.out.tfevents.1.host")
    (events / "events.out.tfevents.2.host").write_bytes(struct.pack("<Q", 2**62) + b"\0" * 8)
    code = cli.run(loss_curve.main, [str(tmp_path / "run"), "--out", str(tmp_path / "curve.svg")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and "event files hold no train/loss" in err and "MemoryError" not in err, err


@pytest.mark.parametrize("module, argv", [("tools.job", ["list", "--stack", "dev"]), ("tools.status", ["--stack", "dev"])])
def test_a_kubeconfig_directory_is_answered_with_the_file_inside_by_every_command(module, argv, tmp_path, capsys):
    import importlib

    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("apiVersion: v1\n")
    code = cli.run(importlib.import_module(module).main, [*argv, "--kubeconfig", str(tmp_path / ".kube")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and f"did you mean --kubeconfig {tmp_path / '.kube' / 'config'}?" in err, (module, err)


@pytest.mark.parametrize("module, argv", [("tools.job", ["list", "--stack", "dev"]), ("tools.status", ["--stack", "dev"])])
def test_a_kubeconfig_that_is_no_regular_file_is_refused_unread(module, argv, tmp_path, monkeypatch, capsys):
    """A FIFO named by --kubeconfig (the client would wait for a writer), a sparse one (read whole), and a FIFO at
    $KUBECONFIG: each refused unread by workload/user_files.py's rule, the flag's as bad input, the default's as this
    machine's set-up."""
    import importlib

    main = importlib.import_module(module).main
    os.mkfifo(tmp_path / "pipe")
    with open(tmp_path / "holes.yaml", "wb") as holes:
        holes.truncate(2**30)
    for name, said in (("pipe", "is a FIFO (named pipe), not a regular file"), ("holes.yaml", "bytes; allowed: at most")):
        code = cli.run(main, [*argv, "--kubeconfig", str(tmp_path / name)])
        err = capsys.readouterr().err
        assert code == cli.USAGE and err.startswith(f"error: --kubeconfig {tmp_path / name} ") and said in err, err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "pipe"))
    code = cli.run(main, argv)
    err = capsys.readouterr().err
    assert code == cli.ENVIRONMENT and f"KUBECONFIG's file {tmp_path / 'pipe'} is a FIFO" in err, err


def test_a_flag_near_by_name_wins_over_its_value_as_a_flag(capsys):
    """`--eval_strategy steps`: --eval_every (eval_steps' alias) is the guess, not --steps, the value."""
    from workload.run import local

    with pytest.raises(SystemExit):
        local.parse_args(["--eval_strategy", "steps"])
    assert "(did you mean --eval_every?)" in capsys.readouterr().err


@pytest.mark.parametrize("text, said", [
    ("config:\n  aws:region: 'us-east-1\n", "not YAML (line 3)"),
    ("config:\n  aws:region: us-east-1\n  aws:region: us-east-2\n", "aws:region is given twice (lines 2 and 3)"),
    ("just a sentence\n", "the file must be a mapping of key: value"),
    ("config: raytrain-eks:trainSteps=9\n", "its config: must be a mapping of key: value"),
])
@pytest.mark.parametrize("module, argv", [
    ("tools.doctor", ["STACK"]), ("tools.status", ["STACK"]), ("tools.leftovers", ["STACK", "--state", "none.json"]),
    ("tools.job", ["list", "STACK"]), ("tools.job", ["submit", "STACK", "--", "--steps", "4"]),
])
def test_a_stack_file_pulumi_would_refuse_is_named_by_every_command(module, argv, text, said, tmp_path, monkeypatch,
                                                                     capsys):
    """A stack file that is not YAML, gives a key twice or is no mapping: one line naming it and the line, exit 2,
    before any kubeconfig, Pulumi CLI or AWS is looked for (tools/stack.py's stack_file_config)."""
    import importlib

    import tools.stack

    (tmp_path / "Pulumi.mine.yaml").write_text(text)
    monkeypatch.setattr(tools.stack, "PROJECT_FILE", tmp_path / "Pulumi.yaml")
    words = [arg for word in argv for arg in (["--stack", "mine"] if word == "STACK" else [word])]
    code = cli.run(importlib.import_module(module).main, words)
    err = capsys.readouterr().err.splitlines()
    assert code == cli.USAGE and err[0].startswith("error: --stack mine: Pulumi.mine.yaml: ") and said in err[0], \
        (module, err)


def test_a_path_with_a_tilde_no_shell_expanded_is_the_users_home(tmp_path, monkeypatch, capsys):
    """`~/...` quoted, after `--flag=` or from a --config file reaches the command as typed: it is the home directory
    (workload/cli.py user_path), never a directory named `~` under the working directory."""
    from tools import loss_curve
    from workload.checkpoint import export
    from workload.config import TrainConfig

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home" / "exp" / "checkpoint_000005").mkdir(parents=True)
    assert TrainConfig(storage_path="~/exp").storage_path == str(tmp_path / "home" / "exp")
    assert cli.run(loss_curve.main, ["~/exp", "--out=~/curve.svg"]) == cli.USAGE
    assert f"RUN {tmp_path / 'home' / 'exp' / 'tensorboard'}: no such directory" in capsys.readouterr().err
    assert cli.run(export.main, ["~/exp/checkpoint_000005", "~/exp"]) == cli.USAGE
    assert f"OUT {tmp_path / 'home' / 'exp'} exists and is not empty" in capsys.readouterr().err
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize("command", ["stop", "logs", "summary"])
def test_a_blank_job_id_is_refused_not_taken_for_the_newest_job(command, tmp_path, capsys):
    """`tools.job stop "$JOB"` with JOB unset or blank: exit 2 naming JOB, before any kubeconfig is read (it meant
    "the stack's newest job", and stop ended a job nobody named)."""
    from tools import job

    with pytest.raises(SystemExit) as exited:
        job.main([command, "\t", "--stack", "p4d", "--kubeconfig", str(tmp_path / "absent.json")])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USAGE, err
    assert err[0].startswith("error: argument JOB: is empty (an unset shell variable?)"), err


def test_an_out_that_cannot_be_written_is_refused_before_the_run_is_read(tmp_path, monkeypatch, capsys):
    """tools.loss_curve's --out (and tools.gpu_panel's, tools/svg_chart.py check_out) in a missing directory, under a
    file, or a directory itself: one line naming --out before any event file is read."""
    from tools import loss_curve
    from workload.metrics import tensorboard

    monkeypatch.setattr(tensorboard, "read_scalars", lambda *_: (_ for _ in ()).throw(AssertionError("read first")))
    (tmp_path / "run" / "tensorboard").mkdir(parents=True)
    (tmp_path / "notes.md").write_text("")
    (tmp_path / "pictures.svg").mkdir()
    for out, said in ((tmp_path / "figs" / "2026" / "curve.svg", f"no directory {tmp_path / 'figs' / '2026'} to"),
                      (tmp_path / "notes.md" / "curve.svg", f"{tmp_path / 'notes.md'} is a file, not a directory"),
                      (tmp_path / "pictures.svg", "is a directory; give a file name ending in .svg")):
        assert cli.run(loss_curve.main, [str(tmp_path / "run"), "--out", str(out)]) == cli.USAGE, out
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"error: --out {out}") and said in err[0], err


def test_loss_curve_given_a_directory_inside_a_run_names_the_run(tmp_path, capsys):
    """A run's checkpoint_<step>/ or model_<step>/ (what the local run's last lines name) given for RUN: the run it is
    in, and the command with it (it was "RUN .../checkpoint_000008/tensorboard: no such directory")."""
    from tools import loss_curve

    run = tmp_path / "runs" / "sft-3"
    (run / "tensorboard").mkdir(parents=True)
    (run / "checkpoint_000008").mkdir()
    (run / "model_000008" / "tokenizer").mkdir(parents=True)
    for inside in ("checkpoint_000008", "model_000008/tokenizer"):
        assert cli.run(loss_curve.main, [str(run / inside), "--out", str(tmp_path / "c.svg")]) == cli.USAGE
        err = capsys.readouterr().err.splitlines()
        assert err == [f"error: RUN {run / inside} is inside the run {run}, not a run directory; give the run: "
                       f"python -m tools.loss_curve {run} --out {tmp_path / 'c.svg'}"], err


@pytest.mark.parametrize("module, argv", [("tools.doctor", ["--stack", "p4d"]),
                                          ("tools.capacity.cli", ["--instance-type", "p4d.24xlarge", "--count", "2"])])
def test_a_blank_profile_is_refused_not_taken_for_the_default_credentials(module, argv, capsys):
    """`--profile "$PROFILE"` with PROFILE unset: exit 2 naming --profile (it meant the default credentials, perhaps
    another account's), before AWS is asked anything (workload/cli.py named)."""
    import importlib

    with pytest.raises(SystemExit) as exited:
        importlib.import_module(module).main([*argv, "--profile", "  "])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USAGE, err
    assert err[0] == "error: argument --profile: is empty (an unset shell variable?); give a name, or leave the flag " \
                     "out for the default", err


@pytest.mark.parametrize("key, said", [
    ("raytrain-eks-dev:trainLearningRate", "config key 'raytrain-eks-dev:trainLearningRate': trainLearningRate is this "
     "project's key, and under the namespace 'raytrain-eks-dev' Pulumi gives it to no program; write it as "
     "raytrain-eks:trainLearningRate"),
    ("gpuNodeCount", "config key 'gpuNodeCount': gpuNodeCount is this project's key, and without a namespace Pulumi "
     "gives it to no program"),
])
def test_a_key_in_the_wrong_namespace_is_refused_not_left_to_its_default(key, said, tmp_path, monkeypatch, capsys):
    """A declared key under another namespace or none: Pulumi gives it to no program, so `pulumi up` and `tools.job
    submit` ran on the default, silently (infra/config/schema.py check_unknown_keys, the preview's rule too)."""
    import tools.stack
    from tools import job

    (tmp_path / "Pulumi.mine.yaml").write_text(f"config:\n  aws:region: us-west-2\n  {key}: 3\n")
    monkeypatch.setattr(tools.stack, "PROJECT_FILE", tmp_path / "Pulumi.yaml")
    assert cli.run(job.main, ["submit", "--stack", "mine", "--print_config"]) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {said}"), err


def test_a_region_is_repeated_only_when_it_could_be_a_mistyped_one():
    """Every region check (the tools' --region/--regions, AWS_DEFAULT_REGION, a stack's aws:region) repeats a value
    of a region's length, with its nearest region; a megabyte, or a line break, only by its length."""
    from workload.aws_region import region_problem

    assert region_problem("eu-west1") == "'eu-west1' is not an AWS region's name; did you mean eu-west-1?"
    for value in ("y" * 100_000, "us-east-1\nforged"):
        said = region_problem(value)
        assert said.startswith(f"a value of {len(value):,} characters (not shown)") and value[:12] not in said, said


@pytest.mark.parametrize("module, argv", [("tools.job", ["list"]), ("tools.status", []), ("tools.doctor", []),
                                          ("tools.leftovers", [])])
def test_a_stack_that_is_not_found_is_named_only_when_it_reads_as_a_name(module, argv, capsys):
    """--stack with a token pasted in (a Shopify token's shape, which no token rule lists): no stack file has that
    name, and the refusal says so by the value's length; a mistyped name is repeated as typed."""
    import importlib

    main = importlib.import_module(module).main
    pasted = "shpat_" + "Q7x2" * 8
    assert cli.run(main, [*argv, "--stack", pasted]) == cli.USAGE
    err = capsys.readouterr().err
    assert "--stack (a value of 38 characters, not shown: it may be a token): no such stack file" in err, err
    assert pasted[6:20] not in err, err
    assert cli.run(main, [*argv, "--stack", "devv"]) == cli.USAGE
    assert "--stack devv: no Pulumi.devv.yaml here" in capsys.readouterr().err


def test_a_recording_nested_past_the_parser_and_a_title_past_a_line_are_refused(tmp_path, capsys):
    """json's decoder recurses once per [ or {: a recording nested deeper than Python's stack was a RecursionError
    traceback; a --title of a megabyte was carried to the picture. Each is exit 2 naming its argument."""
    from tools import gpu_panel, loss_curve

    (tmp_path / "deep.json").write_text("[" * 50_000 + "]" * 50_000)
    assert cli.run(gpu_panel.main, [str(tmp_path / "deep.json"), "--out", str(tmp_path / "g.svg")]) == cli.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: RECORDING {tmp_path / 'deep.json'}: nested too deeply") and "Traceback" not in err
    assert cli.run(loss_curve.main, [str(tmp_path), "--out", str(tmp_path / "c.svg"), "--title", "T" * 5000]) == \
        cli.USAGE
    assert "--title must be at most 200 printable characters" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["https://hooks.slack.com/services/T9Z8Y7X6W/B5V4U3T2S/q1w2e3r4t5y6u7i8",
                                   "dapi" + "0f1e2d3c" * 4])
def test_a_webhook_or_a_databricks_token_is_a_token_in_any_value(value):
    """A Slack webhook's path is its secret (anyone holding it posts), as is a Databricks personal access token:
    refused in trainEnv like every token shape, never repeated."""
    from infra import config
    from tests.program.test_refusals_at_preview import DEV

    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {"trainEnabled": True, "trainEnv": [f"NOTIFY={value}"]})
    assert "'trainEnv': entry 0 (NOTIFY): the value must hold no token" in str(refused.value) and value[-12:] not in str(refused.value)


@pytest.mark.parametrize("regions, said", [(",eu-west-1", "a leading comma"), ("eu-west-1,", "a trailing comma"),
                                           ("eu-west-1, ,ap-south-1", "two commas in a row"),
                                           ("ap-south-1,eu-west-1,ap-south-1", "'ap-south-1' is listed twice")])
def test_a_comma_list_flags_empty_or_repeated_item_is_bad_input_before_credentials(regions, said, capsys, monkeypatch,
                                                                                   tmp_path):
    """tools.capacity --regions (the tools' comma-separated flag, workload/cli.py comma_list): an empty item was
    dropped, so the command went on to look for AWS credentials and said exit 3; it is exit 2 naming the flag."""
    from tools.capacity import cli as capacity

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    argv = ["--instance-type", "g6e.12xlarge", "--count", "3", "--regions", regions]
    assert cli.run(capacity.main, argv) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) <= 2 and err[0].startswith("error: --regions: ") and said in err[0], err
    assert cli.comma_list("--regions", " eu-west-1 , ap-south-1", "x") == ["eu-west-1", "ap-south-1"]
