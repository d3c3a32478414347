"""The Pulumi components of the Ray Train on EKS stack, by concern; nothing here creates a resource at import time.
Layers, each importing only those before it (and workload/): config, aws, kubernetes, job, preview.

    config/      the stack's keys: read from Pulumi.yaml's schema, validated, one frozen StackConfig
    aws/         AWS resources: the VPC, EKS and its system nodes, the EFA GPU node group, reservations, IAM
    kubernetes/  Kubernetes resources: device plugins and KubeRay, the RayCluster, admission, monitoring, idle stop
    job/         the training job's resources: the GPU nodes' readiness gate and the job itself (dynamic providers)
    preview/     what runs before any resource: the EC2 and model look-ups and every feasibility check, into a plan

`__main__.py` at the repository's top composes them in that order.
"""
