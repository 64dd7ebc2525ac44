"""Moved to `codecspec.calibrate.speedup_map` (per-device calibration is not training); this alias
keeps the old import path working."""

import sys

from codecspec.calibrate import speedup_map as _moved

sys.modules[__name__] = _moved
