"""Every command, run as a user types it (`python -m ...` in a fresh process), answers a user error with a short
`error:` line (and at most a hint), the exit code workload/cli.py documents, and never a traceback; `--help`
shows the command's own defaults and exit codes without loading torch, Ray or transformers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_process import HEAVY_MODULES, run_cli  # the libraries that take seconds to import
from workload import cli

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ["workload.train", "workload.local", "workload.transport", "workload.export", "tools.capacity",
            "tools.doctor", "tools.status", "tools.job", "tools.loss_curve", "tools.gpu_panel"]

# An API server that refuses connections, and one whose token command does not exist.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:1"}}}}]
users: [{{name: u, user: {user}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def command(module: str, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """`env` adds to this process's environment; a value None removes the variable."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          env={key: value for key, value in merged.items() if value is not None}, timeout=timeout)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    paths = {
        "empty_log": "nothing from NCCL here\n",
        "refused_kubeconfig": KUBECONFIG.format(user="{token: abc}"),
        "no_aws_cli_kubeconfig": KUBECONFIG.format(
            user="{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: aws-cli-not-here, args: [x]}}"),
        "garbage_kubeconfig": "clusters: [\n",
    }
    for name, text in paths.items():
        (root / name).write_text(text)
    (root / "home").mkdir()
    return {"dir": str(root), **{name: str(root / name) for name in paths}}


NO_AWS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_PROFILE": None, "AWS_CONFIG_FILE": "/nonexistent",
          "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"}
OFFLINE_AWS = {**NO_AWS, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
CAPACITY = ["--instance-type", "g6.12xlarge", "--count", "2"]

# (command and flags, extra env, expected exit code, words the error must contain)
USER_ERRORS = [
    (["workload.train", "--steps", "-5"], {}, cli.USAGE, "--steps"),
    (["workload.train", "--learning_rate", "inf"], {}, cli.USAGE, "--learning_rate"),
    (["workload.train", "--batch_size", "two"], {}, cli.USAGE, "--batch_size"),
    (["workload.train", "--model_config", "gpt-17"], {}, cli.USAGE, "--model_config"),
    # A closed port: "auto" would instead join whatever other Ray cluster runs on this machine.
    (["workload.train", "--model_config", "tiny", "--seq_len", "64", "--steps", "2"],
     {"RAY_ADDRESS": "127.0.0.1:9"},
     cli.ENVIRONMENT, "no Ray cluster answers at RAY_ADDRESS=127.0.0.1:9"),
    (["workload.local", "--batch_size", "0"], {}, cli.USAGE, "--batch_size"),
    (["workload.local", "--dataset", "no/such/file.txt"], {}, cli.USAGE, "--dataset"),
    (["workload.local", "--seq_len", "100000"], {}, cli.USAGE, "--seq_len"),
    (["workload.transport", "{dir}/missing.log"], {}, cli.USAGE, "missing.log"),
    (["workload.transport", "{empty_log}"], {}, cli.CHECK_FAILED, ""),
    (["workload.transport", "{empty_log}", "--expect", "tcp"], {}, cli.USAGE, "--expect"),
    (["tools.capacity", "--count", "2"], {}, cli.USAGE, "--instance-type"),
    (["tools.capacity", "--instance-type", "g6", "--count", "2"], {}, cli.USAGE, "--instance-type"),
    (["tools.capacity", "--instance-type", "m7i.xlarge", "--count", "2"], {}, cli.USAGE, "--instance-type"),
    (["tools.capacity", *CAPACITY, "--regions", "useast1"], {}, cli.USAGE, "--regions"),
    (["tools.capacity", *CAPACITY, "--profile", "nobody"], NO_AWS, cli.USAGE, "--profile"),
    (["tools.capacity", *CAPACITY, "--write-stack", "dev", "--project-dir", "{dir}"], {}, cli.USAGE,
     "--project-dir"),
    (["tools.capacity", *CAPACITY], NO_AWS, cli.ENVIRONMENT, "no AWS credentials"),
    (["tools.capacity", *CAPACITY], OFFLINE_AWS, cli.ENVIRONMENT, "AWS cannot be reached"),
    (["workload.export", "{dir}/no-checkpoint", "{dir}/model"], {}, cli.USAGE, "no such directory"),
    (["tools.loss_curve", "{dir}/no-run", "--out", "{dir}/run.svg"], {}, cli.USAGE, "RUN"),
    (["tools.loss_curve", "{dir}", "--out", "{dir}/run.png"], {}, cli.USAGE, "the picture is SVG"),
    (["tools.loss_curve", "s3://bucket/run", "--out", "{dir}/run.svg"], OFFLINE_AWS, cli.ENVIRONMENT,
     "RUN s3://bucket/run/tensorboard"),
    (["tools.gpu_panel", "{dir}/no-recording.json", "--out", "{dir}/gpu.svg"], {}, cli.USAGE, "RECORDING"),
    (["tools.gpu_panel", "{empty_log}", "--out", "{dir}/gpu.svg"], {}, cli.USAGE, "is not JSON"),
    (["tools.status", "--stack", "nope"], {}, cli.USAGE, "--stack"),
    (["tools.status"], {"HOME": "{dir}/home", "KUBECONFIG": ""}, cli.ENVIRONMENT, "no kubeconfig"),
    (["tools.status", "--kubeconfig", "{dir}/missing"], {}, cli.ENVIRONMENT, "--kubeconfig"),
    (["tools.status", "--kubeconfig", "{garbage_kubeconfig}"], {}, cli.USAGE, "kubeconfig"),
    (["tools.status", "--kubeconfig", "{no_aws_cli_kubeconfig}"], {}, cli.ENVIRONMENT, "aws-cli-not-here"),
    (["tools.status", "--kubeconfig", "{refused_kubeconfig}"], {}, cli.ENVIRONMENT, "cannot be reached"),
    (["workload.train", "--time_limit_s", "0"], {}, cli.USAGE, "--time_limit_s"),
    (["tools.job"], {}, cli.USAGE, "COMMAND"),
    (["tools.job", "tail"], {}, cli.USAGE, "COMMAND"),
    (["tools.job", "list", "--stack", "nope"], {}, cli.USAGE, "--stack"),
    (["tools.job", "logs", "--kubeconfig", "{dir}/missing"], {}, cli.ENVIRONMENT, "--kubeconfig"),
    (["tools.job", "stop"], {"HOME": "{dir}/home", "KUBECONFIG": ""}, cli.ENVIRONMENT, "no kubeconfig"),
    (["tools.job", "summary", "--kubeconfig", "{refused_kubeconfig}"], {}, cli.ENVIRONMENT, "cannot be reached"),
]


@pytest.mark.parametrize("argv, env, code, words", USER_ERRORS, ids=[" ".join(case[0]) for case in USER_ERRORS])
def test_a_user_error_is_a_short_message_and_a_documented_exit_code(files, argv, env, code, words):
    module, *args = [part.format(**files) for part in argv]
    done = command(module, *args, env={key: value and value.format(**files) for key, value in env.items()})
    ours = [line for line in done.stderr.splitlines() if line.startswith(("error:", "usage:"))]
    assert done.returncode == code, (f"`{module} {' '.join(args)}` must exit {code}, exited {done.returncode}:\n"
                                     f"{done.stderr[-2000:]}")
    assert "Traceback" not in done.stderr, f"`{module}` printed a traceback:\n{done.stderr[-3000:]}"
    if code != cli.CHECK_FAILED:
        assert ours and words in done.stderr, f"the error must name {words!r}:\n{done.stderr[-2000:]}"
        error_at = next(i for i, line in enumerate(done.stderr.splitlines()) if line.startswith("error:"))
        assert len(done.stderr.splitlines()[error_at:]) <= 2, f"one line and a hint at most:\n{done.stderr}"


@pytest.mark.parametrize("module", COMMANDS)
def test_help_shows_the_exit_codes_without_loading_heavy_libraries(module):
    probe = (f"import runpy, sys\nsys.argv = ['{module}', '--help']\n"
             f"try:\n    runpy.run_module('{module}', run_name='__main__')\nexcept SystemExit as e:\n"
             f"    assert e.code in (0, None), e.code\n"
             f"print('LOADED', sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"python -m {module}" in done.stdout and "exit status:" in done.stdout, done.stdout[:500]
    for code in (cli.CHECK_FAILED, cli.USAGE, cli.ENVIRONMENT):
        assert f"\n  {code}    " in done.stdout, f"--help of {module} must document exit code {code}"
    assert done.stdout.strip().endswith("LOADED []"), (
        f"--help of {module} must not import {HEAVY_MODULES}: {done.stdout.strip().splitlines()[-1]}")


SEQ_LEN_TOO_LONG = (["--model_config", "tiny", "--seq_len", "100000"],
                    "--seq_len 100000 is above the model's maximum of 512 positions")
CHEAP_REFUSALS = [("workload.train", *SEQ_LEN_TOO_LONG), ("workload.local", *SEQ_LEN_TOO_LONG),
                  ("workload.export", ["/no/such/checkpoint_000001", "/no/such/model"], "no such directory")]


@pytest.mark.parametrize("module, argv, words", CHEAP_REFUSALS, ids=[case[0] for case in CHEAP_REFUSALS])
def test_what_needs_no_library_is_refused_before_the_heavy_libraries_load(module, argv, words):
    """A shipped or named model's limits are known without torch (workload.run.preflight), and a local checkpoint
    that is not there needs no torch to say so: the refusal comes before seconds of imports, as a typo's does."""
    code, stderr, loaded, _ = run_cli(module, argv)
    assert words in stderr, stderr[-2000:]
    assert (code, loaded) == (cli.USAGE, []), f"{module}: exit {cli.USAGE} with nothing of {HEAVY_MODULES} loaded"


def test_each_job_command_shows_its_own_defaults():
    local, train = command("workload.local", "--help").stdout, command("workload.train", "--help").stdout
    assert "python -m workload.local" in local and "data/corpus.txt" in local, "the local run's own usage"
    flat = lambda text: " ".join(text.split())  # noqa: E731 argparse wraps help lines
    assert "Optimizer steps. (default: 40)" in flat(local) and "Optimizer steps. (default: 50)" in flat(train), (
        "each command's --help must print the steps it really runs")
    assert "GPU of the cluster, or 2 CPU workers on a cluster without GPUs. (default: 0)" in flat(train), (
        "a zero default is shown too")
    assert "Configuration name of a Hugging Face --dataset (e.g. wikitext-2-raw-v1). (default: empty)" in flat(train)


@pytest.mark.parametrize("module", ["tools.status", "workload.local"])
def test_a_python_without_the_projects_packages_says_how_to_run_the_command(module):
    """The system's python3 instead of .venv's, stood for by this one without its site-packages (-S)."""
    done = subprocess.run([sys.executable, "-S", "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == cli.ENVIRONMENT and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        f"error: this Python ({sys.executable}) lacks the project's packages ("
        + ("yaml, boto3, kubernetes, pulumi)" if module.startswith("tools") else "ray, torch, transformers)"),
        f"set the project up with `bash scripts/setup.sh`, then run the command from the repository's root: "
        f"`.venv/bin/python -m {module}`"], done.stderr
