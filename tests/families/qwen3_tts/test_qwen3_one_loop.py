"""Qwen3-TTS's `iter_frames` (and so `generate_codes`, `stream`, bench and calibration) runs
the serving engine's loop with one slot, inline (`codecspec.pipeline.loop.run_inline` over
`Qwen3Steps({0: tts})`); the driver it replaced (the `frame_steps` coroutine answered by the
runtime's own talker and depth decoder, kept here as the oracle) gives bit-identical codes,
lengths, eos decisions, traces and stage records: AR and speculative, greedy and sampled,
several seeds, the three checkpoint kinds, the frame limit and the streaming-text prompt."""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA

import codecspec as cs
from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

pytest.importorskip("tokenizers")

DATA = DATA / "qwen3_tiny"
REF = DATA / "ref.wav"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    cache = tmp_path_factory.mktemp("qwen3_one_loop")
    kinds = ("custom_equal", "design_wide", "base_xvector")
    return {v: Qwen3TTS.load(DATA / v, cache_dir=cache, weights="fp32", threads=1) for v in kinds}


def old_loop(tts: Qwen3TTS, text: str, **kw):
    """The driver `iter_frames` was before it became the engine's loop (the oracle)."""
    steps, reply, frames = tts.frame_steps(tts.prepare(text, **kw)), None, []
    while True:
        try:
            kind, item = steps.send(reply)
        except StopIteration:
            return np.asarray(frames, np.int64).reshape(-1, tts.spec.num_code_groups)
        if kind == "depth":
            reply = tts.depth.decode_frame(item.hidden, item.c0, item.generator, item.mode)
        elif kind == "talker":
            reply = tts.talker.step(item)
        else:
            frames.append(item)
            reply = None


def _both(tts: Qwen3TTS, text: str, **kw):
    info_new, info_old, trace_new, trace_old = {}, {}, [], []
    new = tts.generate_codes(text, **kw)
    frames = list(tts.iter_frames(text, info=info_new, trace=trace_new, **kw))
    old = old_loop(tts, text, info=info_old, trace=trace_old, **kw)
    np.testing.assert_array_equal(new.codes, old)
    np.testing.assert_array_equal(np.asarray(frames).reshape(old.shape), old)
    assert new.hit_max_frames == info_old["hit_max_frames"] == info_new["hit_max_frames"]
    assert len(trace_new) == len(trace_old) == len(old)
    for (h1, c1), (h2, c2) in zip(trace_new, trace_old):
        assert c1 == c2 and np.array_equal(h1, h2)
    assert set(new.seconds) == {"prefill", "talker", "depth"}
    return new


@pytest.mark.parametrize("mode", ["ar", "spec"])
@pytest.mark.parametrize(
    "seed,temperature,top_k", [(0, None, None), (7, None, None), (3, 0.0, None), (11, 1.3, 5)]
)
def test_custom_voice_equals_the_old_driver(models, mode, seed, temperature, top_k):
    r = _both(
        models["custom_equal"],
        "Hello there, one loop.",
        speaker="aiden",
        language="english",
        mode=mode,
        seed=seed,
        temperature=temperature,
        top_k=top_k,
    )
    assert len(r.codes) >= 1


@pytest.mark.parametrize("mode", ["ar", "spec"])
def test_voice_design_and_streaming_text_equal_the_old_driver(models, mode):
    _both(
        models["design_wide"],
        "A longer sentence, to make a few frames.",
        instruct="A calm voice.",
        mode=mode,
        seed=5,
        streaming_text=True,
    )


def test_base_clone_equals_the_old_driver(models):
    _both(models["base_xvector"], "Cloned words.", ref_audio=REF, mode="spec", seed=2)


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_the_frame_limit_ends_it_as_the_old_driver(models, limit):
    r = _both(models["custom_equal"], "Hello there, one loop.", max_frames=limit, seed=1)
    assert len(r.codes) <= limit


def test_a_given_generator_draws_as_its_seed(models):
    tts = models["custom_equal"]
    a = np.asarray(list(tts.iter_frames("Seeded.", generator=cs.Generator(9))))
    b = np.asarray(list(tts.iter_frames("Seeded.", seed=9)))
    np.testing.assert_array_equal(a, b)


def test_a_bad_argument_is_still_a_value_error_naming_it(models):
    tts = models["custom_equal"]
    with pytest.raises(ValueError, match="mode"):
        list(tts.iter_frames("Hi.", mode="fast"))
    with pytest.raises(ValueError, match="max_frames"):
        list(tts.iter_frames("Hi.", max_frames=-2))
    with pytest.raises(ValueError, match="speaker"):
        list(tts.iter_frames("Hi.", speaker="nobody"))


def test_the_oracle_catches_a_broken_driver(models):
    """A driver that answers the depth requests with the wrong generator must differ: the
    comparison above is not vacuous."""
    tts = models["custom_equal"]
    steps, reply, frames = tts.frame_steps(tts.prepare("Hello there, one loop.", seed=4)), None, []
    while True:
        try:
            kind, item = steps.send(reply)
        except StopIteration:
            break
        if kind == "depth":
            reply = tts.depth.decode_frame(item.hidden, item.c0, cs.Generator(99), item.mode)
        elif kind == "talker":
            reply = tts.talker.step(item)
        else:
            frames.append(item)
            reply = None
    good = tts.generate_codes("Hello there, one loop.", seed=4).codes
    bad = np.asarray(frames, np.int64).reshape(-1, good.shape[1])
    assert bad.shape != good.shape or not np.array_equal(bad, good)
