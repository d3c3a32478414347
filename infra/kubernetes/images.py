"""The Ray image: what each image the stack knows bundles, and the checks of a dlcImage reference (a tag or a
digest, no credentials, the warnings for a tag that moves or an image the stack does not know). Standard library only."""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from workload.config.fields import shown_value


@dataclass(frozen=True)
class ImageFacts:
    """What an image bundles that the cluster depends on, and that no API can read from a tag at preview."""

    ray_version: str
    """The RayCluster's rayVersion. KubeRay gates features on it, and the DLC's EKS guide says it must match."""
    cuda_version: str
    """CUDA major.minor of the image's PyTorch: the GPU nodes' driver must support it (preflight checks)."""
    python_version: str = ""
    """The image's Python (major.minor): trainPip's wheels must be built for it (infra/preview/pip_index.py). Empty
    for an image the stack does not know: its packages' wheels are then not judged."""
    glibc_version: str = ""
    """The newest glibc its manylinux wheels may need (manylinux_2_X): the image's C library."""


# Issue 22: the default stays a frozen tag, not a digest. The publisher's records (aws/deep-learning-containers,
# docs/ray-train/index.md and changelog/index.md) list the tags of each release and no digest, and the registry cannot
# be reached from where this program is developed, so a digest here could not be verified against a source. The
# vX.Y.Z tag is the publisher's per-release tag (vX.Y and the bare name float with security rebuilds). Pin your own
# by digest with dlcImage: <this image>@sha256:<digest> (`crane digest` / `docker buildx imagetools inspect`): it is
# the same known image to the checks below.
# What each image the stack knows bundles, per the DLC changelog (aws/deep-learning-containers,
# docs/ray-train/changelog/index.md, "Ray Train v1.1 - 2026-09-01": Ray 2.58.0, CUDA 13.0.2). Keyed by the frozen
# vX.Y.Z tag: vX.Y moves with security rebuilds (docs/ray-train/index.md). Not by digest: a digest must be read
# from the registry, which nothing here can reach, and one typed from memory would be a guess.
KNOWN_IMAGES = {
    # Python 3.13, as the project's brief for this image says (the DLC's Ray Train v1.1 release notes list its
    # Python); glibc 2.35 is Ubuntu 22.04's, the DLC training images' os_version (aws/deep-learning-containers
    # release_images_training.yml), assumed rather than read from the image, which nothing here can pull.
    "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0": ImageFacts(
        ray_version="2.58.0", cuda_version="13.0", python_version="3.13", glibc_version="2.35"),
}

_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# A tag naming a full release (1.2.3, v1.2.3, train-ml-cuda-v1.1.0): registries can still move it, but publishers
# treat it as one build. `latest`, `v1.1`, `train-ml-cuda` and the like are moved on purpose.
_FROZEN_TAG = re.compile(r"(^|[^0-9.])v?[0-9]+\.[0-9]+\.[0-9]+([^0-9.]|$)")
_IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The reference grammar of the distribution project (distribution/reference, reference.go; the OCI distribution spec's
# name and tag rules): [domain[:port]/]path[:tag][@algorithm:hex], the path's components lowercase letters and digits
# joined by '.', '_', '__' or dashes. Its characters are these alone, so anything else ('?', '=', '#', '$', a space,
# a quote) is text that was never an image name, possibly a token (?token=...), and is refused without quoting it.
_REFERENCE_CHARACTER = re.compile(r"[A-Za-z0-9._:/@\[\]-]")
_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                        r"(?:@sha256:[0-9a-f]{64})?")
_REFERENCE_ALLOWED = ("allowed: registry[:port]/repository:tag or repository@sha256:<64 hex digits> (letters, digits, "
                      "'.', '_', '-', '/', ':', '@')")


def check_image(image: str) -> None:
    """Refuse an image that names neither a tag nor a digest: it would float to whatever `latest` is that day, and
    one that is not an image reference by the distribution grammar (quoted only when its characters are the grammar's
    own)."""
    if (index := next((i for i, c in enumerate(image) if not _REFERENCE_CHARACTER.fullmatch(c)), None)) is not None:
        kind = "a space or control character" if not image[index].isprintable() or image[index].isspace() \
            else f"{image[index]!r}" if image[index].isascii() else "a non-ASCII character"
        raise ValueError(f"config key 'dlcImage': character {index} is {kind}, which no image reference holds (its "
                         f"value is not shown); {_REFERENCE_ALLOWED}")
    reference, at, digest = image.partition("@")
    # Whatever follows '@' that is not a digest is user:password@registry/...: credentials, refused without quoting
    # (the nodes pull with their own role, never with a name's credentials).
    if at and not digest.startswith("sha256:"):
        raise ValueError("config key 'dlcImage': holds user:password@ or another '@' that is not a digest (its value "
                         "is not shown); allowed: registry/repository:tag or repository@sha256:<64 hex digits>, "
                         "pulled with the nodes' own role")
    if at and not _IMAGE_DIGEST.fullmatch(digest):
        raise ValueError("config key 'dlcImage': has a malformed digest (its value is not shown); expected "
                         "repository@sha256:<64 hex digits>")
    last_component = reference.rsplit("/", 1)[-1]
    repository, colon, tag = last_component.partition(":")
    if colon and not _IMAGE_TAG.fullmatch(tag):
        raise ValueError(f"config key 'dlcImage': {shown_value(image)} has a malformed tag {shown_value(tag)}")
    if not repository or any(c.isspace() for c in image):
        raise ValueError(f"config key 'dlcImage': {shown_value(image)} is not an image reference")
    if not colon and not at:
        raise ValueError(
            f"config key 'dlcImage': {shown_value(image)} has neither a tag nor a digest; give repo:tag "
            f"(e.g. public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0) or repo@sha256:<64 hex digits>"
        )
    if not _REFERENCE.fullmatch(image):
        raise ValueError(f"config key 'dlcImage': {shown_value(image)} is not an image reference (a repository's "
                         "path is lowercase "
                         f"letters and digits joined by '.', '_' or '-'); {_REFERENCE_ALLOWED}")
    if (host := _unreachable_registry(reference)) is not None:
        raise ValueError(f"config key 'dlcImage': its registry {host} is a loopback or link-local address, which names "
                         "each node itself, so no node can pull it; allowed: a registry the nodes reach, such as ECR "
                         "(ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPOSITORY:TAG) or public.ecr.aws")
    _, port = _registry(reference) or ("", "")
    if port and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"config key 'dlcImage': its registry's port {port[:8]!r} is no TCP port; allowed: "
                         "registry[:port]/repository:tag with a port from 1 to 65535")


def _registry(reference: str) -> tuple[str, str] | None:
    """(host, port) of `reference`'s registry, the port "" when none is given; None when it names none. By the
    distribution grammar the first component is a registry only when it holds '.' or ':' or is `localhost`; an IPv6
    host is bracketed ([::1]:5000)."""
    first, slash, _ = reference.partition("/")
    if not slash or not ("." in first or ":" in first or first.lower() == "localhost"):
        return None
    if first.startswith("[") and "]" in first:
        host, _, rest = first[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    host, colon, port = first.rpartition(":")
    return (host, port) if colon else (first, "")


def _unreachable_registry(reference: str) -> str | None:
    """The registry host of `reference` when it can only mean the machine asking (localhost, 127.0.0.0/8, ::1,
    169.254.0.0/16, fe80::/10, 0.0.0.0), else None; the kubelet resolves it on the node, not on the deployer's
    machine."""
    if (registry := _registry(reference)) is None:
        return None
    host, _ = registry
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):  # RFC 6761: always loopback
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if address.is_loopback or address.is_link_local or address.is_unspecified else None


# A tag's CPU architecture word: Ray's images are tagged {Ray version}[-{Python}][-{Platform}][-{Architecture}] with
# `-aarch64` for ARM (ray-project/ray docker/base-deps/README.md, "Tags"), and publishers of per-architecture tags
# commonly use Docker's platform names (`-arm64`, `-amd64`: the OCI image index's `architecture`). A tag without one
# names a single-architecture image or a multi-architecture index, and says nothing.
_TAG_ARCHITECTURE = re.compile(r"(?<![A-Za-z0-9])(aarch64|arm64|amd64|x86_64|x86-64)(?![A-Za-z0-9])", re.IGNORECASE)
_ARCHITECTURES = {"aarch64": "arm64", "arm64": "arm64", "amd64": "x86_64", "x86_64": "x86_64", "x86-64": "x86_64"}


def tag_architecture(image: str) -> str | None:
    """The CPU architecture (x86_64 or arm64) `image`'s tag names, or None where it names none (or names both)."""
    reference = image.partition("@")[0]
    last = reference.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    named = {_ARCHITECTURES[word.lower()] for word in _TAG_ARCHITECTURE.findall(tag)}
    return named.pop() if len(named) == 1 else None


def check_architecture(image: str, nodes_architecture: str) -> None:
    """Refuse a dlcImage whose tag names another CPU architecture than the nodes' AMIs: the head and every worker pod
    would fail to start ("exec format error"), the GPU nodes billing meanwhile."""
    if (named := tag_architecture(image)) is not None and named != nodes_architecture:
        raise ValueError(f"config key 'dlcImage': {shown_value(image)} is tagged for {named}, and the Ray pods run on "
                         f"{nodes_architecture} nodes (the system and GPU node groups' AMIs), so no pod would start "
                         f"(exec format error); allowed: an {nodes_architecture} image, such as "
                         "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0")


def mutable_tag_warning(image: str) -> str | None:
    """A warning for a dlcImage whose tag moves (`latest`, `vX.Y`, a bare name): the head and each worker pull it
    when their pod starts, so one cluster can run two builds, and a re-created pod another. None for a digest or a
    full-release tag."""
    reference, at, _ = image.partition("@")
    if at:
        return None
    tag = reference.rsplit("/", 1)[-1].partition(":")[2]
    if _FROZEN_TAG.search(tag):
        return None
    return (f"dlcImage {shown_value(image)}: the tag {shown_value(tag)} moves (it names no full release), so the Ray "
            "pods may pull "
            "different builds; pin a release tag (vX.Y.Z) or a digest (repo@sha256:...)")


def unpinned_image_warning(image: str) -> str | None:
    """A warning for a dlcImage the stack does not know, named by a tag alone, however frozen the tag looks: a
    registry lets whoever can push to the repository move any tag, `v1.2.3` included, and one the publisher does not
    vouch for (another registry, a fork, a mirror) is pinned only by a digest. None for a digest or a known image."""
    if "@" in image or image in KNOWN_IMAGES:
        return None
    registry = image.split("/", 1)[0] if "/" in image and any(c in image.split("/", 1)[0] for c in ".:") \
        else "docker.io"
    return (f"dlcImage {shown_value(image)}: a tag from {registry} that the stack does not know; whoever can push "
            "there can move "
            "it, so the Ray pods may run another build than the one checked. Pin it by digest: "
            "repo:tag@sha256:<digest> (`crane digest IMAGE` or `docker buildx imagetools inspect IMAGE`)")
