"""Reference model v2 on ONNX Runtime: the two-stage codec LM (docs/reference_model_v2.md).

Per utterance: espeak-ng -> phonemes -> the encoder graph (cross K/V of the target and draft
decoders). Per frame: the temporal step graph reads only the previous frame's c0 (and an
expected progress from the speaking rate) over a ring-buffer cache of its sliding window
(`codecspec.runtime.kv.RingKVCache`) and gives h_t, c0 logits and a stop logit; c0 is sampled,
the depth decoder (AR or tree-speculative) gives c1..c15, and a Bernoulli draw on the stop
logit ends the utterance (a max-length guard stops a text whose stop never fires, and says
so). Codec v2 turns codes into audio. Because a step reads c0 only, n drafted frames can be
scored in one call (`V2Stepper.score`), which the temporal speculation loop builds on.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode, speculation_pays
from codecspec.codec.codec import Codec
from codecspec.decode.depth import COARSE_MODE, MODES, DepthDecoder, stage_params
from codecspec.decode.temporal import Acceptance, TemporalLoop
from codecspec.families.v2.codec import CodecV2
from codecspec.model_store import named_model_dir
from codecspec.pipeline.loop import run_inline
from codecspec.runtime.kv import RingKVCache
from codecspec.runtime.session import open_session
from codecspec.tts.phonemes import phonemize
from codecspec.tts.stream import DEFAULT_CHUNK_FRAMES, AudioStream, FramePlan, stream_model
from codecspec.tts.synthesis import Synthesis
from codecspec.tts.text import BOS, EOS, Frontend, PhonemeModel

__all__ = [
    "V2TTS",
    "V2Stepper",
    "StepBatch",
    "V2FrameDecoder",
    "V2_FILES",
    "V2_FORMAT",
    "default_v2_dir",
    "default_v3_dir",
]

V2_FORMAT = "codecspec-v2-tts/1"
TEMPORAL_MODES = ("ar", "spec")  # and "auto": spec where bench/speculation_sweep.py found
# exact temporal speculation faster than AR on the shipping machine (model.json)
WINDOW_KEY = "codecspec.window"  # step-graph metadata: the window baked into its mask
V2_FILES = (
    "model.json",
    "encoder.onnx",
    "temporal.onnx",
    "draft_temporal.onnx",
    "depth.onnx",
    "depth.heads.npy",
    "c0_embeddings.npy",
)


def default_v2_dir() -> Path:
    return named_model_dir("v2")


def default_v3_dir() -> Path:
    """The shipped aligned model (the v2 family's runtime reading a phoneme track)."""
    return named_model_dir("v3")


def _peek_meta(d: Path) -> dict:
    """model.json as far as it can be read before the folder is checked ({} if absent or
    broken: the checks that follow name what is wrong)."""
    try:
        meta = json.loads((d / "model.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


class V2Stepper:
    """One decoder's step graph (target or draft) over one utterance, with its ring cache.

    `score(prev_tokens)` runs n frames from the next position in one call without storing
    them; `commit(out, n)` stores the first n of them; `step(prev_codes)` is both for one
    frame, the shared frame loop's interface."""

    def __init__(
        self,
        session,
        cross_keys,
        cross_values,
        speaker: int,
        pace,
        start_token: int,
        window: int,
    ):
        inputs = {i.name: i for i in session.get_inputs()}
        capacity = inputs["cache_keys"].shape[3]
        L, _, heads, _, hd = cross_keys.shape
        if not isinstance(capacity, int) or capacity < window:
            raise ValueError(
                f"window: {window} frames do not fit the step graph's cache of {capacity} slots"
            )
        self.cache = RingKVCache(L, heads, capacity, hd)
        self.window = int(window)
        self.session, self.t = session, 0
        self.is_draft = False  # V2TTS.stepper marks the draft LM's (engine batching by graph)
        # v2: r * P, the expected length in frames; v3: the phoneme track u_t itself (frames
        # past its end stay at its last value)
        if np.ndim(pace) == 0:
            self.rate_frames, self.track = float(pace), None
        else:
            self.rate_frames, self.track = float(len(pace)), np.asarray(pace, np.float32)
        self.start_token = int(start_token)
        self.vocab_size = int(start_token)  # c0 codes 0..V-1; V itself is the start token
        self.feeds = {
            "speaker": np.array([speaker], np.int64),
            "cross_keys": cross_keys,
            "cross_values": cross_values,
            "cache_keys": self.cache.keys,
            "cache_values": self.cache.values,
            "cache_positions": self.cache.positions,
        }

    def score(self, prev_tokens) -> tuple:
        """(hidden [n, D], c0 logits [n, V], stop logits [n], new K, new V) of frames
        t..t+n-1 given the c0 before each (prev_tokens [n]; the start token for frame 0)."""
        prev = np.ascontiguousarray(prev_tokens, np.int64).reshape(-1)
        n = len(prev)
        f = self.feeds
        f["prev_tokens"], f["positions"], f["progress"] = self.rows(_padded(prev, MIN_ROWS))
        return first_rows(self.session.run(None, f), n, row_axis=3)

    def rows(self, prev_tokens) -> tuple:
        """(prev_tokens int64 [n], positions int64 [n], progress float32 [n]) of the next n
        frames given the c0 before each."""
        prev = np.ascontiguousarray(prev_tokens, np.int64).reshape(-1)
        pos = self.t + np.arange(len(prev), dtype=np.int64)
        if self.track is None:
            progress = ((pos + 0.5) / self.rate_frames).astype(np.float32)
        else:
            progress = self.track[np.minimum(pos, len(self.track) - 1)]
        return prev, pos, progress

    def commit(self, out: tuple, n: int) -> None:
        """Keep the first n frames of a `score` call in the cache."""
        self.cache.commit(out[3], out[4], self.t + np.arange(n, dtype=np.int64))
        self.t += n

    def rewind(self, frames: int) -> None:
        """Back to `frames` committed frames (drop rejected drafts from the cache)."""
        if not 0 <= frames <= self.t:
            raise ValueError(f"frames: expected 0..{self.t}, got {frames}")
        self.cache.rewind(frames)
        self.t = frames

    def step(self, prev_codes=None):
        prev = self.start_token if prev_codes is None else int(np.asarray(prev_codes)[0, 0])
        out = self.score([prev])
        self.commit(out, 1)
        return out[0][0], out[1][0], out[2][:1]


# Every step call scores at least two rows per stream, a padding row after a lone real one
# (unseen by it: attention within a call is causal). On CPUs whose kernels take another path
# for a single row (MLAS on AVX2 without AVX-512: a one-row attention / projection is computed
# in another summation order), a stream's lone row would otherwise differ in the last bits
# between its own call and a batched call where other streams have more rows, and a served
# stream would not be bit-identical to `generate`. With two rows or more the kernels keep a
# row's bits whatever else the call holds (tests/families/v2/test_v2_step_batch.py).
MIN_ROWS = 2


def _padded(prev: np.ndarray, rows: int) -> np.ndarray:
    return (
        prev
        if len(prev) >= rows
        else np.concatenate([prev, np.zeros(rows - len(prev), prev.dtype)])
    )


def first_rows(out, n: int, row_axis: int) -> tuple:
    """The first n rows of a step call's outputs (hidden, logits, stop: axis 0; new K / V:
    `row_axis`)."""
    h, logits, stop, nk, nv = out
    cut = (slice(None),) * row_axis + (slice(0, n),)
    return h[:n], logits[:n], stop[:n], nk[cut], nv[cut]


class StepBatch:
    """`V2Stepper.score` for several steppers of one step graph in one call of its batch-axis
    variant (`codecspec.families.v2.step_batch`): each stepper's rows padded to the longest, its
    cross K/V to the most phonemes (masked), its ring cache beside the others'. Returns what
    each stepper's own `score` would, bit for bit (see MIN_ROWS), so `commit` and `rewind`
    work unchanged."""

    def __init__(self, session):
        self.session = session
        self.calls = 0
        self._cross = (None, None)  # (the steppers' identities, their padded cross K/V)

    def score(self, requests: list) -> list:
        """[(stepper, prev_tokens)] -> [score output tuple] in the same order."""
        steppers = [st for st, _ in requests]
        B, n = len(requests), max(MIN_ROWS, *(len(p) for _, p in requests))
        prev = np.zeros((B, n), np.int64)
        pos = np.zeros((B, n), np.int64)
        progress = np.zeros((B, n), np.float32)
        for i, (st, p) in enumerate(requests):
            # padding rows continue the stream's positions: past its real rows, unseen by them
            rows = st.rows(list(p) + [0] * (n - len(p)))
            prev[i], pos[i], progress[i] = rows
        cross_k, cross_v, bias = self._cross_for(steppers)
        f = {
            "prev_tokens": prev,
            "progress": progress,
            "positions": pos,
            "speaker": np.concatenate([st.feeds["speaker"] for st in steppers]),
            "cross_keys": cross_k,
            "cross_values": cross_v,
            "cross_bias": bias,
            "cache_keys": np.concatenate([st.cache.keys for st in steppers], axis=1),
            "cache_values": np.concatenate([st.cache.values for st in steppers], axis=1),
            "cache_positions": np.stack([st.cache.positions for st in steppers]),
        }
        h, logits, stop, nk, nv = self.session.run(None, f)
        self.calls += 1
        return [
            (h[i, :m], logits[i, :m], stop[i, :m], nk[:, i : i + 1, :, :m], nv[:, i : i + 1, :, :m])
            for i, m in enumerate(len(p) for _, p in requests)
        ]

    def _cross_for(self, steppers) -> tuple:
        # The same streams call again and again between joins and leaves: pad once. The key
        # holds weak references, not ids: a finished stream's stepper freed and a new one
        # allocated at its address had the same id, and got its padded cross K/V (a served
        # stream then drafted from another utterance's encoding).
        cached, padded = self._cross
        if cached is not None and len(cached) == len(steppers):
            if all(ref() is st for ref, st in zip(cached, steppers)):
                return padded
        key = tuple(weakref.ref(st) for st in steppers)
        ck = [st.feeds["cross_keys"] for st in steppers]
        p = np.array([c.shape[3] for c in ck])
        L, _, heads, _, hd = ck[0].shape
        keys = np.zeros((L, len(ck), heads, int(p.max()), hd), np.float32)
        values = np.zeros_like(keys)
        for i, st in enumerate(steppers):
            keys[:, i, :, : p[i]] = st.feeds["cross_keys"][:, 0]
            values[:, i, :, : p[i]] = st.feeds["cross_values"][:, 0]
        visible = np.arange(p.max())[None, :] < p[:, None]
        bias = np.where(visible, 0.0, -1e9).astype(np.float32)[:, None, None, :]
        self._cross = (key, (keys, values, bias))
        return self._cross[1]


class V2FrameDecoder:
    """c0 by `cs.sample`, c1.. by the depth loop, then the stop head's Bernoulli draw."""

    def __init__(self, tts: V2TTS, mode: str = "ar"):
        self.tts, self.mode = tts, mode
        self.depth_seconds = 0.0

    def decode(self, step_output, generator: cs.Generator):
        h, logits, stop_logit = step_output
        c0 = cs.sample(logits, self.tts.params, generator)
        t0 = time.perf_counter()
        codes = self.tts.depth.decode_frame(h, c0, generator, self.mode)
        self.depth_seconds += time.perf_counter() - t0
        stop = cs.sample_stop(np.asarray(stop_logit, np.float32), generator)
        return codes[None].astype(np.int64), stop


class V2TTS(PhonemeModel):
    """Loads a v2 model folder (V2_FILES; default: the shipped one). Its text side
    (`languages`, `speakers`, `ids`) is the shared `codecspec.tts.text.PhonemeModel`'s.

    depth: "positional" (depth.onnx, the per-position decoder) or "shared" (depth_shared.npz,
    the shared-parameter decoder, `codecspec.decode.shared_depth`); a folder needs the files
    of the one chosen. params: c0's sampling law (default model.json's "sampling");
    depth_params: the depth levels' (`stage_params`: default `params` when given, else
    model.json's "depth_sampling", else its "sampling")."""

    def __init__(
        self,
        model_dir=None,
        provider: str = "auto",
        threads: Optional[int] = None,
        params: Optional[cs.SamplingParams] = None,
        depth: str = "positional",
        depth_params: Optional[cs.SamplingParams] = None,
    ):
        from codecspec.decode.shared_depth import check_depth, depth_files, profile_path

        self.depth_kind = check_depth(depth)
        d = Path(model_dir) if model_dir is not None else default_v2_dir()
        codec_file = _peek_meta(d).get("codec_file", "codec_v2.npz")
        need = [f for f in V2_FILES if f not in depth_files("positional")] + list(
            depth_files(depth)
        )
        need.append(codec_file)
        missing = [f for f in need if not (d / f).is_file()]
        if missing:
            how = "models/recipe/v2.py" + (" shared-depth" if depth == "shared" else "")
            raise FileNotFoundError(
                f"model_dir: {d} lacks {missing} (depth={depth!r}); rebuild it with {how}"
            )
        self.dir = d
        self.meta = _peek_meta(d)
        if self.meta.get("format") != V2_FORMAT:
            raise ValueError(f"model_dir: {d} is not a v2 model ({self.meta.get('format')!r})")
        prof = profile_path(d, depth)
        self._speculation_pays = speculation_pays(prof)
        self.frontend = Frontend.from_dict(self.meta["frontend"])
        self.params = params or cs.SamplingParams(**self.meta["sampling"])
        # v3 ("aligned") reads espeak-ng's phoneme track and speaks through the v1 codec
        self.aligned = self.meta.get("conditioning") == "phoneme_track"
        self.codec = (Codec if codec_file == "codec.npz" else CodecV2).load(d / codec_file)
        self.window = int(self.meta["temporal_config"]["window"])
        self.start_token = int(self.meta["temporal_config"]["c0_vocab_size"])
        self.encoder = open_session(str(d / "encoder.onnx"), provider=provider, threads=threads)
        self.temporal = open_session(str(d / "temporal.onnx"), provider=provider, threads=threads)
        self._check_window(self.temporal, "temporal.onnx")
        self._draft_path = d / "draft_temporal.onnx"
        self._draft = None
        self._session_args = dict(provider=provider, threads=threads)
        self._c0_groups: dict = {}
        from codecspec.decode.shared_depth import open_depth_decoder

        self.depth: DepthDecoder = open_depth_decoder(
            d,
            depth,
            params=stage_params(self.meta, params, depth_params),
            provider=provider,
            threads=threads,
        )
        self._trees = {"exact": self.depth.tree}
        pcg_tree = d / ("tree_pcg.json" if depth == "positional" else "depth_shared.tree_pcg.json")
        if pcg_tree.is_file():  # each depth decoder has its own calibration
            self._trees["pcg"] = cs.DraftTree.from_json(pcg_tree.read_text())
        self._tree_kind = "exact"
        self._round_depth = None
        self._step_batches: dict = {}

    @property
    def depth_params(self) -> cs.SamplingParams:
        """The depth levels' sampling law: the depth decoder's, which every path reads."""
        return self.depth.params

    @property
    def speculation_pays(self) -> bool:
        """What calibration measured (the depth decoder's device profile): did the best tree
        beat AR?"""
        return self._speculation_pays

    def round_depth(self, frames: int):
        """A `BatchedDepth` over the depth decoder with room for `frames` frames, in which a
        round's depth loops run together; None for a decoder without a batched form (the
        shared depth decoder), whose rounds then decode frame by frame."""
        from codecspec.decode.batched_depth import BatchedDepth

        bd = self._round_depth
        if bd is False or (bd is not None and bd.slots >= frames):
            return bd or None
        if getattr(self.depth, "bank", None) is None or self.depth.graph.path is None:
            self._round_depth = False
            return None
        self._round_depth = BatchedDepth(self.depth, max(frames, 8), **self._session_args)
        return self._round_depth

    def step_batch(self, draft: bool) -> StepBatch:
        """The batch-axis variant of the target (or draft) step graph, built on first use."""
        from codecspec.families.v2.step_batch import batch_step_graph

        key = "draft" if draft else "target"
        if key not in self._step_batches:
            import onnx

            path = self._draft_path if draft else self.dir / "temporal.onnx"
            model = batch_step_graph(onnx.load(str(path)))
            session = open_session(model.SerializeToString(), **self._session_args)
            self._step_batches[key] = StepBatch(session)
        return self._step_batches[key]

    def depth_calls(self) -> int:
        """Depth graph calls so far, frame by frame and batched."""
        bd = self._round_depth
        return self.depth.stats.calls + (bd.calls if bd else 0)

    @property
    def draft(self):
        """The draft LM's step session (opened on first use)."""
        if self._draft is None:
            draft = open_session(str(self._draft_path), **self._session_args)
            self._check_window(draft, self._draft_path.name)
            self._check_vocabulary(draft)
            self._draft = draft
        return self._draft

    def _check_vocabulary(self, draft) -> None:
        """A draft LM must propose tokens of the target's c0 vocabulary."""

        def vocab(session):
            return {o.name: o.shape for o in session.get_outputs()}["c0_logits"][-1]

        if vocab(draft) != vocab(self.temporal):
            raise ValueError(
                f"model_dir: the draft LM's c0 vocabulary ({vocab(draft)}) differs from the "
                f"target's ({vocab(self.temporal)})"
            )

    def _check_window(self, session, name: str) -> None:
        """ValueError unless the step graph was exported with model.json's window (its
        metadata) and its ring cache holds at least that many frames."""
        baked = session.get_modelmeta().custom_metadata_map.get(WINDOW_KEY)
        capacity = {i.name: i.shape for i in session.get_inputs()}["cache_keys"][3]
        if baked is not None and int(baked) != self.window:
            raise ValueError(
                f"model_dir: {name} attends over a window of {baked} frames, "
                f"model.json says window {self.window}"
            )
        if not isinstance(capacity, int) or capacity < self.window:
            raise ValueError(
                f"model_dir: {name}'s cache holds {capacity} frames, "
                f"fewer than model.json's window {self.window}"
            )

    def expected_frames(self, num_phonemes: int, language: str, rate: float = 1.0) -> float:
        """r * P: the length the rate input announces (the stop head decides the real one)."""
        if not (isinstance(rate, (int, float)) and 0.25 <= rate <= 4.0):
            raise ValueError(f"rate: expected a number in [0.25, 4], got {rate!r}")
        return max(1.0, num_phonemes * self.meta["frames_per_phoneme"][language] / rate)

    def max_frames_for(self, expected) -> int:
        """The max-length guard: `max_pace` times the announced length (an aligned model's:
        its track's), plus 8 frames."""
        n = expected if np.ndim(expected) == 0 else len(expected)
        return int(math.ceil(self.meta["max_pace"] * n)) + 8

    def espeak_voice(self, language: str, speaker: Optional[str]) -> str:
        """The espeak-ng voice whose timing an aligned model follows (language + variant)."""
        return f"{self.meta['voices'][language]}+{speaker or self.meta['default_speaker']}"

    def phoneme_track(self, text: str, language: str, speaker, rate: float = 1.0):
        """(mnemonics, track u_t) of `text` as espeak-ng times it for this voice; `rate`
        scales the words per minute the model was trained around."""
        from codecspec.tts.aligned import phoneme_track
        from codecspec.tts.espeak import RATE_RANGE, timing

        if not (isinstance(rate, (int, float)) and 0.25 <= rate <= 4.0):
            raise ValueError(f"rate: expected a number in [0.25, 4], got {rate!r}")
        wpm = int(np.clip(round(self.meta["espeak_rate"] * rate), *RATE_RANGE))
        r = timing(text, self.espeak_voice(language, speaker), wpm, self.meta["espeak_pitch"])
        track = phoneme_track(r.starts_ms, r.end_ms, 1000.0 / self.codec.frame_rate)
        return " ".join(r.phonemes), track

    def encode_text(self, text, phonemes, language, speaker):
        """(phonemes, ids with bos/eos, lang id, speaker id, encoder outputs). An aligned
        model's phonemes are espeak-ng mnemonics (`phoneme_track` gives them with timing)."""
        lang_id, spk_id = self.ids(language, speaker)
        if phonemes is None:
            phonemes = (
                self.phoneme_track(text, language, speaker)[0]
                if self.aligned
                else phonemize(text, self.meta["voices"][language])
            )
        ids = self.frontend.vocab.encode(phonemes)
        ids = np.concatenate([[BOS], ids, [EOS]]).astype(np.int64)
        enc = self.encoder.run(
            None,
            {
                "phonemes": ids[None],
                "language": np.array([lang_id], np.int64),
                "speaker": np.array([spk_id], np.int64),
            },
        )
        return phonemes, ids, lang_id, spk_id, enc

    def prepare_text(self, text, phonemes, language, speaker, rate: float = 1.0):
        """`encode_text`'s outputs and the aligned model's phoneme track (else None)."""
        if not self.aligned:
            return self.encode_text(text, phonemes, language, speaker) + (None,)
        if phonemes is not None:
            raise ValueError(
                "phonemes: this model follows espeak-ng's phoneme timing; give text instead"
            )
        self.ids(language, speaker)  # names checked first
        mnemonics, track = self.phoneme_track(text, language, speaker, rate)
        return self.encode_text(None, mnemonics, language, speaker) + (track,)

    def stepper(self, enc, spk_id: int, expected: float, draft: bool = False) -> V2Stepper:
        ck, cv = (enc[2], enc[3]) if draft else (enc[0], enc[1])
        graph = self.draft if draft else self.temporal
        st = V2Stepper(graph, ck, cv, spk_id, expected, self.start_token, self.window)
        st.is_draft = draft
        return st

    def c0_groups(self, theta: float) -> cs.AcousticGroups:
        """Similarity groups of c0 over the target LM's c0 input embeddings (the paper's
        choice for PCG; `self.codec.groups(0, theta)` is the codec-space alternative)."""
        key = float(theta)
        if key not in self._c0_groups:
            emb = np.load(self.dir / "c0_embeddings.npy").astype(np.float32)
            self._c0_groups[key] = cs.AcousticGroups.from_embeddings(emb, key)
        return self._c0_groups[key]

    def _use_tree(self, depth_mode: str) -> None:
        """PCG verification runs on the tree calibrated for group-level acceptance
        (tree_pcg.json) when the folder has one, exact speculation on tree.json."""
        want = "pcg" if depth_mode == COARSE_MODE and self._trees.get("pcg") else "exact"
        if want != self._tree_kind:
            self.depth.set_tree(self._trees[want])
            self._tree_kind = want

    def pcg_c0_groups(self, theta: float, c0_space: Optional[str] = None) -> cs.AcousticGroups:
        """c0 groups for temporal PCG: "embedding" (the target LM's input embeddings, the
        paper's choice) or "codec" (codec v2's c0 code space); None = model.json's
        "pcg_c0_space" (the recipe measures which has non-trivial groups), else embedding."""
        space = c0_space or self.meta.get("pcg_c0_space", "embedding")
        if space not in ("embedding", "codec"):
            raise ValueError(f"c0_space: expected 'embedding' or 'codec', got {space!r}")
        return self.c0_groups(theta) if space == "embedding" else self.codec.groups(0, theta)

    def depth_groups(self, theta: float) -> list:
        """Per-level similarity groups of the codec at cosine θ (for depth mode "pcg")."""
        return [self.codec.groups(k, float(theta)) for k in range(self.codec.n_levels)]

    def temporal_loop(
        self,
        enc,
        spk_id: int,
        expected: float,
        *,
        temporal: str = "ar",
        accept=None,
        draft_len: int = 3,
        depth_mode: str = "ar",
        depth_theta: Optional[float] = None,
        c0_space: Optional[str] = None,
    ) -> TemporalLoop:
        """The round loop over this utterance: temporal "ar" (draft_len 0), "spec" or
        "auto" (spec where the model's measurement found it pays)."""
        if temporal == "auto":
            temporal = "spec" if self.meta.get("temporal_speculation_pays") else "ar"
        if temporal not in TEMPORAL_MODES:
            raise ValueError(
                f"temporal: expected one of {TEMPORAL_MODES + ('auto',)}, got {temporal!r}"
            )
        accept = accept if isinstance(accept, Acceptance) else Acceptance(accept or "exact")
        self._use_tree(depth_mode)
        if depth_mode == COARSE_MODE:
            theta = self.meta.get("pcg_theta", 0.95) if depth_theta is None else depth_theta
            self.depth.set_groups(self.depth_groups(theta))
        groups = None
        spec = temporal == "spec"
        if not spec:  # an AR temporal loop drafts nothing: the rule is the exact AR law
            accept = Acceptance()
        elif accept.rule == "pcg":
            groups = self.pcg_c0_groups(accept.theta, c0_space)
        return TemporalLoop(
            self.stepper(enc, spk_id, expected),
            self.stepper(enc, spk_id, expected, draft=True) if spec else None,
            self.depth,
            self.params,
            depth_params=self.depth_params,
            draft_len=draft_len if spec else 0,
            accept=accept,
            c0_groups=groups,
            depth_mode=depth_mode,
        )

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
        max_frames: Optional[int] = None,
        temporal: str = "auto",
        accept=None,
        draft_len: int = 3,
        depth_theta: Optional[float] = None,
        c0_space: Optional[str] = None,
    ) -> FramePlan:
        """One utterance ready to run: phonemes, the encoder graph and its round loop
        (`TemporalLoop`, as `plan.loop`) on one slot of the serving engine's adapter
        (`V2Family.over`), run inline by `codecspec.pipeline.loop.run_inline`: `plan.frames`
        yields (codes int64 [G], stopped, None) per frame; arguments as in `generate`."""
        from codecspec.families.v2.engine import V2Family, V2State  # they import this module

        if isinstance(max_frames, bool) or not isinstance(max_frames, (int, type(None))):
            raise ValueError(f"max_frames: expected a positive int, got {max_frames!r}")
        mode = auto_mode(mode, self.speculation_pays)
        if mode not in MODES + (COARSE_MODE,):
            raise ValueError(f"mode: must be one of {MODES + (COARSE_MODE, 'auto')}, got {mode!r}")
        t0 = time.perf_counter()
        phonemes, ids, _, spk_id, enc, track = self.prepare_text(
            text, phonemes, language, speaker, rate
        )
        expected = self.expected_frames(len(ids) - 2, language, rate) if track is None else track
        guard = self.max_frames_for(expected) if max_frames is None else max_frames
        loop = self.temporal_loop(
            enc,
            spk_id,
            expected,
            temporal=temporal,
            accept=accept,
            draft_len=draft_len,
            depth_mode=mode,
            depth_theta=depth_theta,
            c0_space=c0_space,
        )
        if guard < 1:
            raise ValueError(f"max_frames: expected a positive int, got {guard!r}")
        g = cs.Generator(seed)
        label = mode if loop.draft_len == 0 else f"spec-{loop.accept.label}/{mode}"
        frontend = time.perf_counter() - t0
        state = V2State(g, self.params, spk_id, None, guard, guard, len(ids), loop=loop)
        family = V2Family.over(self, 1, loop.draft_len, guard)
        frames = ((c, state.stopped, None) for c in run_inline(family, state))
        plan = FramePlan(frames, guard, phonemes, frontend, label)
        plan.loop, plan.state = loop, state
        return plan

    def stream(
        self,
        text: str,
        *,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        split_sentences: bool = False,
        seed: int = 0,
        vocoder: Optional[dict] = None,
        **plan_kwargs,
    ) -> AudioStream:
        """`generate` as a stream of float32 waveform chunks (docs/streaming.md); the plan's
        arguments as in `generate` (the guard per sentence defaults to `max_frames_for`)."""
        return stream_model(
            self,
            text,
            chunk_frames=chunk_frames,
            split_sentences=split_sentences,
            seed=seed,
            vocoder=vocoder,
            **plan_kwargs,
        )

    def generate(
        self,
        text: str,
        *,
        progress: bool = False,
        decode_audio: bool = True,
        **plan_kwargs,
    ) -> Synthesis:
        """Synthesise `text` (or IPA `phonemes`) until the stop head ends it or the guard
        (`max_frames`, default `max_frames_for` the text) does: `Synthesis.hit_max_frames`.

        Keywords (`plan`): language, speaker, seed, rate, phonemes, max_frames; mode: the depth
        loop, "ar" / "spec" (same law) / "pcg" (group law at `depth_theta`) / "auto" (spec
        where calibration found it pays); temporal: "ar" or "spec" (draft LM + one target call
        per round, `draft_len` drafts, `accept` an `Acceptance` or a rule name)."""
        t0 = time.perf_counter()
        plan = self.plan(text, **plan_kwargs)
        t1 = time.perf_counter()
        loop, calls0 = plan.loop, self.depth_calls()
        frames = plan.frames
        if progress:
            from codecspec.progress import bar

            frames = bar(frames, desc=f"synth v2 {plan.mode}", total=plan.max_frames)
        codes = np.stack([c for c, _, _ in frames])
        stopped = plan.state.stopped
        t2 = time.perf_counter()
        seed = plan_kwargs.get("seed", 0)
        wav = self.codec.decode(codes, seed=seed) if decode_audio else None
        st = loop.stats
        return Synthesis(
            codes=codes,
            wav=wav,
            sample_rate=self.codec.sample_rate,
            phonemes=plan.phonemes,
            mode=plan.mode,
            depth_calls=self.depth_calls() - calls0,
            depth_codes=len(codes) * (codes.shape[1] - 1),
            depth_seconds=st.depth_seconds,
            temporal_seconds=t2 - t1 - st.depth_seconds,
            decode_seconds=time.perf_counter() - t2,
            frame_rate=self.codec.frame_rate,
            frontend_seconds=t1 - t0,
            hit_max_frames=not stopped,
            max_frames=plan.max_frames,
            temporal_stats=st,
        )
