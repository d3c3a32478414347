"""A Hugging Face Hub web address given where a Hub id goes (`--model_id https://huggingface.co/Qwen/Qwen2.5-0.5B`,
`--dataset https://huggingface.co/datasets/lab/chats`, `--push_to_hub https://huggingface.co/lab/tuned`): the page a
user copies from the browser, answered with the id to give (workload.model.model_source.hub_web_page reads it)."""
from __future__ import annotations

from workload.config.fields import URI_MAX_LENGTH, shown_uri
from workload.model.model_source import hub_web_page

# Flags that take a Hub id, and the kind of repo each takes.
HUB_ID_FLAGS = {"model_id": "model", "tokenizer": "model", "dataset": "dataset", "push_to_hub": "model"}


def hub_url_problem(flag: str, value: str) -> str | None:
    """The refusal of a Hub web address given for `flag` (a field of HUB_ID_FLAGS), naming the id; None otherwise."""
    if len(value) > URI_MAX_LENGTH or "@" in value or "?" in value:
        return None  # too long, credentials, or a ?token=: the field's own checks refuse it as such
    if (page := hub_web_page(value)) is None:
        return None
    kind, repo_id = page
    shown = shown_uri(value)  # never its user information or query, nor a token in its path
    if not repo_id or shown.startswith("a URI"):
        return f"--{flag} {shown} is a web address; give a Hub id (owner/name)"
    if kind != HUB_ID_FLAGS[flag]:
        return (f"--{flag} {shown} is the Hub page of the {kind} {repo_id}; --{flag} takes a {HUB_ID_FLAGS[flag]}'s "
                "id (owner/name)")
    return f"--{flag} {shown} is a web address; give the Hub id it names: {repo_id}"
