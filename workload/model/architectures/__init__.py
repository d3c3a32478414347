"""The architectures known before any download: the published config.json of the popular open decoders. Imports the
standard library only: the Pulumi program reads it at preview, and it must not pull in torch or transformers.

configs/<org>--<name>.json is the Hub repo <org>/<name>'s config.json as published (SOURCES.md says where each copy
came from). `published(model_id)` answers a Hub id with its config as a plain dict, or None when the project does not
ship it (infra/preview/model_config.py then reads it from the Hub or S3 at preview). workload.model.memory counts
parameters and projects memory from these dicts; workload.model.build builds the random-weight architectures
(--model_config) from them.
"""
from __future__ import annotations

import functools
from pathlib import Path

from workload.model import config_json

CONFIG_DIRECTORY = Path(__file__).resolve().parent / "configs"
# A Hub id's '/' cannot be in a file name; the Hub's own cache names repos the same way (models--<org>--<name>).
ID_SEPARATOR = "--"


def file_for(model_id: str) -> Path:
    """Where the shipped config of Hub id `model_id` lives (whether or not it exists)."""
    return CONFIG_DIRECTORY / (model_id.replace("/", ID_SEPARATOR) + ".json")


@functools.cache
def _shipped() -> dict[str, Path]:
    return {path.stem.replace(ID_SEPARATOR, "/", 1): path for path in sorted(CONFIG_DIRECTORY.glob("*.json"))}


def shipped_ids() -> tuple[str, ...]:
    """Every Hub id whose config the project ships, sorted."""
    return tuple(_shipped())


@functools.cache
def _load(path: Path) -> dict:
    return config_json.load(str(path))


def published(model_id: str) -> dict | None:
    """`model_id`'s published config.json as a dict (a copy: callers may change it), or None when not shipped."""
    path = _shipped().get(model_id)
    return dict(_load(path)) if path else None
