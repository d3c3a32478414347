"""A trainEnv or trainSecretEnv value that no process's environment can hold (a NUL: execve's envp are C strings) is
refused at preview, under the mocks with nothing registered, naming the key and the variable, never the value:
trainSecretEnv's by infra/config/env_names.py unpassable_reason, trainEnv's by the rule of every free-text key's
characters (workload/config/fields.py text_problem)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.program.test_refusals_at_preview import program_refusal
from tests.support.pulumi_mocks import Secret

SECRETISH = "Qv3Tn8Rw1Ys6Lk4Hd9"


def test_no_process_can_be_given_a_nul_in_a_variable():
    # The reason the rule holds, as CPython says it: the value cannot reach a child process.
    with pytest.raises(ValueError, match="embedded null byte"):
        os.putenv("UNPASSABLE_PROBE", "a\x00b")
    with pytest.raises(ValueError, match="embedded null byte"):
        subprocess.run([sys.executable, "-c", "pass"], env={"UNPASSABLE_PROBE": "a\x00b"}, check=False)


@pytest.mark.parametrize("key, entries, name, index", [
    ("trainEnv", ["RUN_NOTE=ok", f"RUN_LABEL=nightly\x00{SECRETISH}"], "RUN_LABEL", 1),
    ("trainEnv", ["TOKENIZERS_PARALLELISM=\x00"], "TOKENIZERS_PARALLELISM", 0),
    ("trainSecretEnv", [f"WANDB_API_KEY={SECRETISH}{SECRETISH}\x00"], "WANDB_API_KEY", 0),
    ("trainSecretEnv", [f"HF_TOKEN=hf_{SECRETISH * 2}", f"MLFLOW_TRACKING_TOKEN={SECRETISH}\x00x"],
     "MLFLOW_TRACKING_TOKEN", 1),
])
def test_a_nul_in_a_variable_is_refused_naming_the_key_and_variable(key, entries, name, index):
    value = Secret(entries) if key == "trainSecretEnv" else entries
    message = program_refusal({"trainEnabled": True, key: value})
    assert message.startswith(f"config key '{key}': entry {index} ({name}): the value "), message
    assert "NUL" in message and "U+0000" in message, message
    assert SECRETISH not in message and SECRETISH[:6] not in message and "\x00" not in message, message
