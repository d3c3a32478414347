"""`python -m workload.transport`: which transport NCCL used, read from a job's NCCL_DEBUG=INFO lines. The command's
name, kept where users type it; the code is workload.fabric.transport."""
import sys

from workload import cli
from workload.fabric.transport import main

if __name__ == "__main__":
    sys.exit(cli.run(main))
