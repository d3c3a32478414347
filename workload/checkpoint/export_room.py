"""Whether this machine has the memory and the disk to export a checkpoint, asked once the checkpoint's own metadata
has given the model's size, before a byte of it is allocated: a 70B model's export builds its 70 billion parameters
at --dtype (140 GB of memory in bfloat16, 280 GB in float32), loads the checkpoint's float32 master weights into them
one tensor at a time, and writes them to OUT (140 GB in bfloat16), which a laptop has neither of.
The kernel's out-of-memory killer ended such an export with no message after minutes of loading; now it is exit 3
naming what is needed and what there is.

`--merge` builds the adapters' base at --dtype (from_pretrained) and merges the adapters into it: its size is the
base's, from the headers of its safetensors files (a directory: the job's base_model/, a local or s3:// copy), else
from its config.json's arithmetic (the project's shipped copy of a Hub model's, else the Hub's, one request).

Memory is MemAvailable of /proc/meminfo (Linux: what can be allocated without swapping), else the physical memory
(os.sysconf); disk is shutil.disk_usage of OUT's nearest existing directory."""
from __future__ import annotations

import json
import math
import os
import shutil

from workload import cli

GIB = 1 << 30
# Bytes per parameter: the export builds the model at --dtype and loads the master weights into it (DCP's load copies
# each stored tensor into its target, casting: torch/distributed/checkpoint/filesystem.py, read_data's copy_), then
# writes it (workload/checkpoint/export.py).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# Beyond the parameters and the largest stored tensor (read whole before its copy): the buffers of the load and the
# save. The check runs once torch and transformers are imported, so what they hold is already out of the available
# memory it reads.
OVERHEAD_BYTES = 256 << 20


def available_memory() -> int | None:
    """Bytes this process may still allocate without swapping, or None where it cannot be told."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_room(parameters: int, dtype: str, out: str, *, largest: int = 0, memory: int | None = None,
               free_disk: int | None = None) -> None:
    """Exit 3 (cli.EnvironmentProblem) when the export of a model of `parameters` (whose largest stored tensor takes
    `largest` bytes) cannot fit this machine's memory or OUT's disk; `memory` and `free_disk` are this machine's
    unless given."""
    need_memory = parameters * DTYPE_BYTES.get(dtype, 4) + largest + OVERHEAD_BYTES
    memory = available_memory() if memory is None else memory
    if memory is not None and need_memory > memory:
        raise cli.EnvironmentProblem(
            f"the checkpoint's model has {parameters / 1e9:,.2f} billion parameters: the export builds them in {dtype}, "
            f"{need_memory / GIB:,.1f} GiB of memory with the load's buffers, and this machine has {memory / GIB:,.1f} GiB "
            "available",
            hint=("--dtype bfloat16 builds it in half; or " if dtype == "float32" else "") +
                 "run the export where the memory is (an EC2 r7i.16xlarge has 512 GiB), with the checkpoint's s3:// "
                 "path as CHECKPOINT")
    need_disk = parameters * DTYPE_BYTES.get(dtype, 4)
    if free_disk is None:
        existing = os.path.abspath(out)
        while not os.path.isdir(existing):
            existing = os.path.dirname(existing)
        free_disk = shutil.disk_usage(existing).free
    if need_disk > free_disk:
        raise cli.EnvironmentProblem(
            f"OUT {out}: the model's weights take {need_disk / GIB:,.1f} GiB at --dtype {dtype}, and its disk has "
            f"{free_disk / GIB:,.1f} GiB free",
            hint="give an OUT on a disk with the room" + (", or --dtype bfloat16 for half" if dtype == "float32" else ""))


def base_parameters(base: str) -> int | None:
    """The parameters of --merge's base model `base` (a directory, or a Hub id), or None where they cannot be told
    before its download (from_pretrained then says what is wrong with it)."""
    import glob

    from workload.model import architectures, safetensors_files, structure

    if os.path.isdir(base):
        files = sorted(glob.glob(os.path.join(base, "*.safetensors")))
        if files and all(safetensors_files.file_problem(path) is None for path in files):
            return sum(math.prod(shape) for path in files
                       for _, shape in safetensors_files.tensor_entries(path).values())
        return None
    config = architectures.published(base)
    if config is None:
        from workload.model import model_source

        try:
            directory = model_source.hub_config_directory(base)
        except Exception:  # noqa: BLE001  (not there, gated, no answer: the download's own error says it)
            return None
        try:
            with open(os.path.join(directory, model_source.CONFIG_FILE)) as file:
                config = json.load(file)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    try:
        return structure.parameter_count(config)
    except Exception:  # noqa: BLE001  (a family whose arithmetic is not known here)
        return None
