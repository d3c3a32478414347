"""The labels the node groups set and the pods select, and the GPU taint's toleration: set by the AWS side (the
system node group in cluster.py, the GPU node group in gpu_nodes.py), read by the Kubernetes side.

The GPU taint keeps everything that does not ask for a GPU off the expensive nodes; what must run there tolerates it.
"""
SYSTEM_NODE_SELECTOR = {"role": "system"}
GPU_WORKER_NODE_SELECTOR = {"role": "gpu-worker"}
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"  # what gpu-feature-discovery labels a GPU node with; set up front here
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
