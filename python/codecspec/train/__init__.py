"""Offline training for depth speculation and the reference families.

ablate     head reuse vs offsets vs Medusa heads, tokens per call per tree budget
tts_torch, tts_train, v2_torch, v2_train, fsq_torch, fsq_train, depth_train
           the reference families in PyTorch (the [train] extra; not imported here)

Per-device calibration (acceptance, latency, trees, offsets) moved to `codecspec.calibrate`;
its names are re-exported here, and the old module paths (`codecspec.train.calibrate`, ...)
are aliases of the new ones.
"""

from codecspec.calibrate.data import (
    collect_frames,
    read_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.device import (
    Acceptance,
    CalibrationResult,
    LatencyProfile,
    calibrate,
    choose_budget,
    measure_acceptance,
    measure_end_to_end,
    measure_latency,
    measure_overhead,
    predict_tree,
    simulate_tree,
)
from codecspec.calibrate.medusa import MedusaHeads, train_medusa
from codecspec.calibrate.offsets import (
    Adam,
    OffsetDrafter,
    draft_logits,
    evaluate_offsets,
    load_offsets,
    save_offsets,
    train_offsets,
)
from codecspec.train.ablate import AblationResult, ablate

__all__ = [
    "AblationResult",
    "Acceptance",
    "Adam",
    "CalibrationResult",
    "ablate",
    "LatencyProfile",
    "MedusaHeads",
    "OffsetDrafter",
    "calibrate",
    "choose_budget",
    "collect_frames",
    "draft_logits",
    "evaluate_offsets",
    "load_offsets",
    "measure_acceptance",
    "measure_end_to_end",
    "measure_latency",
    "measure_overhead",
    "predict_tree",
    "read_heads",
    "save_offsets",
    "simulate_tree",
    "synthetic_inputs",
    "teacher_forced_hidden",
    "train_medusa",
    "train_offsets",
]
