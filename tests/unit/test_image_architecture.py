"""A dlcImage's tag that names a CPU architecture (Ray's `-aarch64`, Docker's `-arm64`/`-amd64`) is read as one
(infra/kubernetes/images.py tag_architecture); a tag naming none says nothing, since it may be a multi-architecture
index."""
from __future__ import annotations

import pytest

from infra.kubernetes import images


@pytest.mark.parametrize("image, architecture", [
    ("rayproject/ray:2.60.0-py311-cu128-aarch64", "arm64"),
    ("docker.io/rayproject/ray:2.58.0-py313-gpu-aarch64", "arm64"),
    ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/ray:2.58.0-ARM64", "arm64"),
    ("registry.example.com/ray:2.58.0_arm64@sha256:" + "a" * 64, "arm64"),
    ("registry.example.com/ray:2.58.0-amd64", "x86_64"),
    ("registry.example.com/ray:cu130-x86_64", "x86_64"),
    ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0", None),
    ("registry.example.com/aarch64/ray:2.58.0", None),  # a path component names no tag
    ("registry.example.com/ray:2.58.0-aarch64-amd64", None),  # names both: no verdict
    ("registry.example.com/ray:2.58.0-aarch640", None),  # not the word
    ("registry.example.com/ray@sha256:" + "b" * 64, None),
])
def test_the_tag_s_architecture_word_is_read(image, architecture):
    assert images.tag_architecture(image) == architecture


def test_an_image_for_another_architecture_than_the_nodes_is_refused_naming_the_key():
    with pytest.raises(ValueError) as refused:
        images.check_architecture("registry.example.com/ray:2.58.0-py313-cu130-aarch64", "x86_64")
    assert str(refused.value).startswith("config key 'dlcImage': ") and "tagged for arm64" in str(refused.value)
    images.check_architecture("registry.example.com/ray:2.58.0-py313-cu130-aarch64", "arm64")
    images.check_architecture("registry.example.com/ray:2.58.0-py313-cu130", "x86_64")
