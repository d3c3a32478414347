"""The RayCluster manifest per stack: golden YAML, the real KubeRay CRD schema, sizing, and each bad input."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jsonschema
import pytest
import yaml

from infra.kubernetes import local_storage
from infra.kubernetes.devices import worker_resources
from infra.kubernetes.raycluster import (
    KNOWN_IMAGES,
    auth_secret_name,
    check_image,
    head_service_name,
    kuberay_name,
    ray_cluster_manifest,
)
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import REFERENCE_DIR, STACKS, stack_settings

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
TRANSPORT_KEYS = {
    "ncclDebug": "NCCL_DEBUG",
    "ncclSocketIfname": "NCCL_SOCKET_IFNAME",
    "fiProvider": "FI_PROVIDER",
    "ncclNetPlugin": "NCCL_NET_PLUGIN",
}


def render(stack: str) -> dict:
    settings = stack_settings(stack)
    instance_type = settings["gpuInstanceType"]
    assert instance_type in INSTANCE_FACTS, f"stack {stack}: add {instance_type} to tests/support/instance_facts.py INSTANCE_FACTS"
    return ray_cluster_manifest(
        name=settings["rayClusterName"],
        namespace=settings["rayNamespace"],
        image=settings["dlcImage"],
        ray_version=KNOWN_IMAGES[settings["dlcImage"]].ray_version,
        gpu_node_count=int(settings["gpuNodeCount"]),
        facts=INSTANCE_FACTS[instance_type],
        transport_env={env: str(settings[key]) for key, env in TRANSPORT_KEYS.items()},
    )


def _crd_json_schema(node: dict) -> dict:
    """An OpenAPI v3 structural schema as JSON Schema, strict where the API server would prune.

    An object with declared properties and no x-kubernetes-preserve-unknown-fields gets additionalProperties:
    false: the API server silently drops an unknown field there, so for us a typo is an error.
    """
    out = {k: v for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if "properties" in node:
        out["properties"] = {name: _crd_json_schema(sub) for name, sub in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in node:
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _crd_json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = _crd_json_schema(node["items"])
    for keyword in ("anyOf", "allOf", "oneOf"):
        if keyword in node:
            out[keyword] = [_crd_json_schema(sub) for sub in node[keyword]]
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@pytest.fixture(scope="module")
def crd_validator() -> jsonschema.Draft7Validator:
    crd_file = REFERENCE_DIR / "kuberay-v1.7.0" / "ray.io_rayclusters.yaml"
    crd = yaml.load(crd_file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    return jsonschema.Draft7Validator(_crd_json_schema(v1["schema"]["openAPIV3Schema"]))


def _errors(validator: jsonschema.Draft7Validator, manifest: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]


@pytest.mark.parametrize("stack", STACKS)
def test_manifest_validates_against_kuberay_crd(stack, crd_validator):
    errors = _errors(crd_validator, render(stack))
    assert not errors, f"RayCluster of stack {stack} must validate against the KubeRay v1.7.0 CRD: {errors}"


def test_the_mark_of_pods_without_aws_credentials_validates_against_kuberay_crd(crd_validator):
    from infra.kubernetes.ray_security import without_aws_credentials

    errors = _errors(crd_validator, without_aws_credentials(render("dev")))
    assert not errors, f"the pod templates' annotation must validate against the KubeRay v1.7.0 CRD: {errors}"


def test_crd_validation_rejects_a_misspelt_field_and_a_wrong_type(crd_validator):
    manifest = render("dev")
    manifest["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resource"] = {}
    manifest["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    errors = _errors(crd_validator, manifest)
    assert any("'resource' was unexpected" in e for e in errors), f"a misspelt container field must fail: {errors}"
    assert any("replicas" in e for e in errors), f"a string replicas must fail: {errors}"


@pytest.mark.parametrize("stack", STACKS)
def test_manifest_matches_golden(stack):
    rendered = yaml.safe_dump(render(stack), sort_keys=False)
    golden = GOLDEN / f"raycluster-{stack}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert golden.exists(), f"{golden} is missing; run UPDATE_GOLDEN=1 pytest tests/program/test_raycluster.py"
    assert rendered == golden.read_text(), (
        f"RayCluster of stack {stack} differs from {golden.name}; review the diff, then UPDATE_GOLDEN=1 to accept it"
    )


@pytest.mark.parametrize("stack", STACKS)
def test_worker_group_takes_every_gpu_and_efa_interface_with_guaranteed_qos(stack):
    settings = stack_settings(stack)
    facts = INSTANCE_FACTS[settings["gpuInstanceType"]]
    (group,) = render(stack)["spec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    (container,) = pod["containers"]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]

    assert group["replicas"] == int(settings["gpuNodeCount"]), f"{stack}: replicas must equal gpuNodeCount"
    assert group["rayStartParams"]["num-gpus"] == requests["nvidia.com/gpu"] == str(facts.gpus), (
        f"{stack}: num-gpus and the nvidia.com/gpu request must both be {facts.gpus}"
    )
    assert requests["vpc.amazonaws.com/efa"] == str(facts.efa_interfaces), (
        f"{stack}: the worker must request all {facts.efa_interfaces} EFA interfaces of its node"
    )
    assert requests == limits, f"{stack}: worker requests must equal limits (Guaranteed QoS): {requests} vs {limits}"
    assert set(requests) == {"cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"}, f"{stack}: {requests}"
    assert int(requests["cpu"]) <= facts.vcpus - 2, f"{stack}: worker cpu {requests['cpu']} must leave node headroom"
    assert int(requests["memory"].removesuffix("Gi")) <= facts.memory_mib // 1024 - 8, (
        f"{stack}: worker memory {requests['memory']} must leave node headroom"
    )
    assert pod["nodeSelector"] == {"role": "gpu-worker"}, f"{stack}: workers must select role=gpu-worker"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"], (
        f"{stack}: workers must tolerate the nvidia.com/gpu NoSchedule taint"
    )
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"], f"{stack}: /dev/shm must be memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"], f"{stack}: dshm at /dev/shm"
    env = {e["name"]: e["value"] for e in container["env"]}
    expected_env = {**{env_name: str(settings[key]) for key, env_name in TRANSPORT_KEYS.items()},
                    **local_storage.env()}
    assert env == expected_env, (f"{stack}: worker env must be the stack's transport settings and the node-local "
                                 f"directories {expected_env}")


def test_g6_12xlarge_worker_lands_on_the_recipe_sizing():
    resources = worker_resources(INSTANCE_FACTS["g6.12xlarge"])
    assert (resources["cpu"], resources["memory"]) == ("40", "160Gi"), (
        f"g6.12xlarge worker must be the recipe's 40 CPU / 160Gi, got {resources}"
    )


def test_head_runs_on_system_nodes_without_gpus_behind_cluster_ip_with_token_auth():
    spec = render("dev")["spec"]
    head = spec["headGroupSpec"]
    pod = head["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["nodeSelector"] == {"role": "system"}, "head must select role=system"
    assert head["rayStartParams"]["num-gpus"] == "0", "head must start with num-gpus 0"
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0", "head job server must listen on 0.0.0.0"
    assert head["serviceType"] == "ClusterIP", "head service must be ClusterIP (8265 never leaves the cluster)"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"], "head: NVIDIA_VISIBLE_DEVICES=void"
    ports = {p["containerPort"] for p in container["ports"]}
    assert {6379, 8265} <= ports, f"head must expose GCS 6379 and the job server 8265, got {ports}"
    assert "nvidia.com/gpu" not in container["resources"]["limits"], "head must not request a GPU"
    assert spec["authOptions"] == {"mode": "token"}, "token authentication must be on"
    assert tuple(map(int, spec["rayVersion"].split("."))) >= (2, 52, 0), "token auth needs rayVersion >= 2.52.0"
    images = {container["image"], spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"]}
    assert images == {stack_settings("dev")["dlcImage"]}, f"head and workers must run the same image, got {images}"
    assert spec["rayVersion"] == KNOWN_IMAGES[stack_settings("dev")["dlcImage"]].ray_version, \
        "rayVersion is the Ray of the default image"


def test_kuberay_derived_names():
    assert head_service_name("ray-train") == "ray-train-head-svc", "KubeRay names the head service <name>-head-svc"
    assert auth_secret_name("ray-train") == "ray-train", "KubeRay names the token secret after the cluster"
    long_name = "a" * 45
    assert head_service_name(long_name) == (long_name + "-head-svc")[-50:], "KubeRay keeps the last 50 characters"
    assert kuberay_name("-" + "b" * 49) == "r" + "b" * 49, "a leading punctuation becomes 'r'"


def _dev_kwargs(**overrides) -> dict:
    kwargs = dict(
        name="ray-train", namespace="ray", image="public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0",
        ray_version="2.58.0", gpu_node_count=2, facts=INSTANCE_FACTS["g6.12xlarge"], transport_env={"NCCL_DEBUG": "INFO"},
    )
    kwargs.update(overrides)
    return kwargs


@pytest.mark.parametrize("image", [
    "public.ecr.aws/deep-learning-containers/ray",
    "registry.example.com:5000/team/ray",
    "ray",
])
def test_image_without_tag_or_digest_is_refused(image):
    with pytest.raises(ValueError, match="dlcImage") as excinfo:
        ray_cluster_manifest(**_dev_kwargs(image=image))
    assert "neither a tag nor a digest" in str(excinfo.value), f"{image}: the error must say what is missing"


@pytest.mark.parametrize("image", [
    "public.ecr.aws/deep-learning-containers/ray@sha256:" + "0123456789abcdef" * 4,
    "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1@sha256:" + "ab" * 32,
    "registry.example.com:5000/team/ray:2.58.0",
])
def test_tag_or_digest_pins_are_accepted(image):
    check_image(image)
    manifest = ray_cluster_manifest(**_dev_kwargs(image=image))
    assert manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize("image", ["repo/ray@sha256:abc", "repo/ray:bad tag", "repo/ray:"])
def test_malformed_pins_are_refused(image):
    with pytest.raises(ValueError, match="dlcImage"):
        check_image(image)


@pytest.mark.parametrize("instance_type, reason", [("m7i.xlarge", "no GPUs"), ("g6.xlarge", "does not support EFA")])
def test_gpu_types_without_gpus_or_efa_are_refused(instance_type, reason):
    with pytest.raises(ValueError, match="gpuInstanceType") as excinfo:
        ray_cluster_manifest(**_dev_kwargs(facts=INSTANCE_FACTS[instance_type]))
    assert reason in str(excinfo.value), f"{instance_type}: the error must say it has {reason}"


def test_a_node_too_small_for_its_reservations_is_refused():
    tiny = dataclasses.replace(INSTANCE_FACTS["g6.12xlarge"], instance_type="tiny", vcpus=2, memory_mib=8192)
    with pytest.raises(ValueError, match="gpuInstanceType"):
        worker_resources(tiny)


@pytest.mark.parametrize("overrides, key", [
    ({"gpu_node_count": 0}, "gpuNodeCount"),
    ({"name": "Ray_Train"}, "rayClusterName"),
    ({"name": "r" * 54}, "rayClusterName"),
    ({"namespace": "Ray"}, "rayNamespace"),
    ({"namespace": "kube-system"}, "rayNamespace"),
    ({"namespace": "kuberay-system"}, "rayNamespace"),
])
def test_other_bad_settings_name_their_key(overrides, key):
    with pytest.raises(ValueError, match=key):
        ray_cluster_manifest(**_dev_kwargs(**overrides))
