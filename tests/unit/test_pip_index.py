"""trainPip against the package index (infra/preview/pip_index.py), over HTTP to the fake PyPI (tests/support/
fake_pypi.py): an entry no release satisfies, or whose matching releases have no wheel for the image's CPython and
manylinux platform, is refused naming the entry; an index that cannot be asked is one warning, never a refusal."""
from __future__ import annotations

import pytest

from infra.preview import pip_index
from tests.support.fake_pypi import file, project, serving

X86 = pip_index.Target(python="3.13", glibc="2.35", architecture="x86_64")
ARM = pip_index.Target(python="3.13", glibc="2.35", architecture="arm64")

PROJECTS = {
    "einops": project("einops", {"0.7.0": [file("einops-0.7.0-py3-none-any.whl"), file("einops-0.7.0.tar.gz")],
                                 "0.8.1": [file("einops-0.8.1-py3-none-any.whl")]}),
    # Compiled wheels for CPython 3.12 only, and an sdist: on the image's 3.13 pip builds from source.
    "fused-kernels": project("fused-kernels", {"1.4.0": [
        file("fused_kernels-1.4.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
        file("fused_kernels-1.4.0.tar.gz")]}),
    # abi3 wheels for x86_64 only.
    "stable-ext": project("stable-ext", {"2.1": [file("stable_ext-2.1-cp39-abi3-manylinux_2_28_x86_64.whl")]}),
    # A wheel for a newer glibc than the image's, and one release only as an sdist.
    "new-glibc": project("new-glibc", {"3.0": [file("new_glibc-3.0-cp313-cp313-manylinux_2_39_x86_64.whl")],
                                       "2.9": [file("new_glibc-2.9.tar.gz")]}),
    # The newest release yanked, one needing Python 3.14, a release candidate.
    "Tidy_Logs": project("Tidy_Logs", {
        "1.0": [file("tidy_logs-1.0-py3-none-any.whl")],
        "2.0": [file("tidy_logs-2.0-py3-none-any.whl", yanked=True)],
        "2.1": [file("tidy_logs-2.1-py3-none-any.whl", requires_python=">=3.14")],
        "3.0rc1": [file("tidy_logs-3.0rc1-py3-none-any.whl")]}),
    "arm-only": project("arm-only", {"0.3": [file("arm_only-0.3-cp313-cp313-manylinux_2_17_aarch64.whl")]}),
}


@pytest.fixture(scope="module")
def index():
    yield from serving(PROJECTS)


@pytest.fixture
def asked(index, monkeypatch):
    monkeypatch.setattr(pip_index, "INDEX_URL", index.url)
    index.asked.clear()
    return index


def _verdict(entries, target=X86):
    warnings: list[str] = []
    try:
        pip_index.check(entries, target, warn=warnings.append)
    except ValueError as refused:
        return str(refused), warnings
    return None, warnings


@pytest.mark.parametrize("entry, words", [
    ("einops>=50", "no release of einops on PyPI satisfies >=50 for Python 3.13 (the newest is 0.8.1)"),
    ("fused-kernels==1.4.0", "have no wheel for Python 3.13 on manylinux x86_64, so pip would build it from source"),
    ("fused_kernels", "build it from source on every GPU node"),
    ("new-glibc>=2.9", "no wheel for Python 3.13"),
    ("tidy-logs>=2,<3", "no release of tidy-logs"),  # 2.0 yanked, 2.1 for Python 3.14
    ("arm-only", "no wheel for Python 3.13 on manylinux x86_64"),
    ("no-such-project-here", "PyPI has no project named no-such-project-here"),
])
def test_an_entry_pip_cannot_install_is_refused(asked, entry, words):
    message, _ = _verdict(["einops==0.8.1", entry])
    assert message is not None and message.startswith("config key 'trainPip': entry 1: "), f"{entry}: {message}"
    assert words in message and "\n" not in message, f"{entry}: {message}"


@pytest.mark.parametrize("entry, target", [
    ("einops==0.8.1", X86), ("einops", ARM), ("stable-ext>=2", X86), ("Tidy.Logs==2.0", X86),  # an exact pin may take
    # a yanked file (PEP 592)
    ("tidy-logs>=3.0rc1", X86), ("tidy_logs<2", X86), ("arm-only==0.3", ARM),
    ('fused-kernels==1.4.0; python_version < "3.13"', X86),  # false in the image: pip skips it
])
def test_an_entry_pip_can_install_passes(asked, entry, target):
    assert _verdict([entry], target) == (None, []), entry


def test_each_project_is_asked_once_by_its_canonical_name(asked):
    assert _verdict(["Tidy_Logs<2", "tidy-logs!=1.1", "einops"]) == (None, [])
    assert sorted(asked.asked) == ["/pypi/einops/json", "/pypi/tidy-logs/json"], asked.asked


def test_an_index_that_cannot_be_asked_is_a_warning(monkeypatch):
    monkeypatch.setattr(pip_index, "INDEX_URL", "http://127.0.0.1:9/pypi")  # nothing listens on the discard port
    message, warnings = _verdict(["einops>=50", "peft==0.21.2"])
    assert message is None and len(warnings) == 1, (message, warnings)
    assert "trainPip" in warnings[0] and "einops, peft" in warnings[0] and "not judged" in warnings[0], warnings


def test_an_answer_that_is_not_the_json_api_is_a_warning():
    warnings: list[str] = []

    def fetch(name):
        raise pip_index.IndexUnreachable("an answer without the JSON API's releases")

    pip_index.check(["einops>=50"], X86, warn=warnings.append, fetch=fetch)
    assert len(warnings) == 1 and "einops" in warnings[0], warnings


def test_the_targets_tags_are_pips():
    """The image's tags hold the manylinux aliases pip takes (PEP 600) and no newer glibc than the image's."""
    tags = {str(tag) for tag in X86.tags()}
    assert {"cp313-cp313-manylinux2014_x86_64", "cp313-abi3-manylinux_2_35_x86_64", "py3-none-any",
            "cp39-abi3-manylinux_2_28_x86_64"} <= tags
    assert "cp313-cp313-manylinux_2_36_x86_64" not in tags and "cp312-cp312-manylinux2014_x86_64" not in tags
    assert all("aarch64" in str(tag) or "any" in str(tag) for tag in ARM.tags())


def test_an_image_the_stack_does_not_know_is_judged_for_releases_alone(asked):
    """Without the image's Python, only whether a release satisfies is judged: an sdist-only match passes."""
    unknown = pip_index.Target(python="", glibc="", architecture="x86_64")
    assert _verdict(["fused-kernels==1.4.0", "tidy-logs==2.1", 'einops>=50; python_version<"3"'], unknown) == (None, [])
    message, _ = _verdict(["einops>=50"], unknown)
    assert message == ("config key 'trainPip': entry 0: no release of einops on PyPI satisfies >=50 "
                       "(the newest is 0.8.1)"), message
