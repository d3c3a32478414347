"""Two rules of the preview beside tests/program/test_hostile_input_classes.py's table: a version is quoted only when
it is short enough to be one (a longer value may hold anything), and CUDA_VISIBLE_DEVICES is Ray's to set on each
worker (ray/_private/accelerators/nvidia_gpu.py), never the job's environment."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV

SENTINEL = "SENTINELquoted4321"


@pytest.mark.parametrize("overrides, key, words", [
    ({"dlcImage": "registry.example.com/ray:2.58.0", "rayVersion": "2.58.0", "imageCudaVersion": f"12.8-{SENTINEL}"},
     "imageCudaVersion", "a value of 23 characters must be empty (the known image's) or a CUDA major.minor"),
    ({"dlcImage": "registry.example.com/ray:2.58.0", "rayVersion": f"2.58-{SENTINEL}", "imageCudaVersion": "13.0"},
     "rayVersion", "a value of 23 characters must be empty (the known image's) or a Ray release"),
    ({"trainEnv": ["CUDA_VISIBLE_DEVICES=0,1"]}, "trainEnv", "CUDA_VISIBLE_DEVICES"),
])
def test_the_preview_refuses_naming_the_key_without_quoting_a_long_value(overrides, key, words):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | overrides)
    message = str(refused.value)
    assert f"'{key}'" in message and words in message and SENTINEL not in message, message
    assert config.parse(DEV | {"dlcImage": "registry.example.com/ray:2.58.0", "rayVersion": "2.58.0",
                               "imageCudaVersion": "12.8"}).image_cuda_version == "12.8"
