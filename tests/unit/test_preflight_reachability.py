"""The services a run uses and its disk, checked before Ray (workload/run/services.py, run by preflight.validate in the
job's driver and workload.local): exit 3 in seconds where the run used to fail inside Ray after 40-80 s.

The fakes and what they stand for:
- tests/support/fake_hub.py's `unreachable_hub` is HF_ENDPOINT at a closed port: huggingface_hub's session gets a
  connection refused, as from a machine without network (the real Hub, unreachable, is the same transport error;
  huggingface_hub would retry it five times over 23 s, utils/_http.py http_backoff, which `waits` records).
- tests/support/fake_s3.py is moto's S3 server (AWS_ENDPOINT_URL_S3, which boto3 honours as it honours the real
  endpoint): HeadBucket answers 200 for a bucket that exists and 404 for one that does not, as S3 does (S3 API
  Reference, HeadBucket: "404 Not Found" with no body); a closed port stands for an S3 endpoint that cannot be reached.
- The disk is shutil.disk_usage's answer replaced: a real full disk is what os.statvfs reports for the filesystem.
"""
from __future__ import annotations

import collections
import time

import pytest

from tests.support.fake_hub import FakeHub, unreachable_hub
from workload import cli, s3_access, train
from workload.config import TrainConfig
from workload.run import preflight, services

DiskUsage = collections.namedtuple("DiskUsage", "total used free")


@pytest.fixture
def empty_caches(monkeypatch, tmp_path):
    for name in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "HF_TOKEN", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    from huggingface_hub import constants

    # huggingface_hub read HF_HOME at import: its cache lookup (try_to_load_from_cache) is pointed at the empty one.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    return tmp_path


def test_a_hub_model_with_the_hub_unreachable_is_exit_3_in_the_drivers_checks(empty_caches, monkeypatch, capsys):
    _, waits = unreachable_hub(monkeypatch)
    started = time.monotonic()
    # The job's driver (workload.train): a shipped model's config is known without the Hub, its weights are not.
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # as Ray's job supervisor sets it for the job's entrypoint
    code = cli.run(train.main, ["--model_id", "Qwen/Qwen2.5-0.5B", "--seq_len", "32", "--steps", "2"])
    err = capsys.readouterr().err
    assert code == cli.ENVIRONMENT, err
    assert err.startswith("error: --model_id Qwen/Qwen2.5-0.5B: the Hugging Face Hub at http://127.0.0.1:"), err
    assert "HF_HUB_OFFLINE=1" in err and "Traceback" not in err
    assert waits == [] and time.monotonic() - started < 10
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # transformers then reads the cache only: an empty one is said so
    with pytest.raises(cli.EnvironmentProblem, match="not in this machine's Hub cache and HF_HUB_OFFLINE is set"):
        services.check_hub_model(TrainConfig(model_id="Qwen/Qwen2.5-0.5B", seq_len=32))


def test_a_hub_model_the_hub_serves_passes(empty_caches, monkeypatch):
    with FakeHub(repos={"acme/small": {"config.json": b"{}"}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        services.check_hub_model(TrainConfig(model_id="acme/small", seq_len=32))
    assert [path for _, path, _ in hub.requests] == ["/acme/small/resolve/main/config.json"]


def test_a_hub_dataset_with_the_hub_unreachable_is_exit_3_unless_cached(empty_caches, monkeypatch, capsys):
    unreachable_hub(monkeypatch)
    cfg = TrainConfig(model_config="tiny", seq_len=32, steps=2, dataset="acme/chats", data_format="chat")
    with pytest.raises(cli.EnvironmentProblem, match=r"^--dataset acme/chats: the Hugging Face Hub at .* not reachable"):
        preflight.validate(cfg)
    # datasets' load_dataset falls back to its cache when the Hub does not answer: a cached dataset is said, not refused
    (empty_caches / "hf" / "datasets" / "acme___chats").mkdir(parents=True)
    from workload.data import hub_dataset

    said = []
    assert hub_dataset.check_dataset(cfg, say=said.append) is None
    assert said and "this machine's cache holds it" in said[0]


@pytest.fixture
def s3_endpoint(monkeypatch):
    from tests.support.fake_s3 import PolicyEnforcingS3

    server = PolicyEnforcingS3({"AKIAUSER": None})
    server.start()
    server.as_this_machines_s3(monkeypatch, "AKIAUSER", "secret")
    import boto3

    # A session of its own: boto3.client would reuse the default session's credentials, cached by an earlier test.
    client = boto3.session.Session().client("s3")
    try:
        client.create_bucket(Bucket="runs", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass  # moto's backends are the process's: an earlier test's server made it
    yield server
    server.stop()


def test_an_s3_storage_path_is_asked_once_before_ray(s3_endpoint, monkeypatch, tmp_path):
    services.check_s3_reachable(TrainConfig(model_config="tiny", storage_path="s3://runs/team"))
    with pytest.raises(cli.UsageError, match="--storage_path s3://nope/x: bucket nope does not exist"):
        services.check_s3_reachable(TrainConfig(model_config="tiny", storage_path="s3://nope/x"))
    with monkeypatch.context() as patched:  # no credentials anywhere boto3 looks
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            patched.delenv(name)
        patched.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        patched.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        with pytest.raises(cli.EnvironmentProblem, match="--storage_path s3://runs/team: no AWS credentials"):
            services.check_s3_reachable(TrainConfig(model_config="tiny", storage_path="s3://runs/team"))
    closed = FakeHub()  # a port where nothing listens
    url = closed.url
    closed.server_close()
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
    started = time.monotonic()
    with pytest.raises(cli.EnvironmentProblem, match="S3 is not reachable from this machine"):
        services.check_s3_reachable(TrainConfig(model_config="tiny", storage_path="s3://runs/team"))
    assert time.monotonic() - started < s3_access.S3_CONNECT_TIMEOUT_S + s3_access.S3_READ_TIMEOUT_S


def test_every_s3_flag_is_asked_by_the_one_rule_with_the_request_its_run_makes(s3_endpoint, monkeypatch, tmp_path):
    """--dataset, --model_id and --tokenizer at s3:// are asked as --storage_path is, each with the one request the
    pods' policy allows for it (HeadObject of a file, a listing under a directory's prefix): a bucket or file that
    does not exist names the flag that gave it, and no credentials say what the run would do there."""
    import boto3

    boto3.session.Session().client("s3").put_object(Bucket="runs", Key="data/x.jsonl", Body=b'{"text": "a"}\n')
    with pytest.raises(cli.UsageError, match="--dataset s3://nope/x.jsonl: no such file"):
        services.check_s3_reachable(TrainConfig(model_config="tiny", dataset="s3://nope/x.jsonl",
                                                storage_path=str(tmp_path)))
    with pytest.raises(cli.UsageError, match=r"^--dataset s3://runs/data/y.jsonl: no such file \(S3 answered 404"):
        services.check_s3_reachable(TrainConfig(model_config="tiny", dataset="s3://runs/data/y.jsonl",
                                                storage_path=str(tmp_path)))
    with pytest.raises(cli.UsageError, match="--tokenizer s3://gone/tok: bucket gone does not exist"):
        services.check_s3_reachable(TrainConfig(model_config="tiny", tokenizer="s3://gone/tok",
                                                dataset="s3://runs/data/x.jsonl", storage_path="s3://runs/team"))
    s3_endpoint.seen.clear()
    services.check_s3_reachable(TrainConfig(model_id="s3://runs/models/base", dataset="s3://runs/data/x.jsonl",
                                            storage_path="s3://runs/team"))
    assert [seen.operation for seen in s3_endpoint.seen] == ["HeadBucket", "HeadObject", "ListObjectsV2"], \
        s3_endpoint.seen
    with monkeypatch.context() as patched:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            patched.delenv(name)
        patched.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        patched.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        with pytest.raises(cli.EnvironmentProblem,
                           match="--dataset s3://runs/x.jsonl: no AWS credentials on this machine to read it from"):
            services.check_s3_reachable(TrainConfig(model_config="tiny", dataset="s3://runs/x.jsonl",
                                                    storage_path=str(tmp_path)))


def test_a_disk_without_room_for_a_checkpoint_is_refused_with_the_sizes(monkeypatch, tmp_path):
    cfg = TrainConfig(model_config="tiny", seq_len=32, storage_path=str(tmp_path / "runs"))
    from workload.model import structure

    parameters = structure.parameter_count(cfg.architecture)
    checkpoint, exported = services.planned_bytes(cfg, cfg.architecture)
    assert (checkpoint, exported) == (12 * parameters, 4 * parameters)
    need = checkpoint + exported
    monkeypatch.setattr(services.shutil, "disk_usage", lambda path: DiskUsage(need * 10, need * 9, need // 2))
    with pytest.raises(cli.EnvironmentProblem, match=r"free at .*, one checkpoint and the exported model need"):
        services.check_disk(cfg, cfg.architecture)
    said = []
    monkeypatch.setattr(services.shutil, "disk_usage", lambda path: DiskUsage(need * 10, need * 9, need + need // 20))
    services.check_disk(cfg, cfg.architecture, say=said.append)
    assert len(said) == 1 and said[0].startswith(f"warning: --storage_path {cfg.storage_path}: ")
    said.clear()
    monkeypatch.setattr(services.shutil, "disk_usage", lambda path: DiskUsage(need * 10, need * 5, need * 2))
    services.check_disk(cfg, cfg.architecture, say=said.append)
    assert said == []
    lora = TrainConfig(model_config="tiny", seq_len=32, method="lora", export="none", storage_path=cfg.storage_path)
    # Only the adapters train (the tiny model is so small that they are a third of it); nothing is exported
    assert 0 < services.planned_bytes(lora, lora.architecture)[0] < checkpoint / 2
    assert services.planned_bytes(lora, lora.architecture)[1] == 0


def test_validate_runs_the_service_checks(monkeypatch, tmp_path):
    called = []
    for name in ("check_hub_model", "check_s3_reachable", "check_disk"):
        monkeypatch.setattr(services, name, lambda *args, name=name, **kwargs: called.append(name))
    monkeypatch.setattr(preflight.hub_dataset, "check_dataset",
                        lambda *args: (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError, match="stop"):
        preflight.validate(TrainConfig(model_config="tiny", seq_len=32, storage_path=str(tmp_path)))
    assert called == ["check_s3_reachable", "check_hub_model", "check_disk"]


@pytest.mark.parametrize("flag, location, why", [
    ("tokenizer", "s3://team_models/tok", "a bucket name has 3-63 lowercase letters"),
    ("dataset", "s3://Corpora/c.jsonl", "a bucket name has 3-63 lowercase letters"),
    ("model_id", "s3://10.0.0.7/base", "it is formatted as an IP address"),
    ("storage_path", "s3://runs--x-s3/team", "the suffix '--x-s3' is reserved"),
])
def test_a_bucket_name_s3_never_allows_is_bad_input_before_credentials(monkeypatch, tmp_path, flag, location, why):
    """The S3 naming rule the stack's keys follow (workload/s3_names.py), on the local run's s3:// flags too: exit 2
    naming the flag, with no credentials on the machine (nothing asked of AWS)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    settings = {"model_config": "tiny", "storage_path": str(tmp_path), flag: location}
    if flag == "model_id":
        settings.pop("model_config")
    if flag == "tokenizer":
        settings["dataset"] = "s3://corpora/c.jsonl"  # a tokenizer is read only for a dataset
    with pytest.raises(ValueError) as refused:  # the flags' one s3:// rule (workload/config/s3_uri.py), at parse
        services.check_s3_reachable(TrainConfig(**settings))
    message = str(refused.value)
    assert message.startswith(f"--{flag} {location!r}: no S3 bucket can be named ") and why in message, message


def test_a_tracking_uri_http_cannot_parse_is_exit_3_not_a_traceback(monkeypatch):
    """http.client refuses a port that is no number (InvalidURL, an HTTPException, neither OSError nor ValueError):
    answered as a server that cannot be reached, naming the variable, never repeating the URI's parts."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example.com:port8443/")
    with pytest.raises(cli.EnvironmentProblem) as refused:
        services.check_services_reachable(TrainConfig(model_config="tiny", report_to="mlflow"), timeout_s=1)
    assert "MLFLOW_TRACKING_URI names" in str(refused.value) and "(InvalidURL, within 1 s)" in str(refused.value), \
        refused.value
