"""Offline training shared by the families: depth speculation and the common PyTorch parts.

ablate       head reuse vs offsets vs Medusa heads, tokens per call per tree budget
networks     the temporal and depth networks the phoneme families are built from
common       the reference depth config, AdamW, the learning-rate schedule, TrainLog
depth_train  the depth decoder trained alone (v2/v3's shared-parameter depth)
             (those three: the [train] extra; not imported here)

Each family's own PyTorch model and training loop are in its package:
`codecspec.families.<name>.torch_model` / `.train` (reference, v2, fsq).

Per-device calibration (acceptance, latency, trees, offsets) is `codecspec.calibrate`; its
names are re-exported here (the old module paths, `codecspec.train.calibrate` ..., are gone).
"""

from codecspec.calibrate import *  # noqa: F403 (the calibration names, re-exported)
from codecspec.calibrate import __all__ as _calibration_names
from codecspec.calibrate.medusa import MedusaHeads, train_medusa
from codecspec.train.ablate import AblationResult, ablate

__all__ = ["AblationResult", "MedusaHeads", "ablate", "train_medusa", *_calibration_names]
