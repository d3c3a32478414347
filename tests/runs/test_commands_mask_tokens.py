"""The commands, run as a user types them (a fresh process each), never print a credential they were given or read:
a refusal leaves through workload/cli.py's one error exit, which masks URI user information and anything shaped like
a token (workload/config/secret_text.py); what a command prints from a file it did not write (workload.transport's
JSON from a job's log) is masked by the same rule. Values differ from the audits'."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_process import run_cli
from workload import cli
from workload.config.secret_text import TOKEN_SHOWN

REPO = Path(__file__).resolve().parents[2]
HIDDEN = "Gt5Wn2Kc7Zx"
UNLISTED = f"mq-{HIDDEN}Ra4{HIDDEN}"  # a token shape no vendor rule names
COMMANDS = ["workload.train", "workload.local", "workload.transport", "workload.export", "tools.capacity",
            "tools.doctor", "tools.status", "tools.job", "tools.loss_curve", "tools.gpu_panel"]


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "RAY_ADDRESS": "127.0.0.1:9"})


@pytest.mark.parametrize("module", COMMANDS)
def test_an_unknown_flag_holding_a_token_is_refused_unechoed(module):
    done = _run(module, f"--api_key={UNLISTED}")
    assert done.returncode == cli.USAGE, f"{module}: exit {done.returncode}: {done.stderr[-300:]}"
    assert HIDDEN not in done.stderr + done.stdout, f"{module}: echoed: {done.stderr[:300]}"


def test_a_config_uri_with_credentials_is_refused_naming_the_flag_unechoed():
    code, stderr, loaded, _ = run_cli("workload.local", ["--config", f"s3://AKIDEXAMPLE77:{HIDDEN}@team-data/run.yaml"])
    assert code == cli.USAGE and "--config" in stderr and "team-data" in stderr, stderr
    assert HIDDEN not in stderr, stderr
    assert loaded == [], f"refused before the heavy imports, got {loaded}"


def test_transport_masks_a_token_read_from_the_log(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(
        "ip-10-1-2-3:77:88 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>\n"
        f"ip-10-1-2-3:77:88 [0] NCCL INFO Using network {UNLISTED}\n"
        "ip-10-1-2-3:77:88 [0] NCCL INFO Using network Socket\n"
        "ip-10-1-2-3:77:88 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n")
    done = _run("workload.transport", str(log))
    assert HIDDEN not in done.stdout + done.stderr, done.stdout[:500]
    networks = {name for rank in json.loads(done.stdout)["ranks"].values() for name in rank["networks"]}
    assert networks == {"Socket", f"mq-{TOKEN_SHOWN}"}, networks


def test_loss_curve_refuses_a_run_uri_with_credentials_unechoed(tmp_path):
    done = _run("tools.loss_curve", f"https://viewer:{HIDDEN}@runs.example.com/sft-3", "--out", str(tmp_path / "c.svg"))
    assert done.returncode in (cli.USAGE, cli.ENVIRONMENT), done.stderr
    assert HIDDEN not in done.stderr + done.stdout, done.stderr
