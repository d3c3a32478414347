"""The credential files the run's libraries read on their own (workload/run/credential_files.py): $NETRC or ~/.netrc
(requests before every request without credentials, wandb's key), $HF_TOKEN_PATH or $HF_HOME/token (huggingface_hub),
the AWS shared files (botocore) and ~/.databrickscfg, each refused unread by workload/user_files.py's rule when it is
no regular file within the bound: exit 3 naming the variable and the file, before anything reads it; /dev/null and a
missing file pass, as the libraries read them as none."""
from __future__ import annotations

import os

import pytest

from tests.support.cli_process import run_cli
from workload import cli
from workload.config import TrainConfig
from workload.run import credential_files, preflight

VARIABLES = ("NETRC", "HF_TOKEN_PATH", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "DATABRICKS_CONFIG_FILE")


@pytest.fixture
def home(monkeypatch, tmp_path):
    for name in (*VARIABLES, "HF_HOME", "XDG_CACHE_HOME", "WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("variable", VARIABLES)
def test_a_credential_variable_naming_a_fifo_is_exit_3_naming_it(variable, home, monkeypatch):
    os.mkfifo(home / "pipe")
    monkeypatch.setenv(variable, str(home / "pipe"))
    with pytest.raises(cli.EnvironmentProblem, match=rf"^{variable} {home / 'pipe'} is a FIFO \(named pipe\)"):
        credential_files.check()


@pytest.mark.parametrize("default, variable", [
    (".netrc", "NETRC"), ("_netrc", "NETRC"), (".cache/huggingface/token", "HF_TOKEN_PATH"),
    (".aws/credentials", "AWS_SHARED_CREDENTIALS_FILE"), (".aws/config", "AWS_CONFIG_FILE"),
])
def test_a_default_location_that_is_no_file_is_named_with_its_variable(default, variable, home):
    (home / default).parent.mkdir(parents=True, exist_ok=True)
    (home / default).mkdir()  # a directory where the file is read
    with pytest.raises(cli.EnvironmentProblem, match=rf"\(read when {variable} is unset\) is a directory"):
        credential_files.check()


def test_what_the_libraries_read_as_none_or_as_a_file_passes(home, monkeypatch):
    credential_files.check()  # none there
    monkeypatch.setenv("NETRC", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "missing"))
    (home / "cache" / "huggingface").mkdir(parents=True)
    (home / "cache" / "huggingface" / "token").write_text("hf_stored\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    credential_files.check()
    (home / "cache" / "huggingface" / "token").write_bytes(b"x" * (credential_files.MAX_BYTES + 1))
    with pytest.raises(cli.EnvironmentProblem, match="read when HF_TOKEN_PATH is unset.* bytes; allowed: at most"):
        credential_files.check()


def test_the_wandb_key_check_never_opens_a_fifo_netrc(home, monkeypatch):
    os.mkfifo(home / ".netrc")  # no NETRC: Python's netrc and requests read ~/.netrc
    with pytest.raises(cli.EnvironmentProblem, match=r"\.netrc \(read when NETRC is unset\) is a FIFO"):
        preflight.check_credentials(TrainConfig(model_config="tiny", seq_len=32, steps=2, report_to="wandb"))


def test_the_local_command_answers_a_fifo_at_netrc_at_once(home, monkeypatch):
    """In a fresh process, as a user runs it: exit 3 naming NETRC before torch loads (it hung for good)."""
    os.mkfifo(home / "pipe")
    monkeypatch.setenv("NETRC", str(home / "pipe"))
    code, err, loaded, _ = run_cli("workload.local", ["--report_to", "wandb", "--model_config", "tiny", "--steps", "2",
                                                      "--storage_path", str(home / "runs")])
    assert code == cli.ENVIRONMENT and f"NETRC {home / 'pipe'} is a FIFO" in err and loaded == [], (code, err, loaded)


def test_the_job_client_is_not_made_with_a_fifo_at_netrc(home, monkeypatch):
    """Ray's job client sends requests through requests, which reads $NETRC before each: tools.job and tools.status
    reach the job server through workload/run/submit.py connect, which checks first."""
    from workload.run import submit

    os.mkfifo(home / "pipe")
    monkeypatch.setenv("NETRC", str(home / "pipe"))
    with pytest.raises(cli.EnvironmentProblem, match="^NETRC .* is a FIFO"):
        submit.connect("http://127.0.0.1:9", token="x")


@pytest.mark.parametrize("command", [["list"], ["logs", "raysubmit_AbC123"]])
def test_tools_job_refuses_a_fifo_at_netrc_before_it_reaches_the_cluster(command, home, monkeypatch):
    """tools.job port-forwards to the cluster's job server before its client is made: a FIFO at $NETRC is refused
    first, and no job server is asked for."""
    from tools import job

    os.mkfifo(home / "pipe")
    monkeypatch.setenv("NETRC", str(home / "pipe"))
    asked = []
    with pytest.raises(cli.EnvironmentProblem, match="^NETRC .* is a FIFO"):
        job.main(command, job_server=lambda args: asked.append(args))
    assert asked == []
