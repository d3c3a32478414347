"""Session-wide test settings and fixtures.

The suite runs in two pytest-xdist workers (pyproject.toml's addopts), each taking whole modules (`--dist loadfile`),
so a module's Ray cluster starts once. The modules that start Ray runs are handed out first, longest first: the two
workers then run the long ones side by side, and the short ones fill in after, instead of one long module running
alone at the end. A Ray run keeps about 1.5 of the 2 cores busy (the rest is waiting on processes to start); the
other worker takes the rest.
"""
import asyncio
import logging

import pytest
from moto import mock_aws

# The README's and docs' journeys' fixtures (project, kube_api, job_server), for every test that walks one; a real
# MLflow tracking server (mlflow_server) for the trackers' tests.
pytest_plugins = ("tests.support.docs_shell", "tests.support.local_mlflow")


# Test modules that start Ray clusters or long runs, longest first (pytest --durations shows what they take).
LONGEST_FIRST = ("test_workload_train", "test_readme", "test_ray_job", "test_workload_runs", "test_docs",
                 "test_workload_submit", "test_cli", "test_parallel", "test_model_families", "test_family_methods",
                 "test_token_cache", "test_local_cleanup", "test_tracking")


def pytest_collection_modifyitems(items):
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(rank)))  # stable: the rest keep
    # their order


@pytest.fixture(autouse=True)
def _an_event_loop():
    """Pulumi's mocks run the program on the main thread's event loop; a module before may have left the thread
    without one (asyncio.run does, and workload.run.submit streams a job's logs with it)."""
    try:
        asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())
    yield


@pytest.fixture(autouse=True)
def _no_real_package_index(monkeypatch):
    """trainPip's look-ups at preview (infra/preview/pip_index.py) never reach the real PyPI from a test: nothing
    listens on the discard port, so the preview warns and judges nothing; tests/unit/test_pip_index.py and the
    program's trainPip tests serve tests/support/fake_pypi.py instead."""
    from infra.preview import pip_index

    monkeypatch.setattr(pip_index, "INDEX_URL", "http://127.0.0.1:9/pypi")
    yield


@pytest.fixture(scope="module")
def ray_cluster():
    """A two-node Ray cluster of the module's own (tests/support/local_ray.py)."""
    from tests.support.local_ray import two_node_cluster

    yield from two_node_cluster()


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
