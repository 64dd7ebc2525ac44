"""Reference model v2 on ONNX Runtime: the two-stage codec LM (docs/reference_model_v2.md).

Per utterance: espeak-ng -> phonemes -> the encoder graph (cross K/V of the target and draft
decoders). Per frame: the temporal step graph reads only the previous frame's c0 (and an
expected progress from the speaking rate) over a ring-buffer cache of its sliding window
(`codecspec.runtime.kv.RingKVCache`) and gives h_t, c0 logits and a stop logit; c0 is sampled,
the depth decoder (AR or tree-speculative) gives c1..c15, and a Bernoulli draw on the stop
logit ends the utterance (a max-length guard stops a text whose stop never fires, and says
so). Codec v2 turns codes into audio. Because a step reads c0 only, n drafted frames can be
scored in one call (`V2Stepper.score`), which the temporal speculation loop builds on.

`V2TTS` is the loaded folder; `V2Family` the family over it (the `codecspec.pipeline.Family`
the serving engine runs), which prepares every request: `generate` and `stream` are its
`prepare` with one slot, the one loop and the codec (`codecspec.pipeline.stream`). An engine step
runs one round of `TemporalLoop` (`codecspec.decode.temporal`) for every active stream: with
temporal speculation the draft LM's proposals, one target call and the verification; in AR
one target call. Each stream's round is a coroutine (`TemporalLoop.round_steps`) asking for
draft and target calls, and one call of the batch-axis variant of each step graph
(`StepBatch`, `codecspec.families.v2.step_batch`) answers every stream's request of that
kind. Then the depth loops of every frame that step emitted, across all streams, run in one
batched depth loop (`codecspec.decode.batched_depth`), and each stream draws its stop head
frame by frame: a speculative stream hands out several frames per step, bit-identical to
`generate` with the same seed whatever streams share the engine
(tests/families/v2/test_serve_v2.py). The sampling law is the model's calibrated one: a
request's temperature, top_k or top_p is refused, naming the field.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec.calibrate.decision import auto_mode, speculation_pays
from codecspec.codec.codec import Codec
from codecspec.decode.batched_depth import decode_frames
from codecspec.decode.depth import COARSE_MODE, MODES, DepthDecoder, stage_params
from codecspec.decode.temporal import Acceptance, TemporalLoop, run_round
from codecspec.families.v2 import bench, quality
from codecspec.families.v2.codec import CodecV2
from codecspec.frontend.aligned import past_end_position
from codecspec.frontend.phonemes import encode_input, phonemize
from codecspec.frontend.text import BOS, EOS, Frontend, PhonemeModel
from codecspec.model_store import named_model_dir
from codecspec.pipeline.family import (
    Check,
    Family,
    Frame,
    SamplingOverride,
    StreamState,
    guard,
    guard_value,
    length_guard,
    resolve_params,
)
from codecspec.pipeline.result import Synthesis
from codecspec.pipeline.stream import (
    DEFAULT_CHUNK_FRAMES,
    AudioStream,
    run_request,
    speech_request,
    stream_request,
)
from codecspec.runtime.kv import RingKVCache
from codecspec.runtime.session import open_session

__all__ = [
    "V2Family",
    "V2State",
    "V2TTS",
    "V2Stepper",
    "StepBatch",
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
        # v2: r * P, the expected length in frames; v3: the phoneme track u_t itself, and
        # past its end the closing pause (the cross keys cover bos + P phonemes + eos)
        if np.ndim(pace) == 0:
            self.rate_frames, self.track = float(pace), None
        else:
            self.rate_frames, self.track = float(len(pace)), np.asarray(pace, np.float32)
            self.past_end = past_end_position(self.track, cross_keys.shape[3] - 2)
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
            inside = pos < len(self.track)
            progress = np.where(
                inside, self.track[np.minimum(pos, len(self.track) - 1)], self.past_end
            )
            progress = progress.astype(np.float32)
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


class V2TTS(PhonemeModel):
    """Loads a v2 model folder (V2_FILES; default: the shipped one). Its text side
    (`languages`, `speakers`, `ids`) is the shared `codecspec.frontend.text.PhonemeModel`'s.

    depth: "positional" (depth.onnx, the per-position decoder) or "shared" (depth_shared.npz,
    the shared-parameter decoder, `codecspec.decode.shared_depth`); a folder needs the files
    of the one chosen. params: c0's sampling law (default model.json's "sampling"; a
    SamplingOverride: the fields it sets, the others model.json's "sampling");
    depth_params: the depth levels' (`stage_params`: default `params` when given, else
    model.json's "depth_sampling", else its "sampling")."""

    def __init__(
        self,
        model_dir=None,
        provider: str = "auto",
        threads: Optional[int] = None,
        params: Optional[cs.SamplingParams | SamplingOverride] = None,
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
            recipe = "v3" if _peek_meta(d).get("conditioning") == "phoneme_track" else "v2"
            how = f"models/recipe/{recipe}.py" + (" shared-depth" if depth == "shared" else "")
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
        params = resolve_params(params, self.meta)
        self.params = params or cs.SamplingParams(**self.meta["sampling"])
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
        round's depth loops run together (the shared depth decoder's too: its graph is kept
        in memory); None for a decoder without a batched form, whose rounds then decode frame
        by frame."""
        from codecspec.decode.batched_depth import BatchedDepth

        bd = self._round_depth
        if bd is False or (bd is not None and bd.slots >= frames):
            return bd or None
        graph = self.depth.graph
        if getattr(self.depth, "bank", None) is None or (
            graph.path is None and graph.proto is None
        ):
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
        return phonemes, ids, lang_id, spk_id, self.encode_ids(ids, lang_id, spk_id)

    def encode_ids(self, ids: np.ndarray, lang_id: int, spk_id: int) -> list:
        """The encoder's outputs for phoneme ids (bos/eos included): the one encoder call,
        of `encode_text` and of a served request (`V2Family.prepare`)."""
        lang, spk = np.array([lang_id], np.int64), np.array([spk_id], np.int64)
        return self.encoder.run(None, {"phonemes": ids[None], "language": lang, "speaker": spk})

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

    def generate(
        self,
        text: str,
        *,
        progress: bool = False,
        decode_audio: bool = True,
        **keywords,
    ) -> Synthesis:
        """Synthesise `text` (or IPA `phonemes`) until the stop head ends it or the guard
        (`max_frames`, default `max_frames_for` the text) does: `Synthesis.hit_max_frames`.

        Keywords: language, speaker, seed, rate, phonemes, max_frames; mode: the depth
        loop, "ar" / "spec" (same law) / "pcg" (group law at `depth_theta`) / "auto" (spec
        where calibration found it pays); temporal: "ar" or "spec" (draft LM + one target call
        per round, `draft_len` drafts, `accept` an `Acceptance` or a rule name). The request
        is the serving engine's, prepared by `V2Family` with one slot and run by the one
        loop."""
        family, req = self._inline(text, **keywords)
        state, frames, frontend = run_request(family, req)
        calls0 = self.depth_calls()
        if progress:
            from codecspec.progress import bar

            frames = bar(frames, desc=f"synth v2 {state.mode}", total=state.limit)
        t1 = time.perf_counter()
        codes = np.stack(list(frames))
        t2 = time.perf_counter()
        wav = self.codec.decode(codes, seed=req.seed) if decode_audio else None
        st = state.loop.stats
        return Synthesis(
            codes=codes,
            wav=wav,
            sample_rate=self.codec.sample_rate,
            phonemes=state.phonemes,
            mode=state.mode,
            depth_calls=self.depth_calls() - calls0,
            depth_codes=len(codes) * (codes.shape[1] - 1),
            depth_seconds=st.depth_seconds,
            temporal_seconds=t2 - t1 - st.depth_seconds,
            decode_seconds=time.perf_counter() - t2,
            frame_rate=self.codec.frame_rate,
            frontend_seconds=frontend,
            hit_max_frames=not state.stopped,
            max_frames=state.limit,
            temporal_stats=st,
        )

    def stream(
        self,
        text: str,
        *,
        chunk_frames: int = DEFAULT_CHUNK_FRAMES,
        split_sentences: bool = False,
        vocoder: Optional[dict] = None,
        **keywords,
    ) -> AudioStream:
        """`generate` as a stream of float32 waveform chunks (docs/streaming.md); keywords as
        in `generate` (the guard per sentence defaults to `max_frames_for`)."""
        family, req = self._inline(text, **keywords)
        return stream_request(
            family, req, chunk_frames=chunk_frames, split_sentences=split_sentences, vocoder=vocoder
        )

    def _inline(
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
        **loops,
    ) -> tuple:
        """(the one-slot family with `generate`'s loop keywords, the request): `mode` is
        the depth loop's, `temporal` the temporal loop's."""
        req = speech_request(
            text,
            phonemes,
            speaker=speaker,
            rate=rate,
            language=language,
            mode=mode,
            seed=seed,
            max_frames=max_frames,
        )
        return V2Family(self, loops=dict(loops, temporal=temporal)), req


DRAFT_LEN = 3  # drafts per temporal round (V2TTS.temporal_loop's default)


@dataclass
class V2State(StreamState):
    plan: tuple = ()  # (encoder outputs, speaker id, expected frames, mode) until the slot
    loop: Optional[object] = None  # the stream's TemporalLoop
    stopped: bool = False  # the stop head ended the stream (not the max-length guard)


class V2Family(Family):
    """`V2TTS` in the engine: one temporal round per stream per step, all the step's frames
    through one batched depth loop."""

    name = "v2"
    formats = ("codecspec-v2-tts/1",)
    model_names = ("codecspec-v2",)
    known_length = False  # the stop head decides
    modes = ("ar", "spec")
    # The one-stream cases of the batched step (every step of `V2TTS.generate`, and of a lone
    # served stream): the stream's own step graphs instead of their batch-axis variants, and
    # one frame's depth loop on the decoder itself instead of the batched loop. The same bits
    # either way (`StepBatch`, `decode_frames`); they stay because they pay: without them
    # v3's generate took ~7% longer per frame with its default loops and ~13% in AR
    # (medians of per-sentence ratios, 24 interleaved sentences each, 2-core CPU).
    solo_graphs = True
    solo_depth = True

    # the commands' questions: its speculation flags and LOOPS[/ACCEPT] modes (quality.py)
    request_options = staticmethod(quality.speculation_options)
    quality_mode = staticmethod(quality.mode_kwargs)
    quality_modes = staticmethod(quality.bench_modes)
    # `codecspec bench`: its depth loop alone, then the pipeline's sides and keys (bench.py)
    bench_depth_loop = True
    bench_requests = staticmethod(bench.bench_requests)
    bench_sides = staticmethod(bench.bench_sides)
    bench_keys, bench_record = staticmethod(bench.bench_keys), staticmethod(bench.record)

    def __init__(self, tts: V2TTS, slots=1, max_frames=None, max_phonemes=None, loops=None):
        """Over a loaded `tts`: `slots` streams of at most `max_frames` frames and
        `max_phonemes` ids each. Without limits it is `generate`'s: its `loops` keywords
        (temporal, accept, draft_len, depth_theta, c0_space: `V2TTS.temporal_loop`'s) set
        every stream's round loop, its depth mode may be "pcg" too, and IPA symbols not in
        the vocabulary read as unknown, as a Python caller's always were (a client's are
        refused). A served stream's loops follow its `mode` alone."""
        self.tts = tts
        self.inline = max_frames is None
        self.loops = {"draft_len": DRAFT_LEN, **(loops or {})}
        if self.inline:
            self.modes = MODES + (COARSE_MODE,)
        if tts.aligned:  # reference model v3: the same runtime, its own name
            self.name, self.model_names = "v3", ("codecspec-v3",)
        self.max_frames, self.max_phonemes = max_frames, max_phonemes
        self.codec = tts.codec
        self.sample_rate = int(self.codec.sample_rate)
        self.frame_rate = float(self.codec.frame_rate)
        self.hop = int(round(self.sample_rate / self.frame_rate))
        # room for every slot's longest round
        self.depth = tts.round_depth(slots * (self.loops["draft_len"] + 1))
        self.stream_steps = 0

    @classmethod
    def open(cls, folder, slots, max_frames, max_phonemes, provider, threads) -> V2Family:
        tts = V2TTS(folder, provider=provider, threads=threads)
        return cls(tts, slots, max_frames, max_phonemes)

    def check(self, req) -> None:
        super().check(req)
        for name in ("temperature", "top_k", "top_p"):
            if getattr(req, name) is not None:
                raise ValueError(f"{name}: the v2 family serves its calibrated sampling law only")

    def params(self, req) -> cs.SamplingParams:
        return self.tts.params

    def prepare(self, req, generator: cs.Generator) -> V2State:
        tts = self.tts
        lang_id, spk_id = tts.ids(req.language, req.voice)
        if tts.aligned:  # v3: the pace is espeak-ng's phoneme track of the text
            ipa, ids, enc, expected = self._aligned_input(req)
        else:
            ipa, ids = encode_input(tts, req, self.max_phonemes, strict=not self.inline)
            expected = tts.expected_frames(len(ids) - 2, req.language, float(req.speed))
        limit = length_guard(req, tts.max_frames_for(expected))
        if self.max_frames is not None and limit > self.max_frames:
            raise ValueError(f"input: may need {limit} frames, more than {self.max_frames}")
        if not tts.aligned:  # encoded once the request is known to fit
            enc = tts.encode_ids(ids, lang_id, spk_id)
        # mode "auto": the depth loop's calibration, and the temporal loop's measurement in
        # model.json; a served request's explicit mode sets both loops, generate's `temporal`
        # keyword the temporal one
        depth = auto_mode(req.mode, tts.speculation_pays)
        temporal = self.loops.get("temporal") or ("auto" if req.mode == "auto" else req.mode)
        return V2State(
            generator=generator,
            params=tts.params,
            speaker=spk_id,
            frames=None,
            expected=int(np.ceil(expected if np.ndim(expected) == 0 else len(expected))),
            limit=limit,
            tokens=len(ids),
            phonemes=ipa,
            plan=(enc, spk_id, expected, depth, temporal),
        )

    def _aligned_input(self, req):
        """(mnemonics, ids, encoder outputs, phoneme track) of a request to an aligned model:
        text only (its phonemes and their timing both come from espeak-ng)."""
        if req.input_format != "text":  # named as its caller gave it
            name = "phonemes" if self.inline else "input_format"
            raise ValueError(f"{name}: this model reads text (espeak-ng times its phonemes)")
        ipa, ids, _, _, enc, track = self.tts.prepare_text(
            req.input, None, req.language, req.voice, float(req.speed)
        )
        if self.max_phonemes is not None and len(ids) > self.max_phonemes:
            raise ValueError(f"input: {len(ids) - 2} phonemes, more than the limit")
        return ipa, ids, enc, track

    def load(self, slot: int, state: V2State) -> None:
        enc, spk_id, expected, depth, temporal = state.plan
        state.plan = ()
        loops = dict(self.loops, temporal=temporal)
        state.loop = loop = self.tts.temporal_loop(enc, spk_id, expected, depth_mode=depth, **loops)
        state.mode = depth if loop.draft_len == 0 else f"spec-{loop.accept.label}/{depth}"

    def step(self, streams: list, check: Check) -> list:
        frames: list = [None] * len(streams)
        rounds, jobs = [], []
        for i, (s, rnd) in enumerate(zip(streams, self._rounds(streams))):
            error = rnd if isinstance(rnd, Exception) else guard(partial(check, s, rnd.hidden))
            if error is not None:
                frames[i] = Frame(error=error)
                continue
            rounds.append((i, rnd, len(jobs)))
            jobs += s.state.loop.frame_jobs(rnd, s.state.generator)
        t0 = time.perf_counter()
        codes = self._depth(jobs)
        dt = time.perf_counter() - t0
        for i, rnd, at in rounds:
            # the step's depth loops ran together: each stream's stats count the call
            streams[i].state.loop.stats.depth_seconds += dt
            frames[i] = self._finish(streams[i], rnd, codes[at : at + len(rnd)])
        return frames

    def _rounds(self, streams: list) -> list:
        """Every stream's round (or the exception that ended it), their graph calls batched:
        each stream's `round_steps` coroutine asks for draft and target calls; all pending
        draft requests run as one call of the draft graph, and the target requests wait
        until no stream drafts any more, so they all run as one target call."""
        steps = [s.state.loop.round_steps(s.state.generator, s.state.limit) for s in streams]
        if len(steps) == 1 and self.solo_graphs:  # one stream: its own graphs (see solo_graphs)
            return [guard_value(lambda: run_round(steps[0]))]
        results: list = [None] * len(streams)
        pending: dict = {}

        def advance(i: int, value) -> None:
            try:
                pending[i] = steps[i].send(value)
            except StopIteration as done:
                results[i] = done.value
            except Exception as e:  # this stream's own failure (its verification, its input)
                results[i] = e

        for i in range(len(steps)):
            advance(i, None)
        while pending:
            drafts = [i for i, (st, _) in pending.items() if st.is_draft]
            group = drafts or list(pending)
            outs = self.tts.step_batch(draft=bool(drafts)).score([pending.pop(i) for i in group])
            for i, out in zip(group, outs):
                advance(i, out)
        return results

    def _depth(self, jobs: list) -> list:
        if self.depth is not None and not (len(jobs) == 1 and self.solo_depth):
            return decode_frames(self.depth, jobs)
        # a depth decoder without a batched form, or one frame: frame by frame, same generators
        dec = self.tts.depth
        return [
            guard_value(lambda j=j: dec.decode_frame(j.hidden, j.c0, j.generator, j.mode))
            for j in jobs
        ]

    def _finish(self, s, rnd, codes: list) -> Frame:
        st = s.state
        box = {}
        error = guard(lambda: box.update(out=st.loop.finish_round(rnd, codes, st.generator)))
        if error is not None:
            return Frame(error=error)
        out, stopped = box["out"]
        st.stopped = stopped
        self.stream_steps += 1
        ended = stopped or len(st.loop.c0s) >= st.limit
        return Frame(codes=out, ended=ended)

    def prebuffer_steps(self, state: V2State) -> int:
        return 1 if state.loop is not None and state.loop.draft_len > 0 else 0

    def counters(self) -> dict:
        # the frame stage's graph calls: the batched depth loop's (as for the reference family)
        d = self.depth
        if d is None:
            s = self.tts.depth.stats
            return {"calls": s.calls, "lane_calls": s.calls, "codes": s.codes}
        return {"calls": d.calls, "lane_calls": d.lane_calls, "codes": d.codes_out}
