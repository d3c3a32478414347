"""The Ray Train + FSDP2 fine-tuning job: runs unchanged on CPU processes (gloo) and on GPUs (NCCL). Imports nothing
of infra/ or tools/; the whole package travels to the cluster as the job's working_dir.

    environment.py, cli.py, config.py, storage.py   the base every part shares: the interpreter check, exit codes
                                                      and errors, the job's config (one dataclass), where a run writes
    sparse_files.py                                 a file measured by what it stores (sparse datasets and shards)
    s3_access.py                                    whether this machine may read or write an s3:// location
    model/        building, sharded weights, model files, memory and its plan, parallel layout, fp8, architectures
    data/         raw text and supervised examples, tokenized, masked, packed into each step's batches
    checkpoint/   sharded save and load, the untrusted-checkpoint reader, the export to a Hugging Face model
    fabric/       the NCCL transport verdict, NCCL's log lines, the fabric check's bandwidth sweeps
    metrics/      TensorBoard event files and live Ray metrics
    trainer.py    the per-GPU training function, top to bottom: config, model, shard, optimizer, loop, report
    gc_control.py Python's garbage collector on the training's schedule
    run/          the local run, its checks and output, and the submission through the Jobs API
    train.py, local.py, export.py, transport.py   the commands (`python -m workload.<name>`)
"""

# The project's version, here because this package is what travels to the cluster (and needs no install to be
# read); pyproject.toml reads it, CHANGELOG.md's newest entry names it.
__version__ = "0.1.0"

from workload.environment import check_interpreter  # noqa: E402 (after the version it reports)

# What workload's commands import (the cluster's image has them all).
check_interpreter("workload", ("ray", "torch", "transformers"))
