"""trainPushToHub into a namespace trainSecretEnv's token cannot write: refused at preview naming trainPushToHub and
trainSecretEnv, after one whoami-v2 request with that token only (infra/preview/hub_access.py check_push,
workload/checkpoint/hub_write.py), never quoting the token; a namespace it may write passes, and a Hub that does not
answer is a warning. The Hub is the local fake (tests/support/fake_hub.py), which answers whoami-v2 as the Hub does."""
from __future__ import annotations

import pulumi
import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_hub import FakeHub, unreachable_hub, whoami_answer
from tests.support.pulumi_mocks import Secret, run_program

TOKEN = "hf_river_team_member_22222222222222"
JOB = {"trainEnabled": True, "trainStoragePath": "s3://company-data/runs"}


@pytest.fixture
def hub(monkeypatch):
    with FakeHub("hf_somebody_elses_000000000000000000") as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", "hf_the_deployers_own_3333333333333333")  # never the one asked with
        yield server


def _push(repo_id: str, token: str = TOKEN) -> dict:
    return {**JOB, "trainPushToHub": repo_id, "trainSecretEnv": Secret([f"HF_TOKEN={token}"])}


def _whoami_asked(hub) -> list[str]:
    return [auth for _, path, auth in hub.requests if path == "/api/whoami-v2"]


@pytest.mark.parametrize("answer, repo_id, words", [
    (whoami_answer("river", {"river-lab": "write"}), "openai-community/gpt2-river", "no member of openai-community"),
    (whoami_answer("river", {"river-lab": "read"}), "river-lab/tuned-0.5b", "role in river-lab is read"),
    (whoami_answer("river", role="read"), "river/tuned-0.5b", "is a read token"),
    (whoami_answer("river", {"river-lab": "admin"}, "fineGrained", [("user", "river", ["repo.write"])]),
     "river-lab/tuned-0.5b", "without repo.write on river-lab"),
])
def test_a_namespace_the_token_cannot_write_is_refused(hub, answer, repo_id, words):
    hub.users[TOKEN] = answer
    message = program_refusal(_push(repo_id))
    assert message.startswith("config keys 'trainPushToHub', 'trainSecretEnv':"), message
    assert words in message and repo_id in message and "allowed:" in message, message
    assert TOKEN not in message and TOKEN[3:20] not in message, "the token is never quoted"
    assert _whoami_asked(hub) == [f"Bearer {TOKEN}"], "one whoami-v2, with trainSecretEnv's token"


def test_a_token_the_hub_does_not_know_is_refused(hub):
    message = program_refusal(_push("river/tuned-0.5b", "hf_revoked_last_week_4444444444444444"))
    assert "'trainSecretEnv'" in message and "401" in message and "revoked_last" not in message, message


@pytest.mark.parametrize("answer, repo_id", [
    (whoami_answer("river"), "river/tuned-0.5b"),
    (whoami_answer("river", {"river-lab": "contributor"}), "river-lab/tuned-0.5b"),
    (whoami_answer("river", {"river-lab": "write"}, "fineGrained", [("org", "river-lab", ["repo.write"])]),
     "river-lab/tuned-0.5b"),
])
def test_a_namespace_the_token_may_write_passes(hub, answer, repo_id):
    hub.users[TOKEN] = answer
    run = run_program("dev", _push(repo_id))
    assert run.error is None, run.error
    assert _whoami_asked(hub) == [f"Bearer {TOKEN}"]


def test_a_hub_that_does_not_answer_is_a_warning(monkeypatch):
    unreachable_hub(monkeypatch)
    seen: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: seen.append(message))
    run = run_program("dev", _push("river/tuned-0.5b"))
    assert run.error is None, run.error
    warned = [line for line in seen if "trainPushToHub river/tuned-0.5b" in line and "could not be asked" in line]
    assert len(warned) == 1 and TOKEN not in warned[0], seen
