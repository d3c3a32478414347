"""trainEnv's directory variables (infra/config/env_names.py pseudo_directory_reason): a variable named like a
directory (*_DIR, *_HOME, *_CACHE, *_PATH, *_ROOT, TMPDIR) set to a path under a kernel pseudo file system (/proc,
/sys, /dev but /dev/shm) is refused at preview naming trainEnv and the variable, never quoting the value."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV, program_refusal

JOB = {"trainEnabled": True}


@pytest.mark.parametrize("entry, top", [
    ("TRITON_CACHE_DIR=/sys/kernel/triton-cache", "/sys"),
    ("XDG_CACHE_HOME=/dev/xdg", "/dev"),
    ("TMPDIR=/proc/self/scratch", "/proc"),
    ("MY_DATA_ROOT=//proc/data", "/proc"),  # two slashes are one
    ("TORCH_HOME=/dev/shm/../../proc/torch", "/proc"),  # .. out of /dev/shm
    ("NEURON_CACHE=/dev/cache", "/dev"),
])
def test_a_directory_variable_under_a_pseudo_file_system_is_refused(entry, top):
    name, _, value = entry.partition("=")
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | JOB | {"trainEnv": [entry]})
    message = str(refused.value)
    assert message.startswith("config key 'trainEnv': entry 0 (") and name in message, message
    assert f"under {top}, a kernel pseudo file system" in message and value not in message, message


def test_the_whole_program_refuses_it_before_any_resource():
    message = program_refusal(JOB | {"trainEnv": ["TORCHINDUCTOR_CACHE_DIR=/sys/inductor-cache"]})
    assert "TORCHINDUCTOR_CACHE_DIR" in message and "/sys" in message, message


@pytest.mark.parametrize("entry", ["TRITON_CACHE_DIR=/dev/shm/triton", "TMPDIR=/tmp/job", "XDG_CACHE_HOME=/mnt/x",
                                   "TRITON_HOME=//dev/shm/t",
                                   "MY_LABEL=/proc/not-a-directory", "TORCHINDUCTOR_CACHE_DIR=relative/proc"])
def test_other_places_and_names_stay_allowed(entry):
    assert config.parse(DEV | JOB | {"trainEnv": [entry]}).train.env[entry.partition("=")[0]] == entry.partition("=")[2]
