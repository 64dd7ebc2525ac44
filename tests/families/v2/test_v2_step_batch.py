"""The batch-axis variant of the v2/v3 step graphs (`codecspec.families.v2.step_batch`): several
utterances with ragged rows, histories and phoneme counts in one call give what each
utterance's own call gives, bit for bit (every call scores at least two rows per stream)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from codecspec.families.v2.model import V2TTS, StepBatch
from codecspec.families.v2.step_batch import batch_step_graph

TEXTS = ("The quick brown fox.", "Speculation keeps the law of the model on every frame.", "Hi.")
TOL = 1e-4


@pytest.fixture(scope="module")
def tts():
    return V2TTS(threads=1, provider="cpu")


def _steppers(tts, draft: bool) -> list:
    out = []
    for k, text in enumerate(TEXTS):
        _, ids, _, spk, enc, track = tts.prepare_text(text, None, "en", None, 1.0)
        expected = tts.expected_frames(len(ids) - 2, "en", 1.0) if track is None else track
        st = tts.stepper(enc, spk, expected, draft=draft)
        for j in range(4 + 9 * k):  # histories of different lengths
            st.commit(st.score([(7 * j) % 97]), 1)
        out.append(st)
    return out


def _requests(steppers) -> list:
    return [(steppers[0], [3, 4, 5, 6]), (steppers[1], [7]), (steppers[2], [8, 9])]


@pytest.mark.parametrize("draft", [False, True])
def test_a_batched_call_equals_each_streams_own_call(tts, draft):
    reqs = _requests(_steppers(tts, draft))
    got = tts.step_batch(draft).score(reqs)
    for (st, prev), out in zip(reqs, got):
        want = st.score(prev)
        for a, b in zip(want, out):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, atol=TOL)


@pytest.mark.parametrize("draft", [False, True])
def test_a_streams_rows_are_the_same_bits_in_any_batch(tts, draft):
    """What makes a served stream bit-identical to `generate`: a stream's rows do not depend on
    what else its call holds (ragged 4 / 1 / 2 rows; each alone, each beside the others). The
    lone row is the case that differs without the two-row padding (AVX2 kernels take another
    summation order for one row); the padding row must not change the real rows either."""
    reqs = _requests(_steppers(tts, draft))
    batch = tts.step_batch(draft)
    together = batch.score(reqs)
    for (st, prev), out in zip(reqs, together):
        for got in (st.score(prev), batch.score([(st, prev)])[0]):
            for a, b in zip(got, out):
                np.testing.assert_array_equal(a, b)
    lone_stepper, lone = reqs[1]
    unpadded = lone_stepper.session.run(None, {**lone_stepper.feeds, **_rows(lone_stepper, lone)})
    np.testing.assert_allclose(together[1][1], unpadded[1], atol=TOL)  # the same law


def _rows(st, prev) -> dict:
    p, pos, progress = st.rows(prev)
    return {"prev_tokens": p, "positions": pos, "progress": progress}


def test_without_the_cross_mask_a_short_input_sees_padding(tts, monkeypatch):
    """The broken variant: padded phonemes left visible change the shorter inputs' rows."""
    reqs = _requests(_steppers(tts, False))
    batch = tts.step_batch(False)
    keys, values, bias = batch._cross_for([st for st, _ in reqs])
    monkeypatch.setattr(batch, "_cross_for", lambda steppers: (keys, values, np.zeros_like(bias)))
    got = batch.score(reqs)
    want = reqs[2][0].score(reqs[2][1])  # "Hi.": the fewest phonemes, the most padding
    assert np.abs(got[2][1] - want[1]).max() > 100 * TOL


def test_committed_rows_continue_like_the_streams_own(tts):
    """Commit what the batched call scored and go on: the caches stay each stream's own."""
    a, b = _steppers(tts, False), _steppers(tts, False)
    batch = tts.step_batch(False)
    for step in range(3):
        reqs = [(st, [step + k]) for k, st in enumerate(a)]
        for (st, _), out in zip(reqs, batch.score(reqs)):
            st.commit(out, 1)
        for k, st in enumerate(b):
            st.commit(st.score([step + k]), 1)
    for sa, sb in zip(a, b):
        np.testing.assert_allclose(sa.score([5])[1], sb.score([5])[1], atol=TOL)


def test_a_graph_of_another_kind_is_refused(tts):
    with pytest.raises(ValueError, match="model"):
        batch_step_graph(onnx.load(str(tts.dir / "depth.onnx")))
    assert isinstance(tts.step_batch(True), StepBatch)


def _reused_address_calls(tts, batch, tries: int = 40) -> tuple:
    """(how often a new stepper landed at a freed one's address, how often its batched call
    differed from its own call): a stepper scored, freed, and another utterance's stepper
    made, as when a served stream ends and a queued one joins its slot."""
    inputs = [tts.prepare_text(t, None, "en", None, 1.0) for t in TEXTS[:2]]
    steppers = []
    for _, ids, _, spk, enc, track in inputs:
        pace = tts.expected_frames(len(ids) - 2, "en", 1.0) if track is None else track
        steppers.append(lambda enc=enc, spk=spk, pace=pace: tts.stepper(enc, spk, pace))
    reused = differed = 0
    for _ in range(tries):
        old = steppers[0]()
        batch.score([(old, [1])])
        freed = id(old)
        del old
        new = steppers[1]()
        reused += id(new) == freed
        differed += not np.array_equal(batch.score([(new, [1])])[0][1], new.score([1])[1])
    return reused, differed


def test_a_new_stepper_at_a_freed_address_gets_its_own_cross_inputs(tts):
    """A served stream's steps held another utterance's encoding when the batch's cache of
    padded cross K/V was keyed by `id` and a new stepper took a finished one's address."""
    reused, differed = _reused_address_calls(tts, tts.step_batch(False))
    assert reused > 0  # the case happened (CPython reuses a freed object's memory)
    assert differed == 0


def test_an_id_keyed_cross_cache_is_caught(tts):
    """The broken variant: the cache keyed by ids hands the freed stepper's inputs on."""
    batch = StepBatch(tts.step_batch(False).session)
    fill = StepBatch._cross_for

    def by_id(steppers):
        key = tuple(id(st) for st in steppers)
        if batch._cross[0] != key:
            batch._cross = (key, fill(StepBatch(batch.session), steppers))
        return batch._cross[1]

    batch._cross_for = by_id
    reused, differed = _reused_address_calls(tts, batch)
    assert reused > 0 and differed > 0
