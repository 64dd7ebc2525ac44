"""`python -m codecspec ...` runs the same command line as the `codecspec` script."""

import sys

from codecspec.cli import main

if __name__ == "__main__":
    sys.exit(main())
