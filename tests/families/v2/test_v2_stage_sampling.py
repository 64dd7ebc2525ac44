"""Per-stage sampling in the v2 family: a folder's model.json may give the depth levels their
own law ("depth_sampling", e.g. greedy) beside c0's ("sampling"). The depth stage then runs
that law on every path — the decoder's own loop (one frame), the batched loop of a
speculative round's frames, the serving engine's shared loop — and c0 keeps its own; a folder
without the key, or an explicit `params`, keeps one law for both (as before)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from serve_util import HELLO, LONG, codes, ipa
from v2_oracle import round_frames

import codecspec as cs
from codecspec.decode.depth import stage_params
from codecspec.families.v2.model import V2TTS, default_v2_dir

GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0}


def _folder(tmp_path, **extra):
    """The shipped v2 folder, its files linked, model.json with `extra` keys."""
    src = default_v2_dir()
    if not (src / "model.json").is_file():
        pytest.skip("no v2 model folder")
    out = tmp_path / "v2"
    out.mkdir()
    for f in src.iterdir():
        if f.name != "model.json":
            (out / f.name).symlink_to(f)
    meta = json.loads((src / "model.json").read_text()) | extra
    (out / "model.json").write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    return V2TTS(_folder(tmp_path_factory.mktemp("staged"), depth_sampling=GREEDY), threads=1)


def _frames(tts, seed, temporal, batched):
    """(codes, hiddens) of the round loop run by hand: the depth loops batched per round, or
    each frame on the decoder itself."""
    _, ids, _, spk, enc, _ = tts.prepare_text("", LONG, "en", None)
    expected = tts.expected_frames(len(ids) - 2, "en")
    loop = tts.temporal_loop(enc, spk, expected, temporal=temporal, depth_mode="ar")
    bd = tts.round_depth(loop.draft_len + 1) if batched else None
    rows = list(round_frames(loop, cs.Generator(seed), tts.max_frames_for(expected), bd))
    return np.stack([c for c, _, _ in rows]), np.stack([h for _, _, h in rows])


def test_the_folder_key_sets_the_depth_law_only(staged):
    assert staged.depth_params.temperature == 0.0 and staged.depth.params.temperature == 0.0
    assert staged.params.temperature == pytest.approx(staged.meta["sampling"]["temperature"])
    one = cs.SamplingParams(0.5, 10, 1.0)  # an explicit law without depth_params: both stages
    assert stage_params(staged.meta, one) is one
    assert stage_params(staged.meta, one, cs.SamplingParams(0.0, 0, 1.0)).temperature == 0.0
    assert stage_params({"sampling": GREEDY | {"temperature": 0.7}}).temperature == pytest.approx(
        0.7
    )


def test_the_depth_levels_are_greedy_and_c0_is_drawn(staged):
    got, hiddens = _frames(staged, 3, "ar", batched=False)
    dec = staged.depth
    for t in range(len(got)):  # any generator: a greedy law draws nothing
        again = dec.decode_frame(hiddens[t], int(got[t, 0]), cs.Generator(1000 + t), "ar")
        np.testing.assert_array_equal(again, got[t])
    other, _ = _frames(staged, 4, "ar", batched=False)
    n = min(len(got), len(other))
    assert not np.array_equal(got[:n, 0], other[:n, 0])  # c0 still sampled: seeds differ


def test_batched_rounds_run_the_depth_law_too(staged):
    """Rounds of several frames decode their depth loops batched (`FrameJob.params`); the
    same codes as each frame on the decoder alone. Had the jobs carried c0's law, the two
    paths would draw differently."""
    batched, _ = _frames(staged, 7, "spec", batched=True)
    alone, _ = _frames(staged, 7, "spec", batched=False)
    np.testing.assert_array_equal(batched, alone)
    gen = staged.generate("", phonemes=LONG, seed=7, temporal="spec", decode_audio=False)
    np.testing.assert_array_equal(gen.codes, batched)


def test_one_law_folders_and_explicit_params_keep_it(tmp_path, staged):
    plain = V2TTS(_folder(tmp_path), threads=1)
    assert plain.depth_params == plain.params
    same = V2TTS(plain.dir, threads=1, depth_params=cs.SamplingParams(**GREEDY))
    a = same.generate("", phonemes=HELLO, seed=2, decode_audio=False).codes
    b = staged.generate("", phonemes=HELLO, seed=2, decode_audio=False).codes
    np.testing.assert_array_equal(a, b)  # the key and the argument are one thing
    c = plain.generate("", phonemes=HELLO, seed=2, decode_audio=False).codes
    assert not np.array_equal(c, b)  # and the key changes what is drawn


def test_a_bad_depth_law_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match="depth_sampling"):
        V2TTS(_folder(tmp_path, depth_sampling={"temperature": 0.5, "top_q": 3}), threads=1)


def test_served_streams_keep_both_laws(staged):
    from codecspec.serve.engine import Engine

    e = Engine(str(staged.dir), max_streams=2, max_queue=2, threads=1)
    try:
        texts = [HELLO, LONG]
        hs = e.submit_many([ipa(t, seed=30 + k, mode="spec") for k, t in enumerate(texts)])
        for k, (h, t) in enumerate(zip(hs, texts)):
            want = staged.generate(
                "", phonemes=t, seed=30 + k, mode="spec", temporal="spec", decode_audio=False
            )
            np.testing.assert_array_equal(codes(h), want.codes.astype(np.int64))
    finally:
        e.shutdown(drain=False)
