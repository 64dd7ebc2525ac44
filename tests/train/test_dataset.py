"""TTS data side (issue 4): phoneme frontend and the codes dataset, on a tiny synthetic corpus.

One test reads the real corpus (~/.cache/codecspec/corpus + codec/codes.npz) when it exists.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from codecspec.codec.data import save_codes
from codecspec.frontend.text import (
    BOS,
    EOS,
    PAD,
    RESERVED,
    UNK,
    Frontend,
    IdTable,
    PhonemeVocab,
    normalize,
    tokenize,
)
from codecspec.train.dataset import TTSDataset

SR, FRAME = 16000, 1280

PHONEMES = [
    "hˈæɹɪsənz pˈɔstʃʊlˌeɪt | fɔːɹ ˈɛvɹi ˈækʃən",
    "das ˈɛŋlɪʃə (en)tˈiːm(de) fɔn | ˈaɪn",
    "ˈola ˈamiɣo",
    "tʃˈiao | ˈbɛlla",
    "ðɪs ɪz ə tˈɛst",
]
LANGS = ["en", "de", "es", "it", "en"]


def _write_corpus(root: Path, frames_of=None, codes_root=None, drop=(), split_override=None):
    """Tiny manifest (5 texts x 2 renditions, text 4 held out) + matching codes.npz."""
    rng = np.random.default_rng(0)
    rows, ids, splits, codes = [], [], [], []
    variants = ["m1", "f2", "m3"]
    for t, (ph, lang) in enumerate(zip(PHONEMES, LANGS)):
        split = "test" if t == 4 else "train"
        for r in range(2):
            uid = f"{lang}-{t:04d}-r{r}"
            T = frames_of(t, r) if frames_of else 5 + 3 * t + r
            n = T * FRAME - 17  # any sample count whose ceil(/1280) is T
            rows.append(
                {
                    "id": uid,
                    "text_id": f"{lang}-{t:04d}",
                    "language": lang,
                    "variant": variants[(t + r) % 3],
                    "voice": f"{lang}+{variants[(t + r) % 3]}",
                    "phonemes": ph,
                    "split": split,
                    "num_samples": n,
                    "sample_rate": SR,
                    "duration": n / SR,
                }
            )
            if uid in drop:
                continue
            ids.append(uid)
            splits.append(split_override.get(uid, split) if split_override else split)
            codes.append(rng.integers(0, 1024, size=(T, 16)))
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "manifest.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    codes_path = (codes_root or root) / "codes.npz"
    save_codes(codes_path, ids, splits, codes, frame_rate=SR / FRAME)
    return root, codes_path


# ---------------------------------------------------------------- text frontend


def test_tokenize_tags_words_and_clauses():
    toks = tokenize("  das (en)tˈiːm(de) fɔn  |  ˈaɪn ")
    assert toks == (
        ["d", "a", "s", " ", "(en)", "t", "ˈ", "i", "ː", "m", "(de)", " ", "f", "ɔ", "n"]
        + ["|", "ˈ", "a", "ɪ", "n"]
    )
    assert tokenize("a\tb\n c") == ["a", " ", "b", " ", "c"]
    assert tokenize("") == []
    # a parenthesis that is not a language tag stays a character
    assert tokenize("(x") == ["(", "x"]
    assert normalize("  a   b |c ") == "a b | c"
    with pytest.raises(ValueError, match="phonemes"):
        tokenize(None)


def test_vocab_reserved_ids_and_ordering():
    v = PhonemeVocab.from_strings(PHONEMES)
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert v.tokens[:4] == RESERVED
    assert list(v.symbols) == sorted(v.symbols)
    assert "(en)" in v and "(de)" in v and "|" in v and " " in v
    assert "(" not in v and "<pad>" not in v
    # the order of the input strings does not matter
    assert PhonemeVocab.from_strings(PHONEMES[::-1]) == v
    ids = v.encode(PHONEMES[1], bos=True, eos=True)
    assert ids.dtype == np.int32 and ids[0] == BOS and ids[-1] == EOS
    assert (ids[1:-1] >= len(RESERVED)).all()
    with pytest.raises(ValueError, match="symbols"):
        PhonemeVocab(["<unk>"])


def test_vocab_round_trip_and_unknown(tmp_path):
    v = PhonemeVocab.from_strings(PHONEMES)
    for s in PHONEMES:
        assert v.decode(v.encode(s)) == s
        assert v.decode(v.encode(s, bos=True, eos=True)) == s
        assert len(v.encode(s)) == len(tokenize(s))
    # unknown symbols map to <unk>, or raise when strict
    ids = v.encode("qa")
    assert ids[0] == UNK and v.decode(ids) == "\ufffd" + "a"
    with pytest.raises(ValueError, match="phonemes.*'q'"):
        v.encode("qa", strict=True)
    # the reserved names in a text are never taken as reserved ids
    ids = v.encode("<pad>").tolist()
    assert ids == [UNK, v.token_id("p"), v.token_id("a"), v.token_id("d"), UNK]
    assert v.token_id("<pad>") == PAD and v.token_id("q") == UNK
    # padding is dropped on decode
    assert v.decode(np.concatenate([v.encode("ola"), [PAD, PAD]])) == "ola"
    with pytest.raises(ValueError, match="ids"):
        v.decode([len(v)])
    with pytest.raises(ValueError, match="ids"):
        v.decode([[1, 2]])
    # JSON save/load
    v.save(tmp_path / "vocab.json")
    assert PhonemeVocab.load(tmp_path / "vocab.json") == v
    with pytest.raises(ValueError, match="path"):
        PhonemeVocab.load(tmp_path / "nope.json")


def test_id_tables_and_frontend_json(tmp_path):
    root, _ = _write_corpus(tmp_path / "c")
    rows = [json.loads(x) for x in (root / "manifest.jsonl").read_text().splitlines()]
    fe = Frontend.from_manifest(rows)
    assert fe.languages.names == ("de", "en", "es", "it")
    assert fe.speakers.names == ("f2", "m1", "m3")
    assert fe.languages.id("es") == 2 and fe.speakers.name(0) == "f2"
    with pytest.raises(ValueError, match="name"):
        fe.languages.id("fr")
    with pytest.raises(ValueError, match="i"):
        fe.speakers.name(3)
    # vocab from the train split only: the held-out text's symbols are not in it
    assert "ð" not in fe.vocab
    assert "ð" in Frontend.from_manifest(rows, vocab_split=None).vocab
    # deterministic regardless of row order, and a JSON round trip
    assert Frontend.from_manifest(rows[::-1]) == fe
    fe.save(tmp_path / "frontend.json")
    assert Frontend.load(tmp_path / "frontend.json") == fe
    assert IdTable.from_dict(fe.speakers.to_dict()) == fe.speakers
    with pytest.raises(ValueError, match="split"):
        PhonemeVocab.from_manifest(rows, split="dev")
    with pytest.raises(ValueError, match="rows"):
        Frontend.from_manifest([])


# ---------------------------------------------------------------- dataset


def test_dataset_items_match_manifest_and_codes(tmp_path):
    root, codes_path = _write_corpus(tmp_path / "c")
    ds = TTSDataset(root, codes_path)
    assert len(ds) == 8 and ds.levels == 16 and ds.frame_rate == 12.5
    with np.load(codes_path) as z:
        allc, offs, ids = z["codes"], z["offsets"], list(z["ids"])
    for u in ds.utterances:
        k = ids.index(u.id)
        np.testing.assert_array_equal(u.codes, allc[offs[k] : offs[k + 1]])
        assert u.phonemes[0] == BOS and u.phonemes[-1] == EOS
    te = TTSDataset(root, codes_path, split="test", frontend=ds.frontend)
    assert len(te) == 2 and te.stats()["unk_phonemes"] > 0  # ð only in the held-out text
    st = ds.stats()
    assert st["utterances"] == 8 and st["frames"] == int(ds.frames.sum())
    assert st["vocab_size"] == len(ds.frontend.vocab)
    assert math.isclose(st["hours_from_frames"], st["frames"] / 12.5 / 3600, abs_tol=1e-4)
    n_ph = sum(len(tokenize(PHONEMES[t])) * 2 for t in range(4))
    assert st["phonemes"] == n_ph
    assert math.isclose(st["mean_phonemes_per_frame"], n_ph / st["frames"], abs_tol=1e-4)


def test_batches_padding_lengths_and_determinism(tmp_path):
    root, codes_path = _write_corpus(tmp_path / "c")
    ds = TTSDataset(root, codes_path, code_pad=-1)
    bs = list(ds.batches(batch_size=3, seed=7))
    assert sorted(i for b in bs for i in b.ids) == sorted(u.id for u in ds.utterances)
    assert all(len(b.ids) <= 3 for b in bs)
    by_id = {u.id: u for u in ds.utterances}
    for b in bs:
        B = len(b.ids)
        assert b.phonemes.shape == (B, b.phoneme_lengths.max())
        assert b.codes.shape == (B, b.frame_lengths.max(), 16)
        assert b.phonemes.dtype == b.codes.dtype == np.int32
        assert list(b.frame_lengths) == sorted(b.frame_lengths, reverse=True)
        for k, uid in enumerate(b.ids):
            u = by_id[uid]
            P, T = b.phoneme_lengths[k], b.frame_lengths[k]
            assert P == len(u.phonemes) and T == u.frames
            np.testing.assert_array_equal(b.phonemes[k, :P], u.phonemes)
            assert (b.phonemes[k, P:] == PAD).all()
            np.testing.assert_array_equal(b.codes[k, :T], u.codes)
            assert (b.codes[k, T:] == -1).all()
            assert b.language[k] == u.language and b.speaker[k] == u.speaker
        assert b.frame_mask.sum() == b.frame_lengths.sum()
        assert b.phoneme_mask.sum() == b.phoneme_lengths.sum()
    # deterministic by seed; another seed gives another order
    again = list(ds.batches(batch_size=3, seed=7))
    assert [b.ids for b in again] == [b.ids for b in bs]
    for a, b in zip(again, bs):
        np.testing.assert_array_equal(a.codes, b.codes)
    orders = {tuple(i for b in ds.batches(3, seed=s) for i in b.ids) for s in range(6)}
    assert len(orders) > 1
    with pytest.raises(ValueError, match="batch_size"):
        next(ds.batches(0))


def test_batches_max_frames_budget(tmp_path):
    root, codes_path = _write_corpus(tmp_path / "c")
    ds = TTSDataset(root, codes_path)  # frames 5..15
    bs = list(ds.batches(batch_size=8, seed=1, max_frames=30))
    assert all(b.codes.shape[0] * b.codes.shape[1] <= 30 for b in bs)
    assert sorted(i for b in bs for i in b.ids) == sorted(u.id for u in ds.utterances)
    # utterances longer than the budget are left out
    kept = [i for b in ds.batches(batch_size=8, seed=1, max_frames=10) for i in b.ids]
    assert sorted(kept) == sorted(u.id for u in ds.utterances if u.frames <= 10)
    # bucketing: with one pool and no budget, batches are contiguous in length
    bs = list(ds.batches(batch_size=2, seed=3))
    spans = sorted((int(b.frame_lengths.min()), int(b.frame_lengths.max())) for b in bs)
    assert all(hi <= lo2 for (_, hi), (lo2, _) in zip(spans, spans[1:]))
    with pytest.raises(ValueError, match="max_frames"):
        ds.batch_indices(2, max_frames=0)


def test_split_consistency_errors(tmp_path):
    root, codes = _write_corpus(tmp_path / "a", drop={"es-0002-r1"})
    with pytest.raises(ValueError, match=r"codes_path: 1 of 8 'train' .*es-0002-r1"):
        TTSDataset(root, codes)
    # a missing test utterance does not matter to the train split
    root, codes = _write_corpus(tmp_path / "b", drop={"en-0004-r0"})
    assert len(TTSDataset(root, codes)) == 8
    with pytest.raises(ValueError, match="codes_path: 1 of 2 'test'"):
        TTSDataset(root, codes, split="test")
    # codes stored under another split
    root, codes = _write_corpus(tmp_path / "c", split_override={"de-0001-r0": "test"})
    with pytest.raises(ValueError, match="another split"):
        TTSDataset(root, codes)
    # frame counts disagreeing with the manifest's sample counts
    root, codes = _write_corpus(tmp_path / "d")
    _, codes2 = _write_corpus(tmp_path / "e", frames_of=lambda t, r: 9)
    with pytest.raises(ValueError, match="frames"):
        TTSDataset(root, codes2)
    with pytest.raises(ValueError, match="split"):
        TTSDataset(root, codes, split="dev")
    with pytest.raises(ValueError, match="levels"):
        TTSDataset(root, codes, levels=8)
    with pytest.raises(ValueError, match="codes_path"):
        TTSDataset(root, tmp_path / "none.npz")
    with pytest.raises(ValueError, match="corpus_dir"):
        TTSDataset(tmp_path / "nowhere", codes)


# ---------------------------------------------------------------- real corpus

REAL_CORPUS = Path("~/.cache/codecspec/corpus").expanduser()
REAL_CODES = Path("~/.cache/codecspec/codec/codes.npz").expanduser()


@pytest.mark.local_data  # not in CI: the corpus is built on the training machine
@pytest.mark.skipif(
    not (REAL_CORPUS / "manifest.jsonl").exists() or not REAL_CODES.exists(),
    reason="real corpus not built (models/recipe/corpus.py + codec.py)",
)
def test_real_corpus_stats():
    train = TTSDataset(REAL_CORPUS, REAL_CODES)
    test = TTSDataset(REAL_CORPUS, REAL_CODES, split="test", frontend=train.frontend)
    for ds in (train, test):
        st = ds.stats()
        print(json.dumps(st))
        assert st["utterances"] > 0 and st["levels"] == 16 and st["frame_rate"] == 12.5
    assert train.stats()["hours"] > 1.0
    vocab = train.frontend.vocab
    assert len(train.frontend.languages) >= 3 and len(train.frontend.speakers) >= 6
    # every manifest phoneme string survives the round trip through the train vocabulary
    for u, r in zip(train.utterances, train._rows):
        assert vocab.decode(u.phonemes) == normalize(r["phonemes"])
    b = next(train.batches(batch_size=16, seed=0, max_frames=2048))
    assert b.codes.shape[0] * b.codes.shape[1] <= 2048
    assert b.codes.max() < 1024 and b.codes.min() >= 0
