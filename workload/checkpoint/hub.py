"""`--push_to_hub OWNER/NAME`: the exported model directory uploaded to the Hugging Face Hub once the run has ended,
with huggingface_hub's HfApi (create_repo, then upload_folder: one commit of every file), as TRL and transformers'
`push_to_hub` do.

The repo is created private when it does not exist (an existing one keeps its visibility); the token is $HF_TOKEN
(a stack's trainSecretEnv), and $HF_ENDPOINT, which huggingface_hub honours, points it at another Hub (a mirror, or
the tests' stand-in, tests/support/fake_hub.py). The driver uploads (workload/train.py), after the workers are done: a failed
upload costs no training, and the model stays where it was exported.
"""
from __future__ import annotations

import os

from workload import storage

# What the Hub's UI and model cards show as the commit that brought the model.
COMMIT_MESSAGE = "Upload {model} (ray-train-fsdp-llm run {run_name}, step {step})"


def push(model_directory: str, repo_id: str, run_name: str, private: bool = True) -> str:
    """Upload `model_directory` (local or s3://) to `repo_id`; returns the repo's URL on the Hub."""
    from huggingface_hub import HfApi

    api = HfApi(token=os.environ.get("HF_TOKEN") or None)
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    step = model_directory.rstrip("/").rsplit("_", 1)[-1]
    with storage.local_copy(model_directory, what="--push_to_hub's model") as local:
        api.upload_folder(repo_id=repo_id, folder_path=local, repo_type="model",
                          commit_message=COMMIT_MESSAGE.format(model=os.path.basename(model_directory.rstrip("/")),
                                                               run_name=run_name, step=step))
    return str(url)
