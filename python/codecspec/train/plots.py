"""Moved to `codecspec.calibrate.plots` (per-device calibration is not training); this alias
keeps the old import path working."""

import sys

from codecspec.calibrate import plots as _moved

sys.modules[__name__] = _moved
