"""dlcImage by tag or digest (issue 22, item 10): a moving tag is warned about at preview; a digest of a known image
keeps that image's facts. The default stays a frozen tag (infra/kubernetes/raycluster.py says why: the publisher gives no
digest)."""
from __future__ import annotations

import logging

import pytest

from infra.kubernetes.raycluster import KNOWN_IMAGES, mutable_tag_warning
from tests.support.pulumi_mocks import SCHEMA, run_program

DEFAULT = SCHEMA["dlcImage"]["default"]
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("image", ["rayproject/ray:latest", "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda",
                                   "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1",
                                   "registry.example.com:5000/team/ray:v2.60", "rayproject/ray:2.60"])
def test_a_moving_tag_is_named_in_a_warning(image):
    warning = mutable_tag_warning(image)
    assert warning and image.rsplit(":", 1)[1] in warning and "digest" in warning, warning


@pytest.mark.parametrize("image", [DEFAULT, "rayproject/ray:2.60.0", "registry.example.com:5000/team/ray:v2.60.0-py313",
                                   f"rayproject/ray@{DIGEST}", f"{DEFAULT}@{DIGEST}"])
def test_a_release_tag_or_a_digest_is_not(image):
    assert mutable_tag_warning(image) is None, image


def test_the_preview_warns_on_a_moving_tag_and_a_digest_of_the_default_keeps_its_facts(caplog):
    with caplog.at_level(logging.WARNING):
        run_program("dev", {"dlcImage": "rayproject/ray:latest", "rayVersion": "2.60.0", "imageCudaVersion": "12.8"})
    assert any("'latest' moves" in record.getMessage() for record in caplog.records), \
        [r.getMessage() for r in caplog.records]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pinned = run_program("dev", {"dlcImage": f"{DEFAULT}@{DIGEST}"})
    assert not any("moves" in record.getMessage() for record in caplog.records)
    spec = pinned.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    assert spec["rayVersion"] == KNOWN_IMAGES[DEFAULT].ray_version, "the digest names the known image"
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == f"{DEFAULT}@{DIGEST}"


@pytest.mark.parametrize("image, host", [
    ("localhost/ml/ray-train:2.58.0", "localhost"),
    ("127.0.0.42:8443/ml/ray-train:2.58.0", "127.0.0.42"),
    ("[::1]:5001/ml/ray-train:2.58.0", "::1"),
    ("169.254.3.7:5000/ml/ray-train:2.58.0", "169.254.3.7"),
    ("builds.localhost:5000/ml/ray-train@" + DIGEST, "builds.localhost"),
])
def test_an_image_on_the_deployers_own_loopback_is_refused(image, host):
    from tests.program.test_refusals_at_preview import program_refusal

    message = program_refusal({"dlcImage": image, "rayVersion": "2.58.0", "imageCudaVersion": "13.0"})
    assert message.startswith(f"config key 'dlcImage': its registry {host} is a loopback or link-local"), message


def test_a_registry_on_a_private_address_or_name_is_left_alone():
    from infra.kubernetes.images import check_image

    for image in ("10.20.0.5:5000/ml/ray-train:2.58.0", "registry.internal.example:5000/ml/ray-train:2.58.0",
                  "ml/ray-train:2.58.0"):
        check_image(image)


@pytest.mark.parametrize("port", ["70000", "0"])
def test_a_registry_port_that_is_no_tcp_port_is_refused(port):
    from tests.program.test_refusals_at_preview import program_refusal

    message = program_refusal({"dlcImage": f"registry.example.net:{port}/ml/ray-train:2.58.0", "rayVersion": "2.58.0",
                               "imageCudaVersion": "13.0"})
    assert message.startswith(f"config key 'dlcImage': its registry's port '{port}' is no TCP port"), message
