"""One rule for every directory a run writes into (workload/run/writable.py): a local --storage_path and the caches the
environment names (HF_HOME, HF_HUB_CACHE, HF_DATASETS_CACHE, ...). A file in the way or a directory that refuses a file
is one line naming the variable and what it must be, exit 3, with nothing left behind. /proc stands for a directory
that refuses a file even to root (a permission bit would not: root passes any access check)."""
from __future__ import annotations

import os

import pytest

from workload import cli
from workload.run import writable


@pytest.mark.parametrize("name", [name for name, _ in writable.CACHE_VARIABLES])
def test_a_cache_variable_at_a_file_is_exit_3_naming_it(tmp_path, name):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(cli.EnvironmentProblem, match=rf"^{name}=\S*notes.txt is a file; .* must be a directory$"):
        writable.check_cache_directories({name: str(tmp_path / "notes.txt")})
    with pytest.raises(cli.EnvironmentProblem, match=rf"^{name}=\S*notes.txt/cache: \S*notes.txt is a file; "):
        writable.check_cache_directories({name: str(tmp_path / "notes.txt" / "cache")})
    with pytest.raises(cli.EnvironmentProblem, match=rf"^{name}=/proc/cache cannot be written: .*\(/proc\); .* this "
                                                     "user can write in$") as refused:
        writable.check_cache_directories({name: "/proc/cache"})
    assert f"point {name} at a directory of yours" in refused.value.hint


def test_a_directory_or_one_to_be_made_passes_and_nothing_is_left(tmp_path):
    (tmp_path / "hf").mkdir()
    writable.check_cache_directories({"HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_CACHE": str(tmp_path / "a" / "b"),
                                      "HF_HUB_CACHE": ""})
    assert sorted(os.listdir(tmp_path)) == ["hf"] and os.listdir(tmp_path / "hf") == []


def test_the_storage_path_is_held_to_the_same_rule(tmp_path):
    from workload.config import TrainConfig
    from workload.run import checks

    (tmp_path / "f").write_text("x")
    with pytest.raises(cli.UsageError, match=rf"^--storage_path {tmp_path}/f/runs: {tmp_path}/f is a file, not a "):
        checks.check_storage(TrainConfig(model_config="tiny", storage_path=str(tmp_path / "f" / "runs")))
    with pytest.raises(cli.UsageError, match=r"^--storage_path /proc/runs cannot be written: "):
        checks.check_storage(TrainConfig(model_config="tiny", storage_path="/proc/runs"))
