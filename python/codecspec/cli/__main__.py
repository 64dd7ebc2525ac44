"""`python -m codecspec.cli ...`: the `codecspec` command line."""

import sys

from codecspec.cli import main

if __name__ == "__main__":
    sys.exit(main())
