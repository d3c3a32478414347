"""Each rank's NCCL transport lines, read back from the file NCCL_DEBUG_FILE sends them to.

The lines prove which transport NCCL chose (EFA through aws-ofi-nccl, or the silent TCP fallback). Each rank
reads its own file at the end of the run, keeps only the transport lines, and rank 0 gathers them for the
driver's summary.
"""
from __future__ import annotations

import os
import re
import socket

import torch.distributed as dist

from workload.fabric.transport import is_transport_line


def expand_debug_file(pattern: str, hostname: str, pid: int) -> str:
    """NCCL's own expansion of NCCL_DEBUG_FILE: %h is the hostname up to its first dot, %p the pid, %% a percent
    sign; any other %x stays as it is."""
    values = {"h": hostname.split(".")[0], "p": str(pid), "%": "%"}
    return re.sub(r"%(.)", lambda match: values.get(match[1], match[0]), pattern)


def read_own_log() -> str:
    """This process's NCCL debug file, filtered to transport lines; empty when NCCL never wrote it."""
    path = expand_debug_file(os.environ["NCCL_DEBUG_FILE"], socket.gethostname(), os.getpid())
    try:
        with open(path, errors="replace") as file:
            lines = file.read().splitlines()
    except FileNotFoundError:
        return ""
    return "\n".join(line for line in lines if is_transport_line(line))


def gather_transport_lines(rank: int, world_size: int) -> dict[str, str]:
    """On rank 0: {rank: its transport lines} for every rank; {} on the other ranks, and everywhere when
    NCCL_DEBUG_FILE is unset. A collective: every rank must call it."""
    if not os.environ.get("NCCL_DEBUG_FILE"):
        return {}
    text = read_own_log()
    gathered: list[str] | None = [""] * world_size if rank == 0 else None
    dist.gather_object(text, gathered, dst=0)
    return {str(index): lines for index, lines in enumerate(gathered)} if rank == 0 else {}
