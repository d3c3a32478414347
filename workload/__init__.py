"""Ray Train + FSDP fine-tuning workload. Runs unchanged on CPU processes (gloo) and on GPUs (NCCL)."""

# The project's version, here because this package is what travels to the cluster (and needs no install to be
# read); pyproject.toml reads it, CHANGELOG.md's newest entry names it.
__version__ = "0.1.0"

from workload.environment import check_interpreter  # noqa: E402 (after the version it reports)

# What workload's commands import (the cluster's image has them all).
check_interpreter("workload", ("ray", "torch", "transformers"))
