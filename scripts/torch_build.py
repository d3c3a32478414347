"""Which torch build scripts/setup.sh installs, and what it got. Standard library only: it runs before anything
is installed.

    python scripts/torch_build.py source 2.13.0    # pip flags for torch: PyTorch's CPU index, if it answers
    python scripts/torch_build.py describe         # the installed torch: its build and its size on disk

Why: `pip install torch==2.13.0` from PyPI alone resolves, on Linux x86_64, to the CUDA build and its `nvidia-*`
and `cuda-*` dependencies (several GB). PyTorch publishes CPU builds (`2.13.0+cpu`) on its own index
(https://pytorch.org/get-started/locally/, "Compute Platform: CPU"). Given as an *extra* index, pip sees both the
PyPI release and the `+cpu` one, and takes `+cpu`: PEP 440 sorts a version with a local label above the same
version without one, and `==2.13.0` matches both (a local label is ignored unless the specifier names one). Every
other package still comes from the default index. Where the CPU index cannot be reached (a machine that sees
only a mirror of PyPI), the default index's build is what pip takes, and `describe` says which one that was.
"""
from __future__ import annotations

import importlib.metadata
import os
import sys
import threading
import urllib.error
import urllib.request

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# The CPU index's torch page must answer within this long, DNS included, or it counts as unreachable: on a machine
# whose network drops packets to it, pip's own default (15 s per try, 5 retries) would stall set-up for minutes.
PROBE_TIMEOUT_S = 5.0
# What a CUDA build of torch pulls in besides itself (its Requires-Dist on PyPI's Linux wheels).
CUDA_DEPENDENCY_PREFIXES = ("nvidia-", "cuda-", "triton")


def cpu_index() -> str:
    """The CPU index to try: $TORCH_CPU_INDEX when set (a mirror; empty: none), else PyTorch's."""
    return os.environ.get("TORCH_CPU_INDEX", CPU_INDEX).rstrip("/")


def index_offers_torch(index: str, version: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether `index` (a PEP 503 simple index) answers for torch and lists a `version+cpu` file, within
    `timeout_s` in all. Run in a thread because urllib's timeout does not cover name resolution."""
    found: list[bool] = []

    def probe() -> None:
        try:
            request = urllib.request.Request(f"{index}/torch/", headers={"Accept": "text/html"})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                page = response.read().decode("utf-8", "replace")
            found.append(f"torch-{version}+cpu-" in page or f"torch-{version}%2Bcpu-" in page)
        except (OSError, ValueError, urllib.error.URLError):
            found.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(found and found[0])


def source(version: str) -> int:
    """Print the pip flags that install torch==`version` (one per line; none: the default index), and say why on
    stderr."""
    index = cpu_index()
    if index and index_offers_torch(index, version):
        print(f"setup: torch {version}: the CPU build, from {index}", file=sys.stderr)
        print("--extra-index-url")
        print(index)
    elif index:
        print(f"setup: torch {version}: {index} cannot be reached (or has no {version}+cpu); taking the default "
              "index's build", file=sys.stderr)
    return 0


def installed_bytes(distribution: importlib.metadata.Distribution) -> int:
    total = 0
    for file in distribution.files or []:
        try:
            total += os.path.getsize(file.locate())
        except OSError:
            pass
    return total


def describe() -> int:
    """One line: the installed torch's version, whether it is a CPU or a CUDA build, and its size on disk with
    the CUDA packages it brought. Read from the package metadata: importing torch would take seconds."""
    try:
        torch = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        print("setup: torch is not installed", file=sys.stderr)
        return 1
    cuda = [dist for dist in importlib.metadata.distributions()
            if (dist.metadata["Name"] or "").lower().startswith(CUDA_DEPENDENCY_PREFIXES)]
    size = installed_bytes(torch) + sum(installed_bytes(dist) for dist in cuda)
    version = torch.version
    requires_cuda = any(r.lower().startswith(CUDA_DEPENDENCY_PREFIXES) for r in torch.requires or [])
    if version.endswith("+cpu") or not (requires_cuda or cuda):
        build = "CPU build"
    else:
        build = f"CUDA build, with {len(cuda)} CUDA packages"
    print(f"setup: torch {version} ({build}), {size / 1e6:,.0f} MB in .venv")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["source"] and len(argv) == 2:
        return source(argv[1])
    if argv == ["describe"]:
        return describe()
    print(f"usage: {sys.argv[0]} source VERSION | describe", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
