"""Text -> codes -> waveform for a Qwen3-TTS 12 Hz checkpoint folder, torch-free.

Per request: validate the arguments against the checkpoint, build the official prompt rows,
prefill the talker, then per frame: sample c0 (talker rules), decode c1..c15 with the depth
loop (autoregressive or speculative; the verification uses exactly the AR warp, so the law is
the same), and feed the talker the sum of the frame's 16 code embeddings plus the next
trailing text row (or tts_pad). Stops at eos or after max_new_tokens sampled tokens, as
transformers' generate does (the last sampled token then gets no frame).
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

import codecspec as cs
from codecspec.decode.batched_depth import FrameJob
from codecspec.frontend.textcheck import check_text
from codecspec.pipeline.result import Result
from codecspec.runtime.npy_rows import open_rows

from .checkpoint import Qwen3Checkpoint
from .graphs import build_or_load, chosen_precision, text_embedding_rows
from .reference_audio import read_reference
from .steps import Qwen3State, Qwen3Steps
from .talker import Talker, TalkerSampler
from .text import NONE, REF_FRAME, SPEAKER, Prompt, build_prompt, load_text_tokenizer
from .text_stream import TextRows, TextStream, prompt_body_tokens, stream_layout

__all__ = ["Qwen3TTS", "Qwen3Result", "ClonedVoice", "MODES"]

MODES = ("ar", "spec")
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920
# Streamed chunks grow from one frame to this many (the speech decoder's calls stay large
# once the first audio has left).
STREAM_CHUNK_FRAMES = 4
# Frames the talker's cache holds at first; it doubles when full. A graph with the default
# attention (the plain variant's talker) copies and attends over the whole capacity, masked:
# at the 0.6B int4 one step took 40 ms at 80 positions and 93 ms at 560 (2 threads,
# interleaved, loaded machine). The cpu variant's in-place graph reads only the filled rows,
# but a cache sized for 512 frames still held ~120 MB per utterance for nothing.
TALKER_FIRST_FRAMES = 64


@dataclasses.dataclass
class Qwen3Result(Result):
    """One utterance's codes (`Result`, the families' one result type) and this family's
    fields: the prompt, the reference clip's codes, and each stage's seconds."""

    codes: np.ndarray  # int64 [frames, G]
    hit_max_frames: bool
    prompt: Prompt
    seconds: dict  # prefill, talker, depth
    ref_codes: Optional[np.ndarray] = None  # in-context clone: the reference clip's codes

    def stage_seconds(self) -> dict:
        return dict(self.seconds)


@dataclasses.dataclass(frozen=True)
class ClonedVoice:
    """A reference clip made ready once (`Qwen3TTS.clone_voice`) and given as `ref_audio` to
    any number of requests: its x-vector, and for in-context cloning its transcript and codes."""

    xvector: np.ndarray
    ref_text: Optional[str] = None
    ref_codes: Optional[np.ndarray] = None


def check_request(
    ck: Qwen3Checkpoint, text, speaker, language, instruct, ref_audio=None, ref_text=None
) -> tuple:
    """(text, speaker or None, language, instruct or None), or a ValueError naming the
    argument: what the checkpoint supports, checked before anything is built."""
    _check_ref_text(ref_text, ref_audio)
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: must be a non-empty string")
    # The same character policy as the phoneme families' (frontend/textcheck.py): the tokenizer
    # raises TypeError on a lone surrogate, and a NUL is refused everywhere, not spoken here
    # and cut there.
    check_text(text, "text")
    if instruct is not None:
        check_text(instruct, "instruct")
    language = "auto" if language is None else str(language)
    supported = ck.spec.supported_languages
    if language.lower() not in supported:
        raise ValueError(f"language: {language!r} is not one of this checkpoint's {supported}")
    if ck.model_type == "base" and ref_audio is None:
        raise ValueError("ref_audio: a Base checkpoint clones a voice: give a 24 kHz reference WAV")
    if ck.model_type != "base" and ref_audio is not None:
        raise ValueError(f"ref_audio: a {ck.model_type} checkpoint does not clone voices")
    if speaker:
        if ck.model_type != "custom_voice":
            raise ValueError(f"speaker: a {ck.model_type} checkpoint has no speakers")
        if speaker.lower() not in ck.spec.speakers:
            raise ValueError(f"speaker: {speaker!r} is not one of {sorted(ck.spec.speakers)}")
    if instruct and not ck.accepts_instruct:
        raise ValueError(
            f"instruct: this {ck.model_type} checkpoint (size {ck.model_size!r}) "
            "ignores instructions"
        )
    return text, speaker or None, language, instruct or None


def check_streaming_text(streaming_text) -> Optional[bool]:
    """The prompt layout a request asks for: True (streaming text), False (whole text) or
    None (the official default of the request's mode, `text.official_streaming_text`).
    A ValueError naming the argument for anything else: 0, 1 or "true" are refused rather
    than read as a layout, so a caller's mistake cannot quietly pick one."""
    if streaming_text is None or isinstance(streaming_text, (bool, np.bool_)):
        return None if streaming_text is None else bool(streaming_text)
    raise ValueError(
        "streaming_text: must be True (streaming-text prompt), False (whole-text prompt) or "
        f"None (the official default for the request's mode), got {streaming_text!r}"
    )


def _check_ref_text(ref_text, ref_audio) -> None:
    """ref_text (the reference clip's transcript) asks for in-context cloning; without it a
    Base checkpoint clones from the x-vector alone."""
    if ref_text is None:
        return
    if not isinstance(ref_text, str) or not ref_text.strip():
        raise ValueError(
            "ref_text: must be a non-empty string (leave it out for x-vector-only cloning)"
        )
    if ref_audio is None:
        raise ValueError("ref_text: is the transcript of ref_audio; give ref_audio too")
    check_text(ref_text, "ref_text")


def calibration_file(entry: Path, name: str, weights: str) -> Path:
    """Where `codecspec calibrate --model DIR --weights W` keeps `name` (offsets.npy,
    tree.json, decision.json): the tree and the decision depend on the graphs' speed,
    so each precision has its own."""
    if weights == "fp32":
        return entry / name
    stem, dot, ext = name.partition(".")
    return entry / f"{stem}.{weights}{dot}{ext}"


AUTO_WEIGHTS = "auto"  # the precision `codecspec calibrate` chose on this device


def resolve_weights(weights: Optional[str], provider: str, entry: Optional[Path] = None) -> str:
    """`weights`, or the default for the provider `provider` resolves to; "auto": the
    precision calibration stored in the built graphs' folder `entry` (precision.py), float32
    where none is stored (or while `entry` is not known yet: "auto" is then kept)."""
    from codecspec.graphs.quantize import check_weights, default_weights
    from codecspec.runtime.providers import resolve

    if weights is None:
        return default_weights(resolve(provider)[0])
    if weights == AUTO_WEIGHTS:
        if entry is None:
            return AUTO_WEIGHTS
        doc = chosen_precision(entry)
        return "fp32" if doc is None else doc["chosen"]
    return check_weights(weights)


class Qwen3TTS:
    """A loaded checkpoint: graphs built (or found in the cache), sessions open.

    `weights`: "fp32", "int8" or "int4" talker and code predictor (graphs.quantize); None =
    the default, fp32 (the official model's numbers; quantised weights are asked for).
    `decoder_precision`: the speech decoder's, "fp32" (None) or "int8" (decoder_int8: the
    audio within a stated error of float32's; the codes are the same either way)."""

    def __init__(
        self,
        ck: Qwen3Checkpoint,
        entry: Path,
        provider="auto",
        threads=None,
        tok=None,
        weights: Optional[str] = None,
        log=None,
        decoder_precision: Optional[str] = None,
    ):
        from codecspec.decode.depth import DepthDecoder

        from .decoder_int8 import check_precision
        from .graphs import weights_graph

        self.ck, self.entry, self.spec = ck, entry, ck.spec
        self.provider, self.threads = provider, threads
        self.weights = resolve_weights(weights, provider, entry)
        self.decoder_precision = check_precision(decoder_precision)
        self.tok = load_text_tokenizer(ck.dir) if tok is None else tok
        self.talker = Talker(
            weights_graph(entry, "talker", self.weights, log, self._talker_block()),
            np.load(entry / "codec_head.npy"),
            provider,
            threads,
        )
        from codecspec.runtime.session import open_session

        self.text_proj = open_session(
            str(entry / "text_proj.onnx"), provider=provider, threads=threads
        )
        # Row lookups only (a frame reads 16 rows): mapped, or for the predictor's tables (126
        # MB at 0.6B) read per row, which keeps them out of resident memory (runtime.npy_rows).
        self.codec_table = np.load(entry / "codec_embedding.npy", mmap_mode="r")
        self.code_tables = open_rows(entry / "code_embedding.npy")
        calib = self._calibration()
        self.depth = DepthDecoder(
            weights_graph(entry, "depth", self.weights, log, *self._depth_layout()),
            provider=provider,
            threads=threads,
            **calib,
        )
        self._pad_row = None
        self._decoder = None
        self._speaker = None
        self._xvector: Optional[np.ndarray] = None
        self._encoder = None
        self._ref_codes: Optional[np.ndarray] = None
        # held by a text stream's worker while it speaks (`text_stream.aspeak`): a runtime
        # handed to the next session waits for the last utterance's worker to stop
        self.speaking = threading.Lock()

    def replica(self) -> Qwen3TTS:
        """A runtime for one more concurrent utterance: its own talker KV cache, depth-loop
        state and per-request rows, sharing this one's ONNX sessions, tables, LM heads and
        speech decoder (nothing is loaded again). One runtime decodes one utterance at a
        time; the serving engine keeps one per slot."""
        from codecspec.decode.depth import DepthDecoder

        r = copy.copy(self)
        t, d = self.talker, self.depth
        r.talker = Talker(t.graph, t.head, prefixes=t.prefixes)
        r.depth = DepthDecoder(
            d.graph, tree=d.tree, offsets=d.offsets, params=d.params, heads=d.bank
        )
        r._pad_row = r._xvector = r._ref_codes = None
        r.speaking = threading.Lock()  # its own: copy.copy would share this one's
        return r

    @classmethod
    def load(
        cls,
        model_dir,
        cache_dir=None,
        provider="auto",
        threads=None,
        rebuild=False,
        log=None,
        weights: Optional[str] = None,
        decoder_precision: Optional[str] = None,
    ):
        from codecspec.pipeline.registry import loading
        from codecspec.runtime.threads import configure

        from .decoder_int8 import check_precision

        # Every command loads a checkpoint through here: a broken folder (truncated
        # safetensors, bad config.json) is then one ModelLoadError line naming the file.
        with loading(model_dir):
            ck = Qwen3Checkpoint(model_dir)
            weights = resolve_weights(weights, provider)  # a bad value fails before any build
            check_precision(decoder_precision)
            tok = load_text_tokenizer(ck.dir)  # before building: a folder without one fails fast
            # The build's probe session would otherwise size the process's shared thread pool
            # first (to the cores), and a `threads` of another size would then be refused.
            configure(threads)
            entry = build_or_load(ck, cache_dir=cache_dir, rebuild=rebuild, log=log)
            return cls(
                ck,
                entry,
                provider=provider,
                threads=threads,
                tok=tok,
                weights=weights,
                log=log,
                decoder_precision=decoder_precision,
            )

    def _depth_layout(self) -> tuple:
        """The code predictor's quantisation block and row multiple: a layout whose rows are
        the same bits alone and in a verify call on this device, so that speculation keeps
        the quantised model's AR law bit for bit (graphs.row_probe.row_exact_layout);
        (None, 1) at fp32."""
        from codecspec.graphs.row_probe import row_exact_layout
        from codecspec.runtime.providers import resolve

        if self.weights == "fp32":
            return None, 1
        cpu = resolve(self.provider)[0] == "CPUExecutionProvider"
        return row_exact_layout(self.weights, "cpu" if cpu else "accelerator", self.threads)

    def _talker_block(self) -> Optional[int]:
        """The talker's quantisation block: one whose rows are the same bits alone and in
        the serving engine's batched step on this device (graphs.row_probe.row_exact_block:
        8 bits in blocks of 64 on AVX-512, where 128 is not), so a served stream stays
        `generate_codes`' while its steps run with others'; None at fp32."""
        from codecspec.graphs.row_probe import row_exact_block
        from codecspec.runtime.providers import resolve

        if self.weights == "fp32":
            return None
        cpu = resolve(self.provider)[0] == "CPUExecutionProvider"
        return row_exact_block(self.weights, "cpu" if cpu else "accelerator", self.threads)

    def calibration_file(self, name: str) -> Path:
        return calibration_file(self.entry, name, self.weights)

    def _calibration(self) -> dict:
        """Offsets and tree from `codecspec calibrate --model DIR`, stored beside the graphs."""
        kw: dict = {}
        off = self.calibration_file("offsets.npy")
        tree = self.calibration_file("tree.json")
        if off.is_file():
            kw["offsets"] = np.load(off)
        if tree.is_file():
            kw["tree"] = cs.DraftTree.from_json(tree.read_text())
        return kw

    # ------------------------------------------------------------------ properties
    @property
    def model_type(self) -> str:
        return self.ck.model_type

    @property
    def speakers(self) -> list[str]:
        return sorted(self.spec.speakers)

    @property
    def languages(self) -> list[str]:
        return self.spec.supported_languages

    @property
    def sample_rate(self) -> int:
        return SAMPLE_RATE

    # ------------------------------------------------------------------ validation
    def check_request(
        self, text, speaker, language, instruct, ref_audio=None, ref_text=None
    ) -> tuple:
        return check_request(self.ck, text, speaker, language, instruct, ref_audio, ref_text)

    def clone_voice(self, ref_audio, ref_text: Optional[str] = None) -> ClonedVoice:
        """A reference recording (and, for in-context cloning, its transcript) encoded once:
        pass the result as `ref_audio` to requests to skip reading and encoding it again."""
        _check_ref_text(ref_text, ref_audio)
        codes = self.reference_codes(ref_audio) if ref_text else None
        return ClonedVoice(self.speaker_vector(ref_audio), ref_text, codes)

    def _voice(self, ref_audio, ref_text) -> Optional[ClonedVoice]:
        if isinstance(ref_audio, ClonedVoice):
            if ref_text is not None:
                raise ValueError("ref_text: a prepared voice (ClonedVoice) has its own")
            return ref_audio
        return None if ref_audio is None else self.clone_voice(ref_audio, ref_text)

    def reference_codes(self, ref_audio) -> np.ndarray:
        """The speech tokenizer's codes [frames, 16] of a reference recording (in-context
        cloning), from the same 24 kHz samples the x-vector is computed on."""
        if self._encoder is None:
            from .encoder import SpeechEncoder

            self._encoder = SpeechEncoder.load(
                self.ck.speech_tokenizer_dir,
                cache_dir=self.entry.parent.parent,
                provider=self.provider,
                threads=self.threads,
            )
        return self._encoder.encode(read_reference(ref_audio))

    def speaker_vector(self, ref_audio) -> np.ndarray:
        """The x-vector of a reference recording (Base checkpoints)."""
        from .graphs import SPEAKER_FILE
        from .speaker import SpeakerEncoder

        wav = read_reference(ref_audio)
        if self._speaker is None:
            with np.load(self.entry / SPEAKER_FILE) as z:
                tensors = {k: z[k] for k in z.files}
            self._speaker = SpeakerEncoder(tensors, self.ck.root.get("speaker_encoder_config"))
        return self._speaker(wav)

    def sampling(
        self,
        temperature=None,
        top_k=None,
        top_p=None,
        *,
        subtalker_temperature=None,
        subtalker_top_k=None,
        subtalker_top_p=None,
    ):
        """(talker params, depth params) from generation_config.json, each argument given
        overriding it for its own model as the official methods' keywords do: temperature,
        top_k and top_p are the talker's, subtalker_* the code predictor's (so temperature=0.7
        leaves the code predictor at the checkpoint's 0.9, as generate_custom_voice does).
        temperature 0 is the deterministic run of both (the official do_sample=False,
        subtalker_dosample=False) unless subtalker_temperature says otherwise; the talker's
        penalty and suppression are kept."""
        gd = self.ck.generation
        t_talk = gd.temperature if gd.do_sample else 0.0
        t_depth = gd.subtalker_temperature if gd.subtalker_dosample else 0.0
        if temperature is not None:
            t_talk = float(temperature)
            t_depth = 0.0 if t_talk == 0.0 else t_depth
        if subtalker_temperature is not None:
            t_depth = float(subtalker_temperature)
        talk = cs.SamplingParams(
            t_talk,
            gd.top_k if top_k is None else top_k,
            gd.top_p if top_p is None else top_p,
            repetition_penalty=gd.repetition_penalty,
        )
        try:
            depth = cs.SamplingParams(
                t_depth,
                gd.subtalker_top_k if subtalker_top_k is None else subtalker_top_k,
                gd.subtalker_top_p if subtalker_top_p is None else subtalker_top_p,
            )
        except ValueError as e:  # name the keyword the caller gave
            raise ValueError(f"subtalker_{e}") from None
        return talk, depth

    # ------------------------------------------------------------------ embeddings
    def _project(self, ids: np.ndarray) -> np.ndarray:
        rows = text_embedding_rows(self.ck, ids)
        return self.text_proj.run(["projected"], {"text_embeds": rows})[0]

    def prompt_embeds(self, p: Prompt) -> tuple[np.ndarray, np.ndarray]:
        """(prefill rows [n, H], trailing rows [m, H])."""
        H = self.spec.hidden_size
        out = np.zeros((len(p), H), np.float32)
        has_text = p.text_ids != NONE
        all_ids = np.concatenate(
            [p.text_ids[has_text], p.trailing_ids, [self.spec.text["tts_pad"]]]
        )
        proj = self._project(all_ids)
        n_text = int(has_text.sum())
        out[has_text] += proj[:n_text]
        trailing = proj[n_text : n_text + len(p.trailing_ids)]
        self._pad_row = proj[-1]
        codec = p.codec_ids
        for i in np.flatnonzero(codec >= 0):
            out[i] += self.codec_table[codec[i]]
        for i in np.flatnonzero(codec == SPEAKER):
            out[i] += self.codec_table[p.speaker_id] if p.speaker_id is not None else self._xvector
        for i, frame in zip(np.flatnonzero(codec == REF_FRAME), self._ref_frames(p)):
            out[i] += self.frame_embed(frame)
        return out, trailing

    def _ref_frames(self, p: Prompt) -> np.ndarray:
        n = int((p.codec_ids == REF_FRAME).sum())
        return self._ref_codes[:n] if n else np.zeros((0, self.spec.num_code_groups), np.int64)

    def frame_embed(self, codes: np.ndarray) -> np.ndarray:
        e = np.array(self.codec_table[codes[0]], np.float32)
        for j in range(1, len(codes)):
            e += self.code_tables[j - 1, codes[j]]
        return e

    # ------------------------------------------------------------------ generation
    def generate_codes(
        self,
        text: str,
        *,
        speaker: Optional[str] = None,
        language: Optional[str] = None,
        instruct: Optional[str] = None,
        ref_audio=None,
        ref_text: Optional[str] = None,
        mode: str = "ar",
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        subtalker_temperature: Optional[float] = None,
        subtalker_top_k: Optional[int] = None,
        subtalker_top_p: Optional[float] = None,
        seed: int = 0,
        max_frames: Optional[int] = None,
        streaming_text: Optional[bool] = None,
    ) -> Qwen3Result:
        """Greedy or sampled codes of one request. Every default is the official method's:
        language "auto", sampling from generation_config.json, and the prompt layout of the
        checkpoint's mode (`streaming_text` None: streaming text for a Base voice clone, as
        generate_voice_clone; whole text for CustomVoice and VoiceDesign, as
        generate_custom_voice / generate_voice_design; True / False choose one)."""
        codes, info = [], {}
        for frame in self.iter_frames(
            text,
            speaker=speaker,
            language=language,
            instruct=instruct,
            ref_audio=ref_audio,
            ref_text=ref_text,
            mode=mode,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            subtalker_temperature=subtalker_temperature,
            subtalker_top_k=subtalker_top_k,
            subtalker_top_p=subtalker_top_p,
            seed=seed,
            max_frames=max_frames,
            streaming_text=streaming_text,
            info=info,
        ):
            codes.append(frame)
        G = self.spec.num_code_groups
        arr = np.asarray(codes, np.int64).reshape(-1, G)
        res = Qwen3Result(arr, info["hit_max_frames"], info["prompt"], info["seconds"])
        res.ref_codes = info.get("ref_codes")
        return res

    def iter_frames(self, text: str, **kw) -> Iterator[np.ndarray]:
        """Codes int64 [G] frame by frame (the order the speech decoder consumes them).
        Keywords: `prepare`'s (speaker, language, instruct, ref_audio, ref_text, mode, the
        talker's and the code predictor's sampling, seed, max_frames, streaming_text, info,
        trace, generator).

        The serving engine's loop with one slot, run in the caller's thread
        (`codecspec.pipeline.loop.run_inline`): the slot's runtime is this one, so its
        `frame_steps` coroutine is answered by this runtime's talker and depth decoder."""
        from codecspec.pipeline.loop import run_inline

        yield from run_inline(Qwen3Steps({0: self}), self.prepare(text, **kw))

    def prepare(
        self,
        text,
        *,
        speaker=None,
        language=None,
        instruct=None,
        ref_audio=None,
        ref_text=None,
        mode="ar",
        seed=0,
        max_frames=None,
        streaming_text=None,
        info: Optional[dict] = None,
        trace: Optional[list] = None,
        generator: Optional[cs.Generator] = None,
        served: bool = False,
        **sampling,
    ) -> Qwen3State:
        """A request checked and its prompt built, once: the stream `frame_steps` runs. The
        one place a Qwen3-TTS request is prepared: `iter_frames`', and with `served` the
        serving engine's (`Qwen3Family.prepare`; a prompt with no room for a frame is then
        refused naming the request's `input`).
        `sampling`: `sampling`'s keywords. `text` may be a TextStream: the prompt then waits
        for the text tokens its rows hold. `info` gets prompt / seconds / hit_max_frames,
        `trace` (talker hidden state, c0) per frame; `generator` draws in place of
        `Generator(seed)` (a fresh `Generator(s)` draws as `seed=s`)."""
        talk, depth = self.sampling(**sampling)
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
        source = text if isinstance(text, TextStream) else None
        shown = "(streamed)" if source is not None else text
        checked, speaker, language, instruct = self.check_request(
            shown, speaker, language, instruct, ref_audio, ref_text
        )
        streaming_text = check_streaming_text(streaming_text)
        if source is not None:
            streaming_text = stream_layout(streaming_text)
        voice = self._voice(ref_audio, ref_text)
        max_new = self.ck.generation.max_new_tokens if max_frames is None else int(max_frames) + 1
        if max_new < 1:
            raise ValueError(f"max_frames: must be >= 0, got {max_frames}")
        ref_text = None if voice is None else voice.ref_text
        ref_frames = 0 if voice is None or voice.ref_codes is None else len(voice.ref_codes)
        ids = None
        if source is not None:  # waits for the first text tokens (or the text's end)
            ids = source.prompt_ids(prompt_body_tokens(self.tok, ref_text, ref_frames))
        p = build_prompt(
            self.tok,
            self.spec,
            checked,
            language=language,
            speaker=speaker,
            instruct=instruct,
            streaming_text=streaming_text,
            speaker_vector=ref_audio is not None,
            ref_text=ref_text,
            ref_frames=ref_frames,
            ids=ids,
        )
        max_new = self._room(p, max_new, served)
        return Qwen3State(
            generator=cs.Generator(seed) if generator is None else generator,
            params=talk,
            speaker=0,
            frames=None,
            expected=1,
            limit=max_new - 1,  # the coroutine's budget ends the stream, served or not
            tokens=len(p.prompt_ids),
            mode=mode,
            text=text,
            prompt=p,
            voice=voice,
            depth_params=depth,
            max_new=max_new,
            info=info,
            trace=trace,
        )

    def _room(self, p: Prompt, max_new: int, served: bool) -> int:
        """At most `max_new` talker tokens, as many as the prompt leaves room for; a
        ValueError where it leaves none (served: no frame, naming the request's `input`)."""
        room = self.talker.max_positions - len(p)
        if served and min(max_new, room) < 2:
            raise ValueError(
                f"input: its prompt takes {len(p)} of the talker's "
                f"{self.talker.max_positions} positions, leaving none for speech"
            )
        if room < 1:
            raise ValueError(
                f"text: {len(p)} prompt positions exceed the talker's budget of "
                f"{self.talker.max_positions - 1}"
            )
        return min(max_new, room)

    def frame_steps(self, s: Qwen3State):
        """The stream `s` (`prepare`'s) on this runtime as a coroutine that hands its graph
        calls out: per frame it yields ("depth", FrameJob) and takes that frame's codes back,
        yields ("frame", codes) for the consumer, then ("talker", next input row) and takes
        the talker's hidden state back (the prefill it runs itself). `iter_frames` answers
        with this runtime's decoder and talker; the serving engine answers its streams' AR
        depth requests with one batched loop (`decode.batched_depth`) and their talker steps
        with one call (`talker_rows`)."""
        self._xvector = None if s.voice is None else s.voice.xvector
        self._ref_codes = None if s.voice is None else s.voice.ref_codes
        self.depth.params = s.depth_params
        spec = self.spec
        sampler = TalkerSampler(
            spec.vocab_size,
            spec.codec["eos"],
            spec.suppressed_ids,
            s.params,
            self.ck.generation.min_new_tokens,
        )
        info = {} if s.info is None else s.info
        info.update(prompt=s.prompt, hit_max_frames=False, ref_codes=self._ref_codes)
        secs = info["seconds"] = {"prefill": 0.0, "talker": 0.0, "depth": 0.0}
        g_talk, g_depth = s.generator.fork(1), s.generator.fork(2)
        t0 = time.perf_counter()
        hidden, text_row = self._prefill(s.text, s.prompt, s.max_new)
        secs["prefill"] = time.perf_counter() - t0
        history: list[int] = []
        eos = self.spec.codec["eos"]
        step = 0
        while True:
            c0 = sampler.sample(self.talker.logits(hidden), history, g_talk)
            history.append(c0)
            if c0 == eos or len(history) >= s.max_new:
                break
            if s.trace is not None:
                s.trace.append((hidden.copy(), c0))
            t1 = time.perf_counter()
            codes = yield "depth", FrameJob(hidden, c0, s.mode, s.depth_params, g_depth)
            t2 = time.perf_counter()
            secs["depth"] += t2 - t1
            yield "frame", codes
            e = self.frame_embed(codes)
            e += text_row(step)
            step += 1
            hidden = yield "talker", e
            secs["talker"] += time.perf_counter() - t2
        # The verdict other families' stop heads give (`StreamState.stopped`), served or
        # not: eos ended it, else the budget did, once its last token was sampled (eos may
        # still be that token, as transformers' generate reads it).
        s.stopped = c0 == eos
        info["hit_max_frames"] = not s.stopped

    def _prefill(self, text, p: Prompt, max_new: int):
        """The talker's hidden state after the prompt, and step -> the text row each frame
        adds (the cache holds the first frames; it grows past them as a frame needs it)."""
        embeds, trailing = self.prompt_embeds(p)
        text_row = self._text_rows(text, p, trailing)
        hidden = self.talker.prefill(
            embeds, capacity=len(p) + min(max_new, TALKER_FIRST_FRAMES), fixed=p.fixed_rows
        )
        return hidden, text_row

    def _text_rows(self, text, p: Prompt, trailing: np.ndarray):
        """step -> the text row frame `step` adds: the trailing rows then tts_pad; for a
        text still arriving when the prompt was built, `TextRows` (waits for each token)."""
        pad = self._pad_row
        rows = lambda step: trailing[step] if step < len(trailing) else pad  # noqa: E731
        if not isinstance(text, TextStream):
            return rows
        if text.rows_from is not None:
            rows = TextRows(text, p, trailing[:-1], self._project, trailing[-1], pad)
        return text.watched(rows)  # a cancelled stream stops at its next frame

    # ------------------------------------------------------------------ text in pieces
    def text_stream(self, chunks=None) -> TextStream:
        """A text that arrives in pieces, to give `generate_codes`, `iter_frames` or
        `stream` in place of the text: over `chunks` (an iterator of str or UTF-8 bytes
        pieces, pulled as frames need text), or fed with `push(piece)` / `end()` from
        another thread. The codes are those of the whole text in the streaming-text layout
        (`streaming_text=True`), whatever the split (text_stream.py)."""
        return TextStream(self.tok, chunks)

    def stream_text(self, chunks, info: Optional[dict] = None, **kw) -> Iterator[np.ndarray]:
        """`stream` of a text that arrives in pieces (`chunks`: str or bytes pieces, e.g. an
        LLM's tokens): audio starts once the first text token is known, and a frame whose
        text token has not come yet waits for it. Keywords as `stream`'s; `streaming_text`
        False (the whole-text layout) is a ValueError."""
        return self.stream(self.text_stream(chunks), info=info, **kw)

    def aspeak(self, stream: TextStream, info: Optional[dict] = None, **kw):
        """Async generator of the audio of `stream` (a `text_stream()` fed elsewhere with
        push / end), made in a worker thread; closing it cancels the stream and returns once
        the worker stopped (`text_stream.aspeak`: the WebSocket endpoint's)."""
        from .text_stream import aspeak

        return aspeak(self, stream, info=info, **kw)

    def astream_text(self, chunks, info: Optional[dict] = None, **kw):
        """`stream_text` as an async generator: `chunks` an async (or plain) iterator of
        pieces, fed from the event loop while the frames are made in a worker thread
        (`text_stream.astream`); closing the generator stops the utterance."""
        from .text_stream import astream

        return astream(self, chunks, info=info, **kw)

    # ------------------------------------------------------------------ audio
    def speech_decoder(self):
        """The 12 Hz speech-tokenizer decoder (families.qwen3_tts.decoder), loaded on use."""
        if self._decoder is None:
            from .decoder import SpeechDecoder

            self._decoder = SpeechDecoder.load(
                self.ck.speech_tokenizer_dir,
                cache_dir=self.entry.parent.parent,
                provider=self.provider,
                precision=self.decoder_precision,
            )
        return self._decoder

    def synthesize(self, text: str, **kw) -> tuple[np.ndarray, Qwen3Result]:
        """(waveform float32 at 24 kHz, the codes result)."""
        r = self.generate_codes(text, **kw)
        return self.waveform(r), r

    def waveform(self, r: Qwen3Result) -> np.ndarray:
        """The audio of a codes result (float32, 24 kHz); after an in-context clone's
        reference, as the official wrapper decodes it."""
        dec = self.speech_decoder()
        if r.ref_codes is not None:
            return _after_reference(dec, r.ref_codes, r.codes)
        wav = dec.decode(r.codes) if len(r.codes) else np.zeros(0, np.float32)
        return np.asarray(wav, np.float32).reshape(-1)

    def stream(
        self, text: str, info: Optional[dict] = None, frames_out: Optional[list] = None, **kw
    ) -> Iterator[np.ndarray]:
        """Float32 audio chunks as frames are made: the decoder's streaming form fed by the
        frame iterator (`iter_frames` arguments; `info` gets prompt / seconds / hit_max_frames;
        `frames_out` gets each frame's codes, int64 [G], as it is made)."""
        dec = self.speech_decoder()
        info = {} if info is None else info
        frames = self.iter_frames(text, info=info, **kw)
        if frames_out is not None:
            frames = _kept(frames, frames_out)
        # The decoder's stream takes blocks of codes [n, 16]: one block per frame made.
        blocks = (f[None, :] for f in frames)
        voice = kw.get("ref_audio")
        if kw.get("ref_text") or (isinstance(voice, ClonedVoice) and voice.ref_codes is not None):
            yield from _stream_after_reference(dec, blocks, info)
            return
        # The first chunk is one frame: the first audio leaves as soon as a frame exists.
        for chunk in dec.stream(blocks, STREAM_CHUNK_FRAMES, first_chunk_frames=1):
            yield np.asarray(chunk, np.float32).reshape(-1)

    def describe(self) -> dict:
        return {
            "model": str(self.ck.dir),
            "type": self.model_type,
            "size": self.ck.model_size,
            "speakers": self.speakers,
            "languages": self.languages,
            "graphs": str(self.entry),
            "weights": self.weights,
        }


def _kept(frames: Iterator[np.ndarray], out: list) -> Iterator[np.ndarray]:
    for f in frames:
        out.append(f)
        yield f


# ---------------------------------------------------------------------- in-context audio
def _after_reference(dec, ref_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The audio of `codes` as generate_voice_clone makes it: the reference codes and the new
    ones decoded as one sequence (the reference is the decoder's left context), then the
    reference's share of the samples cut off by its proportional formula."""
    if not len(codes):
        return np.zeros(0, np.float32)
    wav = np.asarray(dec.decode(np.concatenate([ref_codes, codes])), np.float32).reshape(-1)
    cut = int(len(ref_codes) / max(len(ref_codes) + len(codes), 1) * wav.shape[0])
    return wav[cut:]


def _stream_after_reference(dec, blocks, info: dict, chunk_frames: int = STREAM_CHUNK_FRAMES):
    """Streamed `_after_reference`: the reference codes go through the decoder first (their
    audio dropped), then chunks of new frames: one, doubling up to `chunk_frames`."""
    from .decoder import chunk_sizes

    ds, pending, sizes = None, [], chunk_sizes(1, chunk_frames)
    want = next(sizes)
    for block in blocks:
        if ds is None:  # the reference codes are known once the first frame is made
            ds = dec.open_stream()
            ds.feed(info["ref_codes"])
        pending.append(block)
        if len(pending) == want:
            yield ds.feed(np.concatenate(pending))
            pending, want = [], next(sizes)
    if pending:
        yield ds.feed(np.concatenate(pending))
