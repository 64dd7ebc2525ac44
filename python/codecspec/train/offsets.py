"""Moved to `codecspec.calibrate.offsets` (per-device calibration is not training); this alias
keeps the old import path working."""

import sys

from codecspec.calibrate import offsets as _moved

sys.modules[__name__] = _moved
