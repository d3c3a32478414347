"""Whether a Hugging Face token may write `--push_to_hub OWNER/NAME`, asked before the run instead of after it.

The upload (workload/checkpoint/hub.py) runs once the last step is done: create_repo, then one commit. The Hub answers
a token that may not write to OWNER's repos with 403 (huggingface_hub's hf_raise_for_status raises it), so the whole
run's model stays unpublished. What a token may write is what the Hub's GET /api/whoami-v2 says of it (huggingface_hub
hf_api.py HfApi.whoami; its fields as huggingface.js types them, packages/hub/src/types/api/api-who-am-i.ts and
public.ts):
- `name`, the token's user, and `orgs[]`, each with its `name` and the user's `roleInOrg`: "admin", "write",
  "contributor" or "read" (huggingface.js AccessTokenRole). A read member may not create or write an org's repos; a
  contributor may create repos and write the ones it created, so it is not refused here;
- `auth.accessToken.role`: "read" (writes nothing), "write" (everything its user may), or "fineGrained", whose
  `auth.accessToken.fineGrained.scoped[]` list `entity` ({"type": "user"|"org"|"model"..., "name"}) and the
  `permissions` on it: writing a repo takes "repo.write" on the namespace or on the repo itself.
An answer without these fields (another kind of token, an app) is not judged: nothing is refused that is not known.

Standard library only at import (huggingface_hub inside `whoami`).
"""
from __future__ import annotations

import os
from typing import Any

WRITE_PERMISSION = "repo.write"
READ_ONLY_ORG_ROLE = "read"
WRITING_ORG_ROLES = ("admin", "write", "contributor")
TIMEOUT_S = 10
# What may write a repo, by the rules below: every refusal of a push says it (the preview's and the local run's).
PUSH_ALLOWED = ("allowed: a write token (or a fine-grained one with repo.write there) of a member of the repo's owner "
                "whose role there is write, contributor or admin, or a repo under the token's own user name")


class Unreachable(Exception):
    """The Hub gave no answer (or one that is not whoami's)."""


class InvalidToken(Exception):
    """The Hub answered 401: the token is not one it knows (revoked, mistyped, another Hub's)."""


def whoami(token: str) -> dict:
    """GET {HF_ENDPOINT}/api/whoami-v2 with `token`, once, no retries (huggingface_hub's HfApi.whoami makes the same
    request): its JSON object; InvalidToken for 401, Unreachable for no answer or any other."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    try:
        response = get_session().get(f"{endpoint}/api/whoami-v2", headers=build_hf_headers(token=token),
                                     timeout=TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - httpx's transport errors: no answer at all
        raise Unreachable(f"the Hugging Face Hub at {endpoint} is not reachable ({type(error).__name__})") from None
    if response.status_code == 401:
        raise InvalidToken("whoami-v2 answered 401, Invalid user token")
    if response.status_code != 200:
        raise Unreachable(f"the Hugging Face Hub at {endpoint} answered {response.status_code} to whoami-v2")
    try:
        answer = response.json()
    except ValueError:
        raise Unreachable(f"the Hugging Face Hub at {endpoint} answered whoami-v2 with no JSON") from None
    if not isinstance(answer, dict):
        raise Unreachable(f"the Hugging Face Hub at {endpoint} answered whoami-v2 with no object")
    return answer


def _names(items: Any) -> list[dict]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def write_problem(answer: dict, repo_id: str) -> str | None:
    """Why the token whoami-v2 described as `answer` cannot write `repo_id` (OWNER/NAME), after "the token"; None when
    it can or when the answer does not say (see the module docstring)."""
    user = answer.get("name")
    if answer.get("type", "user") != "user" or not isinstance(user, str):
        return None
    owner = repo_id.split("/", 1)[0] if "/" in repo_id else user
    access = (answer.get("auth") or {}).get("accessToken") if isinstance(answer.get("auth"), dict) else None
    role = access.get("role") if isinstance(access, dict) else None
    if role == "read":
        return "is a read token, and the upload needs write access"
    orgs = {org.get("name"): org.get("roleInOrg") for org in _names(answer.get("orgs"))}
    if owner != user:
        if owner not in orgs:
            member_of = ", ".join(sorted(str(name) for name in orgs if isinstance(name, str))) or "none"
            return (f"belongs to the user {user}, who is no member of {owner} (their organizations: {member_of}), "
                    "and the Hub refuses the upload with 403")
        if orgs[owner] == READ_ONLY_ORG_ROLE:
            return f"belongs to {user}, whose role in {owner} is read, and the Hub refuses the upload with 403"
    if role == "fineGrained":
        fine = access.get("fineGrained") if isinstance(access.get("fineGrained"), dict) else {}
        for scope in _names(fine.get("scoped")):
            entity = scope.get("entity") if isinstance(scope.get("entity"), dict) else {}
            permissions = scope.get("permissions") if isinstance(scope.get("permissions"), list) else []
            if entity.get("name") in (owner, repo_id) and WRITE_PERMISSION in permissions:
                return None
        return f"is a fine-grained token without {WRITE_PERMISSION} on {owner} or on {repo_id}"
    return None
