"""The operator's commands, each `python -m tools.<name> --help`; their exit codes are workload/cli.py's. The top
layer with __main__.py: may import infra/ and workload/, never imported by them.

    tools.capacity   where the GPUs can be had: ranks regions and AZs, writes the stack file
    tools.status     the RayCluster, its pods, the GPU nodes' GPUs and EFA interfaces, and the running job
    tools.job        the stack's training runs: list them, follow one, read its summary, stop it
    tools.loss_curve a run's loss and learning-rate curves as an SVG picture, from its TensorBoard event files
"""

from workload.environment import check_interpreter  # noqa: E402 (below the docstring)

check_interpreter("tools", ("yaml", "boto3", "kubernetes", "pulumi"))
