#!/usr/bin/env bash
# Rebuild the shipped reference model from nothing: corpus -> codec -> training -> export,
# calibration, ablation, bench -> model card. About 2 h on 2 CPU cores; needs root (or
# espeak-ng and the fortunes packages already installed) and PyPI access for torch.
#
#   bash models/recipe/build.sh            # everything, into python/codecspec/models/reference
#   MINUTES=10 bash models/recipe/build.sh # a shorter training budget
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${CODECSPEC_CACHE:-$HOME/.cache/codecspec}"
OUT="${OUT:-python/codecspec/models/reference}"
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
