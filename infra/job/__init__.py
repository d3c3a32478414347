"""The training job's resources: the gate that waits for the GPU nodes (preflight) and the Ray job itself, as Pulumi
dynamic providers, with the job's command and the way to its job server. May import infra.config, .aws, .kubernetes.
"""
