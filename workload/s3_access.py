"""Whether this machine may read or write an s3:// location, asked once before a command relies on it: no AWS
credentials, no answer within the timeouts, or a refusal (403) is exit 3 (cli.EnvironmentProblem); a bucket or file
that does not exist is exit 2. workload.run.services asks it for the training flags' locations (--storage_path,
--dataset, --model_id, --tokenizer), workload.export for its CHECKPOINT. Base layer: boto3 is imported only when a
location is asked about, and where it is not installed nothing is asked (the libraries' own reads say the rest).
"""
from __future__ import annotations

import os

from workload import cli
from workload.aws_region import region_problem

S3_CONNECT_TIMEOUT_S = 5
S3_READ_TIMEOUT_S = 10
# The permission each request needs (S3 API Reference, each operation's "Permissions").
S3_PERMISSION = {"bucket": "s3:ListBucket on the bucket", "file": "s3:GetObject on it",
                 "directory": "s3:ListBucket under its prefix"}
NO_KEYS = ("set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure` (on the cluster the "
           "pods' role gives them); or give a path on this machine")


def aws_session(profile: str | None = None, region: str | None = None, *, what: str = ""):
    """A new boto3 session (the environment as it is now: boto3.client would reuse the default session's
    credentials). A profile that no AWS config file holds (AWS_PROFILE, or `profile` from a stack's aws:profile) is
    exit 3 naming it, where botocore's ProfileNotFound was a traceback; the one place the workload and the tools make
    a session from this machine's profile."""
    import boto3
    import botocore.exceptions

    if profile is None and "AWS_PROFILE" in os.environ and not os.environ["AWS_PROFILE"].strip():
        # botocore takes a set AWS_PROFILE as a profile's name, the empty one too, and found no such profile.
        raise cli.EnvironmentProblem(f"{what + ': ' if what else ''}AWS_PROFILE is set and empty",
                                     hint="`unset AWS_PROFILE` for the environment's credentials, or name a profile")
    try:
        return boto3.session.Session(profile_name=profile, region_name=region)
    except botocore.exceptions.ProfileNotFound as error:
        name = error.kwargs.get("profile") or profile
        source = f"the AWS profile {name!r}" if profile else f"AWS_PROFILE={name}"
        raise cli.EnvironmentProblem(f"{what + ': ' if what else ''}{source} is no profile in this machine's AWS "
                                     "config files (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE, ~/.aws/)",
                                     hint="`aws configure --profile NAME` makes one, or unset AWS_PROFILE for the "
                                          "environment's credentials") from None


# botocore's credential providers, as PartialCredentialsError names them, in a user's words.
PROVIDERS = {"env": "the environment", "shared-credentials-file": "the shared credentials file",
             "config-file": "the AWS config file", "custom-process": "the credential_process"}


def check_s3_locations(named: list[tuple[str, str, str, str]]) -> None:
    """Each s3:// location (what the error names it, its path, what the command does there, its kind: bucket, file
    or directory), asked with this machine's credentials: HeadBucket, HeadObject, or one ListObjectsV2 key."""
    if not named:
        return
    from workload.config.s3_uri import s3_uri_problem  # the package is loaded by every caller's flags already

    for what, path, _, _ in named:  # bad input whatever the credentials: said first, by the one rule of s3:// URIs
        if (problem := s3_uri_problem(path)) is not None:
            raise cli.UsageError(f"{what}: {problem}")
    try:
        import botocore.config
        import botocore.exceptions
    except ImportError:
        return
    session = aws_session(what=named[0][0])
    if session.region_name and (wrong := region_problem(session.region_name)) is not None:
        # a misspelt region reads as "S3 is not reachable" (no such endpoint): named before anything is asked
        where = next((name for name in ("AWS_REGION", "AWS_DEFAULT_REGION") if os.environ.get(name)), "AWS's config")
        raise cli.EnvironmentProblem(f"{named[0][0]}: this machine's AWS region ({where}) {wrong}")
    try:
        credentials = session.get_credentials()
    except botocore.exceptions.PartialCredentialsError as error:  # AWS_ACCESS_KEY_ID without its secret, say
        raise cli.EnvironmentProblem(f"{named[0][0]}: this machine's AWS credentials are incomplete: "
                                     f"{error.kwargs.get('cred_var', 'a key')} is missing from "
                                     f"{PROVIDERS.get(error.kwargs.get('provider'), 'their source')}",
                                     hint=NO_KEYS) from None
    if credentials is None:  # said before the client's second of loading S3's service model
        what, _, purpose, _ = named[0]
        raise cli.EnvironmentProblem(f"{what}: no AWS credentials on this machine to {purpose}", hint=NO_KEYS)
    config = botocore.config.Config(connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
                                    retries={"max_attempts": 1, "mode": "standard"})
    client = session.client("s3", config=config)
    for what, path, purpose, kind in dict.fromkeys(named):
        _ask(client, path, kind, what, purpose)


def _ask(client, path: str, kind: str, what: str, purpose: str) -> None:
    import botocore.exceptions as aws

    bucket, _, key = path[len("s3://"):].partition("/")
    try:
        if kind == "bucket":
            client.head_bucket(Bucket=bucket)
        elif kind == "file":
            client.head_object(Bucket=bucket, Key=key)
        else:
            client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
    except aws.NoCredentialsError:
        raise cli.EnvironmentProblem(f"{what}: no AWS credentials on this machine to {purpose}",
                                     hint=NO_KEYS) from None
    except (aws.EndpointConnectionError, aws.ConnectTimeoutError, aws.ReadTimeoutError,
            aws.ConnectionClosedError) as error:
        raise cli.EnvironmentProblem(f"{what}: S3 is not reachable from this machine ({type(error).__name__})",
                                     hint="check the network and AWS_ENDPOINT_URL_S3, or give a path on this "
                                          "machine") from None
    except aws.ClientError as error:
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 and kind == "file":  # HeadObject has no body: no such key, or no such bucket
            raise cli.UsageError(f"{what}: no such file (S3 answered 404 in bucket {bucket})") from None
        if status == 404:
            raise cli.UsageError(f"{what}: bucket {bucket} does not exist; give a bucket of yours") from None
        raise cli.EnvironmentProblem(f"{what}: S3 answered {status or error} with this machine's credentials; they "
                                     f"need {S3_PERMISSION[kind]}") from None
    except aws.BotoCoreError as error:
        raise cli.EnvironmentProblem(f"{what}: S3 could not be asked ({error})") from None
