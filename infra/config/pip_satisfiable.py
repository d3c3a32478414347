"""trainPip: version specifiers pip can never satisfy, refused at preview instead of on every worker at the job's start.

One rule: the specifiers of every entry naming the same project (PEP 503's canonical name) under the same marker are
ANDed, as pip does with them, and the list is refused when that conjunction is certainly empty. What is detected:
- a pin (`==V` without a wildcard, or `===V`) that the project's other specifiers exclude: two different pins
  (`requests==2.31.0` and `requests==2.30.0`), or a pin outside a bound (`requests==2.0,>=3`) or `!=` itself;
- a lower bound above the upper one, from `>=`, `>`, `<=`, `<` and `~=` (`~=A.B` bounds the release below A+1),
  or equal bounds that are not both inclusive (`>=3,<3`).
Wildcards (`==2.*`, `!=2.*`), pre-release subtleties and `!=` holes in a range are not reasoned about, so a rare
empty set may still pass; nothing that some version satisfies is refused. Entries under different markers are judged
apart (`x==1; python_version<"3.10"` and `x==2; python_version>="3.10"` are one common pattern).
"""
from __future__ import annotations

from packaging.requirements import Requirement
from packaging.specifiers import Specifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

KEY = "trainPip"


def _bounds(specifier: Specifier) -> tuple[tuple[Version, bool] | None, tuple[Version, bool] | None]:
    """(lower, upper) bounds, each (version, inclusive) or None, that contain every version `specifier` allows."""
    operator, text = specifier.operator, specifier.version
    if text.endswith(".*") or operator in ("!=", "==="):
        return None, None
    try:
        version = Version(text)
    except InvalidVersion:
        return None, None
    if operator == "==":
        return (version, True), (version, True)
    if operator in (">=", ">"):
        return (version, operator == ">="), None
    if operator in ("<=", "<"):
        return None, (version, operator == "<=")
    if operator == "~=":  # ~=A.B.C means >=A.B.C, ==A.B.*: below A.(B+1)
        release = list(version.release[:-1])
        release[-1] += 1
        return (version, True), (Version(".".join(map(str, release))), False)
    return None, None


def _empty(specifiers: SpecifierSet) -> bool:
    """Whether no version can satisfy `specifiers` (certainly; see the module's docstring for what is reasoned)."""
    for specifier in specifiers:
        if specifier.operator in ("==", "===") and not specifier.version.endswith(".*"):
            return not specifiers.contains(specifier.version, prereleases=True)
    lower = upper = None
    for specifier in specifiers:
        low, high = _bounds(specifier)
        if low and (lower is None or low[0] > lower[0] or (low[0] == lower[0] and not low[1])):
            lower = low
        if high and (upper is None or high[0] < upper[0] or (high[0] == upper[0] and not high[1])):
            upper = high
    if lower is None or upper is None:
        return False
    return lower[0] > upper[0] or (lower[0] == upper[0] and not (lower[1] and upper[1]))


def check_satisfiable(entries: list[str] | tuple[str, ...]) -> None:
    """trainPip, whose entries already parsed as requirements: refused where one project's specifiers (across
    entries under one marker) admit no version, naming the entries by index and the specifiers (never an entry's
    text: the project name and its version specifiers carry no credential)."""
    projects: dict[tuple[str, str], tuple[list[int], SpecifierSet]] = {}
    for index, entry in enumerate(entries):
        requirement = Requirement(entry)
        group = (canonicalize_name(requirement.name), str(requirement.marker or ""))
        indexes, specifiers = projects.get(group, ([], SpecifierSet()))
        projects[group] = ([*indexes, index], specifiers & requirement.specifier)
        if _empty(projects[group][1]):
            named = projects[group][0]
            where = f"entry {index} asks" if len(named) == 1 else f"entries {', '.join(map(str, named))} ask"
            raise ValueError(
                f"config key {KEY!r}: {where} for {group[0]} {projects[group][1]}, which no version satisfies, so "
                "pip would fail on every worker at the job's start; allowed: one satisfiable specifier per project "
                "(list each project once)")
