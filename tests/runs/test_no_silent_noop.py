"""No setting that would do nothing is taken silently: a --lora_* flag without --method lora/qlora, a --config file's
model_id under its model_config, a second run of a --run_name while the first writes its directory; and
`tools.job submit` reads a stack as `pulumi up` does (its clusterName default, its unknown-key check)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

import tools.stack
from tests.support.docs_shell import REPO
from tools import job as job_cli
from tools import job_submit
from workload import cli
from workload.run import local, run_lock


@pytest.mark.parametrize("argv, flag", [
    (["--lora_rank", "8"], "--lora_rank 8"), (["--lora_r", "8"], "--lora_rank 8"),
    (["--lora_alpha", "8"], "--lora_alpha 8.0"), (["--lora_targets", "q_proj"], "--lora_targets q_proj"),
])
def test_an_adapter_flag_without_an_adapter_method_is_refused(argv, flag, capsys):
    started = time.monotonic()
    assert cli.run(local.main, argv) == cli.USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag} sets the adapters") and "--method lora" in err[0], err
    assert time.monotonic() - started < 1, "refused before anything heavy"
    assert local.parse_args([*argv, "--method", "lora"]).method == "lora"


def test_a_config_files_model_id_under_its_model_config_is_refused(tmp_path, capsys):
    assert local.main(["--print_config"]) == cli.OK
    printed = capsys.readouterr().out
    assert "model_config: tiny" in printed
    path = tmp_path / "run.yaml"
    path.write_text(printed.replace("model_id: Qwen/Qwen2.5-1.5B", "model_id: org/other"))
    assert cli.run(local.main, ["--config", str(path)]) == cli.USAGE
    err = capsys.readouterr().err
    assert "model_config 'tiny'" in err and "remove model_config" in err, err
    # A --model_id flag over the same (unedited) file wins, as every flag wins over the file.
    path.write_text(printed)
    cfg = local.parse_args(["--config", str(path), "--model_id", "org/other"])
    assert (cfg.model_id, cfg.model_config) == ("org/other", ""), cfg


def test_a_run_name_in_use_is_refused_and_a_stale_lock_taken_over(tmp_path):
    held = run_lock.acquire(str(tmp_path), "same")
    assert held is not None and json.loads(held.read_text())["pid"] == os.getpid()
    # Another live process holds it: a child that sleeps, as a second terminal's run would.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        held.write_text(json.dumps({"pid": child.pid, "host": socket.gethostname(), "started": "now"}))
        with pytest.raises(cli.UsageError, match=rf"--run_name same: another run \(pid {child.pid} on "):
            run_lock.acquire(str(tmp_path), "same")
    finally:
        child.kill()
        child.wait()
    # Its process gone (killed, as a SIGKILLed run leaves its lock): stale, taken over.
    again = run_lock.acquire(str(tmp_path), "same")
    assert json.loads(again.read_text())["pid"] == os.getpid()
    run_lock.release(again)
    assert not again.exists()
    assert run_lock.acquire("s3://bucket/runs", "same") is None and run_lock.acquire("", "same") is None


def test_the_local_command_refuses_a_run_name_in_use(tmp_path):
    directory = tmp_path / "busy"
    directory.mkdir()
    (directory / run_lock.LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                            "started": "now"}))
    run = subprocess.run([sys.executable, "-m", "workload.local", "--storage_path", str(tmp_path), "--run_name",
                          "busy", "--steps", "4"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == cli.USAGE and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.splitlines()[0].startswith(f"error: --run_name busy: another run (pid {os.getpid()}"), run.stderr


@pytest.mark.parametrize("stack", ["g6e", "p4d", "p5"])
def test_submit_applies_the_clusterName_default_of_pulumi_up(stack):
    job = job_submit.stack_job(stack, "r", [])
    assert job["workload"].steps >= 1 and job["train_args"] is not None


def test_submit_refuses_a_stack_key_typo_with_the_nearest_key(tmp_path, monkeypatch, capsys):
    (tmp_path / "Pulumi.typo.yaml").write_text("config:\n  aws:region: us-east-1\n  raytrain-eks:trainLoraRnak: 8\n")
    monkeypatch.setattr(tools.stack, "PROJECT_FILE", tmp_path / "Pulumi.yaml")  # where every tool reads a stack file
    assert cli.run(job_cli.main, ["submit", "--stack", "typo", "--print_config"]) == cli.USAGE
    err = capsys.readouterr().err
    assert "'trainLoraRnak' (did you mean 'trainLoraRank'?)" in err and "Traceback" not in err, err


def test_the_kubeconfig_may_come_before_the_command():
    for argv in (["--kubeconfig", "k.yaml", "list"], ["list", "--kubeconfig", "k.yaml"],
                 ["--kubeconfig", "k.yaml", "--stack", "dev", "logs", "--follow"]):
        args = job_cli.parse_args(argv)
        assert str(args.kubeconfig) == "k.yaml", (argv, args)
    assert job_cli.parse_args(["--stack", "dev", "list"]).stack == "dev"
    assert job_cli.parse_args(["list"]).kubeconfig is None
