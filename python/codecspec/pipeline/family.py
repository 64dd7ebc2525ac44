"""The protocol a model family implements: what the engine, the CLI and the registry need.

The engine (`codecspec.serve.engine`) is one loop: admit streams into slots, run one batched
step for the active slots, emit each stream's frame, let finished streams leave. Everything
that depends on the model family sits behind `Family`:

- `name`, and `detect(folder)` / `open(folder, ...)`: which folders the family reads and the
  adapter over one of them (`codecspec.pipeline.registry` finds the family of a folder);
- `prepare(req, generator)`: text -> per-stream state (in the caller's thread: phonemes,
  encoder call), raising ValueError naming the request field;
- `load(slot, state)`: the stream takes a slot of the family's batched stepper;
- `step(streams, check)`: one frame for every active stream in one batched temporal call,
  returning each stream's `Frame` (codes, whether it ended, or its own error);
- the codec the app vocodes chunks with (`codec.decode(codes, n_iter, seed)`, `hop` samples
  per frame), the voices and languages, the frame and sample rates;
- `stages()`: the model's stages per frame and the weight bytes each reads (`Stage`), so
  `codecspec bench` states a bound for a family it times through the protocol alone
  (`codecspec.pipeline.bench`);
- what the commands ask the family's class (optional, with defaults: `request_options`,
  `synth_lines`, `speaks_phonemes`, `quality_mode`, `quality_modes`, `floor_voice`,
  the bench's `bench_requests`, `bench_sides`, `bench_keys`, `bench_figures`,
  `bench_record`, `bench_lines`, `bench_depth_loop`, `check_serve`), and the commands it
  runs whole (`synth_command`, `calibrate_command`; None: the shared command), so that no
  shared module compares a family's name, format or attribute (tests/repository).

A request is a `SpeechRequest` (what the server's `/v1/audio/speech` body and the bench ask
for); the engine (`codecspec.serve.engine`) re-exports it.

Nothing here names a family: the families' adapters
(`codecspec.families.reference.model.ReferenceFamily`,
`codecspec.families.fsq.model.FSQFamily`, `codecspec.families.v2.model.V2Family`,
`codecspec.families.qwen3_tts.engine.Qwen3Family`) subclass `Family`, and the registry names
them by module path only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import codecspec as cs

__all__ = [
    "Check",
    "Family",
    "Frame",
    "SamplingOverride",
    "SpeechRequest",
    "Stage",
    "StreamState",
    "guard",
    "guard_value",
    "length_guard",
    "model_format",
    "resolve_params",
    "sampling_params",
]

# check(stream, *arrays): the engine's per-stream boundary (fault hook, finiteness) run
# inside the family's step on that stream's rows.
Check = Callable[..., None]


@dataclass(frozen=True)
class SpeechRequest:
    """What one stream says and how. `voice` is a speaker of the model; `speed` scales the
    speaking rate (frames = phonemes x frames-per-phoneme / speed); `mode` ar|spec|auto."""

    input: str
    input_format: str = "text"  # "ipa": `input` is espeak-ng IPA (no phonemizer needed)
    voice: Optional[str] = None
    language: Optional[str] = None  # None: the family's `default_language` (Qwen3: auto)
    speed: float = 1.0
    mode: str = "auto"
    seed: Optional[int] = None
    temperature: Optional[float] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    # the depth stage's own law where a family has one per request (Qwen3-TTS's code
    # predictor, the official methods' subtalker_* keywords); None: the family's default
    subtalker_temperature: Optional[float] = None
    subtalker_top_k: Optional[int] = None
    subtalker_top_p: Optional[float] = None
    instructions: Optional[str] = None  # voice/style text, for families that take it
    # the prompt layout, for families with more than one (Qwen3-TTS: True streaming text,
    # False whole text); None: the official default of the request's mode
    streaming_text: Optional[bool] = None
    # at most this many frames (a Python caller's guard; None: the family's own rule)
    max_frames: Optional[int] = None


@dataclass(frozen=True)
class Stage:
    """One stage of a family's frame as `codecspec bench` reports it: `weight_bytes`, the
    bytes of weights one frame reads in it (its bound is weight_bytes ÷ the measured memory
    bandwidth), and `calls`, graph calls per frame (AR)."""

    name: str
    weight_bytes: int
    calls: float = 1.0


@dataclass
class StreamState:
    """Per-stream state a family keeps between steps. `frames`: the known length (None when
    the model's stop head decides); `expected`: frames to expect (retry hints); `limit`: at
    most this many frames."""

    generator: cs.Generator
    params: cs.SamplingParams
    speaker: int
    frames: Optional[int]
    expected: int
    limit: int
    tokens: int = 0  # input phoneme ids (usage reports)
    phonemes: str = ""  # what the stream says, as its family read it (a result reports it)
    mode: str = ""  # how it is decoded, as a result names it ("ar", "spec", ...)
    # a stop head's verdict: True it ended the stream, False the length guard did; None
    # for a family without one (its planned length ends every stream)
    stopped: Optional[bool] = None


@dataclass
class Frame:
    """One stream's outcome of a step: its frame's codes (int64 [G], or [k, G] for the k
    frames of a temporal speculation round) and whether the stream ended, or the error that
    ended it alone. No codes with `ended`: the stream ended at this step
    without another frame (a stop token sampled in place of the frame's first code)."""

    codes: Optional[np.ndarray] = None
    ended: bool = False
    error: Optional[Exception] = None


def guard(fn) -> Optional[Exception]:
    """Runs fn; returns the exception it raised (a stream's own error) instead of raising."""
    try:
        fn()
    except Exception as e:  # this stream's own error: it alone fails
        return e
    return None


def guard_value(fn):
    """fn()'s value, or the exception it raised (a stream's own failure, as `guard`)."""
    try:
        return fn()
    except Exception as e:  # this stream's own error: it alone fails
        return e


def sampling_params(base: cs.SamplingParams, req, top_k_max: int) -> cs.SamplingParams:
    """The request's sampling law over the model's defaults; ValueError names the field."""
    t = base.temperature if req.temperature is None else req.temperature
    k = base.top_k if req.top_k is None else req.top_k
    p = base.top_p if req.top_p is None else req.top_p
    if not (np.isfinite(t) and 0.0 <= t <= 10.0):
        raise ValueError(f"temperature: expected a finite number in [0, 10], got {t!r}")
    if not (0 <= int(k) <= top_k_max):
        raise ValueError(f"top_k: expected an integer in [0, {top_k_max}], got {k!r}")
    if not (np.isfinite(p) and 0.0 < p <= 1.0):
        raise ValueError(f"top_p: expected a finite number in (0, 1], got {p!r}")
    return cs.SamplingParams(float(t), int(k), float(p))


@dataclass(frozen=True)
class SamplingOverride:
    """Part of a sampling law, the rest the model's own (`codecspec synth --top-k 5`): each
    field set replaces the folder's, the others stay its model.json "sampling". The caller
    builds it without reading the folder; the model's constructor, which reads model.json
    anyway, resolves it (`resolve_params`). A field out of range is a ValueError naming it."""

    temperature: Optional[float] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None

    def __post_init__(self):
        # the sampling core's own checks and messages ("top_k: must be >= 0 ..."), on each
        # field set beside values that pass for the unset ones
        cs.SamplingParams(
            1.0 if self.temperature is None else self.temperature,
            0 if self.top_k is None else self.top_k,
            1.0 if self.top_p is None else self.top_p,
        )

    def over(self, sampling: dict) -> cs.SamplingParams:
        """This override over a model.json "sampling" entry."""
        given = {k: v for k, v in vars(self).items() if v is not None}
        return cs.SamplingParams(**(sampling | given))


def resolve_params(params, meta: dict) -> Optional[cs.SamplingParams]:
    """A model constructor's `params` as one law, `meta` its model.json: a SamplingParams
    as it is, a SamplingOverride over meta's "sampling", None as None. An override that
    sets nothing is None, so that a folder's per-stage laws (v2's "depth_sampling") stay,
    while any law given is both stages' (`decode.depth.stage_params`)."""
    if not isinstance(params, SamplingOverride):
        return params
    if params == SamplingOverride():
        return None
    return params.over(meta["sampling"])


def length_guard(req, default: int) -> int:
    """The frames a request may run to: its `max_frames` (a positive int), else `default`
    (the family's own guard for its text); ValueError naming `max_frames`."""
    n = default if req.max_frames is None else req.max_frames
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"max_frames: expected a positive int, got {req.max_frames!r}")
    return int(n)


def model_format(folder) -> Optional[str]:
    """The "format" of `folder`'s model.json, or None where it has none (or is unreadable)."""
    path = Path(folder).expanduser() / "model.json"
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d.get("format") if isinstance(d, dict) else None


class Family:
    """The interface (see the module doc); subclasses set the attributes in __init__.

    A family's folders are told apart by `formats` (model.json "format" values it reads) or,
    for a folder laid out as published elsewhere, by overriding `detect`."""

    name: str  # the registry's name of the family ("reference", "fsq", "v2", "qwen3-tts")
    formats: tuple = ()  # model.json "format" values this family reads
    takes_instructions = False  # whether a request's `instructions` steer the voice
    takes_subtalker = False  # whether a request's subtalker_* set the depth stage's law
    text_layouts = False  # whether a request's `streaming_text` chooses the prompt layout
    default_language = "en"  # an HTTP request's language when it names none
    known_length = True  # the frame count is known at submission (else a stop head decides)
    first_chunk_frames = 3  # frames in a streamed response's first audio chunk
    model_names: tuple  # what an HTTP request's `model` may say for this family
    modes: tuple  # decode modes a request may ask for, besides "auto"
    tts: object  # the single-stream model (its .generate is the reference for the engine)
    codec: object  # .decode(codes [T, C], n_iter, seed) -> float32 waveform
    hop: int  # samples per frame
    sample_rate: int
    frame_rate: float

    # ------------------------------------------------------------------ the folder
    @classmethod
    def detect(cls, folder) -> bool:
        """Whether `folder` holds a model of this family (default: its model.json's format
        is one of `formats`)."""
        return bool(cls.formats) and model_format(folder) in cls.formats

    @classmethod
    def open(cls, folder, slots, max_frames, max_phonemes, provider, threads, **options):
        """The engine's adapter over `folder`: `slots` streams per step, at most `max_frames`
        frames and `max_phonemes` input ids per stream; `options` the family's own
        (registry `Entry.options`)."""
        return cls(folder, slots, max_frames, max_phonemes, provider, threads, **options)

    # ------------------------------------------------------------------ requests
    @property
    def voices(self) -> list:
        return self.tts.speakers

    @property
    def languages(self) -> list:
        return self.tts.languages

    def check(self, req) -> None:
        if req.mode not in self.modes + ("auto",):
            raise ValueError(f"mode: expected one of {self.modes + ('auto',)}, got {req.mode!r}")
        # refused rather than ignored: a layout asked for and not given would change what
        # the client compares against (as `codecspec synth --streaming-text` is refused)
        if req.streaming_text is not None and not self.text_layouts:
            raise ValueError(
                f"streaming_text: the {self.name} model has one prompt layout; "
                "only Qwen3-TTS checkpoints choose one"
            )
        if not self.takes_subtalker:  # refused, not ignored, like the layout above
            for field in ("subtalker_temperature", "subtalker_top_k", "subtalker_top_p"):
                if getattr(req, field) is not None:
                    raise ValueError(
                        f"{field}: the {self.name} model draws its depth levels by its own "
                        "law; only Qwen3-TTS checkpoints take subtalker_*"
                    )

    def params(self, req) -> cs.SamplingParams:
        raise NotImplementedError

    def prepare(self, req, generator: cs.Generator) -> StreamState:
        raise NotImplementedError

    def load(self, slot: int, state: StreamState) -> None:
        raise NotImplementedError

    def step(self, streams: list, check: Check) -> list:
        raise NotImplementedError

    def counters(self) -> dict:
        """calls (batched graph calls of the frame stage), lane_calls (per stream), codes."""
        raise NotImplementedError

    def prebuffer_steps(self, state: StreamState) -> int:
        """Steps whose frames the engine holds back before a stream's first frame goes out.
        0 for a stream that gets one frame per step; a family whose streams get a varying
        number per step (temporal speculation) holds the first step's, so that playback
        starts with a cushion against a step that brings only one frame."""
        return 0

    # ------------------------------------------------------------------ the model
    def stages(self) -> list:
        """The model's stages per frame and the weight bytes each reads (`Stage`), for the
        bench's bound (bytes ÷ bandwidth) beside the measured time; [] where the family
        does not say (the bench then states no bound)."""
        return []

    # ------------------------------------------------------------------ the commands' questions
    # Asked of the class (a command holds a loaded model or its result, not an adapter);
    # the defaults: decode modes `modes`, no flags of its own, a depth loop to report.
    @classmethod
    def request_options(cls, args, tts) -> dict:
        """`generate` / `stream` keywords from the family's own flags (its `cli_options`)
        in parsed `args`."""
        return {}

    @classmethod
    def synth_lines(cls, s, output) -> Optional[dict]:
        """`codecspec synth`'s summary of the result `s` written to `output`, {label: value};
        None: the shared one of a depth-loop result."""
        return None

    @classmethod
    def speaks_phonemes(cls, tts) -> bool:
        """Whether `tts` speaks espeak-ng IPA given in place of text (the evaluation sets'
        stored phonemes); a model that follows espeak-ng's timing of the text (an aligned
        phoneme model: v3, fsq-aligned) does not."""
        return not getattr(tts, "aligned", False)

    @classmethod
    def quality_mode(cls, mode: str, tts=None, beta: float = 0.3, theta=None) -> dict:
        """`generate` keywords of a `codecspec quality` mode; ValueError naming `modes` for
        one the family does not decode. `beta` / `theta`: the lossy rules' tolerances, for
        a family that has them."""
        allowed = ("ar",) + tuple(m for m in cls.modes if m != "ar")
        if mode not in allowed:
            raise ValueError(
                f"modes: {mode!r} is not a mode of the {cls.name} family ({', '.join(allowed)})"
            )
        return {"mode": mode}

    @classmethod
    def quality_modes(cls, args) -> list:
        """`bench --quality`'s rows: AR and the speculative mode the bench measured."""
        return ["ar"] + [m for m in cls.modes if m == "spec"]

    @classmethod
    def floor_voice(cls, tts) -> Optional[tuple]:
        """(espeak-ng voice, words per minute, pitch) whose timing and sound `tts` follows, in
        which the quality floors render a text (`evaluation.floors`); None: the corpus voice.
        An aligned model names the voice whose timing it follows."""
        m = getattr(tts, "meta", {})
        if not getattr(tts, "aligned", False) or "espeak_rate" not in m:
            return None
        return tts.espeak_voice("en", None), int(m["espeak_rate"]), int(m["espeak_pitch"])

    # `codecspec bench` (`codecspec.pipeline.bench.bench`, the one driver). bench_keys:
    # (tts, {side: [Result]}, args, the depth loop's figures alone) -> the figures the family
    # reports of its timed runs (`side_figures` reduces a side); None: the protocol's bench
    # (prepare + the one loop, timed whole). bench_record: (figures, folder, *, bandwidth,
    # peak_rss_mb) -> its `codecspec.perf` record. bench_depth_loop: the folder's depth loop
    # (frames.npz) is timed alone first, and alone is all --no-pipeline runs. bench_figures:
    # args -> its `codecspec.perf` record, for a family whose stages cannot be timed as whole
    # `generate` runs (Qwen3-TTS plans its stages to a time budget and times each apart); it
    # replaces the driver's runs, which completes the record (`completed_record`).
    bench_keys: Optional[Callable] = None
    bench_figures: Optional[Callable] = None
    bench_record: Optional[Callable] = None
    bench_depth_loop = False

    @classmethod
    def bench_lines(cls, res: dict) -> list:
        """Lines `codecspec bench` prints under its table for the figures `res` (what the
        run was, where a family's bench decides that itself); none by default."""
        return []

    @classmethod
    def bench_requests(cls, tts, texts: list, args) -> list:
        """`generate` keywords of each request the bench times, from the held-out `texts`
        (`--texts` of them: text, language, espeak-ng IPA): by default the stored IPA, so
        that no espeak-ng is needed."""
        return [{"text": "", "phonemes": t["phonemes"], "language": t["language"]} for t in texts]

    @classmethod
    def bench_sides(cls, tts, args) -> dict:
        """The sides the bench compares, {side: `generate` keywords}: AR and, where the
        family has one, its speculative mode."""
        return {m: {"mode": m} for m in ("ar", "spec") if m in cls.modes}

    # args -> exit status: a subcommand the family runs whole (its own loading, flags and
    # report: Qwen3-TTS's); None: the shared command serves it
    synth_command = calibrate_command = None

    @classmethod
    def check_serve(cls, args) -> None:
        """`codecspec serve`'s check before the server starts (one line, not a start-up
        traceback): ValueError naming the argument; nothing to check by default."""

    def chunk_decoder(self, iters: int, seed: int, voice=None):
        """None: the app vocodes each chunk with `codec.decode(codes, iters, seed)` over a
        few frames of context. A family whose decoder carries state from chunk to chunk
        returns one object per stream whose `feed(codes [n, C])` gives exactly those
        frames' audio (`voice`: the request's, for a decoder whose state starts from it)."""
        return None
