"""Whether `python -m workload.train` was started where a Ray cluster runs it: as a Ray job, or beside a cluster that
`ray start` left on this machine. Run by hand with neither, the flags' checks against the Hub or S3 would answer
first, and the real mistake (the job's command typed where `python -m workload.local` was meant) never be named."""
from __future__ import annotations

import os
import sys

from workload import cli

HINT = ("to train on this machine: python -m workload.local with the same flags; on a stack's cluster: "
        "python -m tools.job submit --stack STACK -- FLAGS")


def ray_address_file() -> str:
    """The file `ray start --head` writes its address to, which ray.init(address="auto") reads: Ray's own
    ray._common.utils.get_ray_address_file(None) (RAY_TMPDIR, else TMPDIR on Linux, else /tmp, then ray/), written
    out here because importing Ray takes seconds and the check comes before any heavy import."""
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return os.path.join(base, "ray", "ray_current_cluster")


def check_started_as_job() -> None:
    """Ray's job supervisor sets RAY_ADDRESS for every entrypoint (ray/dashboard/modules/job/job_supervisor.py); the
    driver joins that cluster, or with "auto" (or none) the one whose address file is on this machine."""
    address = os.environ.get("RAY_ADDRESS", "")
    if address and address != "auto":
        return
    if os.path.exists(ray_address_file()):
        return
    raise cli.EnvironmentProblem("python -m workload.train is the Ray job's command, and no Ray cluster runs it here "
                                 "(RAY_ADDRESS is unset and no `ray start` cluster is on this machine)", hint=HINT)
