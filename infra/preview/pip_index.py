"""trainPip against the package index, asked once per project at preview: an entry no release satisfies, or whose
only matching releases have no wheel for the image's Python and platform, is refused before the nodes bill.

Where: PyPI's JSON API (https://pypi.org/pypi/<project>/json, Warehouse's "JSON API" docs: `releases` maps each
version to its files, each with `filename`, `packagetype` (bdist_wheel, sdist), `requires_python` and `yanked`).
PyPI is what the workers install from: Ray runs `pip install -r` in the image with the image's pip configuration,
and trainEnv cannot point pip elsewhere (infra/config/env_names.py); this machine's PIP_INDEX_URL is not the
workers' and is not read. An index that cannot be asked (no network, a timeout, an answer that is not the API's) is a
warning and the entry is not judged; a URL or path requirement is refused earlier (infra/config/pip_requirements.py).

What pip does with what the index gives (pip's "Finding and choosing files" in its user guide, PEP 440, PEP 592 for
yanked files, PEP 503 names): versions the specifier allows (pre-releases only when the specifier names one or
nothing else matches: packaging's SpecifierSet.filter), files whose requires_python admits the image's Python,
yanked files only for an exact `==` pin; an entry whose marker is false in the image is skipped. A match with only
sdists (or wheels for other platforms) means pip builds the package from source on every GPU node at the job's start,
uncached per node, in an isolated build environment without the image's torch: flash-attn's setup.py imports torch
and fails there ("No module named 'torch'"; its README says `pip install flash-attn --no-build-isolation`, which a
runtime_env pip list cannot pass). Wheel tags are judged with `packaging.tags` for the image's CPython and manylinux.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

KEY = "trainPip"
INDEX_URL = "https://pypi.org/pypi"  # PyPI's JSON API; tests point it at tests/support/fake_pypi.py
TIMEOUT_S = 5.0  # per request; the requests run side by side, so the preview waits about this long in all
PARALLEL_REQUESTS = 8
_ARCHITECTURES = {"x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}


class IndexUnreachable(Exception):
    """The index could not be asked, or its answer was not the JSON API's."""


@dataclass(frozen=True)
class Target:
    """Where the packages install: the image's CPython, its glibc and the nodes' architecture."""

    python: str  # "3.13"; empty for an image the stack does not know: only whether a release satisfies is judged
    glibc: str  # "2.35"
    architecture: str  # EC2's: x86_64 or arm64

    @property
    def machine(self) -> str:
        return _ARCHITECTURES.get(self.architecture, self.architecture)

    def tags(self) -> frozenset[Tag]:
        """The wheel tags pip takes there (packaging.tags, as pip computes them for CPython on manylinux)."""
        major, minor = (int(part) for part in self.python.split("."))
        glibc_minor = int(self.glibc.split(".")[1])
        platforms = [f"manylinux_2_{m}_{self.machine}" for m in range(glibc_minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # PEP 600's aliases
        platforms += [f"{legacy[m]}_{self.machine}" for m in legacy if m <= glibc_minor
                      and (self.machine == "x86_64" or m == 17)]
        platforms.append(f"linux_{self.machine}")
        interpreter = f"cp{major}{minor}"
        return frozenset((*cpython_tags((major, minor), abis=[interpreter], platforms=platforms),
                          *compatible_tags((major, minor), interpreter, platforms)))

    def environment(self) -> dict[str, str]:
        """PEP 508 marker values in the image (those a trainPip marker is likely to test)."""
        return {"python_version": self.python, "python_full_version": f"{self.python}.0", "sys_platform": "linux",
                "platform_system": "Linux", "os_name": "posix", "platform_machine": self.machine,
                "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def fetch_project(name: str) -> dict[str, Any] | None:
    """The JSON API's answer for project `name` (None: the index has no such project)."""
    url = f"{INDEX_URL.rstrip('/')}/{canonicalize_name(name)}/json"
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            answer = json.loads(response.read(64 * 1024 * 1024))
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise IndexUnreachable(f"HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise IndexUnreachable(type(error).__name__) from None
    if not isinstance(answer, dict) or not isinstance(answer.get("releases"), dict):
        raise IndexUnreachable("an answer without the JSON API's releases")
    return answer


def _python_admits(requires_python: Any, python: str) -> bool:
    if not requires_python:
        return True
    try:
        return SpecifierSet(str(requires_python)).contains(Version(python), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True  # pip ignores a requires_python it cannot parse


def _pinned(requirement: Requirement) -> bool:
    return any(spec.operator in ("==", "===") and not spec.version.endswith(".*") for spec in requirement.specifier)


def judge(requirement: Requirement, project: dict[str, Any], target: Target) -> str | None:
    """Why pip cannot install `requirement` in the image from what the index lists, or None."""
    versions: dict[Version, list[dict]] = {}
    for text, files in project["releases"].items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue  # pip skips a version it cannot parse
        usable = [file for file in files or () if isinstance(file, dict)
                  and (not file.get("yanked") or _pinned(requirement))
                  and (not target.python or _python_admits(file.get("requires_python"), target.python))]
        if usable:
            versions[version] = usable
    name = canonicalize_name(requirement.name)
    matching = sorted(requirement.specifier.filter(versions), reverse=True)
    if not matching:
        newest = max(versions, default=None)
        return (f"no release of {name} on PyPI satisfies {requirement.specifier or 'any version'}"
                f"{f' for Python {target.python}' if target.python else ''}"
                f"{f' (the newest is {newest})' if newest else ''}")
    if not target.python:
        return None
    tags = target.tags()
    for version in matching:
        for file in versions[version]:
            if file.get("packagetype") != "bdist_wheel":
                continue
            try:
                if tags & parse_wheel_filename(str(file.get("filename", "")))[3]:
                    return None
            except InvalidWheelFilename:
                continue
    return (f"the releases of {name} that satisfy {requirement.specifier or 'any version'} (newest {matching[0]}) "
            f"have no wheel for Python {target.python} on manylinux {target.machine}, so pip would build it from "
            "source on every GPU node at the job's start, uncached per node and without the image's torch (pip's "
            "build isolation); pin a version with such a wheel, or build an image with it (dlcImage)")


def check(entries: tuple[str, ...] | list[str], target: Target, *, warn: Callable[[str], None],
          fetch: Callable[[str], dict[str, Any] | None] = None) -> None:
    """Refuse trainPip's first entry pip cannot install in the image; one warning when the index cannot be asked."""
    fetch = fetch or fetch_project
    requirements = [(index, Requirement(entry)) for index, entry in enumerate(entries)]
    requirements = [(index, r) for index, r in requirements if not r.url and (r.marker is None or (
        target.python and r.marker.evaluate(target.environment())))]  # a marker is judged only where Python is known
    names = sorted({canonicalize_name(r.name) for _, r in requirements})
    if not names:
        return
    answers: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=min(PARALLEL_REQUESTS, len(names))) as pool:
        for name, answer in zip(names, pool.map(lambda n: _asked(fetch, n), names)):
            answers[name] = answer
    unreachable = sorted(name for name, answer in answers.items() if isinstance(answer, IndexUnreachable))
    for index, requirement in requirements:
        answer = answers[canonicalize_name(requirement.name)]
        if isinstance(answer, IndexUnreachable):
            continue
        why = (f"PyPI has no project named {canonicalize_name(requirement.name)}" if answer is None
               else judge(requirement, answer, target))
        if why is not None:
            raise ValueError(f"config key {KEY!r}: entry {index}: {why}")
    if unreachable:
        warn(f"config key {KEY!r}: PyPI could not be asked about {', '.join(unreachable[:5])}"
             f"{' and more' if len(unreachable) > 5 else ''} ({answers[unreachable[0]]}); not judged at preview, so "
             "an entry pip cannot install fails on every worker at the job's start")


def _asked(fetch: Callable[[str], dict[str, Any] | None], name: str) -> Any:
    try:
        return fetch(name)
    except IndexUnreachable as error:
        return error
