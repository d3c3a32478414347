"""A later `up` that gives the Ray pods their first AWS credentials makes new Ray pods.

The pods' Pod Identity association exists only while something the job uses is on S3 (__main__.py,
infra/aws/pod_identity.py), and EKS hands its credentials only to pods created after it. A stack whose first `up` had
nothing on S3 and whose next one trains on an s3:// dataset, with the s3:// trainStoragePath every dataset needs
(docs/jobs.md's day-two flow), must therefore replace the RayCluster, whose `replace_on_changes=["spec"]` does so only
if the spec differs, and wake a stopped group for it (GpuNodesAwake's `ray_cluster_spec`). Before, the spec was the same, the head kept running without credentials, and
the job failed reading its dataset.
"""
from __future__ import annotations

from infra.kubernetes import ray_security
from tests.program.test_up_after_idle_stop import AWAKE, RAY_CLUSTER, plain
from tests.support.pulumi_mocks import program

ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
TRAIN = (("trainEnabled", True),)
S3_DATASET = ("trainDataset", "s3://company-data/corpus.txt")
STORAGE = ("trainStoragePath", "s3://company-checkpoints/runs")


def ray_pods_association(run) -> list[str]:
    return [r.name for r in run.of_type(ASSOCIATION) if r.name.endswith("-ray-pods-association")]


def test_the_first_s3_location_on_a_later_up_replaces_the_raycluster_and_wakes_the_group():
    first, second = program("dev", TRAIN), program("dev", (*TRAIN, STORAGE, S3_DATASET))
    assert not ray_pods_association(first) and ray_pods_association(second), (
        "the association comes with the s3:// dataset and its storage path")
    before, after = first.one(RAY_CLUSTER).inputs["spec"], second.one(RAY_CLUSTER).inputs["spec"]
    assert before != after, ("the RayCluster's spec must change, or its pods, made before the association, never get "
                             "credentials and the job fails on the head with NoCredentialsError")
    annotations = before["headGroupSpec"]["template"]["metadata"]["annotations"]
    assert annotations == {ray_security.AWS_CREDENTIALS_ANNOTATION: "none"}, annotations
    assert plain(first.one(AWAKE).inputs)["ray_cluster_spec"] != plain(second.one(AWAKE).inputs)["ray_cluster_spec"], (
        "a stopped group wakes for the new pods")


def test_a_stack_that_has_s3_keeps_its_raycluster_when_another_location_moves_to_s3():
    first, second = program("dev", (*TRAIN, STORAGE)), program("dev", (*TRAIN, STORAGE, S3_DATASET))
    assert ray_pods_association(first) and ray_pods_association(second)
    assert first.one(RAY_CLUSTER).inputs["spec"] == second.one(RAY_CLUSTER).inputs["spec"], (
        "the pods have credentials already; the role's policy changes in place")
    template = first.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]
    assert "metadata" not in template, f"no mark where the pods have credentials: {template.get('metadata')}"
