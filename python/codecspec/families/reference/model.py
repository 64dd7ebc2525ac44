"""The shipped reference codec-LM TTS on ONNX Runtime: text -> codes -> waveform.

Per utterance: espeak-ng turns text into IPA; the encoder graph turns phonemes into the
decoders' cross-attention keys/values; per frame the temporal step graph gives the hidden
state h_t and c0 logits (c0 sampled on the host), the depth decoder (`DepthDecoder`, AR or
tree-speculative) gives c1..c15, and the frame's codec latent is fed back. The frame count
comes from the phoneme count (frames per phoneme of the language, from the corpus) divided by
the speaking rate. The codec turns codes into audio (Griffin-Lim).

`ReferenceTTS` is the loaded folder; `ReferenceFamily` the family over it (the
`codecspec.pipeline.Family` the serving engine runs), which prepares every request, served or
not: `generate` and `stream` are its `prepare` with one slot, the one loop and the codec
(`codecspec.pipeline.stream`).

No PyTorch: every network is an ONNX graph, every sampling step codecspec's own.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode, speculation_pays
from codecspec.codec.codec import Codec
from codecspec.decode.batched_depth import BatchedDepth, DepthLane, sample_roots
from codecspec.decode.depth import MODES, DepthDecoder
from codecspec.families.reference import bench
from codecspec.families.reference.temporal_batch import BatchedTemporal, batched_temporal_session
from codecspec.frontend.phonemes import encode_input
from codecspec.frontend.text import Frontend, PhonemeModel
from codecspec.model_store import named_model_dir
from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    SamplingOverride,
    StreamState,
    guard,
    resolve_params,
    sampling_params,
)
from codecspec.pipeline.result import Synthesis
from codecspec.pipeline.stream import (
    DEFAULT_CHUNK_FRAMES,
    AudioStream,
    run_request,
    speech_request,
    stream_request,
)
from codecspec.runtime.session import open_session

__all__ = [
    "default_model_dir",
    "ReferenceFamily",
    "ReferenceTTS",
    "RVQState",
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
    (`languages`, `speakers`, `ids`) is the shared `codecspec.frontend.text.PhonemeModel`'s.
    params: the sampling law of both stages (default model.json's "sampling"; a
    SamplingOverride: the fields it sets, the others model.json's "sampling")."""

    def __init__(
        self,
        model_dir=None,
        provider: str = "auto",
        threads: Optional[int] = None,
        params: Optional[cs.SamplingParams | SamplingOverride] = None,
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
        params = resolve_params(params, self.meta)
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
        calibrating machine, else ar (see `speculation_pays`). The request is the serving
        engine's, prepared by `ReferenceFamily` with one slot and run by the one loop. The
        result times each stage: frontend (phonemes, encoder graph), temporal, depth loop,
        vocoder."""
        req = self._request(text, phonemes, language, speaker, mode, seed, rate, max_frames)
        family = ReferenceFamily(self)
        state, frames, frontend = run_request(family, req)
        if progress:
            from codecspec.progress import bar

            frames = bar(frames, desc=f"synth {state.mode}", total=state.frames)
        calls0 = self.depth.stats.calls
        t1 = time.perf_counter()
        codes = np.stack(list(frames)).astype(np.int64)
        t2 = time.perf_counter()
        wav = self.codec.decode(codes, seed=seed) if decode_audio else None
        depth_s = family.depth_seconds
        return Synthesis(
            codes=codes,
            wav=wav,
            sample_rate=self.codec.cfg.sample_rate,
            phonemes=state.phonemes,
            mode=state.mode,
            depth_calls=self.depth.stats.calls - calls0,
            depth_codes=len(codes) * (codes.shape[1] - 1),
            depth_seconds=depth_s,
            temporal_seconds=t2 - t1 - depth_s,
            decode_seconds=time.perf_counter() - t2,
            frame_rate=self.codec.cfg.frame_rate,
            frontend_seconds=frontend,
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
        req = self._request(text, phonemes, language, speaker, mode, seed, rate, max_frames)
        return stream_request(
            ReferenceFamily(self),
            req,
            chunk_frames=chunk_frames,
            split_sentences=split_sentences,
            vocoder=vocoder,
        )

    def _request(self, text, phonemes, language, speaker, mode, seed, rate, max_frames):
        fields = dict(language=language, mode=mode, seed=seed, max_frames=max_frames)
        return speech_request(text, phonemes, speaker=speaker, rate=rate, **fields)

    def _latent(self, frame_codes: np.ndarray) -> np.ndarray:
        return self._books[self._levels, frame_codes].sum(axis=0)


@dataclass
class RVQState(StreamState):
    spec: bool = False
    cross: tuple = ()
    latent: Optional[np.ndarray] = None


class ReferenceFamily(Family):
    """The RVQ reference: batched temporal LM (latent feedback), c0 for all streams in one
    core call, the depth loop batched across streams (`BatchedDepth`), frames planned from
    the phoneme count and `speed`."""

    name = "reference"
    formats = ("codecspec-reference-tts/1",)
    model_names = ("codecspec-reference",)
    modes = MODES
    # The one-stream case of the batched step (every step of `ReferenceTTS.generate`, and of
    # a lone served stream): c0 by `cs.sample` and the frame's depth loop on the decoder
    # itself, not the batched loop's lanes. The same draws, so the same bits.
    solo_depth = True
    # `codecspec bench`: its depth loop alone, then the pipeline under its keys (bench.py)
    bench_depth_loop = True
    bench_keys, bench_record = staticmethod(bench.bench_keys), staticmethod(bench.record)

    def __init__(self, tts: ReferenceTTS, slots=1, max_frames=None, max_phonemes=None, depth=None):
        """Over a loaded `tts`: `slots` streams of at most `max_frames` frames and
        `max_phonemes` ids each; `depth` the batched depth loop (None: each frame on the
        decoder itself). Without limits it is `generate`'s: one stream at a time, its stepper
        sized to each stream as it takes the slot, and IPA symbols not in the vocabulary read
        as unknown, as a Python caller's always were (a client's are refused)."""
        self.tts, self.depth = tts, depth
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.inline = max_frames is None
        # the session generate runs its utterance on (one stepper for both)
        self.temporal = None
        if not self.inline:
            self.temporal = BatchedTemporal(tts.temporal_batch, slots, max_frames, max_phonemes)
        self.codec = tts.codec
        self.hop = self.codec.cfg.frame_hop
        self.sample_rate = self.codec.cfg.sample_rate
        self.frame_rate = self.codec.cfg.frame_rate
        self.depth_seconds = 0.0  # the depth loops' time (Synthesis.depth_seconds)
        self.solo_calls = self.solo_codes = 0  # the one-stream case's depth graph calls

    @classmethod
    def open(cls, folder, slots, max_frames, max_phonemes, provider, threads) -> ReferenceFamily:
        tts = ReferenceTTS(folder, provider=provider, threads=threads)
        depth = BatchedDepth(tts.depth, slots, provider, threads)
        return cls(tts, slots, max_frames, max_phonemes, depth)

    def params(self, req) -> cs.SamplingParams:
        return sampling_params(self.tts.params, req, self.tts.depth.V)

    def prepare(self, req, generator: cs.Generator) -> RVQState:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
        ipa, ids = encode_input(tts, req, self.max_phonemes, strict=not self.inline)
        frames = tts.num_frames(len(ids) - 2, req.language, float(req.speed))
        limits = [n for n in (self.max_frames, req.max_frames) if n is not None]
        if limits and frames > min(limits):
            raise ValueError(
                f"input: needs {frames} frames at speed {req.speed}, "
                f"more than max_frames={min(limits)}"
            )
        cross = tts.encoder.run(
            ["cross_keys", "cross_values"],
            {
                "phonemes": ids[None],
                "language": np.array([lang_id], np.int64),
                "speaker": np.array([spk_id], np.int64),
            },
        )
        mode = auto_mode(req.mode, tts.speculation_pays)
        return RVQState(
            generator=generator,
            params=self.params(req),
            speaker=spk_id,
            frames=frames,
            expected=frames,
            limit=frames,
            tokens=len(ids),
            phonemes=ipa,
            mode=mode,
            spec=mode == "spec",
            cross=tuple(cross),
        )

    def load(self, slot: int, state: RVQState) -> None:
        cross, state.cross = state.cross, ()  # the slot's block holds them from now on
        if self.inline:  # sized to this stream: the block a planned utterance needs
            self.temporal = BatchedTemporal(self.tts.temporal_batch, 1, state.frames, state.tokens)
        self.temporal.load(slot, *cross)

    def step(self, streams: list, check: Check) -> list:
        states = [s.state for s in streams]
        zero = np.zeros(self.temporal.latent_dim, np.float32)
        latents = np.stack([zero if st.latent is None else st.latent for st in states])
        progress = [(s.t + 0.5) / s.state.frames for s in streams]
        hidden, logits = self.temporal.step(
            [s.slot for s in streams], latents, progress, [st.speaker for st in states]
        )
        lanes = [self._lane(st) for st in states]
        for i, (s, ln) in enumerate(zip(streams, lanes)):
            ln.failed = guard(lambda s=s, i=i: check(s, hidden[i], logits[i]))
        live = [i for i, ln in enumerate(lanes) if ln.failed is None]
        if len(live) == 1 and (self.depth is None or self.solo_depth):
            i = live[0]
            lanes[i].failed = guard(lambda: self._solo(hidden[i], logits[i], lanes[i]))
        elif live:
            self._batched(hidden, logits, lanes, live)
        return [self._frame(s, ln) for s, ln in zip(streams, lanes)]

    def _solo(self, hidden, logits, ln: DepthLane) -> None:
        """One stream's frame by the depth decoder's own loop: c0 drawn on the host, then
        c1.. (the same draws as the batched depth loop)."""
        c0 = cs.sample(logits, ln.params, ln.generator)
        dec, t0 = self.tts.depth, time.perf_counter()
        calls, codes = dec.stats.calls, dec.stats.codes
        ln.codes[:] = dec.decode_frame(hidden, c0, ln.generator, "spec" if ln.spec else "ar")
        self.depth_seconds += time.perf_counter() - t0
        self.solo_calls += dec.stats.calls - calls
        self.solo_codes += dec.stats.codes - codes

    def _batched(self, hidden, logits, lanes: list, live: list) -> None:
        c0 = sample_roots(logits[live], [lanes[i] for i in live])
        for i, c in zip(live, c0):
            if c is not None:
                lanes[i].codes[0] = c[0]
        # A failed stream's rows may hold NaN; masked columns still multiply their values, so
        # it leaves the depth batch entirely.
        live = [i for i in live if lanes[i].failed is None]
        if live:
            t0 = time.perf_counter()
            self.depth.decode(hidden[live], [lanes[i] for i in live])
            self.depth_seconds += time.perf_counter() - t0

    def _lane(self, st: RVQState) -> DepthLane:
        codes = np.zeros(self.tts.depth.G, np.int64)
        return DepthLane(spec=st.spec, params=st.params, generator=st.generator, codes=codes)

    def _frame(self, s, ln: DepthLane) -> Frame:
        if ln.failed is not None:
            return Frame(error=ln.failed)
        s.state.latent = self.tts._latent(ln.codes)  # the next step's input
        return Frame(codes=ln.codes, ended=s.t + 1 >= s.state.frames)

    def counters(self) -> dict:
        # a one-stream step's graph calls are its own (the batch of one), so lane_calls too
        d, solo = self.depth, self.solo_calls
        if d is None:
            return {"calls": solo, "lane_calls": solo, "codes": self.solo_codes}
        return {
            "calls": d.calls + solo,
            "lane_calls": d.lane_calls + solo,
            "codes": d.codes_out + self.solo_codes,
        }
