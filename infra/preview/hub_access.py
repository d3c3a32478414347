"""Whether the job's token may download a Hub repo (or write trainPushToHub), asked at preview, and the one refusal of
a gated repo.

The preview sizes the models and tokenizers the project ships a config or a size for (workload/model/architectures,
workload.data.tokenizer_size.KNOWN_SIZES) without reading their files, but the job still downloads them: a gated repo
(every meta-llama/* and google/gemma-* repo asks the user to accept its licence on the model's page) serves its files,
config.json included, only to a token of an account that was granted access (https://huggingface.co/docs/hub/
models-gated). The Hub answers X-Error-Code GatedRepo, 401 without a token and 403 with one not granted, which
huggingface_hub's hf_raise_for_status (utils/_http.py) raises as GatedRepoError, and from_pretrained then fails on every
node after the GPUs bill. So for such an id the preview asks once: one bounded request (a one-byte ranged GET of a file
the download reads first, workload.model.model_source.read_file) with trainSecretEnv's HF_TOKEN only, never the
deployer's own. Gated is refused (`gated_refusal`, the words every Hub read at preview uses); no answer, a 5xx or a 429
is a warning; any other answer (the repo not found on a Hub at HF_ENDPOINT that does not mirror it) is left to the job,
as the shipped config still sizes it.
trainPushToHub is asked likewise, once, with that token only: whoami-v2 says what it may write (check_push,
workload/checkpoint/hub_write.py), and a namespace it cannot write is refused before the run, not at its end.
"""
from __future__ import annotations

from infra.config import config_error
from workload.model import model_source

HUB_TOKEN_VARIABLE = model_source.TOKEN_VARIABLE


def gated_refusal(key: str, what: str, token: str | None) -> ValueError:
    """The refusal of a gated repo read without a token that has access, naming `key` and trainSecretEnv (and
    HF_TOKEN, never its value); `what` names the repo as the key holds it ("meta-llama/Llama-3.1-8B", "the tokenizer
    ...")."""
    if token:
        why = (f"trainSecretEnv's {HUB_TOKEN_VARIABLE} has not been granted access, so the job's download fails on every "
               "node; allowed: a token of an account that accepted the model's terms on its Hub page")
    else:
        why = (f"trainSecretEnv has no {HUB_TOKEN_VARIABLE}, so the job would be refused its files on every node; "
               f"allowed: a token of an account that accepted its terms, set with `{model_source.SECRET_COMMAND}`")
    return ValueError(f"config key '{key}': {what} is gated on the Hugging Face Hub and {why}")


def check_download(repo_id: str, file_name: str, key: str, token: str | None) -> str:
    """One bounded request for `file_name` of `repo_id` with trainSecretEnv's token (see the module docstring):
    ValueError naming `key` and trainSecretEnv when the repo is gated to that token; the warning to give when the Hub
    did not answer; "" otherwise."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        model_source.read_file(repo_id, file_name, token or False, 0)
    except GatedRepoError:
        raise gated_refusal(key, repo_id, token) from None
    except RepositoryNotFoundError:  # after GatedRepoError: huggingface_hub derives that from this
        return ""
    except model_source.Unreachable as error:
        return f"{key} {repo_id}: whether the job's token may download it could not be asked of the Hub ({error})"
    except HfHubHTTPError as error:
        status = getattr(error.response, "status_code", 0)
        if status in (404, 416):  # no such file (EntryNotFound), or a range past an empty file: an answer, not gated
            return ""
        return (f"{key} {repo_id}: whether the job's token may download it could not be asked of the Hub "
                f"({type(error).__name__} {status})")
    return ""


def check_push(repo_id: str, token: str | None) -> str:
    """trainPushToHub's upload runs after the last step (workload/checkpoint/hub.py): whether trainSecretEnv's token
    (never the deployer's own) may write `repo_id` is asked now, in one whoami-v2 request
    (workload.checkpoint.hub_write). ValueError naming trainPushToHub and trainSecretEnv when the Hub says it may not,
    or does not know the token (401); the warning to give when the Hub did not answer; "" otherwise. Without a
    token trainPushToHub is refused before (infra/config/train_keys.py)."""
    from workload.checkpoint import hub_write

    if not repo_id or not token:
        return ""
    try:
        answer = hub_write.whoami(token)
    except hub_write.InvalidToken as error:
        why = f"is not a token the Hub knows ({error}): revoked, mistyped or another Hub's"
    except hub_write.Unreachable as error:
        return (f"trainPushToHub {repo_id}: whether trainSecretEnv's {HUB_TOKEN_VARIABLE} may write it could not be "
                f"asked of the Hub ({error}); the upload at the end of the run finds out")
    else:
        why = hub_write.write_problem(answer, repo_id)
        if why is None:
            return ""
    raise config_error(("trainPushToHub", "trainSecretEnv"),
                       f"trainSecretEnv's {HUB_TOKEN_VARIABLE} {why}, so the upload of {repo_id} fails after the whole "
                       f"run; {hub_write.PUSH_ALLOWED}")
