"""`python -m tools.capacity`: see tools/capacity/cli.py, or `python -m tools.capacity --help`."""
import sys

from tools.capacity.cli import main

sys.exit(main())
