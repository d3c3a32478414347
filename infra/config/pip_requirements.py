"""trainPip: the packages the job installs on every worker at its start, as requirement specifiers and nothing else.

Ray writes a runtime_env's pip list into a requirements file, one entry a line, and runs `pip install -r` on it
(ray/_private/runtime_env/dependency_utils.py, gen_requirements_txt). So an entry is a line of a requirements
file: an option (`--index-url https://user:token@...`, `-e git+...`, `-r other.txt`), a URL, a local wheel, a
line with options after the requirement (`torch==2.1.0 --no-deps`) or a second line behind a newline would change
where pip installs from, or what; and the list is the job's plain input, kept in Pulumi's state. Only PEP 508
requirement specifiers by name are accepted (a name, extras, version specifiers, a marker; no `name @ URL`), which
carry no credential. A placeholder name whose install always fails (sklearn, pytorch) is refused with the name
meant. None may replace the image's training stack, judged by the canonical name (PEP 503), so
`Torch`, `ray[train]>=2`, `nvidia_nccl_cu12` and `torch; python_version > "3"` are all caught. (A package that
itself requires another torch is pip's to resolve; the image's constraints are not visible here.)
"""
from __future__ import annotations

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from infra.config.pip_satisfiable import check_satisfiable

KEY = "trainPip"
# pip packages that would replace what the image's training stack is built from: its torch (and the packages that
# pin an exact torch), its Ray (the cluster's own version must match the job's), and the CUDA, cuDNN and NCCL
# wheels (nvidia-*) that torch was linked against. A runtime_env with them reinstalls them on every worker.
IMAGE_STACK_PACKAGES = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "ray")
IMAGE_STACK_PREFIXES = ("nvidia-",)
# PyPI names that are placeholders whose every install fails, so the job would fail on every worker after the GPUs
# started billing; each with the package meant. Checked from their sdists (`pip download --no-binary :all:`):
# sklearn 0.0.post12's build raises "The 'sklearn' PyPI package is deprecated, use 'scikit-learn'"
# (https://github.com/scikit-learn/sklearn-pypi-package); pytorch 1.0.2's setup.py raises 'You tried to install
# "pytorch". The package named for PyTorch is "torch"' on install and bdist_wheel.
# The oldest release of each library the job's own code runs on: transformers 5.13 is the cluster image's (the job
# keeps to the APIs it shares with the tests' 5.24), peft and torchao the pins the job installs and was tested with
# (workload/model/adapters). An entry that allows none of it or later replaces it with one the job fails on at start.
JOB_LIBRARY_FLOORS = {"transformers": "5.13", "peft": "0.21.2", "torchao": "0.18.0"}
PLACEHOLDER_PACKAGES = {"sklearn": "scikit-learn", "pytorch": "torch (which the image already holds)"}


def shown(entry: str) -> str:
    """An entry as a refusal may quote it, on one line (repr); never one holding '://' or '@' (a URL's path, user or
    query may each hold a token, as may a `name @ URL`): that one is named by its index alone."""
    return "(its value is not shown)" if "://" in entry or "@" in entry else repr(entry)


def check_requirements(entries: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """trainPip, refused unless every entry is a requirement specifier by name for a package not of the image."""
    allowed = ("allowed: requirement specifiers by name such as einops==0.8.1 or 'datasets>=3; python_version>=\"3.10\"' "
               "(no pip options, URLs or paths: a private index belongs in the image or its pip.conf)")
    for index, entry in enumerate(entries):
        try:
            requirement = Requirement(entry)
        except InvalidRequirement:
            raise ValueError(f"config key {KEY!r}: entry {index} {shown(entry)} is not a requirement specifier (a pip "
                             f"option, a URL, a path, or text after the requirement); {allowed}") from None
        if requirement.url:
            raise ValueError(f"config key {KEY!r}: entry {index} {shown(entry)} installs from a URL, which would sit "
                             f"in the job's plain inputs in Pulumi's state; {allowed}")
        name = canonicalize_name(requirement.name).strip("-")  # packaging keeps a trailing '_' ("Torch_")
        if name in PLACEHOLDER_PACKAGES:
            raise ValueError(f"config key {KEY!r}: entry {index} {shown(entry)} is a placeholder on PyPI whose install "
                             f"always fails; the package meant is {PLACEHOLDER_PACKAGES[name]}")
        if name in IMAGE_STACK_PACKAGES or name.startswith(IMAGE_STACK_PREFIXES):
            raise ValueError(
                f"config key {KEY!r}: entry {index} {shown(entry)} would replace the image's {name} on every worker, "
                f"and the image's torch, Ray, CUDA and NCCL are built and tested together; allowed: packages other than "
                f"{', '.join(IMAGE_STACK_PACKAGES)} and {', '.join(p + '*' for p in IMAGE_STACK_PREFIXES)} "
                "(use another dlcImage for another stack)")
        if name in JOB_LIBRARY_FLOORS and not _allows_floor_or_later(requirement, JOB_LIBRARY_FLOORS[name]):
            raise ValueError(
                f"config key {KEY!r}: entry {index} {shown(entry)} allows no {name} at or after "
                f"{JOB_LIBRARY_FLOORS[name]}, the oldest the job's code runs on, so every worker would fail at its "
                f"start; allowed: a specifier that allows {name} {JOB_LIBRARY_FLOORS[name]} or later, or no entry "
                f"for {name}")
    check_satisfiable(entries)  # one project's specifiers that no version satisfies
    return tuple(entries)


def _allows_floor_or_later(requirement: Requirement, floor: str) -> bool:
    """Whether any version at or after `floor` meets the requirement's specifiers: the floor itself, each version the
    specifiers name at or after it, or one far beyond them all."""
    floor_version = Version(floor)
    candidates = [floor_version, Version("99999")]
    for spec in requirement.specifier:
        try:
            named = Version(spec.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        if named >= floor_version:
            candidates.append(named)
    return any(requirement.specifier.contains(candidate, prereleases=True) for candidate in candidates)
