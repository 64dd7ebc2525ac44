"""Per-device calibration of speculation: what pays on this machine, measured here.

device       the driver (`calibrate`): frames, offsets, the three measurements, the choice
acceptance   acceptance a[d][r] of the drafts (and of offset drafts, exact and by group)
latency      the latency profile of a depth-graph call, the decoder's glue, end to end
budget       trees replayed and predicted per node budget, the budget choice
profile      device_profile.json and decision.json of a calibration
decision     the one decision format and the one rule for `auto` (`read_decision`, also
             of the older device_profile.json / speculation.json; `write_decision`)
offsets      learned draft offsets b_1..b_K (heads frozen), Adam / cross-entropy in numpy
medusa       per-(level, lookahead) linear heads in numpy: the ablation baseline
data         free-generation frames of the exact model, teacher-forced hidden states
speedup_map  measured vs ideal speed-up over acceptance x chain depth
plots        PNG figures (matplotlib optional)

Nothing here needs torch; `codecspec.train` keeps the PyTorch training of the reference
families and the ablation baselines.
"""

from codecspec.calibrate.acceptance import Acceptance, measure_acceptance
from codecspec.calibrate.budget import choose_budget, predict_tree, simulate_tree
from codecspec.calibrate.data import (
    collect_frames,
    read_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.device import CalibrationResult, calibrate
from codecspec.calibrate.latency import (
    LatencyProfile,
    measure_end_to_end,
    measure_latency,
    measure_overhead,
)
from codecspec.calibrate.offsets import (
    Adam,
    OffsetDrafter,
    draft_logits,
    evaluate_offsets,
    load_offsets,
    save_offsets,
    train_offsets,
)

__all__ = [
    "Acceptance",
    "Adam",
    "CalibrationResult",
    "LatencyProfile",
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
    "train_offsets",
]
