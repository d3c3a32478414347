"""Checkpoints to s3:// with the Ray pods' own role, end to end against moto with IAM enforced.

The pod role and its policy are the ones the program renders for trainStoragePath (under Pulumi's mocks). moto creates
them, STS hands out the role's session (what the EKS Pod Identity agent gets from eks-auth:AssumeRoleForPodIdentity,
which moto lacks), and a local stand-in for the agent serves that session over the container-credentials protocol
the Pod Identity webhook configures in the pods (AWS_CONTAINER_CREDENTIALS_FULL_URI, with the projected token from
AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE in the Authorization header). botocore's own ContainerProvider reads it, as an
SDK in a Ray pod does. Then, with moto's IAM enforcement on, the checkpoint files Ray Train and DCP write (the run
directory of the job the program declares) go in and come back out under the prefix, and the same credentials are
refused outside it. moto does not evaluate the StringLike condition on ListBucket (moto/iam/policy_conditions.py
supports StringEquals only), so listing outside the prefix is not checked here.
"""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.credentials import ContainerProvider
from botocore.exceptions import ClientError
from moto.core import enable_iam_authentication

from tests.support.fake_json_api import JsonServer
from tests.support.pulumi_mocks import program, ray_pods_role

BUCKET, PREFIX = "ckpt-bucket", "runs/dev"
JOB_WITH_CHECKPOINTS = (("trainEnabled", True), ("trainModelConfig", "tiny"), ("trainSeqLen", 256),
                        ("trainExpectTransport", "any"), ("trainStoragePath", f"s3://{BUCKET}/{PREFIX}"))
PROJECTED_TOKEN = "eyJhbGciOiJSUzI1NiJ9.pod-identity-token"  # what the webhook's projected volume holds


def test_checkpoints_go_under_the_prefix_with_the_pod_role_and_nowhere_else(aws_env, tmp_path):
    run = program("dev", JOB_WITH_CHECKPOINTS)
    role = ray_pods_role(run)
    (policy,) = [r for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.parent == role.urn]
    args = run.one("pulumi-python:dynamic/raytrain:TrainingJob").inputs["train_args"]
    run_dir = f"{PREFIX}/{args[args.index('--run_name') + 1]}"

    # The account as `pulumi up` leaves it, before IAM is enforced: the bucket (which the stack requires to exist),
    # the rendered role and policy, and the role's session that the agent hands out.
    s3_admin = boto3.client("s3", region_name="us-west-2")
    s3_admin.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3_admin.create_bucket(Bucket="other-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    iam = boto3.client("iam")
    created = iam.create_role(RoleName="ray-pods", AssumeRolePolicyDocument=role.inputs["assumeRolePolicy"])
    iam.put_role_policy(RoleName="ray-pods", PolicyName="checkpoints", PolicyDocument=policy.inputs["policy"])
    session = boto3.client("sts", region_name="us-west-2").assume_role(
        RoleArn=created["Role"]["Arn"], RoleSessionName="eks-ray-train-ray-head")["Credentials"]
    # The node's agent as a pod sees it: GET /v1/credentials with the projected token, the role's session back.
    agent = JsonServer({"/v1/credentials": {
        "AccessKeyId": session["AccessKeyId"], "SecretAccessKey": session["SecretAccessKey"],
        "Token": session["SessionToken"],
        "Expiration": (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}})
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    token_file = tmp_path / "eks-pod-identity-token"
    token_file.write_text(PROJECTED_TOKEN)
    try:
        # What the webhook puts in the pod's environment, with the agent on loopback instead of 169.254.170.23.
        pod_env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{agent.url}/v1/credentials",
                   "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(token_file)}
        credentials = ContainerProvider(environ=pod_env).load()
        assert credentials is not None and agent.authorizations == [PROJECTED_TOKEN], \
            "the SDK must fetch the role's session from the agent with the pod's projected token"
        frozen = credentials.get_frozen_credentials()
        pod_s3 = boto3.client("s3", region_name="us-west-2", aws_access_key_id=frozen.access_key,
                              aws_secret_access_key=frozen.secret_key, aws_session_token=frozen.token)

        checkpoint = {f"{run_dir}/checkpoint_000002/.metadata": b"dcp metadata",
                      f"{run_dir}/checkpoint_000002/__0_0.distcp": b"rank 0 shards",
                      f"{run_dir}/checkpoint_000002/train_step.json": b'{"step": 2}'}
        with enable_iam_authentication():
            for key, body in checkpoint.items():
                pod_s3.put_object(Bucket=BUCKET, Key=key, Body=body)
            listed = pod_s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{run_dir}/")["Contents"]
            assert sorted(o["Key"] for o in listed) == sorted(checkpoint), "the checkpoint lands under the prefix"
            for key, body in checkpoint.items():
                assert pod_s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == body, f"{key} reads back"
            pod_s3.delete_object(Bucket=BUCKET, Key=f"{run_dir}/checkpoint_000002/train_step.json")

            for bucket, key in ((BUCKET, "elsewhere/checkpoint_000002/.metadata"),
                                (BUCKET, f"{PREFIX}-other/x"), ("other-bucket", f"{PREFIX}/x")):
                with pytest.raises(ClientError) as refused:
                    pod_s3.put_object(Bucket=bucket, Key=key, Body=b"x")
                assert refused.value.response["Error"]["Code"] == "AccessDenied", f"write to {bucket}/{key}"
        s3_admin.put_object(Bucket=BUCKET, Key="outside/other.txt", Body=b"not the pods'")
        with enable_iam_authentication(), pytest.raises(ClientError) as refused:
            pod_s3.get_object(Bucket=BUCKET, Key="outside/other.txt")
        assert refused.value.response["Error"]["Code"] == "AccessDenied", "reads outside the prefix are refused"
    finally:
        agent.shutdown()
        agent.server_close()


def test_an_s3_model_directory_is_readable_by_the_pods_and_nothing_beside_it():
    """workload/model/files.py lists the directory and reads its files: GetObject under the prefix and ListBucket
    limited to it, no write."""
    import json

    from infra.aws.pod_identity import checkpoint_storage_policy

    statements = json.loads(checkpoint_storage_policy("", model="s3://models-bucket/base/llama-3.1-8b/"))["Statement"]
    assert statements == [
        {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::models-bucket/base/llama-3.1-8b/*"},
        {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::models-bucket",
         "Condition": {"StringLike": {"s3:prefix": ["base/llama-3.1-8b", "base/llama-3.1-8b/*"]}}}], statements
    assert checkpoint_storage_policy("", model="Qwen/Qwen2.5-1.5B") is None, "a Hub id needs no S3 access"
