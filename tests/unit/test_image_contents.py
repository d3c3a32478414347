"""What an image repository carries of what the job needs (infra/kubernetes/image_contents.py): the repository matched as
the distribution grammar normalises its name, and a repository its publisher documents without PyTorch or without EFA's
libraries refused when the job needs them; every other image only warned of."""
from __future__ import annotations

import pytest

from infra.kubernetes.image_contents import (
    check_contents,
    normalized_repository,
    published_contents,
    unknown_contents_warning,
)

DIGEST = "sha256:" + "c4" * 32


@pytest.mark.parametrize("image, repository", [
    ("rayproject/ray:2.56.0-py312-cu128", "docker.io/rayproject/ray"),
    ("docker.io/rayproject/ray:2.56.0", "docker.io/rayproject/ray"),
    ("index.docker.io/rayproject/ray:nightly", "docker.io/rayproject/ray"),
    ("registry-1.docker.io/rayproject/ray-llm:2.57.0-py312-cu128", "docker.io/rayproject/ray-llm"),
    (f"rayproject/ray-ml@{DIGEST}", "docker.io/rayproject/ray-ml"),
    (f"docker.io/rayproject/ray:2.56.0@{DIGEST}", "docker.io/rayproject/ray"),
    ("python:3.13", "docker.io/library/python"),
    ("index.docker.io/python:3.13", "docker.io/library/python"),
    ("localhost:5000/rayproject/ray:2.56.0", "localhost:5000/rayproject/ray"),
    ("mirror.example.net:8443/rayproject/ray:2.56.0", "mirror.example.net:8443/rayproject/ray"),
])
def test_a_name_normalises_as_the_distribution_grammar_does(image, repository):
    assert normalized_repository(image) == repository, image


@pytest.mark.parametrize("image", [
    "rayproject/ray:2.56.0-py312-cu128", "docker.io/rayproject/ray:2.55.1-gpu", "index.docker.io/rayproject/ray:latest",
    f"rayproject/ray@{DIGEST}",
])
def test_an_image_without_pytorch_is_refused_whenever_the_job_runs(image):
    for transport in ("efa", "socket", "any"):
        with pytest.raises(ValueError) as refused:
            check_contents(image, train_enabled=True, expect_transport=transport)
        message = str(refused.value)
        assert message.startswith("config key 'dlcImage': ") and "torch" in message, message
        assert "deep-learning-containers/ray:train-ml-cuda" in message and "FROM" in message, message
    check_contents(image, train_enabled=False, expect_transport="efa")  # no job: the cluster needs only Ray


@pytest.mark.parametrize("image", ["rayproject/ray-llm:2.57.0-py312-cu128", "rayproject/ray-ml:2.49.2.deprecated-py311-gpu",
                                   "docker.io/rayproject/ray-ml:2.30.0", "rayproject/ray-ml:2.49.2.deprecated-py311-cpu"])
def test_an_image_without_efa_libraries_is_refused_only_while_efa_is_expected(image):
    with pytest.raises(ValueError) as refused:
        check_contents(image, train_enabled=True, expect_transport="efa")
    message = str(refused.value)
    assert message.startswith("config keys 'dlcImage', 'trainExpectTransport': efa"), message
    assert "aws-ofi-nccl" in message and "socket or any" in message, message
    for transport in ("socket", "intra-node", "any"):
        check_contents(image, train_enabled=True, expect_transport=transport)


@pytest.mark.parametrize("image", [
    # Copies and builds in other registries are other images (one built FROM the DLC, say), whatever their path.
    "123456789012.dkr.ecr.us-west-2.amazonaws.com/rayproject/ray:2.56.0-dlc",
    "123456789012.dkr.ecr.eu-west-1.amazonaws.com/deep-learning-containers/ray:train-ml-cuda-v1.1.0",
    f"public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0@{DIGEST}",
    "ghcr.io/acme/rayproject/ray:2.56.0", "rayproject/ray-custom:2.56.0", "acme/ray:2.56.0-cu128",
])
def test_an_image_of_another_repository_is_not_refused(image):
    assert published_contents(image) is None, image
    check_contents(image, train_enabled=True, expect_transport="efa")


def test_an_unknown_image_is_warned_of_and_a_known_one_is_not():
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/ray:2.56.0-ft"
    warning = unknown_contents_warning(image, train_enabled=True, expect_transport="efa")
    assert warning and "PyTorch" in warning and "aws-ofi-nccl" in warning and "FROM" in warning, warning
    socket = unknown_contents_warning(image, train_enabled=True, expect_transport="socket")
    assert socket and "PyTorch" in socket and "aws-ofi-nccl" not in socket, socket
    assert unknown_contents_warning(image, train_enabled=False, expect_transport="efa") is None
    known = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
    assert unknown_contents_warning(known, train_enabled=True, expect_transport="efa") is None
    assert unknown_contents_warning(f"{known}@{DIGEST}", train_enabled=True, expect_transport="efa") is None
