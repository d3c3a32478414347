"""The image's CUDA against the GPU's architecture: a PyTorch built with a CUDA older than the GPU's generation has no
kernel for it, so the job starts and then fails at its first kernel on every rank ("no kernel image is available for
execution on the device"; PyTorch warns "NVIDIA B200 with CUDA capability sm_100 is not compatible with the current
PyTorch installation"), after the GPU nodes bill. Refused at preview, naming the keys, from what the stack knows: the
GPU's compute capability (settings.GPU_COMPUTE_CAPABILITY, by DescribeInstanceTypes' GPU name), and the image's CUDA
(imageCudaVersion, a known image's own, and a `cuNNN` / `cudaNN.N` in dlcImage's tag: the lowest of them)."""
from __future__ import annotations

import re

from infra.config.rules import config_error
from infra.config.settings import GPU_COMPUTE_CAPABILITY

# The first CUDA toolkit that builds for each compute capability (highest first; a GPU takes the row of the highest
# capability at or below its own). NVIDIA's CUDA Toolkit release notes and the CUDA C++ Programming Guide's "Compute
# Capabilities" table (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/, https://developer.nvidia.com/
# cuda-gpus): Blackwell sm_100 from CUDA 12.8 (12.8 release notes: "Added support for ... SM_100"), sm_103 (B300) from
# 12.9, Hopper sm_90 and Ada sm_89 from 11.8, Ampere sm_86 from 11.1, A100 sm_80 from 11.0, Turing sm_75 from 10.0.
MIN_CUDA_FOR_CAPABILITY = ((10.3, (12, 9)), (10.0, (12, 8)), (9.0, (11, 8)), (8.9, (11, 8)), (8.6, (11, 1)),
                           (8.0, (11, 0)), (7.5, (10, 0)))
# PyTorch's wheel tags (cu124 = CUDA 12.4, cu130 = 13.0) and NVIDIA's image tags (cuda12.4, cuda-12.4.1).
_TAG_CUDA = (re.compile(r"(?<![A-Za-z0-9])cu(\d{2})(\d)(?!\d)"), re.compile(r"(?<![A-Za-z0-9])cuda-?(\d{1,2})\.(\d{1,2})"))


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def tag_cuda_version(image: str) -> tuple[int, int] | None:
    """The CUDA major.minor an image's tag names (repo:2.58.0-cu124 -> (12, 4)), or None when it names none."""
    reference = image.partition("@")[0]
    tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else ""
    found = [(int(m[1]), int(m[2])) for pattern in _TAG_CUDA for m in pattern.finditer(tag)]
    return min(found) if found else None


def minimum_cuda(capability: float) -> tuple[int, int] | None:
    """The oldest CUDA that builds for `capability`, or None for one older than the table (check_efa_gpu's)."""
    return next((cuda for at_least, cuda in MIN_CUDA_FOR_CAPABILITY if capability >= at_least), None)


def check_image_cuda(*, image: str, image_cuda_version: str, configured_cuda_version: str, instance_type: str,
                     gpu_name: str) -> None:
    """Refuse an image whose CUDA (`image_cuda_version`: imageCudaVersion or the known image's, and its tag's) is
    older than the first CUDA that builds for `instance_type`'s GPU. `configured_cuda_version`: the key as written
    (empty when the image's own), so the refusal names the key that said it."""
    capability = GPU_COMPUTE_CAPABILITY.get(gpu_name)
    needed = minimum_cuda(capability) if capability is not None else None
    if needed is None:
        return
    candidates = [(_version(image_cuda_version), "imageCudaVersion" if configured_cuda_version else "dlcImage")]
    if (from_tag := tag_cuda_version(image)) is not None:
        candidates.append((from_tag, "dlcImage"))
    cuda = min(version for version, _ in candidates)
    if cuda >= needed:
        return
    keys = {key for version, key in candidates if version < needed}  # each key that said a CUDA too old
    shown, wanted = ".".join(map(str, cuda)), ".".join(map(str, needed))
    sm = f"sm_{int(round(capability * 10))}"
    raise config_error(tuple(sorted({*keys, "gpuInstanceType"})),
                       f"{instance_type}'s {gpu_name} is compute capability {capability} ({sm}), which CUDA builds for "
                       f"from {wanted} on, and the image's CUDA is {shown}: its PyTorch has no kernel for this GPU and "
                       f"every rank would fail at its first one; allowed: an image of CUDA {wanted} or newer (dlcImage "
                       "with imageCudaVersion), or a GPU type of an older generation")
