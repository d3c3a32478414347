"""The Kubernetes side of reaching the job server: the token from the RayCluster's Secret, the head pod, and
the order of preflight, token and port-forward. The API server is a stand-in; the port-forward is LocalForward."""
from __future__ import annotations

import base64
import contextlib

import pytest
from kubernetes import client

from infra.job import job_server, nodes_joined, preflight
from infra.kubernetes import portforward


class FakeCore:
    """CoreV1Api's three calls used here, answering from fixed objects."""

    def __init__(self, secret_data=None, pods=()):
        self.secret_data, self.pods = secret_data, list(pods)

    def read_namespaced_secret(self, name, namespace):
        if self.secret_data is None:
            raise client.ApiException(status=404, reason="Not Found")
        return client.V1Secret(data=self.secret_data)

    def list_namespaced_pod(self, namespace, label_selector):
        assert label_selector == "ray.io/cluster=ray-train,ray.io/node-type=head", label_selector
        return client.V1PodList(items=self.pods)


def head(name, phase):
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), status=client.V1PodStatus(phase=phase))


@pytest.fixture
def core(monkeypatch):
    fake = FakeCore()
    monkeypatch.setattr(client, "CoreV1Api", lambda api_client=None: fake)
    return fake


def test_token_is_decoded_from_the_auth_token_key(core):
    core.secret_data = {"auth_token": base64.b64encode(b"s3cret-token").decode()}
    assert job_server.read_auth_token(None, "ray", "ray-train") == "s3cret-token", "the Secret's auth_token, decoded"


def test_missing_secret_or_key_fails_naming_the_secret(core):
    with pytest.raises(RuntimeError, match="ray/ray-train: 404 Not Found"):
        job_server.read_auth_token(None, "ray", "ray-train")
    core.secret_data = {"token": "eA=="}
    with pytest.raises(RuntimeError, match="Secret ray/ray-train has no 'auth_token' key"):
        job_server.read_auth_token(None, "ray", "ray-train")


def test_head_pod_is_the_running_one(core):
    core.pods = [head("ray-train-head-old", "Pending"), head("ray-train-head-abc", "Running")]
    assert portforward.head_pod_name(None, "ray", "ray-train") == "ray-train-head-abc"
    core.pods = [head("ray-train-head-old", "Pending")]
    with pytest.raises(RuntimeError, match="no running Ray head pod.*ray-train-head-old=Pending"):
        portforward.head_pod_name(None, "ray", "ray-train")


def test_kubernetes_job_server_preflights_reads_the_token_and_forwards_to_the_head(monkeypatch):
    steps = []
    monkeypatch.setattr(preflight, "kubernetes_client", lambda kubeconfig: steps.append(("client", kubeconfig)))
    monkeypatch.setattr(preflight, "run_preflight", lambda api, request: steps.append(("preflight", request)))
    # Two joined GPU nodes, Ready and advertising their devices: the wait before the readiness check returns at once.
    usable = {"metadata": {"name": "n", "labels": {"role": "gpu-worker"}}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "allocatable": {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "1"}}}
    monkeypatch.setattr(nodes_joined, "list_gpu_nodes", lambda api: steps.append(("nodes",)) or [usable, usable])
    monkeypatch.setattr(job_server, "read_auth_token", lambda api, ns, secret: steps.append(("token", ns, secret)) or "t")
    monkeypatch.setattr(portforward, "head_pod_name", lambda api, ns, name: steps.append(("head", name)) or "head-0")

    @contextlib.contextmanager
    def forward(api, ns, pod, port):
        steps.append(("forward", pod, port))
        yield type("Forward", (), {"address": "http://127.0.0.1:1"})()

    monkeypatch.setattr(portforward, "forward_to_pod", forward)
    props = {"kubeconfig": "kc", "namespace": "ray", "cluster_name": "ray-train", "auth_secret_name": "ray-train",
             "gpus_per_worker": 4, "efa_per_worker": 1, "workers": 2}
    with job_server.kubernetes_job_server(props, True) as server:
        assert server == job_server.JobServer("http://127.0.0.1:1", "t"), server
    assert steps == [("client", "kc"), ("nodes",), ("preflight", preflight.WorkerRequest(4, 1, 2)),
                     ("token", "ray", "ray-train"),
                     ("head", "ray-train"), ("forward", "head-0", job_server.JOB_SERVER_PORT)], steps
    steps.clear()
    with job_server.kubernetes_job_server(props, False):
        pass
    assert [step[0] for step in steps] == ["client", "token", "head", "forward"], f"no preflight on delete: {steps}"


def test_kubeconfig_text_or_dict_makes_a_client():
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://example.invalid"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
    }
    import json

    for given in (kubeconfig, json.dumps(kubeconfig)):
        api_client = preflight.kubernetes_client(given)
        assert api_client.configuration.host == "https://example.invalid", "the kubeconfig's server"
