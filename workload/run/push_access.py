"""--push_to_hub's token asked of the Hub before the run: whether it may write the repo the upload goes to.

The upload (workload/checkpoint/hub.py) runs after the last step, so a token the Hub does not know (401) or one that
may not write OWNER's repos (403 at create_repo) used to fail the run only at its end. The preview asks the Hub's
whoami-v2 for trainPushToHub (infra/preview/hub_access.py); the local run and the job's driver ask the same question
with the same rule (workload/checkpoint/hub_write.py) in workload.run.preflight.validate, before Ray starts. A token
the Hub refuses, or one the Hub says cannot write there, is exit 2 naming --push_to_hub and where the token came from,
never its value. A Hub that gives no answer is left to what the run did before: the local run's one bounded request
(workload/run/services.py check_services_reachable) has already refused a Hub that does not answer (exit 3), and the
driver on a cluster goes on to the upload, which says it then.
"""
from __future__ import annotations

import os

from workload import cli
from workload.checkpoint import hub_write
from workload.model import model_source

# The variables huggingface_hub reads a token from, first first (utils/_auth.py _get_token_from_environment), before
# the file `hf auth login` writes.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def _token() -> tuple[str | None, str]:
    """(the token huggingface_hub's uploads would send, as get_token() finds it, and where it came from in words)."""
    from huggingface_hub import get_token

    source = next((name for name in TOKEN_VARIABLES if os.environ.get(name)), "the token `hf auth login` stored")
    try:
        return get_token(), source
    except Exception:  # noqa: BLE001 - HF_OIDC_RESOURCE's exchange failing: the upload's own error says it
        return None, source


def check_push_access(repo_id: str) -> None:
    """Whether the run's Hub token may write `repo_id` (--push_to_hub), by one whoami-v2 request; cli.UsageError
    naming --push_to_hub when the Hub refuses the token or says it may not write there. Nothing is asked for no
    --push_to_hub, with the Hub offline, or without a token (workload.run.preflight.check_credentials refuses that)."""
    if not repo_id or model_source.offline_variable():
        return
    token, source = _token()
    if not token:
        return
    try:
        answer = hub_write.whoami(token)
    except hub_write.InvalidToken as error:
        why = f"is not a token the Hub knows ({error}): revoked, mistyped or another Hub's"
    except hub_write.Unreachable:
        return  # see the module's docstring: an unreachable Hub is said where it was said before
    else:
        why = hub_write.write_problem(answer, repo_id)
        if why is None:
            return
    raise cli.UsageError(f"--push_to_hub {repo_id}: {source} {why}, so the upload fails after the whole run",
                         hint=hub_write.PUSH_ALLOWED)
