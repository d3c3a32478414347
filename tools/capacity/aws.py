"""Where the capacity finder gets its AWS clients, and how it words AWS's refusals.

One method per API group, so that tests can answer the APIs moto does not emulate (capacity reservations, service
quotas, Spot placement scores) with botocore Stubbers, and the rest with moto.
"""
from __future__ import annotations

import threading

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError, ProfileNotFound

from infra.aws.capacity_reservation import error_code, error_message
from workload import cli
from workload.s3_access import aws_session

_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})
# The first call only asks who the caller is: offline or without credentials it should say so at once, not after
# five backed-off attempts.
_STS_CONFIG = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=10, read_timeout=10)


class Aws:
    """The finder's boto3 clients, from one session (a profile, or the environment's credentials)."""

    def __init__(self, profile: str | None = None):
        try:
            self._session = boto3.session.Session(profile_name=profile) if profile else aws_session()
        except ProfileNotFound:  # the flag's: AWS_PROFILE's is this machine's set-up (s3_access.aws_session)
            raise cli.UsageError(f"--profile {cli.shown(profile)}: no such AWS profile in the AWS config files") from None
        self._lock = threading.Lock()  # creating clients from one session is not thread-safe
        # One client per service, region and config: botocore builds a client's class anew on every create_client
        # (EC2's has some 700 methods), and the survey asks for EC2 three times in each region. Clients themselves
        # are thread-safe (boto3's documentation, "Multithreading or multiprocessing with clients").
        self._clients: dict[tuple, object] = {}

    @property
    def home_region(self) -> str:
        return self._session.region_name or "us-east-1"

    def client(self, service: str, region: str, config: Config = _CLIENT_CONFIG):
        with self._lock:
            key = (service, region, id(config))
            if key not in self._clients:
                self._clients[key] = self._session.client(service, region_name=region, config=config)
            return self._clients[key]

    def ec2(self, region: str):
        return self.client("ec2", region)

    def quotas(self, region: str):
        return self.client("service-quotas", region)

    def spot_scores(self, region: str):
        return self.client("ec2", region)

    def reservations(self, region: str):
        return self.client("ec2", region)

    def sts(self):
        return self.client("sts", self.home_region, _STS_CONFIG)


def check_credentials(aws: Aws) -> str:
    """The caller's account id; the first AWS call, so a missing credential or network fails here, in one line."""
    try:
        return aws.sts().get_caller_identity()["Account"]
    except NoCredentialsError:
        raise cli.EnvironmentProblem(
            "no AWS credentials found",
            hint="export AWS_PROFILE (or pass --profile), run `aws sso login` or `aws configure`, or set "
                 "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from None
    except ClientError as error:
        raise cli.EnvironmentProblem(
            f"AWS rejected the credentials ({error_code(error)}: {error_message(error)})",
            hint="refresh them (`aws sso login`) or pick another --profile") from None
    except EndpointConnectionError as error:
        raise cli.EnvironmentProblem(f"AWS cannot be reached ({error})",
                                     hint="check the network, a proxy (HTTPS_PROXY), or AWS_ENDPOINT_URL") from None
    except BotoCoreError as error:
        raise cli.EnvironmentProblem(f"AWS cannot be asked who you are ({error})") from None


def describe_failure(error: Exception) -> str:
    """One line for an AWS error, saying what it means for the search (a denied API, a region not enabled)."""
    if isinstance(error, ClientError):
        code = error_code(error)
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return f"access denied ({code}): {error_message(error)}"
        if code in ("AuthFailure", "UnrecognizedClientException", "OptInRequired"):
            return f"{code}: the account cannot use this region (not enabled?): {error_message(error)}"
        return f"{code}: {error_message(error)}"
    return f"{type(error).__name__}: {error}"
