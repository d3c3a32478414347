"""What an image repository carries of what the job needs (issue 44): PyTorch, which the job imports first, and EFA's
libraries (libfabric under /opt/amazon/efa and the aws-ofi-nccl plugin), which NCCL needs to cross nodes over EFA.

No registry can be reached at preview, and a guessed image config would pin nothing, so the table holds only
repositories whose publisher documents what they carry, each fact with its source. A dlcImage of such a repository
that lacks PyTorch is refused whenever the job runs, one that lacks the EFA libraries while trainExpectTransport is
efa; a repository matches as the distribution grammar normalises its name (`rayproject/ray`,
`docker.io/rayproject/ray`, `index.docker.io/rayproject/ray`, with any tag or digest), and nothing else does: a copy
in another registry (your ECR) is another image, possibly built FROM the DLC. An image the stack neither knows
(images.KNOWN_IMAGES) nor has facts for gets a warning that the stack cannot see its contents. Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass

from infra.kubernetes.images import KNOWN_IMAGES
from workload.config.fields import shown_value

# The distribution grammar's normalisation (distribution/reference normalize.go, splitDockerDomain): a name whose first
# component is no registry (no '.' or ':', not `localhost`, no capital) is on docker.io, `index.docker.io` is the legacy
# spelling of docker.io, and a one-component name there is an official image under `library/`.
DOCKER_HUB = "docker.io"
_DOCKER_HUB_SPELLINGS = ("docker.io", "index.docker.io",
                         # Docker Hub's registry API host: containerd's resolver pulls docker.io from it
                         # (containerd remotes/docker/config/hosts.go, `if host == "docker.io"`), so it names the
                         # same repositories.
                         "registry-1.docker.io")
ALLOWED = ("allowed: the AWS Ray Train DLC (public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0, or "
           "another train-ml-cuda tag) or an image built FROM it")


@dataclass(frozen=True)
class PublishedContents:
    """What a repository's publisher documents it carries; None where they document nothing."""

    name: str
    """How the refusal names it."""
    pytorch: bool | None
    efa: bool | None
    """libfabric (EFA's provider) and the aws-ofi-nccl plugin NCCL loads to drive EFA."""
    source: str
    """The publisher's document, as the refusal cites it (the comment beside each entry says more)."""


# Ray's images (docker.io/rayproject/*). None carries EFA's libraries: they are built FROM ubuntu or NVIDIA CUDA images
# (ray-project/ray docker/base-deps/Dockerfile, docker/README.md's tree: base-deps -> ray -> ray-ml / ray-llm), and none
# of docker/base-deps, docker/ray, docker/ray-ml or docker/ray-llm's Dockerfiles runs AWS's EFA installer or builds
# aws-ofi-nccl; only docker/base-extra does, the layer of Anyscale's own images, which are not these. A tag's platform
# (`-cpu`, `-cuXX`: installation.rst's "Docker Source Images") changes neither fact, and is no rule of its own: ray-ml's
# `-cpu` builds were based on Ubuntu, yet docker/ray-ml/install-ml-docker-requirements.sh installs the CUDA PyTorch
# (dl-gpu-requirements.txt, whose wheels bring their CUDA libraries) into every variant.
PUBLISHED_CONTENTS = {
    f"{DOCKER_HUB}/rayproject/ray": PublishedContents(
        name="Ray's base image", pytorch=False, efa=False,
        # installation.rst: "The images include Ray and all required dependencies"; the image's pip freeze it publishes
        # (doc/source/ray-overview/pip_freeze_ray-py310-cpu.txt, Ray 2.58.0) has no torch; ray-project/ray#46378: ML
        # libraries such as PyTorch were the ray-ml image's, now "build on a rayproject/ray base" (#65388).
        source="Ray's installation.rst: Ray and its dependencies"),
    f"{DOCKER_HUB}/rayproject/ray-ml": PublishedContents(
        # ray-project/ray#46378: "200+ additional Python packages, including PyTorch"; deprecated from 2.31.0, last
        # built at 2.49.x (ray-project/ray#57070), below the Ray 2.52.0 KubeRay's token auth needs.
        name="Ray's discontinued ML image", pytorch=True, efa=False,
        source="ray-project/ray#46378: rayproject/ray plus ML libraries"),
    f"{DOCKER_HUB}/rayproject/ray-llm": PublishedContents(
        # docker/ray-llm/Dockerfile: FROM the CUDA rayproject/ray, plus vLLM's lock (its torch), EP kernels, DeepGEMM.
        name="Ray's LLM serving image", pytorch=True, efa=False,
        source="ray-project/ray docker/ray-llm/Dockerfile: vLLM over rayproject/ray"),
}


def normalized_repository(image: str) -> str:
    """`image`'s repository as the distribution grammar normalises it (registry included, tag and digest dropped):
    rayproject/ray:2.58.0 and index.docker.io/rayproject/ray@sha256:... are docker.io/rayproject/ray."""
    name = image.partition("@")[0]
    head, _, last = name.rpartition("/")
    name = f"{head}/{last.partition(':')[0]}" if head else last.partition(":")[0]
    first, slash, rest = name.partition("/")
    registry_named = slash and (any(c in first for c in ".:") or first == "localhost" or first.lower() != first)
    registry, path = (first.lower(), rest) if registry_named else (DOCKER_HUB, name)
    if registry in _DOCKER_HUB_SPELLINGS:
        registry = DOCKER_HUB
        path = path if "/" in path else f"library/{path}"
    return f"{registry}/{path}"


def published_contents(image: str) -> PublishedContents | None:
    return PUBLISHED_CONTENTS.get(normalized_repository(image))


def check_contents(image: str, *, train_enabled: bool, expect_transport: str) -> None:
    """Refuse a dlcImage whose publisher documents it without what the job needs: PyTorch when the job runs, EFA's
    libraries when it must show efa. Nothing is refused while trainEnabled is false: the cluster itself needs only
    Ray."""
    contents = published_contents(image)
    if contents is None or not train_enabled:
        return
    shown, repository = shown_value(image), normalized_repository(image)
    if contents.pytorch is False:
        raise ValueError(f"config key 'dlcImage': {shown} is {contents.name} ({repository}), which its publisher "
                         f"documents without PyTorch ({contents.source}); the job imports torch first, so every rank "
                         f"would fail after the GPU nodes bill; {ALLOWED}")
    if contents.efa is False and expect_transport == "efa":
        raise ValueError(f"config keys 'dlcImage', 'trainExpectTransport': efa, but dlcImage {shown} is "
                         f"{contents.name} ({repository}), which carries neither libfabric (/opt/amazon/efa) nor "
                         f"aws-ofi-nccl ({contents.source}), so NCCL falls back to TCP sockets and the transport check "
                         f"fails; {ALLOWED}, or trainExpectTransport socket or any")


def unknown_contents_warning(image: str, *, train_enabled: bool, expect_transport: str) -> str | None:
    """A warning for a dlcImage the job runs on that the stack neither knows nor has its publisher's facts for: whether
    it carries PyTorch (and, for efa, libfabric and aws-ofi-nccl) is seen only once the GPU nodes bill."""
    if not train_enabled or image in KNOWN_IMAGES or image.partition("@")[0] in KNOWN_IMAGES \
            or published_contents(image) is not None:
        return None
    efa = (", and EFA's libfabric (/opt/amazon/efa) and aws-ofi-nccl, which trainExpectTransport efa needs"
           if expect_transport == "efa" else "")
    return (f"dlcImage {shown_value(image)}: the stack cannot see whether this image carries PyTorch, which the job "
            f"imports first{efa}; the job finds out only on the GPU nodes. An image built FROM the AWS Ray Train DLC "
            "(public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0) carries them")
