"""The talker's prefix cache: a prompt's leading rows that its voice, language and instruction
fix (not its text) run as a call of their own and their K/V are kept, so a later request with
the same voice skips them. The codes must be the same bits whether the prefix came from the
cache or was run, for one runtime and for the server's replicas; a cache that hands one
voice's prefix to another must be caught."""

from __future__ import annotations

import numpy as np
import pytest
from paths import DATA

pytest.importorskip("tokenizers")  # the [qwen3] extra (also in [test])

from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
from codecspec.families.qwen3_tts.talker import PrefixCache
from codecspec.families.qwen3_tts.text import build_prompt

DATA = DATA / "qwen3_tiny"
TEXT = "The quick brown fox."


@pytest.fixture(scope="module")
def tts(tmp_path_factory):
    cache = tmp_path_factory.mktemp("qwen3_prefix_cache")
    return Qwen3TTS.load(DATA / "custom_equal", cache_dir=cache, weights="fp32")


def _codes(tts, speaker="aiden", text=TEXT, **kw):
    kw = {"language": "english", "seed": 3, "max_frames": 12, **kw}
    return tts.generate_codes(text, speaker=speaker, **kw).codes


def _fresh(tts, prefixes=None):
    """A replica of `tts` with a cache of its own (a cold start)."""
    r = tts.replica()
    r.talker.prefixes = PrefixCache() if prefixes is None else prefixes
    return r


def test_the_fixed_rows_are_the_text_independent_prefix(tts):
    a = build_prompt(tts.tok, tts.spec, TEXT, language="english", speaker="aiden")
    b = build_prompt(tts.tok, tts.spec, "Other words here.", language="english", speaker="aiden")
    k = a.fixed_rows
    assert 0 < k < min(len(a), len(b))
    assert (a.text_ids[:k] == b.text_ids[:k]).all() and (a.codec_ids[:k] == b.codec_ids[:k]).all()
    assert a.text_ids[k] == a.prompt_ids[3] != b.text_ids[k]  # the row after: the text's first
    assert a.fixed_rows == b.fixed_rows


def test_a_cached_prefix_gives_the_same_codes_as_a_cold_run(tts):
    r = _fresh(tts)
    cold = _codes(r)
    assert (r.talker.prefixes.hits, r.talker.prefixes.misses) == (0, 1)
    warm = _codes(r, text=TEXT)
    assert r.talker.prefixes.hits == 1
    np.testing.assert_array_equal(warm, cold)
    other_text = _codes(r, text="A different sentence, same voice.")
    assert r.talker.prefixes.hits == 2  # the text is not part of the prefix
    np.testing.assert_array_equal(
        other_text, _codes(_fresh(tts), text="A different sentence, same voice.")
    )


def test_replicas_share_the_cache(tts):
    r = _fresh(tts)
    first = _codes(r)
    twin = r.replica()
    assert twin.talker.prefixes is r.talker.prefixes
    np.testing.assert_array_equal(_codes(twin), first)
    assert r.talker.prefixes.hits == 1


def test_another_voice_is_another_prefix(tts):
    r = _fresh(tts)
    _codes(r, speaker="aiden")
    vivian = _codes(r, speaker="vivian")
    assert r.talker.prefixes.misses == 2
    np.testing.assert_array_equal(vivian, _codes(_fresh(tts), speaker="vivian"))


class _ShapeKeyed(PrefixCache):
    """The broken variant: keyed by the rows' shape only, one voice's K/V serve another."""

    @staticmethod
    def key(rows):
        return rows.shape


def test_a_cache_that_ignores_the_rows_is_caught(tts):
    r = _fresh(tts, _ShapeKeyed())
    _codes(r, speaker="aiden", temperature=0)
    wrong = _codes(r, speaker="vivian", temperature=0)
    assert r.talker.prefixes.hits == 1
    assert not np.array_equal(wrong, _codes(_fresh(tts), speaker="vivian", temperature=0))


def test_least_recently_used_prefixes_leave_first(tts):
    r = _fresh(tts, PrefixCache(entries=1))
    for speaker in ("aiden", "vivian", "aiden"):
        _codes(r, speaker=speaker, max_frames=2)
    assert (r.talker.prefixes.hits, r.talker.prefixes.misses) == (0, 3)


def test_bad_arguments(tts):
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="entries"):
            PrefixCache(bad)
    emb = np.zeros((5, tts.spec.hidden_size), np.float32)
    for bad in (-1, 5, 2.0):
        with pytest.raises(ValueError, match="fixed"):
            tts.talker.prefill(emb, capacity=8, fixed=bad)
