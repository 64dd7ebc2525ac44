"""The FSQ model family on ONNX Runtime: text -> 32 FSQ channels per frame -> waveform.

The same stages as the RVQ family (docs/fsq_model.md): espeak-ng IPA and the phoneme
frontend -> encoder graph (cross-attention K/V) -> per frame ONE step graph call
(`FSQStepper`, slots of the serving engine's `FSQSlots`) whose outputs are all 32 channel
heads' logits and the stop logit ->
`FSQFrameDecoder` (`cs.sample_factorized` + `cs.sample_stop`) -> the frame's channels fed
back -> `FSQCodec.decode` (the v1 vocoder). `FSQTTS` is the loaded folder; `FSQFamily` the
family over it (the `codecspec.pipeline.Family` the serving engine runs), which prepares every
request: `generate` and `stream` are its `prepare` with one slot, the one loop in the
caller's thread and the codec (`codecspec.pipeline.stream`); the step graph has a batch axis, so B
streams share each call (the engine, and the batched bench: `run_together`).

The FSQ step graph needs no graph surgery to serve: each slot owns rows of preallocated
self-attention K/V and cross K/V blocks (`FSQSlots`); a step feeds the active slots' rows cut
to the longest stream, with `past_bias` hiding the positions a stream has not written and
`cross_bias` the phonemes it does not have. Attention has no positional term (position enters
through `pace`), so a stream's outputs are its own single-stream ones; on onnxruntime CPU they
are bit-identical (tests/families/fsq/test_serve_fsq.py). A stream ends at its stop head's
first stop, or at the max-length guard `FSQTTS.max_frames_for` its text.

No PyTorch: every network is an ONNX graph, every sampling step codecspec's own.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np

import codecspec as cs
from codecspec.families.fsq import bench
from codecspec.families.fsq.codec import FSQCodec, config_from_meta
from codecspec.families.fsq.voice import VoiceBank
from codecspec.frontend.aligned import past_end_position
from codecspec.frontend.phonemes import encode_input, phonemize
from codecspec.frontend.text import BOS, EOS, PAD, Frontend, PhonemeModel
from codecspec.model_store import named_model_dir
from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    SamplingOverride,
    StreamState,
    guard,
    length_guard,
    resolve_params,
    sampling_params,
)
from codecspec.pipeline.result import Result
from codecspec.pipeline.stream import (
    DEFAULT_CHUNK_FRAMES,
    AudioStream,
    run_request,
    speech_request,
    stream_request,
)
from codecspec.runtime.session import open_session
from codecspec.runtime.slots import SlotCache

__all__ = [
    "FSQFamily",
    "FSQState",
    "FSQTTS",
    "FSQSynthesis",
    "FSQStepper",
    "FSQSlots",
    "FSQFrameDecoder",
    "stop_logits_from_prob",
]
__all__ += ["FORMAT", "FSQ_FILES", "default_fsq_dir"]

FORMAT = "codecspec-fsq-tts/1"
FSQ_FILES = ("model.json", "encoder.onnx", "step.onnx", "fsqcodec.npz")
Generators = Union[cs.Generator, Sequence[cs.Generator]]


def default_fsq_dir() -> Path:
    return named_model_dir("fsq")


def stop_logits_from_prob(stop_prob) -> np.ndarray:
    """float32 logits of stop probabilities in [0, 1] (0 -> -inf: never, 1 -> +inf: always),
    for models whose stop head emits probabilities. Raises ValueError naming `stop_prob`."""
    p = np.asarray(stop_prob, dtype=np.float64)
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"stop_prob: expected probabilities in [0, 1], got {p.ravel()[:8]}")
    with np.errstate(divide="ignore"):
        return (np.log(p) - np.log1p(-p)).astype(np.float32)


class FSQFrameDecoder:
    """One frame per call from one step's logits: every channel head sampled independently
    (`cs.sample_factorized`, warped by `params`) and a Bernoulli stop (`cs.sample_stop`;
    temperature 0 when `params` is greedy, else `stop_temperature`)."""

    def __init__(self, channel_levels, params: cs.SamplingParams, stop_temperature=1.0):
        self.head_sizes = [int(v) for v in channel_levels]
        if not self.head_sizes or min(self.head_sizes) < 1:
            raise ValueError(f"channel_levels: expected sizes >= 1, got {channel_levels!r}")
        self.width = sum(self.head_sizes)
        self.params = params
        self.stop_base = float(stop_temperature)  # the stop head's temperature when sampling
        self.stop_temperature = 0.0 if params.temperature == 0 else self.stop_base

    def check(self, channel_logits, stop_logits) -> tuple[np.ndarray, np.ndarray]:
        cl = np.asarray(channel_logits, dtype=np.float32)
        if cl.ndim != 2 or cl.shape[1] != self.width:
            raise ValueError(
                f"channel_logits: expected shape [B, {self.width}] ({len(self.head_sizes)} "
                f"heads of sizes {self.head_sizes[:4]}...), got {cl.shape}"
            )
        sl = np.asarray(stop_logits, dtype=np.float32)
        if sl.shape != (cl.shape[0],):
            raise ValueError(f"stop_logits: expected shape [{cl.shape[0]}], got {sl.shape}")
        return cl, sl

    def sample(self, channel_logits, stop_logits, generator: Generators):
        """(channels int64 [B, C], stop bool [B]). `generator`: one per stream (a list), so a
        stream's draws never depend on what else shares the batch; a single Generator is
        accepted for B = 1."""
        cl, sl = self.check(channel_logits, stop_logits)
        gens = [generator] if isinstance(generator, cs.Generator) else list(generator)
        if len(gens) != len(cl):
            raise ValueError(f"generator: expected {len(cl)} generators (one per stream)")
        out = np.empty((len(cl), len(self.head_sizes)), np.int64)
        stop = np.empty(len(cl), bool)
        for b, g in enumerate(gens):
            out[b], stop[b] = self.sample_stream(cl[b : b + 1], sl[b : b + 1], self.params, g)
        return out, stop

    def sample_stream(self, channel_logits, stop_logits, params: cs.SamplingParams, generator):
        """One stream's frame from its rows [1, Σ L] and [1] under the law `params` (the
        serving engine's per request): (channels int64 [C], stop bool), the channels drawn
        first, then the stop (temperature 0 when `params` is greedy)."""
        codes = cs.sample_factorized(channel_logits, self.head_sizes, params, generator)[0]
        temp = 0.0 if params.temperature == 0 else self.stop_base
        stop = cs.sample_stop(stop_logits, generator, temperature=temp)[0]
        return codes.astype(np.int64), bool(stop)


def track_pace(track, tokens: int) -> Callable:
    """Frame t's pace for an aligned model: its phoneme track u_t, and past the track's end
    `past_end_position` (v3's rule: the closing pause, where the stop head learned to stop).
    `tokens`: the stream's ids with bos/eos."""
    track = np.asarray(track, np.float32)
    past_end = np.float32(past_end_position(track, tokens - 2))
    return lambda t: track[t] if t < len(track) else past_end


class FSQSlots(SlotCache):
    """step.onnx for up to `slots` streams at different frame indices, one call per frame."""

    def __init__(self, session, slots: int, max_frames: int, max_phonemes: int):
        super().__init__(session, slots, max_frames, max_phonemes)
        self.channels = int({i.name: i.shape for i in session.get_inputs()}["prev_channels"][1])
        self.calls = 0

    def step(self, slots, prev_channels, pace, speakers):
        """(hidden [n, D], channel_logits [n, Σ L], stop_logits [n]) of each slot's next frame."""
        slots = np.asarray(slots, np.int64)
        t, p = self.frames[slots], self.phonemes[slots]
        tmax, pmax = self.key_lengths(t, p)  # padded: a stream's bits whatever shares the call
        past = np.where(np.arange(tmax)[None, :] < t[:, None], 0.0, -np.inf)
        cross = np.where(np.arange(pmax)[None, :] < p[:, None], 0.0, -np.inf)
        feeds = {
            "prev_channels": np.asarray(prev_channels, np.int64).reshape(len(slots), -1),
            "pace": np.asarray(pace, np.float32),
            "speaker": np.asarray(speakers, np.int64),
            "is_first": (t == 0).astype(np.float32),
            "cross_keys": self.cross_k[:, slots, :, :pmax],
            "cross_values": self.cross_v[:, slots, :, :pmax],
            "cross_bias": cross.astype(np.float32),
            "past_keys": self.keys[:, slots, :, :tmax],
            "past_values": self.values[:, slots, :, :tmax],
            "past_bias": past.astype(np.float32),
        }
        h, logits, stop, nk, nv = self.session.run(None, feeds)
        self.keys[:, slots, :, t] = nk[:, :, :, 0].transpose(1, 0, 2, 3)
        self.values[:, slots, :, t] = nv[:, :, :, 0].transpose(1, 0, 2, 3)
        self.frames[slots] += 1
        self.calls += 1
        return h, logits, stop


class FSQStepper:
    """B streams of step.onnx advanced together, one frame per call, each fed the frames it
    is given (teacher forcing: the ship recipe's ONNX parity check, the export tests); the
    synthesis loop is the engine's (`FSQFamily`), not this. Slots 0..B-1 of an `FSQSlots`
    (the serving engine's stepper, where streams join and leave). `phoneme_lengths`: tokens
    per stream with bos/eos (the pace unit's denominator); cross K/V [L, B, heads, P, hd]
    padded to the longest; `max_frames`: the most frames a stream may run (its K/V block is
    mapped lazily: unused room costs no memory)."""

    def __init__(
        self,
        session,
        cross_keys,
        cross_values,
        speakers,
        phoneme_lengths,
        pace_unit,
        max_frames: int = 512,
        tracks=None,
    ):
        lengths = np.asarray(phoneme_lengths, np.int64)
        B = len(lengths)
        self.slots = FSQSlots(session, B, max_frames, int(lengths.max()))
        for b, n in enumerate(lengths):
            self.slots.load(b, cross_keys[:, b : b + 1, :, :n], cross_values[:, b : b + 1, :, :n])
        self._pace = np.float32(1.0) / (lengths.astype(np.float32) * np.float32(pace_unit))
        # an aligned model's pace is each stream's phoneme track, then its past-end position
        self.tracks = (
            None if tracks is None else [track_pace(t, n) for t, n in zip(tracks, lengths)]
        )
        self.speakers = np.asarray(speakers, np.int64).reshape(B)
        self.t = 0

    @property
    def session(self):
        return self.slots.session

    def step(self, prev_channels=None):
        """(hidden [B, D], channel_logits [B, Σ L], stop_logits [B]) of the next frame."""
        B = len(self.speakers)
        prev = np.zeros((B, self.slots.channels), np.int64)
        if prev_channels is not None:
            prev[:] = prev_channels
        if self.tracks is None:
            pace = np.float32(self.t + 0.5) * self._pace
        else:
            pace = np.array([at(self.t) for at in self.tracks], np.float32)
        out = self.slots.step(np.arange(B), prev, pace, self.speakers)
        self.t += 1
        return out


@dataclass
class FSQSynthesis(Result):
    """One utterance: channel codes, audio, and what each stage cost (`Result`, the
    families' one result type, with this family's fields)."""

    codes: np.ndarray  # int64 [T, 32] channel indices
    wav: Optional[np.ndarray]
    sample_rate: int
    phonemes: str
    graph_calls: int  # step graph calls (one per frame)
    stopped: bool  # the stop head ended the utterance (False: the max-length guard did)
    max_frames: int
    temporal_seconds: float  # encoder + step graph calls
    sampling_seconds: float  # the frame decoder
    decode_seconds: float  # vocoder
    frame_rate: float = 12.5
    mode: str = "fsq"

    @property
    def audio_seconds(self) -> float:
        return len(self.codes) / self.frame_rate

    @property
    def calls_per_frame(self) -> float:
        return self.graph_calls / max(len(self.codes), 1)

    @property
    def ms_per_frame(self) -> float:
        return 1e3 * (self.temporal_seconds + self.sampling_seconds) / max(len(self.codes), 1)

    @property
    def hit_max_frames(self) -> bool:
        return not self.stopped

    # The RVQ family's Synthesis interface (`codecspec synth --json`): the frame decoder is
    # this family's "depth" stage, one call per frame gives 32 channel codes per call.
    frontend_seconds = 0.0  # counted in temporal_seconds (the encoder runs with the stepper)

    @property
    def depth_seconds(self) -> float:
        return self.sampling_seconds

    @property
    def tokens_per_call(self) -> float:
        return self.codes.shape[1] * len(self.codes) / max(self.graph_calls, 1)

    @property
    def calls_per_audio_second(self) -> float:
        return self.graph_calls / max(self.audio_seconds, 1e-9)

    def stage_seconds(self) -> dict:
        return {
            "frontend": 0.0,
            "temporal": self.temporal_seconds,
            "depth": self.sampling_seconds,
            "vocoder": self.decode_seconds,
        }

    @property
    def real_time_factor(self) -> float:
        return self.total_seconds / max(self.audio_seconds, 1e-9)


def _read_meta(d: Path) -> dict:
    path = d / "model.json"
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: {d} has no model.json")
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"model_dir: {d} is a {meta.get('format')!r} model folder, not {FORMAT!r} "
            "(load it with codecspec.pipeline.registry.load_model, which picks the family)"
        )
    return meta


class FSQTTS(PhonemeModel):
    """Loads an FSQ model folder (FSQ_FILES; default: the shipped python/codecspec/models/fsq).
    Its text side (`languages`, `speakers`, `ids`) is the shared
    `codecspec.frontend.text.PhonemeModel`'s. A voice-prefix folder (`voice.onnx`) speaks
    in voices instead of speaker ids (`voices`, a `VoiceBank`): its named ones, clips of
    `voices_dir` (NAME.wav -> voice NAME), and `ref_audio` (a clip: voice "ref", the default
    voice then; without it the null prefix "neutral" is)."""

    family = "fsq"

    def __init__(
        self,
        model_dir=None,
        provider="auto",
        threads=None,
        params: Optional[cs.SamplingParams | SamplingOverride] = None,
        ref_audio=None,
        voices_dir=None,
    ):
        d = Path(model_dir) if model_dir is not None else default_fsq_dir()
        self.meta = _read_meta(d)
        missing = [f for f in FSQ_FILES if not (d / f).is_file()]
        if missing:
            raise FileNotFoundError(f"model_dir: {d} lacks {missing}; rebuild with fsq.py ship")
        self.dir = d
        cfg = config_from_meta(self.meta)
        self.codec = FSQCodec.load(d / "fsqcodec.npz")
        if self.codec.cfg != cfg:
            raise ValueError(
                f"levels: model.json's {cfg} does not match the codec's {self.codec.cfg}"
            )
        self.frontend = Frontend.from_dict(self.meta["frontend"])
        params = resolve_params(params, self.meta)  # a SamplingOverride: over model.json's
        self.params = params or cs.SamplingParams(**self.meta["sampling"])
        self.frame_decoder = FSQFrameDecoder(self.codec.cfg.channel_levels, self.params)
        self.encoder = open_session(str(d / "encoder.onnx"), provider=provider, threads=threads)
        self.step_graph = open_session(str(d / "step.onnx"), provider=provider, threads=threads)
        self.voices = self.default_voice = None
        if (d / "voice.onnx").is_file():
            self.voices = VoiceBank(d, self.codec, provider, threads)
            self.default_voice = self.meta.get("default_voice", self.meta["default_speaker"])
        self._add_voices(ref_audio, voices_dir)

    def _add_voices(self, ref_audio, voices_dir) -> None:
        for name, value in (("ref_audio", ref_audio), ("voices_dir", voices_dir)):
            if value is not None and self.voices is None:
                raise ValueError(
                    f"{name}: {self.dir} reads no reference clip (no voice.onnx: speakers "
                    f"{self.speakers}); a voice-prefix folder such as fsq-voices does"
                )
        if voices_dir is not None:
            self.voices.add_dir(voices_dir)
        if ref_audio is not None:
            self.voices.add("ref", ref_audio)
            self.default_voice = "ref"

    def encode(self, ph, lengths, languages, speakers, voices=None) -> list:
        """Cross-attention K/V of padded phoneme ids [B, P] (a voice-prefix model: of the
        voice names `voices`, None = the default voice)."""
        feeds = {
            "phonemes": ph,
            "phoneme_lengths": np.asarray(lengths, np.int64),
            "language": np.asarray(languages, np.int64),
            "speaker": np.asarray(speakers, np.int64),
        }
        if self.voices is not None:
            names = voices or [None] * len(ph)
            feeds["prefix"] = self.voices.prefix([n or self.default_voice for n in names])
        return self.encoder.run(None, feeds)

    def max_frames_for(self, num_tokens: int, track=None) -> int:
        """The max-length guard: `max_pace` times the nominal length of the text (an aligned
        model: of its phoneme track, plus 8 frames, as v3's)."""
        if track is not None:
            return int(math.ceil(self.meta["max_pace"] * len(track))) + 8
        return int(math.ceil(self.meta["max_pace"] * num_tokens * self.meta["pace_unit"])) + 4

    def stepper(
        self,
        token_lists: list,
        languages: list,
        speakers: list,
        max_frames: Optional[int] = None,
        tracks: Optional[list] = None,
        voices: Optional[list] = None,
    ) -> FSQStepper:
        """Encoder call for B streams (padded) and a stepper over them, room for `max_frames`
        frames each (default: the largest `max_frames_for` guard of the streams, at least
        512; the K/V block is mapped lazily, so unused room costs no memory). An aligned
        model's streams come with their phoneme `tracks`, a voice-prefix model's with their
        `voices` (names)."""
        lengths = np.array([len(t) for t in token_lists], np.int64)
        ph = np.full((len(token_lists), lengths.max()), PAD, np.int64)
        for b, t in enumerate(token_lists):
            ph[b, : len(t)] = t
        spk = np.asarray(speakers, np.int64)
        ck, cv = self.encode(ph, lengths, languages, spk, voices)
        if max_frames is None:
            guards = [self.max_frames_for(int(lengths.max()))]
            guards += [self.max_frames_for(0, t) for t in tracks or ()]
            max_frames = max(512, *guards)
        unit = self.meta["pace_unit"]
        return FSQStepper(self.step_graph, ck, cv, spk, lengths, unit, int(max_frames), tracks)

    def tokens(self, text, phonemes, language) -> tuple[str, np.ndarray]:
        """(phonemes, ids with bos/eos): IPA, or an aligned model's espeak-ng mnemonics."""
        if phonemes is None and self.aligned:
            phonemes = self.phoneme_track(text, language, None)[0]
        elif phonemes is None:
            phonemes = phonemize(text, self.meta["voices"][language])
        ids = self.frontend.vocab.encode(phonemes)
        return phonemes, np.concatenate([[BOS], ids, [EOS]]).astype(np.int64)

    def generate(
        self,
        text: str,
        *,
        language: str = "en",
        speaker: Optional[str] = None,
        seed: int = 0,
        phonemes: Optional[str] = None,
        max_frames: Optional[int] = None,
        progress: bool = False,
        decode_audio: bool = True,
        mode: str = "auto",
        rate: float = 1.0,
    ) -> FSQSynthesis:
        """Synthesise `text` (or IPA `phonemes`) until the stop head ends it, or the guard
        (`max_frames`, default `max_frames_for` the text) does: see `FSQSynthesis.stopped`.
        `mode` and `rate` exist for CLI parity with the RVQ family: one decode loop only
        ("auto"/"ar"), and the stop head, not a rate, sets the length (rate must be 1).
        The request is the serving engine's, prepared by `FSQFamily` with one slot and run
        by the one loop, in this thread."""
        fields = dict(language=language, mode=mode, seed=seed, max_frames=max_frames)
        req = speech_request(text, phonemes, speaker=speaker, rate=rate, **fields)
        family = FSQFamily(self)
        state, frames, frontend = run_request(family, req)
        if progress:
            from codecspec.progress import bar

            frames = bar(frames, desc="synth fsq", total=state.limit)
        t0 = time.perf_counter()
        codes = np.stack(list(frames)).astype(np.int64)
        t1 = time.perf_counter()
        # temporal: the step graph and all of the loop's own work, so that the two stages
        # add up to the loop's wall time (the bench's ms_per_frame shows its overhead)
        temporal = frontend + (t1 - t0) - family.sample_seconds
        wav = self.codec.decode(codes, seed=seed) if decode_audio and len(codes) else None
        return FSQSynthesis(
            codes=codes,
            wav=wav,
            sample_rate=self.codec.sample_rate,
            phonemes=state.phonemes,
            graph_calls=family.slots.calls,
            stopped=state.stopped,
            max_frames=state.limit,
            temporal_seconds=temporal,
            sampling_seconds=family.sample_seconds,
            decode_seconds=time.perf_counter() - t1 if wav is not None else 0.0,
            frame_rate=self.codec.frame_rate,
        )

    def stream(
        self,
        text: str,
        *,
        language: str = "en",
        speaker: Optional[str] = None,
        seed: int = 0,
        phonemes: Optional[str] = None,
        max_frames: Optional[int] = None,
        mode: str = "auto",
        rate: float = 1.0,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        split_sentences: bool = False,
        **vocoder,
    ) -> AudioStream:
        """`generate` as a stream of float32 waveform chunks (`AudioStream`): the RVQ
        family's `ReferenceTTS.stream`, on this family's requests and codec."""
        fields = dict(language=language, mode=mode, seed=seed, max_frames=max_frames)
        req = speech_request(text, phonemes, speaker=speaker, rate=rate, **fields)
        kw = dict(chunk_frames=chunk_frames, split_sentences=split_sentences, vocoder=vocoder)
        return stream_request(FSQFamily(self), req, **kw)


@dataclass
class FSQState(StreamState):
    pace: np.float32 = np.float32(0.0)  # pace per frame: 1 / (tokens x pace_unit)
    at: Optional[Callable] = None  # an aligned model's pace of frame t (`track_pace`)
    cross: tuple = ()
    prev: np.ndarray = None  # the last frame's channels, the next step's input
    stopped: bool = False  # the stop head ended the stream (not the max-length guard)


class FSQFamily(Family):
    """The FSQ family over a loaded `FSQTTS`: frames decoded by `FSQFrameDecoder` (one
    generator per stream),
    ended by the stop head or the max-length guard. `speed` must be 1 (the stop head, not a
    rate, sets the length) and `mode` ar/auto (one decode loop), as in `FSQTTS.generate`."""

    name = "fsq"
    formats = ("codecspec-fsq-tts/1",)
    model_names = ("codecspec-fsq",)
    known_length = False  # the stop head decides
    modes = ("ar",)

    # `codecspec bench`: its folder's utterances, figures, record, --batch line (bench.py)
    bench_requests = staticmethod(bench.bench_requests)
    bench_keys, bench_record = staticmethod(bench.bench_keys), staticmethod(bench.record)
    bench_lines = staticmethod(bench.bench_lines)

    @classmethod
    def synth_lines(cls, s, output) -> dict:
        """What `codecspec synth` prints for an FSQ synthesis: no depth loop, a stop head."""
        return {
            "wrote": f"{output} ({s.sample_rate} Hz)",
            "audio seconds": f"{s.audio_seconds:.2f}",
            "frames": f"{len(s.codes)} x {s.codes.shape[1]} channels",
            "ended by": "stop head" if s.stopped else f"max-length guard ({s.max_frames} frames)",
            "graph calls / frame": f"{s.calls_per_frame:.2f}",
            "ms / frame": f"{s.ms_per_frame:.2f}",
            "real-time factor": f"{s.real_time_factor:.3f} (temporal {s.temporal_seconds:.2f} s, "
            f"sampling {s.sampling_seconds:.2f} s, vocoder {s.decode_seconds:.2f} s)",
        }

    def __init__(self, tts: FSQTTS, slots=1, max_frames=None, max_phonemes=None, step=None):
        """Over a loaded `tts`: `slots` streams of at most `max_frames` frames and
        `max_phonemes` ids each, on the step session `step` (default the model's). Without
        limits it is `generate`'s: one stream at a time, its slot sized to each stream as it
        loads, and IPA symbols not in the vocabulary read as unknown, as a Python caller's
        always were (a client's are refused)."""
        self.tts = tts
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.inline = max_frames is None
        self.step_graph = tts.step_graph if step is None else step
        self.slots = (
            None if self.inline else FSQSlots(self.step_graph, slots, max_frames, max_phonemes)
        )
        self.codec = tts.codec
        self.sample_rate = int(self.codec.sample_rate)
        self.frame_rate = float(self.codec.frame_rate)
        self.hop = int(round(self.sample_rate / self.frame_rate))
        self.stream_steps = self.codes_out = 0
        self.sample_seconds = 0.0  # the frame decoder's time (FSQSynthesis.sampling_seconds)

    @classmethod
    def open(
        cls, folder, slots, max_frames, max_phonemes, provider, threads, **voices
    ) -> FSQFamily:
        """`voices`: `ref_audio`, `voices_dir` of a voice-prefix folder (FSQTTS's)."""
        tts = FSQTTS(folder, provider=provider, threads=threads, **voices)
        # A session of its own: FSQTTS.generate on tts.step_graph may run beside the engine.
        step = open_session(str(tts.dir / "step.onnx"), provider=provider, threads=threads)
        return cls(tts, slots, max_frames, max_phonemes, step)

    def check(self, req) -> None:
        super().check(req)
        if req.speed != 1.0:
            raise ValueError(
                f"speed: the fsq family's stop head, not a rate, sets the length; got {req.speed}"
            )

    def params(self, req) -> cs.SamplingParams:
        return sampling_params(self.tts.params, req, max(self.tts.frame_decoder.head_sizes))

    def prepare(self, req, generator: cs.Generator) -> FSQState:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
        track = None
        if tts.aligned:  # the pace is espeak-ng's phoneme track of the text
            ipa, ids, track = self._aligned_input(req)
        else:
            ipa, ids = encode_input(tts, req, self.max_phonemes, strict=not self.inline)
        limit = length_guard(req, tts.max_frames_for(len(ids), track))
        if self.max_frames is not None and limit > self.max_frames:
            raise ValueError(f"input: may need {limit} frames, more than {self.max_frames}")
        cross = tts.encode(ids[None], [len(ids)], [lang_id], [spk_id], [req.voice])
        unit = np.float32(tts.meta["pace_unit"])
        return FSQState(
            generator=generator,
            params=self.params(req),
            speaker=spk_id,
            frames=None,
            expected=len(track) if tts.aligned else int(np.ceil(len(ids) * unit)),
            limit=limit,
            tokens=len(ids),
            phonemes=ipa,
            # FSQStepper's float32 arithmetic, so the pace input is the same bits
            pace=np.float32(1.0) / (np.float32(len(ids)) * unit),
            at=None if track is None else track_pace(track, len(ids)),
            cross=tuple(cross),
            prev=np.zeros(len(tts.frame_decoder.head_sizes), np.int64),
            mode="fsq",
        )

    def _aligned_input(self, req):
        """(mnemonics, ids, phoneme track) of a request to an aligned model: text only (its
        phonemes and their timing both come from espeak-ng)."""
        if req.input_format != "text":  # named as its caller gave it
            name = "phonemes" if self.inline else "input_format"
            raise ValueError(f"{name}: this model reads text (espeak-ng times its phonemes)")
        mnemonics, track = self.tts.phoneme_track(req.input, req.language, req.voice)
        _, ids = self.tts.tokens(None, mnemonics, req.language)
        if self.max_phonemes is not None and len(ids) > self.max_phonemes:
            raise ValueError(f"input: {len(ids) - 2} phonemes, more than the limit")
        return mnemonics, ids, track

    def load(self, slot: int, state: FSQState) -> None:
        cross, state.cross = state.cross, ()
        if self.inline:  # sized to this stream (its guard, its phonemes)
            self.slots = FSQSlots(self.step_graph, 1, state.limit, state.tokens)
        self.slots.load(slot, *cross)

    def step(self, streams: list, check: Check) -> list:
        states = [s.state for s in streams]
        pace = [
            np.float32(s.t + 0.5) * s.state.pace if s.state.at is None else s.state.at(s.t)
            for s in streams
        ]
        h, logits, stop = self.slots.step(
            [s.slot for s in streams],
            np.stack([st.prev for st in states]),
            pace,
            [st.speaker for st in states],
        )
        t1 = time.perf_counter()
        self.stream_steps += len(streams)
        rows = zip(streams, h, logits, stop)
        frames = [self._frame(s, check, hi, li[None], si[None]) for s, hi, li, si in rows]
        self.sample_seconds += time.perf_counter() - t1
        return frames

    def _frame(self, s, check: Check, hidden, logits, stop) -> Frame:
        out = {}

        def sample():
            check(s, hidden, logits, stop)
            out["codes"], out["stop"] = self._sample(s.state, logits, stop)

        error = guard(sample)
        if error is not None:
            return Frame(error=error)
        s.state.prev, s.state.stopped = out["codes"], bool(out["stop"])
        self.codes_out += len(out["codes"])
        return Frame(codes=out["codes"], ended=bool(out["stop"]) or s.t + 1 >= s.state.limit)

    def _sample(self, st: FSQState, logits, stop):
        # FSQTTS.generate's draws (FSQFrameDecoder), with the stream's own sampling law
        return self.tts.frame_decoder.sample_stream(logits, stop, st.params, st.generator)

    def counters(self) -> dict:
        return {"calls": self.slots.calls, "lane_calls": self.stream_steps, "codes": self.codes_out}
