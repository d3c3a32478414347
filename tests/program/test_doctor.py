"""`python -m tools.doctor` against the stand-ins the README's journeys use: `pulumi` and `aws` as scripts on PATH
that answer as the real CLIs do (`pulumi version` prints `v3.x.y`; `pulumi whoami --json` prints
{"user", "organizations", "url"}, pulumi/pulumi pkg/cmd/pulumi/whoami.go; `aws --version` prints
`aws-cli/2.x.y Python/... Linux/...`), moto for STS and EC2, Service Quotas answered in its real shape (moto has
no quota values), and checkip.amazonaws.com as a local server that answers an address as text."""
from __future__ import annotations

import http.server
import json
import os
import threading

import pytest

from infra.aws import network
from tests.support.docs_shell import JourneyAws
from tests.support.pulumi_mocks import stack_settings
from tools import doctor
from workload import cli


def fake_cli(directory, name: str, answers: dict[str, str]) -> None:
    """A script answering each argument list (joined by spaces) with its text, exit 1 for any other."""
    cases = "".join(f"  '{args}') printf '%s\\n' '{text}';;\n" for args, text in answers.items())
    (directory / name).write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "unknown: $*" >&2; exit 1;;\nesac\n')
    (directory / name).chmod(0o755)


class _CheckIp(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"52.94.236.248\n"  # a public address (AWS's own range), as checkip answers: the address and a newline
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def checkip(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CheckIp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(network, "CHECKIP_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    yield
    server.shutdown()


@pytest.fixture
def no_time_limits(monkeypatch):
    """The stand-ins answer at once, so how soon their answers come depends only on how loaded this machine is, which
    must not decide a test: without the limits the doctor puts on a real CLI (one that hangs at a prompt) and on
    checkip, it waits for them. test_a_cli_that_does_not_answer_is_reported_not_waited_on holds the CLI limit."""
    monkeypatch.setattr(doctor, "COMMAND_TIMEOUT_S", None)
    monkeypatch.setattr(network, "CHECKIP_TIMEOUT_SECONDS", None)


def test_a_ready_machine_is_ok_but_for_the_passphrase(tmp_path, monkeypatch, capsys, aws_env, checkip, no_time_limits):
    fake_cli(tmp_path, "pulumi", {"version": "v3.272.0", "whoami --json": json.dumps(
        {"user": "alice", "organizations": [], "url": "s3://alice-pulumi-state"})})
    fake_cli(tmp_path, "aws", {"--version": "aws-cli/2.27.3 Python/3.13.3 Linux/6.8.0 exe/x86_64.ubuntu.24"})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    region = stack_settings("dev")["aws:region"]
    assert doctor.main(["--stack", "dev"], aws=JourneyAws(region)) == cli.CHECK_FAILED
    lines = capsys.readouterr().out.splitlines()
    by_name = {line.split()[1]: line for line in lines if line[:3] in ("ok ", "fix")}
    assert by_name["pulumi"].startswith("ok ") and "3.272.0" in by_name["pulumi"], lines
    assert by_name["backend"] == "ok   backend     s3://alice-pulumi-state as alice", lines
    assert by_name["passphrase"].startswith("fix") and "export PULUMI_CONFIG_PASSPHRASE" in by_name["passphrase"]
    assert by_name["aws"] == "ok   aws         AWS CLI 2.27.3", lines
    assert by_name["credentials"] == "ok   credentials AWS account 123456789012", lines
    assert by_name["quota"].startswith("ok ") and f"{region}: 4096 of 4096 vCPUs free, 96 needed " \
        "(2 x g6.12xlarge)" in by_name["quota"], lines
    assert by_name["address"] == "ok   address     52.94.236.248, admitted to the API endpoint as 52.94.236.248/32"
    assert lines[-1] == "7 of 8 ok; to fix: passphrase", lines

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse")
    assert doctor.main(["--stack", "dev"], aws=JourneyAws(region)) == cli.OK
    out = capsys.readouterr().out
    assert "correct horse" not in out and out.splitlines()[-1] == "8 of 8 ok: ready for `pulumi up` on stack dev"


def test_a_bare_machine_gets_what_to_do_for_each_item(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi, no aws
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(network, "deployer_public_ip", lambda: None)  # offline
    assert doctor.main(["--stack", "dev"]) == cli.CHECK_FAILED
    lines = capsys.readouterr().out.splitlines()
    fixes = {line.split()[1]: line for line in lines if line.startswith("fix")}
    assert set(fixes) == {"pulumi", "aws", "credentials", "address"}, lines
    assert "get.pulumi.com" in fixes["pulumi"] and "getting-started-install" in fixes["aws"]
    assert "no AWS credentials found" in fixes["credentials"] and "aws sso login" in fixes["credentials"]
    assert "apiPublicAccessCidrs[0]" in fixes["address"]


def test_a_cli_that_does_not_answer_is_reported_not_waited_on(tmp_path, monkeypatch):
    """A `pulumi` that never answers (stuck at a prompt) is reported after the limit: a stand-in that sleeps far past a
    limit of a tenth of a second."""
    (tmp_path / "pulumi").write_text("#!/bin/sh\nexec sleep 60\n")
    (tmp_path / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(doctor, "COMMAND_TIMEOUT_S", 0.1)
    (check,) = doctor.check_pulumi(doctor.run_command)
    assert not check.ok and check.said == "`pulumi version` failed: `pulumi version` did not answer within 0.1 s", check
