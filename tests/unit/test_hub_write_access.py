"""What a Hugging Face token may write, read from whoami-v2's answer (workload/checkpoint/hub_write.py): the user's own
namespace, an organization where the user's role writes, and a fine-grained token's repo.write scopes. Answers as
tests/support/fake_hub.py builds them (whoami_answer), in the Hub's shape."""
from __future__ import annotations

import pytest

from tests.support.fake_hub import FakeHub, whoami_answer
from workload.checkpoint import hub_write


@pytest.mark.parametrize("answer, repo_id", [
    (whoami_answer("ada"), "ada/tuned"),
    (whoami_answer("ada"), "tuned"),  # no owner: create_repo puts it under the token's user
    (whoami_answer("ada", {"lab": "write"}), "lab/tuned"),
    (whoami_answer("ada", {"lab": "admin"}), "lab/tuned"),
    (whoami_answer("ada", {"lab": "contributor"}), "lab/tuned"),
    (whoami_answer("ada", {"lab": "write"}, "fineGrained", [("org", "lab", ["repo.content.read", "repo.write"])]),
     "lab/tuned"),
    (whoami_answer("ada", role="fineGrained", scoped=[("model", "ada/tuned", ["repo.write"])]), "ada/tuned"),
    ({"type": "app", "name": "ci-bot"}, "lab/tuned"),  # not a user's token: not judged here
    ({"type": "user", "name": "ada"}, "ada/tuned"),  # no auth block: nothing known to refuse
])
def test_a_token_that_may_write_passes(answer, repo_id):
    assert hub_write.write_problem(answer, repo_id) is None


@pytest.mark.parametrize("answer, repo_id, words", [
    (whoami_answer("ada", {"lab": "write"}), "bigco/tuned", "no member of bigco (their organizations: lab)"),
    (whoami_answer("ada"), "bigco/tuned", "(their organizations: none)"),
    (whoami_answer("ada", {"lab": "read"}), "lab/tuned", "whose role in lab is read"),
    (whoami_answer("ada", role="read"), "ada/tuned", "is a read token"),
    (whoami_answer("ada", {"lab": "write"}, "fineGrained", [("org", "lab", ["repo.content.read"])]), "lab/tuned",
     "without repo.write on lab"),
    (whoami_answer("ada", {"lab": "write"}, "fineGrained", [("user", "ada", ["repo.write"])]), "lab/tuned",
     "without repo.write on lab"),
])
def test_a_token_that_may_not_write_says_why(answer, repo_id, words):
    why = hub_write.write_problem(answer, repo_id)
    assert why is not None and words in why, why


def test_whoami_asks_the_hub_once_with_the_token_given(monkeypatch):
    with FakeHub("hf_hub_token_0000000000000000000") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", "hf_the_deployers_own_0000000000000")
        hub.users["hf_lab_member_00000000000000000000"] = whoami_answer("ada", {"lab": "read"})
        assert hub_write.whoami("hf_lab_member_00000000000000000000")["orgs"][0]["roleInOrg"] == "read"
        with pytest.raises(hub_write.InvalidToken):
            hub_write.whoami("hf_revoked_000000000000000000000000")
    assert [(path, auth) for _, path, auth in hub.requests if path == "/api/whoami-v2"] == [
        ("/api/whoami-v2", "Bearer hf_lab_member_00000000000000000000"),
        ("/api/whoami-v2", "Bearer hf_revoked_000000000000000000000000")]


def test_whoami_of_a_hub_that_does_not_answer_is_unreachable(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(hub_write.Unreachable):
        hub_write.whoami("hf_any_000000000000000000000000000")


def test_the_fake_hub_answers_as_huggingface_hub_reads_it(monkeypatch):
    """huggingface_hub's own HfApi.whoami against the fake: the answer it returns, and its 401 words."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    with FakeHub("hf_hub_token_0000000000000000000") as hub:
        hub.users["hf_fine_000000000000000000000000000"] = whoami_answer(
            "ada", {"lab": "contributor"}, "fineGrained", [("org", "lab", ["repo.write"])])
        api = HfApi(endpoint=hub.url)
        assert api.whoami(token="hf_hub_token_0000000000000000000")["name"] == "hub-user"
        fine = api.whoami(token="hf_fine_000000000000000000000000000")
        assert fine["auth"]["accessToken"]["fineGrained"]["scoped"][0]["permissions"] == ["repo.write"]
        with pytest.raises(HfHubHTTPError, match="Invalid user token"):
            api.whoami(token="hf_unknown_00000000000000000000000000")
