"""Kubernetes resources in the cluster: the device plugins and KubeRay (addons), the RayCluster, the Ray namespace's
admission and network policies, monitoring, the idle stop, and the port-forward. May import infra.config, infra.aws.
"""
