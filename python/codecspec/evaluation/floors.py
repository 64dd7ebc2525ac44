"""The floors and the ceiling a model is measured against, on the same sentences in the same
run (`codecspec quality --modes espeak codec lookup ...` or `--floors`).

* ``espeak``: espeak-ng's own rendering through its library, with the voice, rate and pitch
  the model follows (v3: en-us+f1, 170 wpm, pitch 50: the voice its corpus was rendered in),
  resampled to the codec's rate: the speech a model imitates.
* ``codec``: that rendering encoded and decoded by the model's codec (all levels): the
  ceiling, the most any model that speaks through this codec can say.
* ``lookup``: the aligned-lookup floor. Every frame of espeak-ng's phoneme timing of the text
  gets the mean codec latent of frames with the same phoneme context in timed espeak-ng
  renderings of *other* texts (Debian fortunes, the corpus recipes' text source; the
  evaluation sets occur in none of them, a test checks), then the codec's RVQ and decoder.
  Context: (previous, current, next phoneme, which third of the current phoneme the frame's
  centre lies in), backing off to (current, third) and (current). A table, no training: a
  model that is told the phoneme timing (v3) should say more than it.

The espeak and lookup rows are deterministic; the codec's decoder (Griffin-Lim) takes the
seed, so a floor's seeds differ only by the decoder's phase (`quality --floor-seeds`,
default 1).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

__all__ = ["FLOORS", "LOOKUP_TEXTS", "Reference", "Lookup", "lookup_texts", "floor_synthesizer"]

FLOORS = ("espeak", "codec", "lookup")
LOOKUP_TEXTS = 600  # ~40 min of speech, about the ~49 min the first lookup floor was built on
DEFAULT_VOICE = ("en-us+f1", 170, 50)  # the corpus voice, for a model that names none
FORTUNES = Path("/usr/share/games/fortunes")
_LOOKUP_FORMAT = "codecspec-lookup/1"


def _log(msg: str) -> None:
    print(f"[floors] {msg}", file=sys.stderr, flush=True)


def model_voice(tts) -> tuple:
    """(espeak-ng voice, words per minute, pitch) whose timing and sound `tts` follows, as
    its family says (`Family.floor_voice`), else the corpus voice."""
    from codecspec.pipeline.registry import family_of

    family = family_of(tts.dir, detect=False).load("engine")
    return family.floor_voice(tts) or DEFAULT_VOICE


def _codec(tts, mode: str):
    codec = getattr(tts, "codec", None)
    if codec is None or not all(hasattr(codec, a) for a in ("encode", "decode", "sample_rate")):
        raise ValueError(f"modes: {mode!r} needs a model with a codec (v3, v2, reference)")
    return codec


class Reference:
    """espeak-ng's rendering of a text in the model's voice (audio at the codec's rate) and
    its codes, cached per text."""

    def __init__(self, tts):
        self.tts, self.voice, self.cache = tts, model_voice(tts), {}

    def __call__(self, text: str) -> dict:
        if text not in self.cache:
            from codecspec.codec.audio import resample
            from codecspec.frontend.espeak import render

            codec = _codec(self.tts, "codec")
            r = render(text, *self.voice)
            sr = codec.sample_rate
            y = resample(r.audio, r.sample_rate, sr).astype(np.float32)
            self.cache[text] = {"audio": y, "sr": sr, "codes": None, "rendering": r}
        return self.cache[text]

    def codes(self, text: str) -> np.ndarray:
        ref = self(text)
        if ref["codes"] is None:
            ref["codes"] = self.tts.codec.encode(ref["audio"], ref["sr"]).astype(np.int64)
        return ref["codes"]


def lookup_texts(n: int = LOOKUP_TEXTS, seed: int = 0, root: Path = FORTUNES) -> list:
    """`n` English fortunes (the corpus recipes' text source) as plain one-line prose of
    24-220 characters, in an order drawn from `seed`. ValueError naming `lookup` where no
    fortunes are installed."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"lookup_texts: expected an int >= 1, got {n!r}")
    files = sorted(
        p
        for p in Path(root).glob("*")
        if p.is_file() and not p.is_symlink() and p.suffix not in (".dat", ".u8", ".gz")
    )
    texts = set()
    for path in files:
        raw = path.read_text(encoding="utf-8", errors="replace")
        for entry in re.split(r"^%\s*$", raw, flags=re.M):
            lines = []
            for line in entry.splitlines():
                if re.match(r"^\s*--", line):
                    break  # the attribution, and what follows it
                lines.append(line)
            t = re.sub(r"\s+", " ", " ".join(lines)).strip()
            # plain prose only: code, tables and ASCII art are not speech
            if 24 <= len(t) <= 220 and re.fullmatch(r"[A-Za-z0-9 .,;:!?'\"()-]+", t):
                texts.add(t)
    if not texts:
        raise ValueError(
            f"lookup: no fortunes under {root} to build the table from "
            "(apt-get install fortunes-min)"
        )
    ordered = sorted(texts)
    order = np.random.default_rng(seed).permutation(len(ordered))
    return [ordered[i] for i in order[:n]]


class Lookup:
    """Aligned phoneme context -> mean codec latent (see the module docstring), built from
    timed espeak-ng renderings of `texts` in the model's voice; `codes(text)` gives the
    frames of a text as the codec's RVQ codes. Needs a codec with a latent (`project`) and
    RVQ codebooks (the v1 codec of v3 and reference)."""

    def __init__(self, tts, texts: list, cache: bool = True):
        codec = _codec(tts, "lookup")
        if not all(hasattr(codec, a) for a in ("project", "features", "_books")):
            raise ValueError("modes: 'lookup' needs a model on the v1 codec (v3, reference)")
        if not texts:
            raise ValueError("texts: expected at least one text to build the lookup from")
        self.tts, self.codec, self.voice = tts, codec, model_voice(tts)
        self.frame_ms = 1000.0 / codec.frame_rate
        path = self._cache_path(texts) if cache else None
        if path is not None and path.is_file():
            self.table = self._read(path)
            return
        self.table = self._build(texts)
        if path is not None:
            self._write(path)

    def _build(self, texts: list) -> dict:
        from codecspec.codec.audio import resample
        from codecspec.frontend.espeak import render

        sums: dict = {}
        t0 = time.monotonic()
        for i, text in enumerate(texts):
            r = render(text, *self.voice)
            y = resample(r.audio, r.sample_rate, self.codec.sample_rate)
            z = self.codec.project(self.codec.features(y, self.codec.sample_rate))
            for key, zt in zip(self.keys(r.phonemes, r.starts_ms, len(z), self.frame_ms), z):
                for k in key:
                    s = sums.setdefault(k, [np.zeros(z.shape[1]), 0])
                    s[0] += zt
                    s[1] += 1
            if (i + 1) % 200 == 0:
                _log(f"lookup: {i + 1}/{len(texts)} texts ({time.monotonic() - t0:.0f} s)")
        return {k: (s / n).astype(np.float32) for k, (s, n) in sums.items()}

    def _cache_path(self, texts: list) -> Path:
        """<cache>/lookup/<hash of texts, voice, espeak-ng version, codebooks>.npz."""
        from codecspec.cache import cache_root
        from codecspec.frontend.espeak import library_info

        h = hashlib.sha256()
        h.update(json.dumps([texts, self.voice, library_info()["version"]]).encode())
        h.update(np.ascontiguousarray(self.codec._books).tobytes())
        h.update(np.ascontiguousarray(self.codec.mean).tobytes())
        return cache_root() / "lookup" / f"{h.hexdigest()[:24]}.npz"

    def _write(self, path: Path) -> None:
        keys = list(self.table)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            format=np.array(_LOOKUP_FORMAT),
            keys=np.array(json.dumps(keys)),
            means=np.stack([self.table[k] for k in keys]),
        )
        tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one

    @staticmethod
    def _read(path: Path) -> dict:
        with np.load(path) as z:
            if str(z["format"]) != _LOOKUP_FORMAT:
                raise ValueError(f"lookup: {path} is not a {_LOOKUP_FORMAT} table")
            keys = [tuple(k) for k in json.loads(str(z["keys"]))]
            return dict(zip(keys, z["means"]))

    @staticmethod
    def keys(phonemes, starts_ms, frames: int, frame_ms: float) -> list:
        """Per frame, its context keys from the most to the least specific."""
        starts = np.asarray(starts_ms, np.float64)
        ends = np.append(starts[1:], max(starts[-1], frames * frame_ms))
        out = []
        for t in range(frames):
            c = (t + 0.5) * frame_ms
            i = int(np.clip(np.searchsorted(starts, c, side="right") - 1, 0, len(starts) - 1))
            frac = (c - starts[i]) / max(ends[i] - starts[i], 1e-3)
            third = int(np.clip(frac * 3, 0, 2))
            p = phonemes[i]
            prv = phonemes[i - 1] if i > 0 else "<s>"
            nxt = phonemes[i + 1] if i + 1 < len(phonemes) else "</s>"
            out.append(((prv, p, nxt, third), (p, third), (p,)))
        return out

    def codes(self, text: str) -> np.ndarray:
        """int64 [frames, levels]: the table's latents along espeak-ng's timing of `text`
        (the timing the model is given), quantised by the codec's RVQ."""
        from codecspec.codec.rvq import rvq_encode
        from codecspec.frontend.espeak import timing

        r = timing(text, *self.voice)
        frames = int(np.ceil(r.end_ms / self.frame_ms - 1e-9))
        zero = np.zeros_like(next(iter(self.table.values())))
        z = []
        for key in self.keys(r.phonemes, r.starts_ms, frames, self.frame_ms):
            z.append(next((self.table[k] for k in key if k in self.table), zero))
        return rvq_encode(np.asarray(z, np.float32), self.codec._books).astype(np.int64)


_LOOKUPS: dict = {}


def model_lookup(tts, n_texts: int = LOOKUP_TEXTS) -> Lookup:
    """The lookup of `tts` from `n_texts` fortunes, built once per process (and cached on
    disk under the codecspec cache: about 0.2 s per text to build)."""
    key = (id(tts), n_texts)
    if key not in _LOOKUPS:
        _LOOKUPS[key] = Lookup(tts, lookup_texts(n_texts))
    return _LOOKUPS[key]


def floor_synthesizer(
    name: str, tts, reference: Optional[Reference] = None, lookup: Optional[Lookup] = None
) -> Callable:
    """`synthesize(text, seed) -> (wav, sample_rate)` of the floor `name` (FLOORS) for the
    model `tts`; ValueError naming `modes` for another name or a model it cannot serve."""
    if name not in FLOORS:
        raise ValueError(f"modes: {name!r} is not a floor ({', '.join(FLOORS)})")
    codec = _codec(tts, name)
    ref = reference or Reference(tts)
    if name == "lookup" and lookup is None:
        lookup = model_lookup(tts)

    def synthesize(text: str, seed: int):
        if name == "espeak":
            r = ref(text)
            # its length in codec frames: the length a model's stop should come near
            synthesize.clips.append(
                (int(np.ceil(len(r["audio"]) * codec.frame_rate / r["sr"])), False)
            )
            return r["audio"], r["sr"]
        codes = ref.codes(text) if name == "codec" else lookup.codes(text)
        synthesize.clips.append((len(codes), False))
        return codec.decode(codes, seed=seed), codec.sample_rate

    synthesize.clips = []  # (frames, runaway) per call, as `model_synthesizer` collects them
    return synthesize
