"""A stream's step is the same bits alone and beside other streams (the slot caches of the
reference and FSQ families), which is what makes a served stream bit-identical to `generate`
whatever joins or leaves its batch. Streams of different lengths share a call with their key
axes padded to the longest; the padding is aligned (`runtime.slots.KEY_ALIGN`) so that a
stream's keys reach the attention sum in the same SIMD lanes in any batch."""

import numpy as np
import pytest

import codecspec.runtime.slots as slots_module
from codecspec.families.fsq.model import FSQSlots
from codecspec.families.reference.temporal_batch import BatchedTemporal
from codecspec.pipeline.registry import load_model

PHONEMES = (23, 7, 41)  # three streams with different phoneme counts
STEPS = 20


def _cross(cache, rng):
    """Random cross K/V of each stream's phoneme count (the graphs take any floats)."""
    L, _, heads, _, hd = cache.cross_k.shape
    for slot, p in enumerate(PHONEMES):
        ck = rng.standard_normal((L, 1, heads, p, hd)).astype(np.float32)
        cache.load(slot, ck, rng.standard_normal(ck.shape).astype(np.float32))


def _reference_run(session, active):
    rng = np.random.default_rng(0)
    cache = BatchedTemporal(session, 3, 64, max(PHONEMES))
    _cross(cache, rng)
    inputs = rng.standard_normal((STEPS, 3, cache.latent_dim)).astype(np.float32)
    out = []
    for s in range(STEPS):
        h, _ = cache.step(
            active, inputs[s][active], [0.05 * (s + 1)] * len(active), [0] * len(active)
        )
        out.append(h)
    return out


def _fsq_run(session, active):
    rng = np.random.default_rng(0)
    cache = FSQSlots(session, 3, 64, max(PHONEMES))
    _cross(cache, rng)
    prev = rng.integers(0, 5, (STEPS, 3, cache.channels))
    out = []
    for s in range(STEPS):
        h, _, _ = cache.step(
            active, prev[s][active], [0.05 * (s + 1)] * len(active), [0] * len(active)
        )
        out.append(h)
    return out


@pytest.fixture(scope="module")
def sessions():
    return {
        "reference": load_model("reference", threads=1, provider="cpu").temporal_batch,
        "fsq": load_model("fsq", threads=1, provider="cpu").step_graph,
    }


@pytest.mark.parametrize("family, run", [("reference", _reference_run), ("fsq", _fsq_run)])
def test_a_streams_step_is_the_same_bits_alone_and_in_a_batch(sessions, family, run):
    together = run(sessions[family], [0, 1, 2])
    for k in range(3):
        alone = run(sessions[family], [k])
        for s in range(STEPS):
            np.testing.assert_array_equal(alone[s][0], together[s][k], err_msg=f"step {s}")


def test_unaligned_padding_still_computes_the_same_law(sessions, monkeypatch):
    """Without the alignment a stream's bits may follow its neighbours' lengths (they do on
    AVX2), but only by float rounding: the padding is masked either way."""
    monkeypatch.setattr(slots_module, "KEY_ALIGN", 1)
    together = _reference_run(sessions["reference"], [0, 1, 2])
    alone = _reference_run(sessions["reference"], [1])
    for s in range(STEPS):
        np.testing.assert_allclose(alone[s][0], together[s][1], atol=1e-5)
