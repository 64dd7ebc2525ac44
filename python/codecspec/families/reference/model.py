"""The shipped reference codec-LM TTS on ONNX Runtime: text -> codes -> waveform.

Per utterance: espeak-ng turns text into IPA; the encoder graph turns phonemes into the
decoders' cross-attention keys/values; per frame the temporal step graph gives the hidden
state h_t and c0 logits (c0 sampled on the host), the depth decoder (`DepthDecoder`, AR or
tree-speculative) gives c1..c15, and the frame's codec latent is fed back. The frame count
comes from the phoneme count (frames per phoneme of the language, from the corpus) divided by
the speaking rate. The codec turns codes into audio (Griffin-Lim).

No PyTorch: every network is an ONNX graph, every sampling step codecspec's own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode, speculation_pays
from codecspec.codec.codec import Codec
from codecspec.decode.depth import MODES, DepthDecoder
from codecspec.model_store import named_model_dir
from codecspec.pipeline.loop import run_inline
from codecspec.runtime.session import open_session
from codecspec.tts.phonemes import phonemize
from codecspec.tts.stream import DEFAULT_CHUNK_FRAMES, AudioStream, FramePlan, stream_model
from codecspec.tts.synthesis import Synthesis
from codecspec.tts.text import BOS, EOS, Frontend, PhonemeModel

__all__ = [
    "default_model_dir",
    "ReferenceTTS",
    "Synthesis",
    "TemporalStepper",
    "MODEL_FILES",
]


MODEL_FILES = (
    "model.json",
    "encoder.onnx",
    "temporal.onnx",
    "draft_temporal.onnx",
    "depth.onnx",
    "depth.heads.npy",
    "offsets.npy",
    "tree.json",
    "codec.npz",
)


def default_model_dir() -> Path:
    """The reference model shipped inside the package (`CODECSPEC_MODEL_DIR` overrides)."""
    env = os.environ.get("CODECSPEC_MODEL_DIR")
    return Path(env) if env else named_model_dir("reference")


class TemporalStepper:
    """Runs a temporal step graph (temporal.onnx or draft_temporal.onnx) as shipped, one frame
    at a time over an utterance of `frames` frames, keeping its self-attention KV cache on the
    host: the training recipe's and the export checks' stepper. Synthesis runs the batch-axis
    variant (`temporal_batch.BatchedTemporal` in this package), the serving engine's."""

    def __init__(self, session, cross_keys, cross_values, speaker: int, frames: int):
        L, _, heads, _, hd = cross_keys.shape
        latent = session.get_inputs()[0].shape[1]
        empty = np.zeros((L, 1, heads, 0, hd), np.float32)
        self.session, self.frames, self.t = session, int(frames), 0
        self.feeds = {
            "prev_latent": np.zeros((1, latent), np.float32),
            "progress": np.zeros(1, np.float32),
            "speaker": np.array([speaker], np.int64),
            "is_first": np.ones(1, np.float32),
            "cross_keys": cross_keys,
            "cross_values": cross_values,
            "past_keys": empty,
            "past_values": empty,
        }

    def step(self, prev_latent=None) -> tuple[np.ndarray, np.ndarray]:
        """(h_t [D], c0 logits [V]) of the next frame; `prev_latent`: the previous frame's
        scaled codec latent (None on the first frame)."""
        f = self.feeds
        f["progress"][0] = (self.t + 0.5) / self.frames
        f["is_first"][0] = 1.0 if self.t == 0 else 0.0
        f["prev_latent"][0] = 0.0 if prev_latent is None else prev_latent
        h, logits, nk, nv = self.session.run(None, f)
        f["past_keys"] = np.concatenate([f["past_keys"], nk], axis=3)
        f["past_values"] = np.concatenate([f["past_values"], nv], axis=3)
        self.t += 1
        return h[0], logits[0]


class ReferenceTTS(PhonemeModel):
    """Loads a model folder (see MODEL_FILES; default: the shipped one). Its text side
    (`languages`, `speakers`, `ids`) is the shared `codecspec.tts.text.PhonemeModel`'s."""

    def __init__(
        self,
        model_dir=None,
        provider: str = "auto",
        threads: Optional[int] = None,
        params: Optional[cs.SamplingParams] = None,
    ):
        d = Path(model_dir) if model_dir is not None else default_model_dir()
        missing = [f for f in MODEL_FILES if not (d / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"model_dir: {d} lacks {missing}; rebuild it with models/recipe/build.sh"
            )
        self.dir = d
        self.meta = json.loads((d / "model.json").read_text())
        # the folder's decision.json, or the device_profile.json of an older calibration
        self._speculation_pays = speculation_pays(d)
        self.frontend = Frontend.from_dict(self.meta["frontend"])
        self.scale = float(self.meta["latent_scale"])
        self.params = params or cs.SamplingParams(**self.meta["sampling"])
        self.codec = Codec.load(d / "codec.npz")
        self._books = self.codec.codebooks.astype(np.float32) / self.scale
        self._levels = np.arange(self._books.shape[0])
        self.encoder = open_session(str(d / "encoder.onnx"), provider=provider, threads=threads)
        self.temporal = open_session(str(d / "temporal.onnx"), provider=provider, threads=threads)
        self._temporal_batch = None
        self._temporal_args = dict(provider=provider, threads=threads)
        self.depth = DepthDecoder.from_dir(
            d, params=self.params, provider=provider, threads=threads
        )

    @property
    def speculation_pays(self) -> bool:
        """What calibration decided (`codecspec.calibrate.decision`): did the best tree beat
        AR on the calibrating machine?"""
        return self._speculation_pays

    # ------------------------------------------------------------------ text
    @property
    def temporal_batch(self):
        """The batch-axis variant of temporal.onnx (this package's `temporal_batch`), opened on
        first use: `generate` runs its utterance as one slot of it, the serving engine all
        its streams."""
        if self._temporal_batch is None:
            from codecspec.families.reference.temporal_batch import batched_temporal_session

            self._temporal_batch = batched_temporal_session(
                self.dir / "temporal.onnx", **self._temporal_args
            )
        return self._temporal_batch

    def num_frames(self, num_phonemes: int, language: str, rate: float = 1.0) -> int:
        """Frames for an utterance: phonemes x the language's frames per phoneme / rate."""
        if not (isinstance(rate, (int, float)) and 0.25 <= rate <= 4.0):
            raise ValueError(f"rate: expected a number in [0.25, 4], got {rate!r}")
        per = self.meta["frames_per_phoneme"][language]
        return max(2, int(round(num_phonemes * per / rate)))

    # ------------------------------------------------------------------ generation
    def _mode(self, mode: str) -> str:
        mode = auto_mode(mode, self.speculation_pays)
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES + ('auto',)}, got {mode!r}")
        return mode

    def plan(
        self,
        text: str,
        *,
        language: str = "en",
        speaker: Optional[str] = None,
        mode: str = "auto",
        seed: int = 0,
        rate: float = 1.0,
        phonemes: Optional[str] = None,
        max_frames: int = 1000,
    ) -> FramePlan:
        """One utterance ready to run: phonemes, the encoder graph, and its frames from the
        one loop (`codecspec.pipeline.loop.run_inline` over `ReferenceFamily.over`, the
        serving engine's adapter with one slot): `plan.frames` yields (codes int64 [G],
        last frame, None) per frame, `cs.Generator(seed)` drawing, `mode` resolved as in
        `generate`; the guard is the planned frame count."""
        from codecspec.families.reference.engine import ReferenceFamily, RVQState  # imports us

        mode = self._mode(mode)
        speaker = speaker or self.meta["default_speaker"]
        lang_id, spk_id = self.ids(language, speaker)
        t0 = time.perf_counter()
        if phonemes is None:
            phonemes = phonemize(text, self.meta["voices"][language])
        ids = self.frontend.vocab.encode(phonemes)
        frames = self.num_frames(len(ids), language, rate)
        if frames > max_frames:
            raise ValueError(f"text: needs {frames} frames, more than max_frames={max_frames}")
        ids = np.concatenate([[BOS], ids, [EOS]]).astype(np.int64)[None]
        ck, cv = self.encoder.run(
            ["cross_keys", "cross_values"],
            {
                "phonemes": ids,
                "language": np.array([lang_id], np.int64),
                "speaker": np.array([spk_id], np.int64),
            },
        )
        g, n = cs.Generator(seed), ids.shape[1]
        family = ReferenceFamily.over(self, frames, n)
        state = RVQState(
            g, self.params, spk_id, frames, frames, frames, n, mode == "spec", (ck, cv)
        )
        # the length is planned: the last frame is the stream's own end, as a stop would be
        run = enumerate(run_inline(family, state), 1)
        frames_out = ((codes, t >= frames, None) for t, codes in run)
        plan = FramePlan(frames_out, frames, phonemes, time.perf_counter() - t0, mode)
        plan.family = family  # generate's statistics
        return plan

    def generate(
        self,
        text: str,
        *,
        language: str = "en",
        speaker: Optional[str] = None,
        mode: str = "auto",
        seed: int = 0,
        rate: float = 1.0,
        phonemes: Optional[str] = None,
        max_frames: int = 1000,
        progress: bool = False,
        decode_audio: bool = True,
    ) -> Synthesis:
        """Synthesise `text` (or given IPA `phonemes`). mode "ar" or "spec" (the same output
        law); "auto" = spec where the folder's calibration found that speculation pays on the
        calibrating machine, else ar (see `speculation_pays`). The result times each
        stage: frontend (phonemes, encoder graph), temporal, depth loop, vocoder."""
        plan = self.plan(
            text,
            language=language,
            speaker=speaker,
            mode=mode,
            seed=seed,
            rate=rate,
            phonemes=phonemes,
            max_frames=max_frames,
        )
        frames, it = plan.max_frames, plan.frames
        if progress:
            from codecspec.progress import bar

            it = bar(it, desc=f"synth {plan.mode}", total=frames)
        calls0 = self.depth.stats.calls
        t1 = time.perf_counter()
        codes = np.stack([c for c, _, _ in it]).astype(np.int64)
        t2 = time.perf_counter()
        wav = self.codec.decode(codes, seed=seed) if decode_audio else None
        depth_s = plan.family.depth_seconds
        return Synthesis(
            codes=codes,
            wav=wav,
            sample_rate=self.codec.cfg.sample_rate,
            phonemes=plan.phonemes,
            mode=plan.mode,
            depth_calls=self.depth.stats.calls - calls0,
            depth_codes=frames * (codes.shape[1] - 1),
            depth_seconds=depth_s,
            temporal_seconds=t2 - t1 - depth_s,
            decode_seconds=time.perf_counter() - t2,
            frame_rate=self.codec.cfg.frame_rate,
            frontend_seconds=plan.frontend_seconds,
        )

    def stream(
        self,
        text: str,
        *,
        language: str = "en",
        speaker: Optional[str] = None,
        mode: str = "auto",
        seed: int = 0,
        rate: float = 1.0,
        phonemes: Optional[str] = None,
        max_frames: int = 1000,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        split_sentences: bool = False,
        **vocoder,
    ) -> AudioStream:
        """`generate` as a stream: an `AudioStream` yielding float32 waveform chunks of about
        `chunk_frames` frames as the frames are produced (the same codes as `generate` for
        the same arguments; audio within the chunk vocoder's tolerance, docs/streaming.md).
        `split_sentences`: speak `text` sentence by sentence (each phonemized and synthesised
        in turn, sentence i with seed + i, `max_frames` per sentence), one continuous stream.
        `vocoder`: `context_frames`, `crossfade` of `codecspec.codec.streaming.ChunkVocoder`."""
        return stream_model(
            self,
            text,
            chunk_frames=chunk_frames,
            split_sentences=split_sentences,
            seed=seed,
            vocoder=vocoder,
            language=language,
            speaker=speaker,
            mode=mode,
            rate=rate,
            phonemes=phonemes,
            max_frames=max_frames,
        )

    def _latent(self, frame_codes: np.ndarray) -> np.ndarray:
        return self._books[self._levels, frame_codes].sum(axis=0)
