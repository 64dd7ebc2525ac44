"""Qwen3-TTS checkpoint folders (`codecspec serve --model DIR`) in the continuous-batching engine.

Each stream runs `Qwen3TTS.frame_steps`, the coroutine behind `iter_frames` (prefill, then
per frame the talker's c0, the depth loop AR or speculative, the talker step), with its own
generator, on a runtime of its slot: `Qwen3TTS.replica()` gives every slot its own talker KV
cache and depth-loop state over the one set of loaded ONNX sessions, tables and LM heads
(the graphs are loaded once). An engine step advances every active stream by one frame: each
stream's coroutine hands out its frame's depth loop, the AR ones of all streams run as one
batched loop (`BatchedDepth` over the code predictor's grouped-heads graph: one call per
level for every stream), a speculative one on its stream's own decoder. The codes come from
the same loop with the same generators as `Qwen3TTS.generate_codes`, so a served stream is
bit-identical to it for the same seed and arguments, whatever streams share the engine
(tests/families/qwen3_tts/test_serve_qwen3.py).

The talker's eos decides the length (`known_length = False`): the step that samples eos ends
the stream without a frame. Audio is the 12 Hz speech decoder (24 kHz), one decoder state per
stream fed chunk by chunk (`chunk_decoder`), so the chunks join exactly as a whole decode.
`batch_decoder()` decodes the chunks that streams feed at the same time in one batched call
instead (decoder_batch.py: each stream keeps its own state; its audio is its lone decode's
to float32 rounding, not bit for bit); off by default, as it saved no CPU time here.

Request fields: `voice` is a CustomVoice speaker (OpenAI's voice names map onto the
speakers; VoiceDesign and Base checkpoints have none); `instructions` is the official
`instruct` where the checkpoint reads it (`Qwen3Checkpoint.accepts_instruct`); `language` is
a language of the checkpoint or its ISO 639-1 code; temperature / top_k / top_p override the
talker's law and subtalker_temperature / _top_k / _top_p the code predictor's, as the official
methods' keywords of those names do (absent, the code predictor keeps the checkpoint's
subtalker law; temperature 0 alone is greedy for both, `Qwen3TTS.sampling`);
`streaming_text` picks the prompt layout (absent: the official default of the checkpoint's
mode, streaming text for a Base voice clone and whole text for CustomVoice / VoiceDesign, as
`Qwen3TTS.generate_codes`). `speed` other than 1 is refused: the model has no rate control.
A Base (voice-cloning) checkpoint is served with a reference recording given at load
(`ref_audio`), whose voice every stream then speaks in (x-vector only), or with a folder of
voices (`voices_dir`: NAME.wav + NAME.txt, its transcript), each encoded once at load and
cloned in context; `voice` picks one by NAME (OpenAI's voice names map onto them as onto
speakers), and its audio is decoded after the voice's reference codes, as the official
generate_voice_clone decodes it.

The talker steps of all streams run as one graph call where that is bit-identical
(talker_rows.py): each slot's talker keeps its K/V in its slot of one slot-major buffer
(`TalkerSlots`, growing by doubling as streams need rows), and a row-batched twin of the
talker graph steps one row per stream, each at its own position over its own cache length
(GroupQueryAttention's per-row seqlens_k). A lone stream takes its own one-row call. Whether
a batched row is the row alone is measured at load on the loaded graphs (`rows_agree`): on
the 2-core AVX-512 + AMX Xeon it holds at fp32, int4 (blocks of 32) and int8, whose talker
is quantised in blocks of 64 there (`row_probe.row_exact_block`: in blocks of 128 MatMulNBits
computes a lone row by another kernel than rows together). Where it fails (a CPU whose
kernels no block serves alike), the talker steps per stream as before.

What it does not do: batch the speculative depth loops of several streams (each runs on its
stream's own decoder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import DECISION_FILE, auto_mode, speculation_pays
from codecspec.pipeline.family import length_guard, sampling_params

from .steps import Qwen3State, Qwen3Steps

__all__ = ["Qwen3Family", "LANGUAGE_CODES", "check_folder"]

# ISO 639-1 codes of the languages Qwen3-TTS checkpoints name (a request's "en" default too)
LANGUAGE_CODES = {
    "zh": "chinese",
    "en": "english",
    "ja": "japanese",
    "ko": "korean",
    "de": "german",
    "fr": "french",
    "ru": "russian",
    "pt": "portuguese",
    "es": "spanish",
    "it": "italian",
}
CHARS_PER_FRAME = 14 / 12.5  # about 14 characters a second of speech: retry hints only


class _Codec:
    """The `codec` attribute other families have (`decode(codes, n_iter, seed)`), over the
    speech decoder, which is deterministic and has no iterations to set."""

    def __init__(self, decoder) -> None:
        self.decoder = decoder
        self.sample_rate = int(decoder.sample_rate)
        self.frame_rate = self.sample_rate / decoder.samples_per_frame

    def decode(self, codes, n_iter=None, seed=None) -> np.ndarray:
        return np.asarray(self.decoder.decode(codes), np.float32).reshape(-1)


def _subtalker(req) -> dict:
    """A request's subtalker_* keywords (None: the checkpoint's code-predictor law)."""
    return {
        "subtalker_temperature": req.subtalker_temperature,
        "subtalker_top_k": req.subtalker_top_k,
        "subtalker_top_p": req.subtalker_top_p,
    }


class Qwen3Family(Qwen3Steps):
    """A Qwen3-TTS 12 Hz checkpoint folder in the engine: one frame loop per stream (the
    steps are `Qwen3Steps`'); the requests, voices and codec of the loaded folder."""

    text_layouts = True  # streaming-text or whole-text prompt (`streaming_text`)
    # the official methods' language=None: no language tag in the prompt ("en" would add
    # the english tag and give other codes)
    default_language = "auto"
    takes_subtalker = True  # the code predictor's own law, per request
    # The speech decoder carries its state, so a one-frame first chunk costs no audio quality
    # (the Griffin-Lim vocoders of the other families want a few frames of context).
    first_chunk_frames = 1

    @classmethod
    def detect(cls, folder) -> bool:
        from codecspec.families.qwen3_tts.checkpoint import is_qwen3_folder

        return is_qwen3_folder(str(folder))

    @classmethod
    def open(cls, folder, slots, max_frames, max_phonemes, provider, threads, **options):
        # the talker reads its own tokenizer's ids: no phoneme limit applies
        return cls(folder, slots, max_frames, provider, threads, **options)

    def __init__(
        self,
        model_dir,
        slots,
        max_frames,
        provider,
        threads,
        cache_dir=None,
        ref_audio=None,
        weights=None,
        voices_dir=None,
        decoder_precision=None,
    ):
        from .pipeline import Qwen3TTS

        reference = check_folder(model_dir, ref_audio, voices_dir)
        self.tts = Qwen3TTS.load(
            model_dir,
            cache_dir=cache_dir,
            provider=provider,
            threads=threads,
            weights=weights,
            decoder_precision=decoder_precision,
        )
        # the reference's x-vector computed once, here, for every stream
        self.reference = None if reference is None else self.tts.clone_voice(reference)
        # each voice read, x-vector computed and reference encoded once, here
        voices = read_voices_dir(voices_dir) if voices_dir is not None else {}
        self.cloned = {n: self.tts.clone_voice(wav, text) for n, (wav, text) in voices.items()}
        self.model_names = (f"qwen3-tts-{Path(model_dir).resolve().name}", "qwen3-tts")
        self.takes_instructions = self.tts.ck.accepts_instruct
        self.max_frames = int(max_frames)
        self.codec = _Codec(self.tts.speech_decoder())
        self.sample_rate = self.codec.sample_rate
        self.hop = int(self.tts.speech_decoder().samples_per_frame)
        self.frame_rate = self.codec.frame_rate
        self.speculation_pays = self._speculation_pays()
        super().__init__({})  # slot -> its Qwen3TTS replica, made on first use
        from codecspec.decode.batched_depth import BatchedDepth

        # every stream's AR depth loop of a step in one batched loop over the shared graph
        self.depth = BatchedDepth(self.tts.depth, slots, provider, threads)
        # every stream's talker step of a step in one call, where that is bit-identical here
        self.talker_rows = talker_rows(self.tts.talker, slots, provider, threads)
        # Each stream's decoder chunks on their own: decoding the chunks streams feed at once
        # in one call (`batch_decoder()`) is not bit-identical and saved no CPU time here
        # (docs/serving.md), so it is asked for, not the default.
        self.slots = int(slots)
        self.decoder_batch = None

    def _speculation_pays(self) -> bool:
        """Mode "auto": what `codecspec calibrate --model DIR` measured (as `synth`)."""
        return speculation_pays(self.tts.calibration_file(DECISION_FILE))  # as `synth`

    # ------------------------------------------------------------------ requests
    @property
    def voices(self) -> list:
        if self.cloned:
            return sorted(self.cloned)
        return self.tts.speakers if self.tts.model_type == "custom_voice" else []

    @property
    def languages(self) -> list:
        own = self.tts.languages
        return own + [code for code, lang in LANGUAGE_CODES.items() if lang in own]

    def check(self, req) -> None:
        super().check(req)
        if req.input_format != "text":
            raise ValueError("input_format: a Qwen3-TTS checkpoint reads text, not IPA")
        if float(req.speed) != 1.0:
            raise ValueError(f"speed: Qwen3-TTS has no speaking-rate control; 1.0, not {req.speed}")
        if req.instructions and not self.takes_instructions:
            raise ValueError(
                f"instructions: this {self.tts.model_type} checkpoint (size "
                f"{self.tts.ck.model_size!r}) takes none"
            )
        from .pipeline import check_streaming_text

        # the HTTP body is typed already; an Engine driven from Python is not
        check_streaming_text(req.streaming_text)

    def params(self, req) -> cs.SamplingParams:
        talk, _ = self.tts.sampling()
        sampling_params(talk, req, self.tts.spec.vocab_size)  # ranges, naming the field
        # the code predictor's law is checked here too (its errors name subtalker_*)
        talk, _ = self.tts.sampling(req.temperature, req.top_k, req.top_p, **_subtalker(req))
        return talk

    def request_kwargs(self, req) -> dict:
        """The `Qwen3TTS.iter_frames` keywords of a request (also the reference for tests)."""
        language = LANGUAGE_CODES.get(req.language, req.language)
        speaker = req.voice
        if speaker is None and self.voices:
            speaker = self.voices[0]
        reference = self.reference
        if self.cloned:  # the voice is a cloned one, not a speaker of the checkpoint
            speaker, reference = None, self.cloned[speaker]
        mode = auto_mode(req.mode, self.speculation_pays)
        return dict(
            speaker=speaker,
            language=language,
            instruct=req.instructions or None,
            ref_audio=reference,
            mode=mode,
            temperature=req.temperature,
            top_k=req.top_k,
            top_p=req.top_p,
            **_subtalker(req),
            streaming_text=req.streaming_text,
        )

    def frame_limit(self, req) -> int:
        """The most frames a stream of `req` may have: the engine's `max_frames`, the
        checkpoint's max_new_tokens (less the token sampled in place of a frame), and the
        request's own `max_frames` where it has one (a Python caller's; ValueError naming
        it unless a positive int), the least of them, as other families' guards."""
        limit = min(self.max_frames, self.tts.ck.generation.max_new_tokens - 1)
        return min(limit, length_guard(req, limit))

    def prepare(self, req, generator: cs.Generator) -> Qwen3State:
        """The request as the runtime prepares every request (`Qwen3TTS.prepare`: checked,
        its prompt built once), at most `frame_limit` frames; errors name its fields."""
        kw = dict(self.request_kwargs(req), generator=generator, max_frames=self.frame_limit(req))
        try:
            state = self.tts.prepare(req.input, served=True, **kw)
        except ValueError as e:  # name the HTTP field, not the runtime's argument
            raise ValueError(_as_request_field(str(e))) from None
        state.expected = min(state.limit, max(1, int(np.ceil(len(req.input) / CHARS_PER_FRAME))))
        return state

    # ------------------------------------------------------------------ the commands
    # synth and calibrate are its own whole (its flags, graph building and report); the
    # bench's stages are timed here, each apart and sized to a time budget (bench.py), and
    # reported by the one bench command
    @classmethod
    def synth_command(cls, args) -> int:
        from .cli import synth

        return synth(args)

    @classmethod
    def bench_figures(cls, args) -> dict:
        from .bench import bench_figures

        return bench_figures(args)

    @classmethod
    def bench_lines(cls, res: dict) -> list:
        from .bench import plan_line

        return [plan_line(res)]

    @classmethod
    def calibrate_command(cls, args) -> int:
        from .calibrate import calibrate_command

        return calibrate_command(args)

    @classmethod
    def check_serve(cls, args) -> None:
        """`check_folder` on `codecspec serve`'s --ref-audio and --voices-dir."""
        check_folder(args.model, args.ref_audio, args.voices_dir)

    def batch_decoder(self, on: bool = True):
        """Decode the chunks that streams feed at once in one batched call (on) or each on
        its own decoder state (off). Returns the `DecoderBatcher`, or None (off, one slot,
        or a cache that cannot take the batched graph). Streams opened before keep theirs."""
        self.decoder_batch = decoder_batcher(self.codec.decoder, self.slots) if on else None
        return self.decoder_batch

    def chunk_decoder(self, iters: int, seed: int, voice=None):
        """The stream's decoder state, fed its chunks by the app: through the batcher where
        there is one (its chunks decoded with other streams'), else on its own. A cloned
        voice's reference codes go first as left context (their audio dropped), as
        generate_voice_clone decodes reference + new codes in one sequence; they are
        decoded on the first feed, in the vocoder's worker thread, not here."""
        cloned = self.cloned.get(voice) if voice is not None else None
        context = cloned.ref_codes if cloned is not None else None
        if self.decoder_batch is not None:
            return self.decoder_batch.open_stream(context)
        return self.codec.decoder.open_stream(context)


def decoder_batcher(decoder, slots: int):
    """The engine's `DecoderBatcher` over the speech decoder and its batched twin, or None
    with one slot or where the twin cannot be had (a decoder not loaded from a folder, a
    cache that cannot take its graph, an int8 decoder: the twin is float32's)."""
    from .decoder_batch import BatchedDecoder, DecoderBatcher

    if slots < 2 or decoder.precision != "fp32":
        return None
    batched = BatchedDecoder.load(decoder)
    return DecoderBatcher(batched) if batched is not None else None


def talker_rows(talker, slots: int, provider, threads):
    """The engine's shared talker buffer and batched step (`TalkerSlots`), or None where a
    batched step would not give every stream the bits of its own step on this device at
    these weights (`rows_agree`; e.g. 8-bit MatMulNBits in blocks of 128 computes a lone
    row by another kernel than rows together on AVX-512, which is why the talker is
    quantised in a block that does not, `Qwen3TTS._talker_block`), or with one slot."""
    from codecspec.runtime.session import open_session

    from .talker_rows import TalkerSlots, rows_agree, rows_graph_path

    graph = talker.graph
    if slots < 2 or not graph.kv_in_place or graph.path is None:
        return None
    session = open_session(str(rows_graph_path(graph.path)), provider=provider, threads=threads)
    if not rows_agree(graph, session, slots):
        return None
    return TalkerSlots(session, graph.config, slots, talker.max_positions)


def check_folder(model_dir, ref_audio=None, voices_dir=None) -> Optional[tuple]:
    """Whether a Qwen3-TTS folder can be served (before any graph is built): a Base
    checkpoint needs a reference recording or a voices folder, the others take neither.
    Returns the recording as (samples, 24000) or None; ValueError naming `model`,
    `ref_audio` or `voices_dir` otherwise."""
    from codecspec.families.qwen3_tts.checkpoint import Qwen3Checkpoint

    from .reference_audio import read_reference

    ck = Qwen3Checkpoint(model_dir)
    if ck.model_type == "base" and ref_audio is None and voices_dir is None:
        raise ValueError(
            f"model: {ck.dir} is a Base (voice-cloning) checkpoint; serve it with --ref-audio "
            "CLIP (the voice every stream speaks in) or --voices-dir DIR, or serve a "
            "CustomVoice or VoiceDesign checkpoint"
        )
    for name, value in (("ref_audio", ref_audio), ("voices_dir", voices_dir)):
        if ck.model_type != "base" and value is not None:
            raise ValueError(f"{name}: a {ck.model_type} checkpoint does not clone voices")
    if ref_audio is not None and voices_dir is not None:
        raise ValueError("voices_dir: give it or ref_audio, not both")
    if voices_dir is not None:
        read_voices_dir(voices_dir)  # a bad folder fails before any graph is built
    return None if ref_audio is None else (read_reference(ref_audio), 24000)


def read_voices_dir(voices_dir) -> dict:
    """NAME -> (24 kHz samples, transcript) of every NAME.wav + NAME.txt in the folder;
    ValueError naming `voices_dir` for a folder without voices, a clip without its
    transcript (or the reverse), or an empty transcript."""
    from .reference_audio import read_reference

    d = Path(voices_dir)
    if not d.is_dir():
        raise ValueError(f"voices_dir: {d} is not a folder")
    clips = {p.stem: p for p in d.glob("*.wav")}
    texts = {p.stem: p for p in d.glob("*.txt")}
    unpaired = sorted(set(clips) ^ set(texts))
    if unpaired:
        raise ValueError(
            f"voices_dir: {d}: every voice is NAME.wav + NAME.txt (its transcript); "
            f"unpaired: {unpaired}"
        )
    if not clips:
        raise ValueError(f"voices_dir: {d} holds no voice (NAME.wav + NAME.txt)")
    out = {}
    for name in sorted(clips):
        text = texts[name].read_text(encoding="utf-8").strip()
        if not text:
            raise ValueError(f"voices_dir: {texts[name]} is empty (the clip's transcript)")
        try:
            wav = read_reference(clips[name])
        except ValueError as e:
            raise ValueError(f"voices_dir: {clips[name]}: {e}") from None
        out[name] = ((wav, 24000), text)
    return out


def _as_request_field(message: str) -> str:
    """A runtime ValueError's message with the argument named as the request's field."""
    head, sep, rest = message.partition(":")
    field = {"text": "input", "speaker": "voice", "instruct": "instructions"}.get(head)
    return f"{field}{sep}{rest}" if field and sep else message
