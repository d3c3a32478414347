"""The Ray job server of a stack's RayCluster, from the operator's machine: through a port-forward made with the
Kubernetes API, with the cluster's token from its Secret (tools.job, tools.status)."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from infra.job.job_server import JobServer, head_job_server
from infra.job.ray_job import STACK_METADATA
from infra.kubernetes.raycluster import auth_secret_name
from tools.kube import talking_to
from workload import cli


@contextlib.contextmanager
def job_server(api: Any, namespace: str, cluster: str) -> Iterator[JobServer]:
    """The RayCluster's job server through a port-forward, with its token; failures as cli.EnvironmentProblem."""
    with contextlib.ExitStack() as entered:
        try:
            with talking_to(f"the RayCluster {namespace}/{cluster}"):
                server = entered.enter_context(head_job_server(api, namespace, cluster, auth_secret_name(cluster)))
        except RuntimeError as error:  # no running head pod, no token Secret
            raise cli.EnvironmentProblem(str(error), hint="`python -m tools.status` shows the RayCluster") from None
        yield server


def connect(server: JobServer) -> Any:
    from workload.run import submit

    try:
        return submit.connect(server.address, server.token)
    except submit.JobAuthenticationError as error:
        raise cli.EnvironmentProblem(str(error)) from None
    except (ConnectionError, RuntimeError) as error:
        raise cli.EnvironmentProblem(f"the Ray job server cannot be reached through the port-forward: {error}",
                                     hint="is the head pod ready (`python -m tools.status`)?") from None


def stack_jobs(client: Any, stack: str | None) -> list[Any]:
    """The jobs the stack's TrainingJob submitted (all stacks' without `stack`), oldest first."""
    jobs = [job for job in client.list_jobs()
            if STACK_METADATA in (job.metadata or {}) and stack in (None, job.metadata[STACK_METADATA])]
    return sorted(jobs, key=lambda job: job.start_time or 0)
