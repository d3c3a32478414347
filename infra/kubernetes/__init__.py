"""Kubernetes resources in the cluster: the device plugins and KubeRay (addons), the RayCluster, the Ray namespace's
admission and network policies, monitoring, the idle stop, the optional MLflow server
(mlflow_server, with its pod's entrypoint mlflow_serve), and the port-forward. May import infra.config, infra.aws.
"""
