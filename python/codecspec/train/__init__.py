"""Offline training and per-device calibration for depth speculation.

data       free-generation frames of the exact model, teacher-forced hidden states
offsets    learned draft offsets b_1..b_K (heads frozen), Adam / cross-entropy in numpy
medusa     per-(level, lookahead) linear heads: the ablation baseline
calibrate  acceptance a[d][r], latency profile, tree-budget choice, tree.json
ablate     head reuse vs offsets vs Medusa heads, tokens per call per tree budget
plots      PNG figures (matplotlib optional)
tts_torch, tts_train   the reference TTS in PyTorch (the [train] extra; not imported here)
"""

from codecspec.train.ablate import AblationResult, ablate
from codecspec.train.calibrate import (
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
from codecspec.train.data import (
    collect_frames,
    read_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.train.medusa import MedusaHeads, train_medusa
from codecspec.train.offsets import (
    Adam,
    OffsetDrafter,
    draft_logits,
    evaluate_offsets,
    load_offsets,
    save_offsets,
    train_offsets,
)

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
