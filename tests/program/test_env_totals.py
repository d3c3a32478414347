"""trainEnv and trainSecretEnv are bounded in total, not only per entry (infra/config/train_keys.py ENV_TOTAL_BOUNDS):
trainSecretEnv is one Kubernetes Secret (1 MiB), trainEnv part of every Ray worker's execve environment (ARG_MAX)."""
from __future__ import annotations

import re

from infra.config.train_keys import ENV_TOTAL_BOUNDS
from tests.program.test_refusals_at_preview import program_refusal
from tests.support.pulumi_mocks import Secret, run_program

JOB = {"trainEnabled": True}
# Values of "y " runs: a long run of letters keeps the credential heuristics' regexes busy for minutes.
SPACED = "y " * 8000  # 16,000 characters


def _total(entries: list[str]) -> int:
    return sum(len(entry.encode()) + 1 for entry in entries)


def test_a_secret_env_over_one_kubernetes_secret_is_refused_with_its_total():
    entries = [f"BLOB_{i}=" + "z" * 30_000 for i in range(36)]
    message = program_refusal({**JOB, "trainSecretEnv": Secret(entries)})
    assert message.startswith(f"config key 'trainSecretEnv': its entries total {_total(entries):,} bytes; allowed: at "
                              f"most {ENV_TOTAL_BOUNDS['trainSecretEnv'][0]:,} in all"), message
    assert "z" * 20 not in message


def test_a_plain_env_over_its_share_of_arg_max_is_refused_and_one_under_it_runs():
    over = [f"NOTE_{i}={SPACED}" for i in range(40)]
    message = program_refusal({**JOB, "trainEnv": over})
    assert re.match(rf"config key 'trainEnv': its entries total {_total(over):,} bytes; allowed: at most "
                    rf"{ENV_TOTAL_BOUNDS['trainEnv'][0]:,} in all \(.*ARG_MAX", message), message
    under = over[:30]
    assert _total(under) <= ENV_TOTAL_BOUNDS["trainEnv"][0] < _total(over)
    run_program("dev", {**JOB, "trainEnv": under})


def test_one_entry_longer_than_execve_takes_is_refused_by_its_bytes_not_its_characters():
    from infra.config.train_keys import MAX_ARG_STRLEN

    entry = "NOTE=" + "\U0001d538" * 32_767  # 32,767 characters of four bytes: over 128 KiB, under the character bound
    message = program_refusal({**JOB, "trainEnv": [entry]})
    assert message.startswith(f"config key 'trainEnv': entry 0 is {len(entry.encode()) + 1:,} bytes; allowed: at most "
                              f"{MAX_ARG_STRLEN:,}"), message
