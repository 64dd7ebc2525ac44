"""Moved to `codecspec.families.v2.bench` (the v2 family is a package of its own); this
alias keeps the old import path working."""

import sys

from codecspec.families.v2 import bench as _moved

sys.modules[__name__] = _moved
