#!/usr/bin/env bash
# Rebuild the shipped reference model from nothing: corpus -> codec -> training -> export,
# calibration, ablation, bench -> model card. About 2 h on 2 CPU cores; needs root (or
# espeak-ng and the fortunes packages already installed) and PyPI access for torch.
#
#   bash models/recipe/build.sh            # everything, into models/reference
#   MINUTES=10 bash models/recipe/build.sh # a shorter training budget
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CODECSPEC_CACHE:-$HOME/.cache/codecspec}"
OUT="${OUT:-models/reference}"
python3 -m pip install -q ".[train,plot]"
python3 models/recipe/corpus.py --out "$CACHE/corpus" --seed 0 --overwrite
python3 models/recipe/codec.py --corpus "$CACHE/corpus" --out "$CACHE/codec" --seed 0
# One torch thread at raised priority: two OpenMP threads stall badly on a shared 2-core box.
OMP_NUM_THREADS=1 python3 models/recipe/tts.py train --corpus "$CACHE/corpus" \
    --codec "$CACHE/codec" --out "$CACHE/tts" --minutes "${MINUTES:-60}" --threads 1
OPENBLAS_NUM_THREADS=1 python3 models/recipe/ship.py --trained "$CACHE/tts" \
    --corpus "$CACHE/corpus" --codec "$CACHE/codec" --out "$OUT"
python3 models/recipe/vocoder.py --model "$OUT" --corpus "$CACHE/corpus"
python3 models/recipe/card.py --model "$OUT" --corpus "$CACHE/corpus" --codec "$CACHE/codec"

# Reference model v2 (docs/reference_model_v2.md): codec v2 -> two-stage LM + draft + depth
# decoder -> shipped folder models/v2. `train` resumes from the checkpoint in
# $CACHE/v2/train when one exists: rerunning this script (here, or on a fresh machine with
# that folder copied over) continues the run instead of starting again.
V2OUT="${V2OUT:-models/v2}"
python3 models/recipe/v2.py --work "$CACHE/v2" codec
OMP_NUM_THREADS=1 python3 models/recipe/v2.py --work "$CACHE/v2" train \
    --minutes "${V2_MINUTES:-78}" --threads 1
mkdir -p "$CACHE/v2/codec_report"
OMP_NUM_THREADS=1 python3 models/recipe/codec_v2.py --grid 8,8,4,4 --refine 4 \
    --refine-grid 8,8,4,4 --out "$CACHE/v2/codec_report"
OPENBLAS_NUM_THREADS=1 python3 models/recipe/v2.py --work "$CACHE/v2" ship --out "$V2OUT"
python3 models/recipe/v2_card.py --model "$V2OUT"

# Reference model v3, the default (docs/reference_model_v3.md): first weights on 4 h of timed
# espeak-ng speech, continued on 12 h, its depth decoder then trained alone on 24 h and on
# 12 h of mixed text (its stop head fitted again there), shipped into
# python/codecspec/models/v3; then its seed comparisons (speed/quality per decoding mode; the
# depth-loop ablation comes with `ship`), whether temporal speculation pays (model.json), the
# words-recognised run and the card. About 11 h on 2 cores; `train` resumes from its
# checkpoint when rerun.
V3FIRST="$CACHE/v3_first"
V3SECOND="$CACHE/v3_second"
v3a() { python3 models/recipe/v3.py --corpus "$CACHE/corpus_v3" --work "$CACHE/v3" "$@"; }
v3b() { python3 models/recipe/v3.py --corpus "$CACHE/corpus_v3x" --work "$CACHE/v3x" "$@"; }
v3c() { python3 models/recipe/v3.py --corpus "$CACHE/corpus_v3y" --work "$CACHE/v3y" "$@"; }
v3a corpus
v3a codec
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 v3a train --minutes 70 --no-ce-draft --threads 1
OPENBLAS_NUM_THREADS=1 v3a ship --out "$V3FIRST" --no-ablation --no-distance
v3b corpus --hours 12
v3b codec
OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 v3b train --init-from "$V3FIRST" --init-other-corpus \
    --out "$CACHE/v3x/train" --max-steps 1050 --lr 4e-4 --warmup 0.05 --depth-frames 1024 \
    --no-ce-draft --threads 2
# the stop head fitted again on frames past the track's end (the runaways), then shipped
OMP_NUM_THREADS=2 v3b stop --hidden 64
OPENBLAS_NUM_THREADS=1 v3b ship --checkpoint "$CACHE/v3x/stop/ckpt.pt" --out "$V3SECOND" \
    --no-ablation --no-distance
# the depth decoder alone, on the teacher-forced frames of 24 h (five passes, ~205 min);
# a pass whose report exists is done: a rerun goes on from the first pass not yet written
v3c corpus --hours 24
v3c codec
D="$CACHE/v3y"
depth_pass() {  # FROM OUT ARGS...: one pass from folder FROM into folder OUT
    local from="$1" out="$2"
    shift 2
    [ -f "$out/depth_probe.json" ] || OMP_NUM_THREADS=2 v3c depth --from-folder "$from" \
        --model "$from" --out "$out" --threads 2 "$@"
}
depth_pass "$V3SECOND" "$D/depth24" --train-frames 1000000 --steps 2400
depth_pass "$D/depth24" "$D/depth24b" --train-frames 1000000 --steps 1800
depth_pass "$D/depth24b" "$D/depth24c" --train-frames 1300000 --steps 2400 --seed 1
depth_pass "$D/depth24c" "$D/depth24d" --train-frames 1300000 --steps 3000 --seed 2
depth_pass "$D/depth24d" "$D/depth24e" --train-frames 1300000 --steps 3000 --seed 3
v3c checkpoint --from-folder "$D/depth24e" --out "$D/depth24e.pt" --depth-reports \
    "$D"/depth24{,b,c,d,e}/depth_probe.json
V3THIRD="$CACHE/v3_third"
OPENBLAS_NUM_THREADS=1 v3c ship --checkpoint "$D/depth24e.pt" --out "$V3THIRD" \
    --no-ablation --no-distance
# then on 12 h of mixed text (fortunes and unpredictable English, half each): one depth pass,
# the stop head fitted further on teacher-forced and free-running utterances, two more passes
v3m() { python3 models/recipe/v3.py --corpus "$CACHE/corpus_v3m" --work "$CACHE/v3m" "$@"; }
v3m corpus --hours 12 --texts mixed
v3m codec
M="$CACHE/v3m"
mixed_pass() {  # FROM OUT ARGS...: one depth pass on the mixed corpus
    local from="$1" out="$2"
    shift 2
    [ -f "$out/depth_probe.json" ] || OMP_NUM_THREADS=2 v3m depth --from-folder "$from" \
        --model "$from" --out "$out" --threads 2 --train-frames 620000 "$@"
}
mixed_pass "$V3THIRD" "$M/depth_m1" --steps 2400
v3m checkpoint --from-folder "$M/depth_m1" --out "$M/depth_m1.pt" \
    --depth-reports "$M/depth_m1/depth_probe.json"
OMP_NUM_THREADS=2 v3m stop --checkpoint "$M/depth_m1.pt" --free 400 --hidden -1 \
    --out "$M/stop_m/ckpt.pt" --threads 2
OPENBLAS_NUM_THREADS=1 v3m ship --checkpoint "$M/stop_m/ckpt.pt" --out "$M/cand_m1" \
    --no-ablation --no-distance
mixed_pass "$M/cand_m1" "$M/depth_m2" --steps 1800 --seed 1
mixed_pass "$M/depth_m2" "$M/depth_m3" --steps 1800 --lr 1.5e-4 --seed 2
v3m checkpoint --from-folder "$M/depth_m3" --out "$M/depth_m3.pt" \
    --depth-reports "$M"/depth_m{2,3}/depth_probe.json
OPENBLAS_NUM_THREADS=1 v3m ship --checkpoint "$M/depth_m3.pt" --no-distance
python3 -m pip install -q ".[quality]"
python3 bench/speed_quality.py --model v3 --seeds 3 --threads 1 --out docs/speed_quality_rounds
python3 models/recipe/v3.py temporal
codecspec quality --model v3 --modes ar temporal --set all --seeds 3 --threads 2 \
    -o docs/quality_v3_sets_mixed.json
python3 models/recipe/v3_card.py

# fsq-aligned (docs/fsq_model.md): the FSQ family's network trained the v3 way, on 12 h of
# mixed text the v3 runs above never read (the order after their 7,000 texts), over the codec
# whose levels follow the PCA variances (200 bits per frame); one hour on one thread; the
# greedy law chosen on held-out corpus texts (`fsq.py listen --temperature T`).
python3 models/recipe/v3.py --corpus "$CACHE/corpus_v3n" --work "$CACHE/v3n" corpus \
    --hours 12 --texts mixed --skip-texts 7000
F="$CACHE/fsq_v3n"
fsq() { python3 models/recipe/fsq.py "$1" --corpus "$CACHE/corpus_v3n" --out "$F" "${@:2}"; }
fsq codec --bits 200
OMP_NUM_THREADS=1 fsq train --minutes 60 --threads 1
OMP_NUM_THREADS=1 fsq listen --export "$F/folder" --texts 120 --seeds 2 \
    --temperature 0 --json "$F/listen_final.json"
OPENBLAS_NUM_THREADS=1 fsq ship --model python/codecspec/models/fsq-aligned --temperature 0 \
    --listen-json "$F/listen_final.json"
codecspec quality --model fsq-aligned --modes ar codec --set all --seeds 3 --threads 1 \
    -o docs/quality_fsq_aligned_sets.json
