"""The shipped FSQ model trained the v3 way (`fsq-aligned`, issue 54): 108 channel heads over a
codec whose levels follow the variances, told espeak-ng's phoneme timing. On ONNX Runtime, no
torch: one graph call per frame, the stop head ends short and long texts, streams run together
keep their own codes, and the folder is what the card says."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_fsq import assert_streams_keep_their_codes

from codecspec.families.fsq.model import FSQ_FILES, FSQTTS
from codecspec.model_store import named_model_dir
from codecspec.pipeline.family import SpeechRequest
from codecspec.pipeline.registry import load_model, model_family

DIR = named_model_dir("fsq-aligned")
pytestmark = pytest.mark.skipif(
    not all((DIR / f).is_file() for f in FSQ_FILES), reason="no shipped fsq-aligned model"
)
TEXTS = ["Good morning.", "Seven.", "The quiet harbour wakes before the gulls do."]


@pytest.fixture(scope="module")
def tts():
    return FSQTTS(DIR, provider="cpu", threads=1)


def test_the_folder_is_small_and_says_what_it_is():
    total = sum(p.stat().st_size for p in DIR.iterdir() if p.is_file())
    assert total <= 15 * 2**20, f"{total / 2**20:.1f} MiB shipped"
    meta = json.loads((DIR / "model.json").read_text())
    assert meta["conditioning"] == "phoneme_track" and meta["config"]["aligned"]
    assert len(meta["levels"]) == meta["groups"] and len(set(map(tuple, meta["levels"]))) > 1
    assert model_family("fsq-aligned") == "fsq"
    assert type(load_model("fsq-aligned", provider="cpu")).__name__ == "FSQTTS"


@pytest.mark.parametrize("text", TEXTS)
def test_one_call_per_frame_and_the_stop_head_ends_it(tts, text):
    s = tts.generate(text, seed=0, decode_audio=False)
    assert s.stopped, "the length guard, not the stop head, ended it"
    assert s.graph_calls == len(s.codes) and s.codes.shape[1] == tts.codec.cfg.channels
    assert np.all(s.codes < np.array(tts.codec.cfg.channel_levels))
    track = tts.phoneme_track(text, "en", None)[1]
    assert 0.7 < len(s.codes) / len(track) < 1.3  # the track sets the length


def test_streams_together_keep_their_own_codes(tts):
    reqs = [SpeechRequest(t, "text", v, "en") for t, v in zip(TEXTS, ("f1", "m3", "f2"))]
    assert_streams_keep_their_codes(tts, reqs, seed=9)
