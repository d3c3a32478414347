"""The repository is self-contained: every upstream file the program or the tests read is a committed copy whose
provenance (repository, tag, path, SHA-256) is recorded beside it, and nothing reaches outside the checkout."""
from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROVENANCE_READMES = [REPO / "tests" / "reference" / "README.md", REPO / "infra" / "kubernetes" / "charts" / "README.md"]
_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \|.*\| `(?P<sha256>[0-9a-f]{64})` \|$")


def provenance_rows() -> list[tuple[Path, str]]:
    rows = []
    for readme in PROVENANCE_READMES:
        for line in readme.read_text().splitlines():
            if match := _ROW.match(line):
                rows.append((readme.parent / match["file"], match["sha256"]))
    return rows


@pytest.mark.parametrize("path, sha256", provenance_rows(), ids=lambda value: getattr(value, "name", "")[:40])
def test_each_copy_is_the_file_its_provenance_names(path, sha256):
    assert path.is_file(), f"{path} is listed with its provenance but missing"
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    assert actual == sha256, f"{path.relative_to(REPO)} changed (sha256 {actual}); update its provenance row too"


def test_every_file_in_the_reference_folders_has_a_provenance_row():
    listed = {path for path, _ in provenance_rows()}
    for readme in PROVENANCE_READMES:
        copies = {path for path in readme.parent.rglob("*") if path.is_file() and path.name != "README.md"}
        unlisted = sorted(str(path.relative_to(REPO)) for path in copies - listed)
        assert not unlisted, f"{readme.relative_to(REPO)} must record the provenance of {unlisted}"


def test_nothing_reads_outside_the_checkout():
    """A clone from the repository's home has no ../shared: no tracked source may look there."""
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.yaml", ".ci/*"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.split()
    def reads_outside(name: str) -> bool:
        # Comments may say where a copy came from (provenance); code may not go there.
        code = [line for line in (REPO / name).read_text(errors="replace").splitlines()
                if not line.lstrip().startswith("#")]
        return any(re.search(r"\.\./shared|RAYTRAIN_SHARED_DIR", line) for line in code)

    offenders = [name for name in tracked if name != "tests/unit/test_reference_files.py" and reads_outside(name)]
    assert not offenders, f"these files reach outside the checkout: {offenders}"
