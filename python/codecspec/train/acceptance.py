"""Moved to `codecspec.calibrate.acceptance` (per-device calibration is not training); this alias
keeps the old import path working."""

import sys

from codecspec.calibrate import acceptance as _moved

sys.modules[__name__] = _moved
