"""A dlcImage whose publisher documents it without what the job needs is refused at preview, with nothing registered
(infra/kubernetes/image_contents.py, run by infra/preview/feasibility.py): no PyTorch whenever the job runs, no EFA
libraries while trainExpectTransport is efa. An image the stack has no facts for, such as one built FROM the DLC under
the user's own name, still previews, with a warning."""
from __future__ import annotations

import logging

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.pulumi_mocks import run_program

JOB = {"trainEnabled": True}
# An image the stack does not know must say its Ray and CUDA (infra/kubernetes/raycluster.py image_facts).
VERSIONS = {"rayVersion": "2.56.0", "imageCudaVersion": "12.8"}


@pytest.mark.parametrize("stack, overrides, keys, words", [
    ("dev", {"dlcImage": "docker.io/rayproject/ray:2.56.0-py312-cu128"}, "config key 'dlcImage'", "without PyTorch"),
    ("dev", {"dlcImage": "index.docker.io/rayproject/ray:2.56.0-gpu", "trainExpectTransport": "any"},
     "config key 'dlcImage'", "without PyTorch"),
    ("p5", {"dlcImage": "rayproject/ray-llm:2.57.0-py312-cu128"}, "config keys 'dlcImage', 'trainExpectTransport'",
     "aws-ofi-nccl"),
])
def test_an_image_its_publisher_documents_without_what_the_job_needs_is_refused(stack, overrides, keys, words):
    message = program_refusal({**JOB, **VERSIONS, **overrides}, stack=stack)
    assert message.startswith(keys) and words in message, message
    assert "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda" in message, f"the allowed values: {message}"


def test_the_same_images_preview_where_the_job_does_not_need_what_they_lack():
    assert run_program("dev", {"dlcImage": "rayproject/ray:2.56.0-py312-cu128", **VERSIONS}).error is None  # no job
    llm = run_program("dev", {**JOB, **VERSIONS, "dlcImage": "rayproject/ray-llm:2.57.0-py312-cu128",
                              "ncclNetPlugin": "none", "trainExpectTransport": "socket"})
    assert llm.error is None, "PyTorch is there, and sockets need no EFA library"


def test_an_image_built_from_the_dlc_under_another_name_previews_with_a_warning(caplog):
    image = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ml/ray-train-ft:2.58.0-cu130-r7"
    with caplog.at_level(logging.WARNING):
        run = run_program("dev", {**JOB, "dlcImage": image, "rayVersion": "2.58.0", "imageCudaVersion": "13.0"})
    assert run.error is None and run.resources, "previewed, resources registered"
    warnings = [record.getMessage() for record in caplog.records if "PyTorch" in record.getMessage()]
    assert len(warnings) == 1 and "aws-ofi-nccl" in warnings[0] and image in warnings[0], warnings


def test_an_arm64_image_on_x86_64_nodes_is_refused_at_preview():
    # infra/preview/feasibility.py, images.check_architecture: every Ray pod would fail with "exec format error".
    message = program_refusal({"dlcImage": "registry.example.com/team/ray:2.58.0-py313-cu130-arm64",
                               "rayVersion": "2.58.0", "imageCudaVersion": "13.0"})
    assert message.startswith("config key 'dlcImage': ") and "tagged for arm64" in message, message
    assert "x86_64 nodes" in message, message
