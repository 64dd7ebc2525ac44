"""Moved to `codecspec.families.fsq.engine` (the FSQ family is a package of its own); this
alias keeps the old import path working."""

import sys

from codecspec.families.fsq import engine as _moved

sys.modules[__name__] = _moved
