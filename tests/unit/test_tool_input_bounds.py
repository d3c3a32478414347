"""What the operator's commands take, bounded before any request: a JOB that is no job server's id (a '/', '..', a
control character, past any id's length) refused before the Jobs API is asked; tools.capacity's --count past a
capacity reservation's 1,000 instances refused before credentials are looked for; workload.transport's LOGFILEs read
by the rule of every file the user names (a socket, a sparse file, more than the bound: refused unread); and a remote
location with credentials in it (user information, a signature parameter) refused before any request, never
repeated; workload.train's --time_limit_s within the stack's 30 days."""
from __future__ import annotations

import os
import socket

import pytest

from tests.support.cli_process import run_cli
from workload import cli

SECRET = "Zr8plainTextSecretValue"


@pytest.mark.parametrize("job", ["raysubmit_4LamXRuQpYdSMg7J", "raytrain-p4d.prod-run_7-0a1b2c3d", "02000000",
                                 "x" * 160])
def test_a_job_servers_ids_are_taken(job):
    from tools.job import job_id

    assert job_id(job) == job


@pytest.mark.parametrize("job, said", [
    ("raysubmit_abc/../../api/jobs", "got raysubmit_abc/../../api/jobs"),
    ("..", "got .."),
    (".", "got ."),
    ("_raysubmit", "got _raysubmit"),
    ("run%2F..%2Fversion", "got run%2F..%2Fversion"),
    ("raysubmit_ab\rcd", "got a value of 15 characters"),
    ("y" * 161, "got a value of 161 characters"),
    ("z" * 300_000, "got a value of 300,000 characters"),
])
def test_a_job_that_is_no_id_is_refused_before_any_request(job, said, capsys):
    from tools import job as job_command

    def no_server(_args):
        raise AssertionError("the job server was asked")

    with pytest.raises(SystemExit) as exited:
        job_command.main(["stop", "--stack", "dev", job], job_server=no_server)
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == cli.USAGE and err[0].startswith("error: argument JOB: must be a submission id"), err
    assert said in err[0] and len(err[0]) < 400, err


@pytest.mark.parametrize("count, said", [("1001", "got 1001"), ("0", "got 0"), ("-2", "got -2"),
                                         ("7" * 40, "got a number of 40 digits")])
def test_count_past_a_reservations_instances_is_refused_before_credentials(count, said, monkeypatch, capsys):
    from tools.capacity import cli as capacity

    monkeypatch.setattr(capacity, "check_credentials", lambda _aws: (_ for _ in ()).throw(AssertionError("asked")))
    code = cli.run(capacity.main, ["--instance-type", "p4d.24xlarge", f"--count={count}"])
    err = capsys.readouterr().err.splitlines()
    assert code == cli.USAGE and err == [f"error: --count must be from 1 to 1,000 GPU nodes (a capacity reservation's "
                                         f"most instances); {said}"], err


def test_count_within_the_bound_is_taken():
    from tools.capacity.cli import MAX_COUNT, parse_args

    assert parse_args(["--instance-type", "p4d.24xlarge", "--count", str(MAX_COUNT)]).count == MAX_COUNT


def test_transport_logs_are_read_by_the_rule_of_every_file_named(tmp_path, monkeypatch, capsys):
    from workload.fabric import transport

    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "rank0.log"))
    with open(tmp_path / "holes.log", "wb") as file:
        file.truncate(64 * 2**20)  # 64 MiB that store nothing
    for log, said in ((tmp_path / "rank0.log", "is a socket, not a regular file (refused unread)"),
                      (tmp_path / "holes.log", "sparse")):
        assert cli.run(transport.main, [str(log)]) == cli.USAGE, log
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"error: LOGFILE {log} ") and said in err[0] and len(err) == 1, err
    listening.close()
    # The bound holds for all the LOGFILEs together: two of 600 bytes against 1,000.
    monkeypatch.setattr(transport, "MAX_LOG_BYTES", 1000)
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("host:1:1 [0] NCCL INFO Using network Socket\n" * 14)
    assert cli.run(transport.main, [str(tmp_path / "a.log"), str(tmp_path / "b.log")]) == cli.USAGE
    err = capsys.readouterr().err
    assert "LOGFILE" in err and "b.log" in err and "the LOGFILEs before it took" in err and "Traceback" not in err, err


@pytest.mark.parametrize("run", [f"s3://ops:{SECRET}@team-bucket/runs/r7",
                                 f"s3://{SECRET}@team-bucket/runs/r7",
                                 f"s3://team-bucket/runs/r7?X-Amz-Signature={SECRET}"])
def test_a_run_with_credentials_in_its_uri_is_refused_before_any_request(run, tmp_path, monkeypatch, capsys):
    import sys

    from tools import loss_curve

    monkeypatch.delitem(sys.modules, "pyarrow.fs", raising=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # any import of pyarrow (the S3 client) fails the test
    code = cli.run(loss_curve.main, [run, "--out", str(tmp_path / "curve.svg")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith("error: RUN 's3://team-bucket/runs/r7'") and "credentials" in err, err
    assert SECRET not in err and "ops" not in err, err


def test_every_reader_and_writer_of_a_remote_location_applies_the_rule(tmp_path, monkeypatch):
    import sys

    from workload import storage

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(cli.UsageError, match="CHECKPOINT 's3://team-bucket/x'.*holds credentials") as refused:
        with storage.local_copy(f"s3://AKIAEXAMPLE:{SECRET}@team-bucket/x"):
            pass
    with pytest.raises(cli.UsageError, match="holds credentials") as written:
        storage.upload(str(tmp_path), f"s3://team-bucket/models?token={SECRET}")
    assert SECRET not in str(refused.value) + str(written.value)
    assert os.path.isdir(tmp_path)


@pytest.mark.parametrize("limit", ["1e300", "2592001", "-60", "nan"])
def test_a_time_limit_past_the_stacks_bound_is_refused_not_an_overflow(limit, capsys):
    """--time_limit_s past 30 days (trainTimeoutMinutes' bound, the one that sets it) is bad input: 1e300 reached
    setitimer, which raised OverflowError past time_t."""
    from infra.config.settings import MAX_TIMEOUT_MINUTES
    from workload import train

    assert train.MAX_TIME_LIMIT_S == MAX_TIMEOUT_MINUTES * 60
    with pytest.raises(cli.UsageError, match=r"^--time_limit_s must be a positive number of seconds, at most 2,592,000"):
        train.parse_args(["--time_limit_s", limit])
    assert train.parse_args(["--time_limit_s", str(train.MAX_TIME_LIMIT_S)])[1] == train.MAX_TIME_LIMIT_S


@pytest.mark.parametrize("profile", ["team-dev\n[profile other]", "dev\x1b[2J", "p" * 257])
@pytest.mark.parametrize("command", ["tools.doctor", "tools.capacity"])
def test_a_profile_that_is_no_name_is_refused_before_boto3_loads(command, profile):
    """An AWS profile is an INI section's name, one line: a newline or a control character names none, and the
    refusal shows it escaped on one line, before any profile is looked up."""
    code, stderr, loaded, _ = run_cli(command, ["--profile", profile], watch=("boto3",))
    # tools.doctor answers before boto3 loads; tools.capacity's module imports its AWS clients' module first
    assert (code, loaded) == (2, [] if command == "tools.doctor" else ["boto3"]), stderr
    error = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "--profile" in error[0] and "is no name" in error[0], stderr
    assert "[profile other]" not in stderr.replace("\\n[profile other]", ""), stderr


def test_a_profiles_name_is_taken_as_written():
    assert cli.named("team-dev") == "team-dev" and cli.named("sso admin@acme") == "sso admin@acme"


@pytest.mark.parametrize("claimed", [2**40, 2**63 - 1])
def test_event_files_without_one_whole_record_are_answered_before_the_protocol_buffers(tmp_path, claimed):
    """A run's event file whose first record claims more than the file holds (cut off mid-write, or crafted) has no
    scalar: tools.loss_curve says so without importing tensorboardX (over a second of its writers' imports)."""
    import struct

    events = tmp_path / "run" / "tensorboard"
    events.mkdir(parents=True)
    (events / "events.out.tfevents.7.node").write_bytes(struct.pack("<Q", claimed) + b"\0" * 4 + b"e" * 64)
    code, stderr, loaded, _ = run_cli("tools.loss_curve", [str(tmp_path / "run"), "--out", str(tmp_path / "o.svg")],
                                      watch=("tensorboardX",))
    assert (code, loaded) == (2, []), stderr
    assert "hold no train/loss" in stderr and not (tmp_path / "o.svg").exists(), stderr


@pytest.mark.parametrize("command", ["tools.doctor", "tools.capacity"])
def test_a_profile_no_aws_file_defines_is_refused_before_boto3_loads(command, tmp_path, monkeypatch):
    """--profile with a token pasted in (a Slack bot token's shape) or a name no AWS file defines: refused at the flag
    (workload/aws_profile.py), without the value, before boto3, pulumi or kubernetes load; tools.doctor in well under
    a second of its own (its module imports none of them)."""
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\n[profile team-dev]\n[team-ops]\n")
    (tmp_path / "credentials").write_text("[ci-runner]\naws_access_key_id = x\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    pasted = "xoxb-" + "5829301746-" * 2 + "Zr8Qm2Vx7Kp4Ty1Lw9Hs3Nd6"
    argv = ["--profile", pasted] + (["--instance-type", "g6.12xlarge", "--count", "1"] if command == "tools.capacity"
                                    else ["--stack", "dev"])
    code, stderr, loaded, _ = run_cli(command, argv, watch=("boto3", "pulumi", "kubernetes"))
    assert code == cli.USAGE and "--profile" in stderr and "no such AWS profile" in stderr, stderr
    assert pasted[5:] not in stderr and "team-dev" in stderr, stderr
    if command == "tools.doctor":
        assert loaded == [], loaded


def test_the_profiles_are_read_as_botocore_reads_them(tmp_path, monkeypatch):
    from workload.aws_profile import aws_profile, profile_names

    (tmp_path / "config").write_text('[default]\n[profile team-dev]\n[team-ops]\n[profile "sso admin"]\n'
                                     "[sso-session corp]\n")
    (tmp_path / "credentials").write_text("[ci-runner]\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    assert profile_names() == {"default", "team-dev", "sso admin", "ci-runner"}
    assert aws_profile("ci-runner") == "ci-runner"
    for missing in ("team-ops", "corp", "team-dev2"):
        with pytest.raises(Exception, match="no such AWS profile"):
            aws_profile(missing)
    (tmp_path / "config").write_text("[default]\n[default]\n")  # botocore's ConfigParseError: boto3 says so
    assert profile_names() is None and aws_profile("anything") == "anything"
