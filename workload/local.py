"""`python -m workload.local`: the whole job on this machine, through the same path as a real cluster. The command's
name, kept where users type it; the code is workload.run.local."""
import sys

from workload import cli
from workload.run.local import main

if __name__ == "__main__":
    sys.exit(cli.run(main))
