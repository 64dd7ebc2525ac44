"""Training data for the reference codec-LM: phonemes + language + speaker -> codec codes.

Reads the outputs of the recipe (docs/reference_model.md): the corpus manifest
(``<corpus>/manifest.jsonl``) and the encoded corpus (``<codec>/codes.npz``, int16 [T, 16] per
utterance). Numpy only.

>>> ds = TTSDataset("~/.cache/codecspec/corpus", "~/.cache/codecspec/codec/codes.npz")
>>> for b in ds.batches(batch_size=16, seed=0, max_frames=2048):
...     b.phonemes, b.phoneme_lengths, b.language, b.speaker, b.codes, b.frame_lengths
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from codecspec.codec.data import load_codes, load_manifest
from codecspec.frontend.aligned import phoneme_track
from codecspec.frontend.text import PAD, Frontend

__all__ = ["Utterance", "Batch", "TTSDataset"]


@dataclass(frozen=True)
class Utterance:
    id: str
    phonemes: np.ndarray  # int32 [P] (with bos/eos when the dataset adds them)
    language: int
    speaker: int
    codes: np.ndarray  # int16 [T, levels]
    track: Optional[np.ndarray] = None  # float32 [T] phoneme positions (a timed corpus)

    @property
    def frames(self) -> int:
        return int(self.codes.shape[0])


@dataclass(frozen=True)
class Batch:
    """Padded arrays of B utterances; rows are sorted by decreasing frame length."""

    ids: list
    phonemes: np.ndarray  # int32 [B, P_max], padded with PAD (0)
    phoneme_lengths: np.ndarray  # int32 [B]
    language: np.ndarray  # int32 [B]
    speaker: np.ndarray  # int32 [B]
    codes: np.ndarray  # int32 [B, T_max, levels], padded with the dataset's code_pad
    frame_lengths: np.ndarray  # int32 [B]
    progress: Optional[np.ndarray] = None  # float32 [B, T_max] phoneme track (timed corpus)

    @property
    def frame_mask(self) -> np.ndarray:
        """bool [B, T_max]: True on real frames."""
        return np.arange(self.codes.shape[1])[None, :] < self.frame_lengths[:, None]

    @property
    def phoneme_mask(self) -> np.ndarray:
        """bool [B, P_max]: True on real phoneme tokens."""
        return np.arange(self.phonemes.shape[1])[None, :] < self.phoneme_lengths[:, None]


def _split_rows(rows: list, split) -> list:
    """The manifest rows of `split`; an unknown split names the ones there are."""
    if not isinstance(split, str) or not split:
        raise ValueError(f"split: expected a split name, got {split!r}")
    split_rows = [r for r in rows if r.get("split") == split]
    if not split_rows:
        known = sorted({str(r.get("split")) for r in rows})
        raise ValueError(f"split: no manifest rows in split {split!r} (splits: {known})")
    return split_rows


def _load_split_codes(codes_path, split: str, split_rows: list, speaker_field: str):
    """(path, frame rate, {id: codes} of the split), checked against the manifest: every row of
    the split has its fields and codes stored under the same split, and the split holds no
    utterance the manifest lacks (codes of another corpus)."""
    codes_path = Path(codes_path).expanduser()
    if not codes_path.exists():
        raise ValueError(f"codes_path: {codes_path} does not exist")
    with np.load(str(codes_path), allow_pickle=False) as z:
        frame_rate = float(z["frame_rate"]) if "frame_rate" in z.files else 12.5
    all_codes = load_codes(codes_path)
    codes = load_codes(codes_path, split=split)
    for r in split_rows:
        lacking = [f for f in ("id", "phonemes", "language", speaker_field) if f not in r]
        if lacking:
            raise ValueError(
                f"corpus_dir: manifest row {r.get('id', '?')!r} lacks the fields {lacking}"
            )
    ids = [r["id"] for r in split_rows]
    missing = [i for i in ids if i not in all_codes]
    if missing:
        raise ValueError(
            f"codes_path: {len(missing)} of {len(ids)} {split!r} utterances of the manifest "
            f"have no codes in {codes_path} (first: {missing[:5]}); re-encode the corpus"
        )
    wrong_split = [i for i in ids if i not in codes]
    if wrong_split:
        raise ValueError(
            f"codes_path: {len(wrong_split)} {split!r} utterances are stored under another "
            f"split in {codes_path} (first: {wrong_split[:5]}); re-encode the corpus"
        )
    extra = sorted(set(codes) - set(ids))
    if extra:
        raise ValueError(
            f"codes_path: {len(extra)} {split!r} utterances in {codes_path} are not in the "
            f"manifest (first: {extra[:5]}); the codes belong to another corpus"
        )
    return codes_path, frame_rate, codes


def _checked_codes(r: dict, c: np.ndarray, levels: Optional[int], frame_rate: float):
    """One utterance's codes: [T, levels], with the frame count the codec gives for the row's
    number of samples (when the manifest records it)."""
    if c.ndim != 2 or (levels is not None and c.shape[1] != levels):
        raise ValueError(
            f"levels: utterance {r['id']!r} has codes of shape {c.shape}, expected [T, {levels}]"
        )
    if "num_samples" in r and "sample_rate" in r:
        want = math.ceil(r["num_samples"] * frame_rate / r["sample_rate"] - 1e-9)
        if c.shape[0] != want:
            raise ValueError(
                f"codes_path: utterance {r['id']!r} has {c.shape[0]} frames, its "
                f"{r['num_samples']} samples give {want}; codes and corpus disagree"
            )
    return c


class TTSDataset:
    """The utterances of one split, with a consistency check against the encoded corpus.

    Args:
        corpus_dir: folder with ``manifest.jsonl``.
        codes_path: the encoded corpus (``codes.npz`` written by ``models/recipe/codec.py``).
        split: ``"train"`` or ``"test"`` (any split name present in the manifest).
        frontend: phoneme/language/speaker tables; by default built from the manifest
            (vocabulary from the train split, so held-out texts never shape it).
        add_bos_eos: wrap every phoneme sequence in ``bos ... eos``.
        levels: expected codebooks per frame (None: accept what the file has).
        code_pad: value of padded code positions in batches.
        speaker_field: the manifest field that names the speaker (espeak-ng voice variant).
    """

    def __init__(
        self,
        corpus_dir,
        codes_path,
        split: str = "train",
        frontend: Optional[Frontend] = None,
        add_bos_eos: bool = True,
        levels: Optional[int] = 16,
        code_pad: int = 0,
        speaker_field: str = "variant",
    ):
        rows = load_manifest(corpus_dir)
        split_rows = _split_rows(rows, split)
        if frontend is None:
            frontend = Frontend.from_manifest(rows, speaker_field=speaker_field)
        elif not isinstance(frontend, Frontend):
            raise ValueError(f"frontend: expected a Frontend, got {type(frontend).__name__}")
        codes_path, frame_rate, codes = _load_split_codes(
            codes_path, split, split_rows, speaker_field
        )
        if levels is not None and not (isinstance(levels, int) and levels > 0):
            raise ValueError(f"levels: expected a positive int or None, got {levels!r}")

        self.split = split
        self.frontend = frontend
        self.frame_rate = frame_rate
        self.code_pad = int(code_pad)
        self.add_bos_eos = bool(add_bos_eos)
        self._rows = split_rows
        self._unk = 0
        utts = []
        for r in split_rows:
            c = _checked_codes(r, codes[r["id"]], levels, frame_rate)
            ph = frontend.vocab.encode(r["phonemes"], bos=add_bos_eos, eos=add_bos_eos)
            track = None
            if "events" in r:
                starts = [float(t) for _, t in r["events"]]
                end = float(r.get("end_ms", starts[-1]))
                track = phoneme_track(starts, end, 1000.0 / frame_rate, frames=c.shape[0])
            self._unk += int(np.count_nonzero(ph == frontend.vocab.unk_id))
            utts.append(
                Utterance(
                    id=r["id"],
                    phonemes=ph,
                    language=frontend.languages.id(r["language"]),
                    speaker=frontend.speakers.id(r[speaker_field]),
                    codes=c,
                    track=track,
                )
            )
        self.utterances: list[Utterance] = utts
        self.levels = int(utts[0].codes.shape[1])
        self.frames = np.array([u.frames for u in utts], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.utterances)

    @property
    def rows(self) -> list:
        """The manifest rows of the split, in the order of `utterances`."""
        return self._rows

    def __getitem__(self, i: int) -> Utterance:
        return self.utterances[i]

    def collate(self, indices) -> Batch:
        """Pad the utterances at ``indices`` into one :class:`Batch` (rows in the given order)."""
        us = [self.utterances[int(i)] for i in indices]
        if not us:
            raise ValueError("indices: a batch needs at least one utterance")
        plen = np.array([len(u.phonemes) for u in us], dtype=np.int32)
        flen = np.array([u.frames for u in us], dtype=np.int32)
        ph = np.full((len(us), int(plen.max())), PAD, dtype=np.int32)
        codes = np.full((len(us), int(flen.max()), self.levels), self.code_pad, dtype=np.int32)
        timed = all(u.track is not None for u in us)
        progress = np.zeros(codes.shape[:2], dtype=np.float32) if timed else None
        for k, u in enumerate(us):
            ph[k, : plen[k]] = u.phonemes
            codes[k, : flen[k]] = u.codes
            if timed:
                progress[k, : flen[k]] = u.track
        return Batch(
            ids=[u.id for u in us],
            phonemes=ph,
            phoneme_lengths=plen,
            language=np.array([u.language for u in us], dtype=np.int32),
            speaker=np.array([u.speaker for u in us], dtype=np.int32),
            codes=codes,
            frame_lengths=flen,
            progress=progress,
        )

    def batch_indices(
        self,
        batch_size: int,
        seed: int = 0,
        max_frames: Optional[int] = None,
        pool_batches: int = 32,
    ) -> list[np.ndarray]:
        """The index lists :meth:`batches` yields (deterministic given the arguments).

        Utterances are shuffled from ``seed``, cut into pools of ``pool_batches * batch_size``,
        each pool sorted by frame length (ties in shuffled order) and cut greedily into batches
        of at most ``batch_size`` rows and, when ``max_frames`` is set, at most ``max_frames``
        padded frames (rows x longest utterance). Utterances longer than ``max_frames`` are left
        out. The batch order is then shuffled from the same seed.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
        if max_frames is not None and (
            not isinstance(max_frames, (int, np.integer)) or max_frames < 1
        ):
            raise ValueError(f"max_frames: expected a positive int or None, got {max_frames!r}")
        if not isinstance(pool_batches, (int, np.integer)) or pool_batches < 1:
            raise ValueError(f"pool_batches: expected a positive int, got {pool_batches!r}")
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(self.utterances))
        if max_frames is not None:
            order = order[self.frames[order] <= max_frames]
        pool = pool_batches * batch_size
        out: list[np.ndarray] = []
        for start in range(0, len(order), pool):
            chunk = order[start : start + pool]
            chunk = chunk[np.argsort(-self.frames[chunk], kind="stable")]  # longest first
            cur: list[int] = []
            for i in chunk.tolist():
                # chunk is sorted longest first, so the first row sets the padded length
                longest = self.frames[cur[0]] if cur else self.frames[i]
                full = len(cur) >= batch_size or (
                    max_frames is not None and (len(cur) + 1) * longest > max_frames
                )
                if cur and full:
                    out.append(np.array(cur, dtype=np.int64))
                    cur = []
                cur.append(i)
            if cur:
                out.append(np.array(cur, dtype=np.int64))
        perm = rng.permutation(len(out))
        return [out[k] for k in perm]

    def batches(
        self,
        batch_size: int,
        seed: int = 0,
        max_frames: Optional[int] = None,
        pool_batches: int = 32,
    ) -> Iterator[Batch]:
        """One epoch of padded batches (see :meth:`batch_indices` for the bucketing)."""
        for idx in self.batch_indices(batch_size, seed, max_frames, pool_batches):
            yield self.collate(idx)

    def stats(self) -> dict:
        """Sizes of the split: utterances, frames, hours, phonemes per frame, table sizes."""
        extra = 2 if self.add_bos_eos else 0
        n_ph = sum(len(u.phonemes) - extra for u in self.utterances)
        frames = int(self.frames.sum())
        seconds = sum(float(r.get("duration", 0.0)) for r in self._rows)
        return {
            "split": self.split,
            "utterances": len(self.utterances),
            "frames": frames,
            "hours": round(seconds / 3600.0, 4),
            "hours_from_frames": round(frames / self.frame_rate / 3600.0, 4),
            "frame_rate": self.frame_rate,
            "levels": self.levels,
            "frames_min": int(self.frames.min()),
            "frames_mean": round(float(self.frames.mean()), 2),
            "frames_max": int(self.frames.max()),
            "phonemes": n_ph,
            "phonemes_max": int(max(len(u.phonemes) for u in self.utterances)),
            "mean_phonemes_per_frame": round(n_ph / max(frames, 1), 4),
            "unk_phonemes": self._unk,
            "vocab_size": len(self.frontend.vocab),
            "languages": list(self.frontend.languages.names),
            "speakers": list(self.frontend.speakers.names),
        }
