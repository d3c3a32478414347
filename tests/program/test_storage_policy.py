"""The whole storage path of a run, with the Ray pods' rendered S3 policy enforced (issue 22, item 2).

Ray Train's own StorageContext (its set-up at fit() and persist_current_checkpoint), the job's export
(workload.storage.writing) and TensorBoard upload (workload.metrics.tensorboard.MetricsLog), and the read back that resuming and
`workload.export` do (workload.storage.local_copy) run against moto's S3 server through pyarrow and boto3, exactly
as in a pod, with the credentials of a caller whose policy is the one the program renders for trainStoragePath. Each
request is authorized as S3 would (tests/support/fake_s3.py: the operation, its action and condition keys) by an
evaluator that honours the policy's conditions (tests/support/iam_policy.py). No Ray cluster: the StorageContext is the
object Ray Train's controller and workers build, driven directly.
"""
from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.support.fake_s3 import PolicyEnforcingS3
from tests.support.iam_policy import Request, decide
from tests.support.pulumi_mocks import program, ray_pods_role

BUCKET, PREFIX = "ckpt-bucket", "runs/dev"
STORAGE = f"s3://{BUCKET}/{PREFIX}"
RUN = "ray-train-fsdp-llm-1"
POD_KEY, ADMIN_KEY = "AKIARAYPODS000000001", "AKIAADMIN00000000001"


def pod_policy() -> str:
    run = program("dev", (("trainStoragePath", STORAGE),))
    role = ray_pods_role(run)
    (policy,) = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.parent == role.urn]
    return policy.inputs["policy"]


@pytest.fixture(scope="module")
def s3():
    server = PolicyEnforcingS3({POD_KEY: [pod_policy()], ADMIN_KEY: None})
    server.start()
    admin = boto3.client("s3", endpoint_url=server.url, region_name="us-west-2", aws_access_key_id=ADMIN_KEY,
                         aws_secret_access_key="admin-secret")
    admin.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    admin.put_object(Bucket=BUCKET, Key="other-team/data.bin", Body=b"not the pods'")
    yield server
    server.stop()


@pytest.fixture
def as_the_pods(s3, monkeypatch):
    """The environment of a Ray pod, with the S3 endpoint on loopback and the pod role's credentials."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ENDPOINT_URL_S3": s3.url, "AWS_ACCESS_KEY_ID": POD_KEY,
                        "AWS_SECRET_ACCESS_KEY": "pod-secret", "AWS_REGION": "us-west-2",
                        "AWS_DEFAULT_REGION": "us-west-2", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    s3.seen.clear()
    return s3


def pods_requests(s3: PolicyEnforcingS3) -> list:
    # The AWS SDK inside pyarrow probes the endpoint with HeadBucket on a bucket named $extremelyunlikelytoexist$
    # while it resolves the region; its refusal is ignored by the SDK and is no request for the pods' data.
    return [s for s in s3.seen if s.access_key == POD_KEY and "extremelyunlikelytoexist" not in s.resource]


def test_storage_setup_checkpoint_export_tensorboard_and_read_back_pass_the_pod_policy(as_the_pods, tmp_path):
    from ray.train import Checkpoint
    from ray.train.v2._internal.execution.storage import StorageContext

    from workload import storage
    from workload.metrics import tensorboard as metrics

    context = StorageContext(STORAGE, RUN)  # what fit() builds first: the run directory and its marker file
    shards = tmp_path / "checkpoint"
    shards.mkdir()
    files = {".metadata": b"dcp metadata", "__0_0.distcp": b"rank 0 shards", "train_step.json": b'{"step": 2}'}
    for name, body in files.items():
        (shards / name).write_bytes(body)
    context.persist_current_checkpoint(Checkpoint.from_directory(str(shards)), "checkpoint_000002")

    run_directory = storage.join(STORAGE, RUN)
    with storage.writing(storage.join(run_directory, "model_000002")) as model:  # the export, as _export_model does
        with open(f"{model}/config.json", "w") as out:
            json.dump({"model_type": "qwen2"}, out)
    log = metrics.MetricsLog(run_directory, start_step=0)
    log.scalars(1, {"loss": 2.5})
    log.sync()  # a checkpoint's upload of the event file so far
    log.close()

    with storage.local_copy(storage.join(run_directory, "checkpoint_000002")) as copy:  # resume, workload.export
        assert {p.name: p.read_bytes() for p in Path(copy).iterdir()} == files, \
            "the checkpoint reads back whole"

    seen = pods_requests(as_the_pods)
    refused = [(s.operation, s.resource, s.decision) for s in seen if s.decision != "Allow"]
    assert not refused, f"the pods' policy refuses requests the run needs: {refused}"
    operations = {s.operation for s in seen}
    assert "HeadBucket" in operations, "pyarrow's create_dir checks the bucket (HeadBucket needs s3:ListBucket)"
    written = {s.resource.removeprefix(f"arn:aws:s3:::{BUCKET}/") for s in seen if s.action == "s3:PutObject"}
    assert {f"{PREFIX}/{RUN}/checkpoint_000002/.metadata", f"{PREFIX}/{RUN}/model_000002/config.json"} <= written
    assert any(key.startswith(f"{PREFIX}/{RUN}/tensorboard/events.out.tfevents.") for key in written), written
    outside = sorted(key for key in written if not key.startswith(f"{PREFIX}/"))
    assert outside == ["runs/"], f"only the prefix's own directory markers lie outside it: {outside}"


def test_the_pod_policy_keeps_the_pods_inside_the_prefix(as_the_pods, tmp_path):
    from workload import cli, storage

    (tmp_path / "x.txt").write_text("x")
    for destination in (f"s3://{BUCKET}/elsewhere", f"s3://{BUCKET}/{PREFIX}-other", f"s3://other-bucket/{PREFIX}"):
        with pytest.raises(OSError, match="ACCESS_DENIED|AccessDenied"):
            storage.upload(str(tmp_path), destination)
    with pytest.raises(cli.EnvironmentProblem):
        with storage.local_copy(f"s3://{BUCKET}/other-team"):
            pass
    pods = boto3.client("s3", region_name="us-west-2")
    with pytest.raises(ClientError) as refused:
        pods.get_object(Bucket=BUCKET, Key="other-team/data.bin")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError):
        pods.list_objects_v2(Bucket=BUCKET, Prefix="other-team/")
    with pytest.raises(ClientError):
        pods.put_object(Bucket=BUCKET, Key="runs/x", Body=b"beside the prefix, not in it")
    pods.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/")


def test_the_evaluator_honours_the_conditions_moto_ignores():
    """The fake is stricter than moto where the pods' policy relies on it: s3:prefix and its absence."""
    policy = pod_policy()
    bucket = f"arn:aws:s3:::{BUCKET}"
    assert decide([policy], Request("s3:ListBucket", bucket, {"s3:prefix": f"{PREFIX}/"})) == "Allow"
    assert decide([policy], Request("s3:ListBucket", bucket, {"s3:prefix": "other-team/"})) == "ImplicitDeny"
    assert decide([policy], Request("s3:ListBucket", bucket, {})) == "Allow", "HeadBucket carries no s3:prefix"
    assert decide([policy], Request("s3:PutObject", f"{bucket}/runs/")) == "Allow", "a directory marker"
    assert decide([policy], Request("s3:PutObject", f"{bucket}/runs/x")) == "ImplicitDeny", "not under it"
    deny = {"Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": "*",
                           "Condition": {"StringNotLikeIfExists": {"s3:prefix": f"{PREFIX}/*"}}}]}
    assert decide([policy, deny], Request("s3:ListBucket", bucket, {"s3:prefix": "x"})) == "ExplicitDeny"
    assert decide([policy, deny], Request("s3:ListBucket", bucket, {})) == "ExplicitDeny", \
        "a negated ...IfExists operator holds on an absent key"


def test_the_drivers_s3_checks_are_requests_the_pod_policy_allows(monkeypatch):
    """workload.run.services.check_s3_reachable on the cluster, as the driver runs it before any worker: a dataset file
    and a model directory in another bucket than the checkpoints are asked with the requests the pods' policy grants
    for them (HeadObject, a listing under the model's prefix), not a HeadBucket it refuses there."""
    from infra.aws.pod_identity import checkpoint_storage_policy
    from workload.config import TrainConfig
    from workload.run import services

    dataset, model = "s3://data-bucket/sets/chat.jsonl", "s3://data-bucket/models/base"
    server = PolicyEnforcingS3({"AKIARAYPODS000000002": [checkpoint_storage_policy(STORAGE, dataset=dataset,
                                                                                    model=model)], ADMIN_KEY: None})
    server.start()
    try:
        admin = boto3.client("s3", endpoint_url=server.url, region_name="us-west-2", aws_access_key_id=ADMIN_KEY,
                             aws_secret_access_key="admin-secret")
        for bucket in (BUCKET, "data-bucket"):
            try:
                admin.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
            except admin.exceptions.BucketAlreadyOwnedByYou:
                pass  # moto's backends are the process's: the module's server made it
        admin.put_object(Bucket="data-bucket", Key="sets/chat.jsonl", Body=b'{"text": "a"}\n')
        admin.put_object(Bucket="data-bucket", Key="models/base/config.json", Body=b"{}")
        server.as_this_machines_s3(monkeypatch, "AKIARAYPODS000000002", "pod-secret")
        server.seen.clear()
        services.check_s3_reachable(TrainConfig(model_id=model, dataset=dataset, storage_path=STORAGE))
        asked = [(seen.operation, seen.decision) for seen in server.seen]
        assert asked == [("HeadBucket", "Allow"), ("HeadObject", "Allow"), ("ListObjectsV2", "Allow")], server.seen
    finally:
        server.stop()
