"""Moved to `codecspec.calibrate.device` (per-device calibration is not training); this alias
keeps the old import path working."""

import sys

from codecspec.calibrate import device as _moved

sys.modules[__name__] = _moved
