"""The GPU nodes' fast local storage (issue 43, item 1): the launch template's user data, decoded as EC2 hands it to
nodeadm (base64, MIME multi-part, a NodeConfig YAML), asks for the instance store as one RAID0 volume and is valid
against nodeadm's published NodeConfig schema (tests/reference/amazon-eks-ami-v20260724/); a type without instance
store keeps its root volume with gp3 throughput for checkpoints; the Ray workers' staging and caches are on an emptyDir
(on that volume), named by the environment variables the workload reads."""
from __future__ import annotations

import base64
import dataclasses
import email

import jsonschema
import pytest
import yaml

from infra.aws import node_storage
from infra.kubernetes import local_storage
from tests.program.test_raycluster import _crd_json_schema, render
from tests.program.test_stack import gpu_launch_template
from tests.support.instance_facts import INSTANCE_FACTS
from tests.support.pulumi_mocks import REFERENCE_DIR, STACKS, run_program, stack_settings
from workload import storage

NODECONFIG_CRD = REFERENCE_DIR / "amazon-eks-ami-v20260724" / "node.eks.aws_nodeconfigs.yaml"


@pytest.fixture(scope="module")
def nodeconfig_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(NODECONFIG_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft7Validator(_crd_json_schema(version["schema"]["openAPIV3Schema"]))


def node_configs(user_data: str) -> list[dict]:
    """The NodeConfig documents of a launch template's user data, read as nodeadm reads its MIME parts."""
    message = email.message_from_bytes(base64.b64decode(user_data))
    assert message.get_content_type() == "multipart/mixed", f"user data must be MIME multi-part: {message}"
    parts = [part for part in message.walk() if not part.is_multipart()]
    assert parts and all(part.get_content_type() == "application/node.eks.aws" for part in parts), parts
    return [document for part in parts for document in yaml.safe_load_all(part.get_payload()) if document]


@pytest.mark.parametrize("stack", STACKS)
def test_the_gpu_launch_template_asks_nodeadm_for_raid0_on_the_instance_store(stack, nodeconfig_validator):
    facts = INSTANCE_FACTS[stack_settings(stack)["gpuInstanceType"]]
    assert facts.instance_store_gb and facts.instance_store_disks, f"{facts.instance_type} has instance store"
    template = gpu_launch_template(run_program(stack))
    (config,) = node_configs(template.inputs["userData"])
    assert config["apiVersion"] == "node.eks.aws/v1alpha1" and config["kind"] == "NodeConfig", config
    assert config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0", config
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in nodeconfig_validator.iter_errors(config)]
    assert not errors, f"{stack}: the NodeConfig does not validate against nodeadm's CRD: {errors}"
    # The root volume holds the OS alone: gp3's baseline, no throughput bought.
    (root,) = template.inputs["blockDeviceMappings"]
    assert "throughput" not in root["ebs"] and "iops" not in root["ebs"], f"{stack}: {root}"


def test_the_schema_check_refuses_a_strategy_nodeadm_does_not_know(nodeconfig_validator):
    config = node_storage.node_config(INSTANCE_FACTS["g6.12xlarge"])
    assert not list(nodeconfig_validator.iter_errors(config))
    config["spec"]["instance"]["localStorage"]["strategy"] = "raid0"
    assert list(nodeconfig_validator.iter_errors(config)), "the enum is RAID0, RAID10, Mount"
    config["spec"]["instance"]["localStorage"] = {"stratgy": "RAID0"}
    assert list(nodeconfig_validator.iter_errors(config)), "a misspelt field must fail"


def test_a_type_without_instance_store_keeps_its_root_volume_at_checkpoint_throughput(monkeypatch):
    # As EC2 would describe a g6.12xlarge with no instance store (every EFA GPU type of the stacks has one).
    monkeypatch.setitem(INSTANCE_FACTS, "g6.12xlarge", dataclasses.replace(
        INSTANCE_FACTS["g6.12xlarge"], instance_store_gb=0, instance_store_disks=0))
    template = gpu_launch_template(run_program("dev"))
    assert template.inputs.get("userData") is None, "without instance store EKS writes the whole user data"
    (root,) = template.inputs["blockDeviceMappings"]
    assert (root["ebs"]["throughput"], root["ebs"]["iops"]) == (1000, 4000), root
    assert root["ebs"]["volumeType"] == "gp3" and root["ebs"]["volumeSize"] == 200, root
    # Within gp3's limits: 125-1000 MiB/s, 3000-16000 IOPS, at most 0.25 MiB/s per IOPS.
    assert 125 <= root["ebs"]["throughput"] <= 1000 and 3000 <= root["ebs"]["iops"] <= 16000
    assert root["ebs"]["throughput"] / root["ebs"]["iops"] <= 0.25


@pytest.mark.parametrize("stack", STACKS)
def test_the_ray_workers_stage_and_cache_on_a_node_local_empty_dir(stack):
    (group,) = render(stack)["spec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "node-local", "emptyDir": {}} in pod["volumes"], pod["volumes"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"] if m["name"] == "node-local"}
    env = {e["name"]: e["value"] for e in container["env"]}
    for name in (storage.CHECKPOINT_STAGING_ENV, "HF_HOME", storage.DATA_CACHE_ENV):
        assert env[name] in mounts, f"{stack}: {name}={env.get(name)} must be a mount of the node-local emptyDir"
    assert env["HF_HOME"] == "/mnt/local/hf" and env[storage.CHECKPOINT_STAGING_ENV] == "/mnt/local/checkpoints"
    # The head runs no rank: it gets none of it.
    head = render(stack)["spec"]["headGroupSpec"]["template"]["spec"]
    assert "node-local" not in str(head), head


def test_the_rendered_raycluster_with_its_new_volume_validates_against_kuberay():
    crd = yaml.safe_load((REFERENCE_DIR / "kuberay-v1.7.0" / "ray.io_rayclusters.yaml").read_text())
    (v1,) = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
    validator = jsonschema.Draft7Validator(_crd_json_schema(v1["schema"]["openAPIV3Schema"]))
    manifest = render("dev")
    assert not list(validator.iter_errors(manifest))
    (group,) = manifest["spec"]["workerGroupSpecs"]
    group["template"]["spec"]["containers"][0]["volumeMounts"][-1]["subpath"] = "data"
    assert list(validator.iter_errors(manifest)), "a misspelt mount field must fail"


def test_the_checkpoint_staging_directory_follows_the_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(storage.CHECKPOINT_STAGING_ENV, str(tmp_path / "checkpoints"))
    staged = storage.staging_directory("checkpoint-000010-")
    assert staged.startswith(str(tmp_path / "checkpoints") + "/checkpoint-000010-"), staged
    monkeypatch.delenv(storage.CHECKPOINT_STAGING_ENV)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert storage.staging_directory("checkpoint-").startswith(str(tmp_path / "tmp")), "unset: tempfile's choice"
    assert local_storage.env()[storage.CHECKPOINT_STAGING_ENV] == "/mnt/local/checkpoints"
