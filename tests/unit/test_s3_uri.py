"""The one rule of an s3:// location (workload/config/s3_uri.py), held against pyarrow's own parser where pyarrow
decides, and applied by every command that takes one (--storage_path, --dataset, --model_id, --tokenizer of
workload.local and workload.train, workload.export's CHECKPOINT, tools.loss_curve's RUN): exit 2 naming the flag or
argument, before any AWS session is made or any request sent."""
from __future__ import annotations

import pyarrow
import pyarrow.fs
import pytest

from tools import loss_curve
from workload import cli, s3_access, train
from workload.checkpoint import export
from workload.config.s3_uri import s3_uri_problem
from workload.run import local

# Values pyarrow.fs.FileSystem.from_uri refuses (ArrowInvalid): its RFC 3986 parser's syntax errors, its S3 options'
# unknown query parameters, an empty bucket.
PYARROW_REFUSES = [
    "s3://ml-team/ckpt/run 7", "s3://ml-team/data.parquet?versionId=abc123", "s3://ml-team/corpus.jsonl?partNumber=2",
    "s3://ml-team/a%g1/x", "s3://ml-team/shards[0]", "s3://ml-team/naïve/m", "s3://ml-team/x{y}", "s3://ml-team/a|b",
    "s3://ml-team/x^y", "s3://ml-team/x\\y", "s3://ml-team/a`b", 's3://ml-team/a"b', "s3://ml-team/a<b>",
    "s3:///just-a-key", "s3://ml-team/a\tb",
]
# Values pyarrow takes and S3's rules do not: a bucket name S3 never gives, a key outside the safe characters, a
# percent-escape pyarrow decodes while S3 and IAM read it literally, a '..' segment.
S3_REFUSES = [
    "s3://Team_Bucket/runs", "s3://ml-team/a#b", "s3://ml-team/a+b", "s3://ml-team/a:b", "s3://ml-team:443/x",
    "s3://ml-team/a%2Fb", "s3://ml-team/runs/../other", "s3://ml-team/runs//x", "s3://192.168.0.9/x",
]
# What S3 and pyarrow both take.
ACCEPTED = [
    "s3://ml-team", "s3://ml-team/", "s3://ml-team/runs/exp-1/", "s3://ml.team-2/corpora/date=2026-01-01/part_0.jsonl.gz",
    "s3://ml-team/m/(v2)/it's!", "s3://123-ml/a/b.txt",
]


@pytest.fixture
def pyarrow_offline(monkeypatch):
    """pyarrow's S3 file system pointed at a closed port: from_uri then asks nothing of the network (no region
    lookup), so what it refuses is its parser's decision."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("uri", PYARROW_REFUSES)
def test_what_pyarrow_refuses_is_refused(pyarrow_offline, uri):
    with pytest.raises(pyarrow.ArrowInvalid):
        pyarrow.fs.FileSystem.from_uri(uri)
    assert s3_uri_problem(uri) is not None, f"{uri!r}: pyarrow refuses it, the rule passed it"


@pytest.mark.parametrize("uri", S3_REFUSES)
def test_what_s3_refuses_is_refused_though_pyarrow_parses_it(pyarrow_offline, uri):
    pyarrow.fs.FileSystem.from_uri(uri)
    assert s3_uri_problem(uri) is not None, f"{uri!r}: outside S3's rules, the rule passed it"


@pytest.mark.parametrize("uri", ACCEPTED)
def test_what_s3_and_pyarrow_take_passes(pyarrow_offline, uri):
    pyarrow.fs.FileSystem.from_uri(uri)
    assert s3_uri_problem(uri) is None, f"{uri!r}: {s3_uri_problem(uri)}"


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """No credentials, and any AWS session a failure of the test: the refusal must come before it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")

    def session(*args, **kwargs):
        raise AssertionError("an AWS session was made for a location the rule refuses")
    monkeypatch.setattr(s3_access, "aws_session", session)
    return tmp_path


TINY = ["--model_config", "tiny", "--seq_len", "32", "--steps", "1"]
# (command, argv, the name the refusal starts with, a word of the reason).
COMMANDS = [
    (local.main, [*TINY, "--storage_path", "s3://ml-team/runs/exp 3"], "--storage_path", "safe key characters"),
    (local.main, [*TINY, "--dataset", "s3://ml-team/c.jsonl?versionId=7"], "--dataset", "'?'"),
    (local.main, ["--seq_len", "32", "--model_id", "s3://Models_Team/base/"], "--model_id", "bucket naming rules"),
    (local.main, [*TINY, "--dataset", "s3://ml-team/c.jsonl", "--tokenizer", "s3://ml-team/tok{1}/"], "--tokenizer",
     "safe key characters"),
    (train.main, [*TINY, "--storage_path", "s3://ml-team/runs/a%20b"], "--storage_path", "percent-escape"),
    (train.main, [*TINY, "--storage_path", "s3://ml-team/runs", "--run_name", "trial #4"], "--run_name",
     "safe key characters"),
    (train.main, [*TINY, "--dataset", "s3://Corpora.Team/c.jsonl"], "--dataset", "bucket naming rules"),
    (export.main, ["s3://ml-team/runs/r1/checkpoint 000010", "OUT_DIR"], "CHECKPOINT", "safe key characters"),
    (export.main, ["s3://ml_team/runs/r1/checkpoint_000010", "OUT_DIR"], "CHECKPOINT", "bucket naming rules"),
    (loss_curve.main, ["s3://Research_Runs/r/ray-1", "--out", "OUT_DIR.svg"], "RUN", "bucket naming rules"),
    (loss_curve.main, ["s3://research-runs/r/ray 1", "--out", "OUT_DIR.svg"], "RUN", "safe key characters"),
]


@pytest.mark.parametrize("main, argv, name, why", COMMANDS, ids=lambda value: getattr(value, "__module__", None))
def test_every_command_refuses_a_bad_s3_location_before_aws(no_aws, monkeypatch, capsys, main, argv, name, why):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # workload.train's driver: a closed port, never a real cluster
    argv = [word.replace("OUT_DIR", str(no_aws / "out")) for word in argv]
    code = cli.run(main, argv)
    err = capsys.readouterr().err
    assert code == cli.USAGE, err
    assert err.startswith(f"error: {name} 's3://"), err
    assert why in err and "allowed" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) <= 2, err


def test_a_secret_looking_part_of_a_refused_location_is_not_quoted(no_aws, capsys):
    """No vendor's token shape (the flags' own bound lets it through), a random-looking run: masked in the refusal
    (workload/config/secret_text.py)."""
    token = "Xk9fQ2mWz7LpR4vT8bN3cY6hJ1dG"
    code = cli.run(local.main, [*TINY, "--storage_path", f"s3://ml-team/{token}/run 2"])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith("error: --storage_path "), err
    assert token not in err, err
