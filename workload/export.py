"""`python -m workload.export`: a sharded training checkpoint as a Hugging Face model directory. The command's name,
kept where users type it; the code is workload.checkpoint.export."""
import sys

from workload import cli
from workload.checkpoint.export import main

if __name__ == "__main__":
    sys.exit(cli.run(main))
