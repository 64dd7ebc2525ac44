"""The shared frame loop runs the RVQ reference family too: `run_frame_loop` over the
reference model's stepper and depth loop gives exactly the codes `ReferenceTTS.generate`
gives for the same seed (one decode loop for both families)."""

from __future__ import annotations

import numpy as np
import pytest

import codecspec as cs
from codecspec.decode.frames import run_frame_loop
from codecspec.tts.model import MODEL_FILES, ReferenceTTS, default_model_dir

pytestmark = pytest.mark.skipif(
    not all((default_model_dir() / f).is_file() for f in MODEL_FILES),
    reason="no shipped reference model",
)
PHONEMES = "hˈɛloʊ wˈɜːld"


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_frame_loop_reproduces_the_reference_runtime(mode):
    from codecspec.tts.rvq_frames import rvq_frame_loop_parts

    tts = ReferenceTTS(provider="cpu", threads=1)
    ref = tts.generate("", phonemes=PHONEMES, mode=mode, seed=3, decode_audio=False)
    frames = len(ref.codes)
    stepper, decoder = rvq_frame_loop_parts(
        tts, PHONEMES, "en", tts.meta["default_speaker"], frames, mode
    )
    loop = run_frame_loop(stepper, decoder, cs.Generator(3), max_frames=frames + 5)
    assert loop.steps == frames and not loop.hit_max_frames
    assert np.array_equal(loop.codes[0], ref.codes)
