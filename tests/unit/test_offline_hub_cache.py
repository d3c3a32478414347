"""HF_HUB_OFFLINE with a model in this machine's Hub cache: its config.json is read from the cache, and the check
before Ray leaves the user's cache as it was (it removed the snapshot directory it was handed, then said the model
was missing)."""
from __future__ import annotations

import json

from workload.model import model_source


def _cached_model(hub, repo_id: str) -> object:
    """The layout huggingface_hub's cache keeps (file_download.py: models--owner--name/refs/main names the snapshot)."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    (snapshot / "tokenizer_config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    return snapshot


def test_the_offline_check_reads_a_copy_and_leaves_the_cache(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    from huggingface_hub import constants  # read at import: another test of this process may have imported it

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = _cached_model(tmp_path / "hub", "me/tiny-base-r9")
    directory = model_source.hub_config_directory("me/tiny-base-r9")
    assert json.loads(open(f"{directory}/config.json").read())["hidden_size"] == 64
    shutil.rmtree(directory)  # what the local run's check does with it
    assert (snapshot / "config.json").is_file() and (snapshot / "tokenizer_config.json").is_file()
    model_source.check_hub_reachable("me/tiny-base-r9")  # and the run goes on: its tokenizer is still cached
