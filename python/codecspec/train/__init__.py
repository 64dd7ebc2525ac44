"""Offline training for depth speculation and the reference families.

ablate     head reuse vs offsets vs Medusa heads, tokens per call per tree budget
tts_torch, tts_train, v2_torch, v2_train, fsq_torch, fsq_train, depth_train
           the reference families in PyTorch (the [train] extra; not imported here)

Per-device calibration (acceptance, latency, trees, offsets) moved to `codecspec.calibrate`;
its names are re-exported here, and the old module paths (`codecspec.train.calibrate`, ...)
are aliases of the new ones.
"""

from codecspec.calibrate import *  # noqa: F403 (the calibration names, re-exported)
from codecspec.calibrate import __all__ as _calibration_names
from codecspec.calibrate.medusa import MedusaHeads, train_medusa
from codecspec.train.ablate import AblationResult, ablate

__all__ = ["AblationResult", "MedusaHeads", "ablate", "train_medusa", *_calibration_names]
