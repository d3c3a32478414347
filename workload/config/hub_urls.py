"""A Hugging Face Hub web address given where a Hub id goes (`--model_id https://huggingface.co/Qwen/Qwen2.5-0.5B`,
`--dataset https://huggingface.co/datasets/lab/chats`, `--push_to_hub https://huggingface.co/lab/tuned`): the page a
user copies from the browser, answered with the id to give. Standard library only."""
from __future__ import annotations

from urllib.parse import urlsplit

from workload.config.fields import URI_MAX_LENGTH, shown_uri
from workload.model.model_source import hub_id_problem

# The Hub's web hosts (huggingface_hub's constants.ENDPOINT, and the short host its links use).
HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
# What the Hub's URL paths start with for a repo of a kind other than a model's (huggingface_hub's REPO_TYPES_URL_PREFIXES).
KIND_PREFIXES = {"datasets": "dataset", "spaces": "Space"}
# Flags that take a Hub id, and the kind of repo each takes.
HUB_ID_FLAGS = {"model_id": "model", "tokenizer": "model", "dataset": "dataset", "push_to_hub": "model"}


def hub_url_problem(flag: str, value: str) -> str | None:
    """The refusal of a Hub web address given for `flag` (a field of HUB_ID_FLAGS), naming the id; None otherwise."""
    try:
        parts = urlsplit(value.strip()) if "://" in value and len(value) <= URI_MAX_LENGTH else None
    except ValueError:  # not a URL urllib can split: the field's own checks answer it
        return None
    if parts is None or parts.scheme not in ("http", "https") or (parts.hostname or "") not in HUB_HOSTS:
        return None
    if "@" in parts.netloc or parts.query:  # credentials, or a ?token=: the field's own checks refuse it as such
        return None
    path = [part for part in parts.path.split("/") if part]
    kind = KIND_PREFIXES.get(path[0], "model") if path else "model"
    if kind != "model":
        path = path[1:]
    shown = shown_uri(value)  # never its user information or query, nor a token in its path
    repo_id = "/".join(path[:2])
    if len(path) < 2 or hub_id_problem(repo_id, owner=True) is not None or shown.startswith("a URI"):
        return f"--{flag} {shown} is a Hub web address; give a Hub id (owner/name)"
    wanted = HUB_ID_FLAGS[flag]
    if kind != wanted:
        return (f"--{flag} {shown} is the Hub page of the {kind} {repo_id}; --{flag} takes a {wanted}'s id "
                f"(owner/name)")
    return f"--{flag} {shown} is the Hub's web page of {repo_id}; give its id: --{flag} {repo_id}"
