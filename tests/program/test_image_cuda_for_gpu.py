"""The image's CUDA against the GPU's generation (infra/config/gpu_cuda.py): a custom image whose CUDA is older than
the first toolkit that builds for the instance's GPU is refused at preview with nothing registered, naming the key
that said the CUDA (imageCudaVersion, or dlcImage by its tag) and gpuInstanceType; one rule over the whole table."""
from __future__ import annotations

import pytest

from infra.config import gpu_cuda
from tests.program.test_refusals_at_preview import program_refusal

CUSTOM = {"rayVersion": "2.58.0", "capacityReserve": False}


@pytest.mark.parametrize("stack, overrides, keys, words", [
    # H100 (sm_90) needs CUDA 11.8: an 11.7 image, said by the key and by the tag.
    ("p5", {"dlcImage": "registry.example.com/ml/ray:2.58.0-cu117", "imageCudaVersion": "11.7"},
     ("dlcImage", "gpuInstanceType", "imageCudaVersion"), ["sm_90", "11.8", "11.7"]),
    # The key says 12.1, the tag 11.6: the lower one is what the image's PyTorch was built with.
    ("p5", {"dlcImage": "registry.example.com/ml/ray:cuda11.6-py310", "imageCudaVersion": "12.1"},
     ("dlcImage", "gpuInstanceType"), ["sm_90", "11.6"]),
    # A100 (sm_80) needs CUDA 11.0.
    ("p4d", {"dlcImage": "registry.example.com/ml/ray:2.58.0-gpu", "imageCudaVersion": "10.2"},
     ("gpuInstanceType", "imageCudaVersion"), ["sm_80", "11.0"]),
])
def test_an_image_older_than_the_gpus_cuda_is_refused_naming_the_keys(stack, overrides, keys, words):
    message = program_refusal(CUSTOM | overrides, stack=stack)
    assert message.startswith(f"config keys {', '.join(repr(key) for key in keys)}: "), message
    assert all(word in message for word in words), message


def test_the_table_and_the_tag_reading():
    assert gpu_cuda.minimum_cuda(10.0) == (12, 8) and gpu_cuda.minimum_cuda(10.3) == (12, 9)
    assert gpu_cuda.minimum_cuda(8.9) == (11, 8) and gpu_cuda.minimum_cuda(8.6) == (11, 1)
    assert gpu_cuda.minimum_cuda(7.0) is None  # check_efa_gpu refuses it first
    assert gpu_cuda.tag_cuda_version("reg.example.com:5000/team/ray:2.58.0-cu126") == (12, 6)
    assert gpu_cuda.tag_cuda_version("nvcr.io/nvidia/pytorch:cuda-12.9.1-devel") == (12, 9)
    assert gpu_cuda.tag_cuda_version("reg.example.com:5000/cu118/ray:2.58.0") is None  # a repository, not the tag
    assert gpu_cuda.tag_cuda_version("reg.example.com/ray:2.58.0-cu130@sha256:" + "a" * 64) == (13, 0)
    # New enough for the GPU: no refusal (B200 with CUDA 12.8; L4 with 11.8 from the key and 12.4 from the tag).
    gpu_cuda.check_image_cuda(image="reg.example.com/ray:x-cu128", image_cuda_version="12.8",
                              configured_cuda_version="12.8", instance_type="p6-b200.48xlarge", gpu_name="B200")
    gpu_cuda.check_image_cuda(image="reg.example.com/ray:x-cu124", image_cuda_version="11.8",
                              configured_cuda_version="11.8", instance_type="g6.12xlarge", gpu_name="L4")
    with pytest.raises(ValueError, match=r"sm_100\), which CUDA builds for from 12.8"):
        gpu_cuda.check_image_cuda(image="reg.example.com/ray:2.58.0-cu126", image_cuda_version="12.6",
                                  configured_cuda_version="12.6", instance_type="p6-b200.48xlarge", gpu_name="B200")
