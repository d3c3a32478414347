"""trainPip judged against the package index at preview, in the whole program under mocks (infra/preview/
pip_index.py through feasibility), the index being tests/support/fake_pypi.py: an entry pip cannot install in the
image is refused naming trainPip before any resource, and one it can install passes."""
from __future__ import annotations

import pytest

from infra.preview import pip_index
from tests.program.test_refusals_at_preview import program_refusal
from tests.support.fake_pypi import file, project, serving
from tests.support.pulumi_mocks import run_program

PROJECTS = {
    "rotary-ops": project("rotary-ops", {"0.9.0": [file("rotary_ops-0.9.0.tar.gz")]}),
    "einops": project("einops", {"0.8.1": [file("einops-0.8.1-py3-none-any.whl")]}),
    "wandb": project("wandb", {"0.21.0": [
        file("wandb-0.21.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")]}),
}


@pytest.fixture(scope="module")
def index():
    yield from serving(PROJECTS)


@pytest.fixture
def fake_index(index, monkeypatch):
    monkeypatch.setattr(pip_index, "INDEX_URL", index.url)
    return index


@pytest.mark.parametrize("entry, words", [
    ("rotary-ops==0.9.0", "have no wheel for Python 3.13 on manylinux x86_64"),
    ("einops>=1", "no release of einops on PyPI satisfies >=1"),
])
def test_an_entry_pip_cannot_install_is_refused(fake_index, entry, words):
    message = program_refusal({"trainEnabled": True, "trainPip": ["wandb>=0.20", entry]})
    assert message.startswith("config key 'trainPip': entry 1: ") and words in message, message


def test_an_installable_entry_passes(fake_index):
    run = run_program("dev", {"trainEnabled": True, "trainPip": ["einops==0.8.1"]})
    assert run.resources, "the program registered nothing"
    assert "/pypi/einops/json" in fake_index.asked, fake_index.asked
