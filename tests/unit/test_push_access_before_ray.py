"""--push_to_hub's token asked of the Hub before Ray starts (workload/run/push_access.py): the local run and the job's
driver refuse a token the Hub does not know, or one it says cannot write the repo, exit 2 naming the flag and where the
token came from, never its value; a Hub that does not answer stays the local run's exit 3 and the driver's upload's."""
from __future__ import annotations

import pytest

from tests.support.fake_hub import FakeHub, unreachable_hub, whoami_answer
from workload import cli, train
from workload.run import local, push_access

HUB_TOKEN = "hf_fakehub_own_0000000000000000000"
READ_MEMBER = "hf_Rb7kQ2mZ9xW4vN1pL8tC5yH3gF6dJ0s"
UNKNOWN = "hf_Nq4wE8rT1yU6iO3pA9sD2fG7hJ5kL0z"
REPO = "vision-lab/llama-sft"


@pytest.fixture
def clean_hub(tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN_PATH",
                 "HF_OIDC_RESOURCE", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))

    def no_cluster(*args, **kwargs):
        raise AssertionError("the token was let through: the local Ray cluster would start now")

    monkeypatch.setattr(local, "local_cluster", no_cluster)
    with FakeHub(HUB_TOKEN) as hub:
        hub.users[READ_MEMBER] = whoami_answer("grace", {"vision-lab": "read", "other-lab": "write"})
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def _local(tmp_path, capsys, *flags) -> tuple[int, str]:
    code = cli.run(local.main, ["--steps", "2", "--storage_path", str(tmp_path / "runs"), "--push_to_hub", REPO,
                                *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("token, words", [
    (UNKNOWN, "HF_TOKEN is not a token the Hub knows (whoami-v2 answered 401"),
    (READ_MEMBER, "HF_TOKEN belongs to grace, whose role in vision-lab is read"),
])
def test_the_local_run_refuses_a_token_that_cannot_push_before_ray(token, words, clean_hub, tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.setenv("HF_TOKEN", token)
    code, err = _local(tmp_path, capsys)
    assert code == cli.USAGE, err
    assert err.startswith(f"error: --push_to_hub {REPO}: {words}"), err
    assert "allowed: a write token" in err and token not in err and token[3:12] not in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def test_a_token_that_may_write_passes_in_one_request(clean_hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", READ_MEMBER)
    push_access.check_push_access("other-lab/llama-sft")
    assert [(path, auth) for _, path, auth in clean_hub.requests] == [("/api/whoami-v2", f"Bearer {READ_MEMBER}")]


def test_the_driver_refuses_it_too(clean_hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", UNKNOWN)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")  # as Ray's job supervisor sets it; nothing listens there
    code = cli.run(train.main, ["--model_config", "tiny", "--seq_len", "32", "--steps", "2", "--push_to_hub", REPO,
                                "--storage_path", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and f"--push_to_hub {REPO}: HF_TOKEN is not a token the Hub knows" in err, err


def test_an_unreachable_hub_is_what_it_was(clean_hub, tmp_path, monkeypatch, capsys):
    unreachable_hub(monkeypatch)
    monkeypatch.setenv("HF_TOKEN", UNKNOWN)
    code, err = _local(tmp_path, capsys)  # the local run's one bounded request says it, exit 3
    assert code == cli.ENVIRONMENT and f"--push_to_hub {REPO}: the Hugging Face Hub" in err, err
    push_access.check_push_access(REPO)  # the driver goes on; its upload says it at the end, as before
