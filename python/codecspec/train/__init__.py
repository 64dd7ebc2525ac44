"""Offline training shared by the families: depth speculation and the common PyTorch parts.

ablate       head reuse vs offsets vs Medusa heads, tokens per call per tree budget
dataset      the phoneme families' training data (phonemes, codes, the aligned track)
networks     the temporal and depth networks the phoneme families are built from
common       the reference depth config, AdamW, the learning-rate schedule, TrainLog
depth_train  the depth decoder trained alone (v2/v3's shared-parameter depth)
             (those three: the [train] extra)

Each family's own PyTorch model and training loop are in its package:
`codecspec.families.<name>.torch_model` / `.train` (reference, v2, fsq). Per-device
calibration (acceptance, latency, trees, offsets, Medusa heads) is `codecspec.calibrate`.
Importing this package imports none of its modules.
"""
