"""The RayCluster component under Pulumi mocks: its namespace, the custom resource, its order and its outputs."""
from __future__ import annotations

import dataclasses

import pulumi
import pulumi_kubernetes as k8s
import pytest

from infra import config
from infra.config import StackConfig
from infra.kubernetes import monitoring, ray_security
from infra.kubernetes.addons import ClusterAddons
from infra.kubernetes.raycluster import KNOWN_IMAGES, RayCluster, ray_cluster_manifest
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import EchoMocks, run_under_mocks, stack_settings

# Pulumi.yaml's defaults, with the VPC AZs and GPU AZ that the program would otherwise look up.
CONFIG = config.parse(stack_settings(None) | {"vpcAvailabilityZones": ["us-west-2a", "us-west-2b"],
                                              "gpuAvailabilityZone": "us-west-2a"})
FACTS = INSTANCE_FACTS["g6.12xlarge"]


def build(cfg: StackConfig = CONFIG):
    provider = k8s.Provider("k8s", kubeconfig=pulumi.Output.secret("apiVersion: v1\nkind: Config\n"))
    node_group = pulumi.CustomResource("test:index:NodeGroup", "gpu-nodes", {})
    addons = ClusterAddons("addons", provider=provider, gpu_instance_type=cfg.gpu_instance_type, vpc_cidr=cfg.vpc_cidr,
                           depends_on=[node_group])
    ray = RayCluster("ray", provider=provider, cfg=cfg, facts=FACTS, depends_on=[addons.kuberay_operator])
    return pulumi.Output.all(
        cluster_name=ray.cluster_name,
        namespace=ray.namespace,
        head_service_name=ray.head_service_name,
        auth_secret_name=ray.auth_secret_name,
    )


def test_raycluster_is_the_manifest_in_its_namespace_after_the_operator():
    mocks, _ = run_under_mocks(build)
    component = mocks.named("ray")
    namespace = mocks.named("ray-namespace")
    custom_resource = mocks.named("ray-raycluster")
    operator = mocks.named("addons-kuberay-operator")

    assert component["type"] == "raytrain:infra:RayCluster", "the component's type token"
    assert namespace["type"] == "kubernetes:core/v1:Namespace", "the Ray namespace is created"
    assert namespace["inputs"]["metadata"]["name"] == "ray", "the namespace is rayNamespace"
    assert custom_resource["type"] == "kubernetes:ray.io/v1:RayCluster", "the CR must be a ray.io/v1 RayCluster"
    expected = ray_cluster_manifest(name="ray-train", namespace="ray", image=CONFIG.dlc_image,
                                    ray_version=KNOWN_IMAGES[CONFIG.dlc_image].ray_version, gpu_node_count=2,
                                    facts=FACTS, transport_env=CONFIG.transport_env,
                                    # Pulumi.yaml's default monitoring (prometheus): the head is told where it is
                                    head_env=monitoring.ray_head_env())
    # Nothing on S3 in this config: the pods have no Pod Identity association, and their templates say so.
    assert not CONFIG.train.storage_path and not CONFIG.train.dataset.startswith("s3://"), CONFIG.train
    expected = ray_security.without_aws_credentials(expected)
    assert CONFIG.monitoring == "prometheus", CONFIG.monitoring
    inputs = custom_resource["inputs"]
    assert (inputs["apiVersion"], inputs["kind"]) == ("ray.io/v1", "RayCluster")
    assert inputs["metadata"] == expected["metadata"], "the CR's metadata must be the manifest's"
    assert inputs["spec"] == expected["spec"], "the CR's spec must be the manifest's"
    # Destroy runs in reverse dependency order: the RayCluster goes while the operator can still finalize it.
    assert operator["urn"] in custom_resource["dependencies"], "the RayCluster must depend on the KubeRay operator"
    assert namespace["urn"] in custom_resource["dependencies"], "the RayCluster must depend on its namespace"


def test_outputs_name_the_cluster_its_head_service_and_token_secret():
    captured = {}

    def program():
        outputs = build()
        return outputs.apply(captured.update)

    run_under_mocks(program)
    assert captured == {
        "cluster_name": "ray-train",
        "namespace": "ray",
        "head_service_name": "ray-train-head-svc",
        "auth_secret_name": "ray-train",
    }, f"RayCluster outputs must be the CR's name, namespace, <name>-head-svc and the token secret, got {captured}"


def test_bad_image_is_refused_before_the_raycluster_is_registered():
    bad = dataclasses.replace(CONFIG, dlc_image="public.ecr.aws/deep-learning-containers/ray")
    mocks = EchoMocks()
    with pytest.raises(ValueError, match="dlcImage"):
        run_under_mocks(lambda: build(bad), mocks)
    registered = {r["type"] for r in mocks.registered}
    assert "raytrain:infra:ClusterAddons" in registered, "the program must get as far as the RayCluster component"
    ray_parts = {"raytrain:infra:RayCluster", "kubernetes:core/v1:Namespace", "kubernetes:ray.io/v1:RayCluster"}
    assert not registered & ray_parts, f"a refused image must register no part of the RayCluster; got {registered}"
