"""The Ray head's job server, reached from outside the cluster: a port-forward to the head pod through the
Kubernetes API, with the RayCluster's token read from its Secret."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Mapping

from infra.kubernetes.raycluster import (
    DASHBOARD_PORT as JOB_SERVER_PORT,  # the head serves the Jobs API on its dashboard port
)

# The job server's port on the head pod (the dashboard serves the jobs API).
# Key of the token in the Secret KubeRay generates for authOptions.mode=token.
AUTH_TOKEN_KEY = "auth_token"


@dataclass(frozen=True)
class JobServer:
    """Where the Ray job server answers, and the token it wants (None when auth is off)."""

    address: str
    token: str | None


# (props, preflight) -> a context in which the job server is reachable. The seam tests replace.
JobServerConnector = Callable[[Mapping[str, Any], bool], ContextManager[JobServer]]


def read_auth_token(api_client: Any, namespace: str, secret_name: str) -> str:
    """The RayCluster's token from its Secret. Never logged: callers pass it straight to the job client."""
    import base64

    from kubernetes import client

    try:
        secret = client.CoreV1Api(api_client).read_namespaced_secret(secret_name, namespace)
    except client.ApiException as e:
        raise RuntimeError(f"cannot read the RayCluster's auth Secret {namespace}/{secret_name}: "
                           f"{e.status} {e.reason}") from None
    data = secret.data or {}
    if AUTH_TOKEN_KEY not in data:
        raise RuntimeError(f"Secret {namespace}/{secret_name} has no {AUTH_TOKEN_KEY!r} key")
    return base64.b64decode(data[AUTH_TOKEN_KEY]).decode()


@contextlib.contextmanager
def kubernetes_job_server(props: Mapping[str, Any], preflight: bool) -> Iterator[JobServer]:
    """Preflight (when asked: the GPU nodes joined and advertising their devices, then the readiness check), then the
    RayCluster's job server (head_job_server)."""
    from infra.job.nodes_joined import eks_reader, list_gpu_nodes, wait_for_joined_nodes
    from infra.job.preflight import WorkerRequest, kubernetes_client, run_preflight, to_stderr

    api_client = kubernetes_client(props["kubeconfig"])
    if preflight:
        request = WorkerRequest.from_props(props)
        wait_for_joined_nodes(lambda: list_gpu_nodes(api_client), request, read_nodegroup=eks_reader(props),
                              nodegroup=props.get("gpu_nodegroup") or "", wake_hint=props.get("wake_command") or "",
                              on_progress=to_stderr)
        run_preflight(api_client, request)
    with head_job_server(api_client, props["namespace"], props["cluster_name"], props["auth_secret_name"]) as server:
        yield server


@contextlib.contextmanager
def head_job_server(api_client: Any, namespace: str, cluster_name: str, secret_name: str) -> Iterator[JobServer]:
    """The token from the RayCluster's Secret, and a port-forward to its head pod's job server."""
    from infra.kubernetes.portforward import forward_to_pod, head_pod_name

    token = read_auth_token(api_client, namespace, secret_name)
    pod = head_pod_name(api_client, namespace, cluster_name)
    with forward_to_pod(api_client, namespace, pod, JOB_SERVER_PORT) as forward:
        yield JobServer(forward.address, token)
