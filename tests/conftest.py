"""Session-wide test settings and fixtures."""
import logging

import pytest
from moto import mock_aws

# The README's and docs' journeys' fixtures (project, kube_api, job_server), for every test that walks one; a real
# MLflow tracking server (mlflow_server) for the trackers' tests.
pytest_plugins = ("tests.docs_shell", "tests.mlflow_server")


@pytest.fixture
def aws_env(monkeypatch):
    """moto for every AWS call, with fake credentials and nothing of the machine's own AWS setup."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def pytest_unconfigure(config):
    # A Pulumi program that fails under mocks (the bad-config tests) leaves futures holding the same error, which
    # asyncio reports as "Future exception was never retrieved" when the interpreter exits, after pytest's summary.
    # The tests have already asserted on that error; nothing asyncio logs after the session is news.
    logging.getLogger("asyncio").disabled = True
