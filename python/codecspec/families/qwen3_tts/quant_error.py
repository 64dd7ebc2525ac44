"""What weight-only quantisation does to a checkpoint's logits, against its float32 graphs.

Teacher-forced on the float32 model's own greedy frames of built-in texts, both models score
the same inputs: the talker its c0 logits at every prompt-end and frame position, the code
predictor the logits of c1..c15 of every frame (one causal call over the frame, fed the float32
talker's hidden state, so each stage's error is its own). Per stage: the largest absolute logit
difference, how often the top-1 code agrees, and the mean KL divergence between the two
warped distributions (the checkpoint's own temperature / top-k / top-p over the codes it may
sample, suppressed ids removed: the law sampling draws from; KL(fp32 || quantised), with
the quantised law floored at 1e-12 where the float32 one keeps a code the quantised top-k /
top-p cut).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import codecspec as cs

from .corpus import CALIBRATION_TEXTS, corpus_request
from .pipeline import Qwen3TTS
from .text import build_prompt

__all__ = ["logit_error", "grouping_error", "depth_logits", "talker_logits"]


def depth_logits(dec, hidden: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Logits [G-1, V] of c1..c_{G-1} given the frame's codes, in one causal call."""
    from codecspec.graphs.config import embedding_row, zero_row
    from codecspec.runtime.kv import KVCache

    c, G = dec.config, dec.G
    cache = KVCache.for_graph(dec.graph, 1)
    call = dec.graph.bind(G, *cache.past, 0 if dec.graph.grouped_heads else None)
    call.ids[0] = zero_row(c)
    call.ids[1:] = [embedding_row(c, lv, int(codes[lv])) for lv in range(G - 1)]
    call.embeds[0] = hidden
    call.pos[:] = np.arange(G)
    call.bias[...] = -np.inf
    call.bias[:, 1:] = np.triu(np.full((G, G), -np.inf, np.float32), k=1)
    call.heads[:] = np.maximum(np.arange(G) - 1, 0)
    call.run()
    if dec.bank is None:
        return call.logits[1:].copy()
    return np.stack([dec.bank.logits(lv, call.hidden[lv + 1]) for lv in range(G - 1)])


def talker_logits(tts: Qwen3TTS, prompt, codes: np.ndarray) -> np.ndarray:
    """c0 logits [frames + 1, V] at the prompt's end and after each of `codes`' frames."""
    emb, trailing = tts.prompt_embeds(prompt)
    h = tts.talker.prefill(emb, capacity=len(emb) + len(codes) + 1)
    out = [tts.talker.logits(h)]
    for f, frame in enumerate(codes):
        e = tts.frame_embed(frame) + (trailing[f] if f < len(trailing) else tts._pad_row)
        out.append(tts.talker.logits(tts.talker.step(e)))
    return np.stack(out)


def _compare(ref: np.ndarray, got: np.ndarray, params: cs.SamplingParams) -> dict:
    ref = ref.reshape(-1, ref.shape[-1]).astype(np.float32)
    got = got.reshape(-1, got.shape[-1]).astype(np.float32)
    finite = np.isfinite(ref) & np.isfinite(got)
    kl = []
    for a, b in zip(ref, got):
        p, q = cs.warp(a, params), cs.warp(b, params)
        keep = p > 0
        kl.append(float(np.sum(p[keep] * np.log(p[keep] / np.maximum(q[keep], 1e-12)))))
    return {
        "max_abs": float(np.abs(ref[finite] - got[finite]).max()),
        "top1_agreement": float(np.mean(ref.argmax(-1) == got.argmax(-1))),
        "kl_mean": float(np.mean(kl)),
        "positions": int(len(ref)),
    }


def logit_error(
    model_dir,
    weights: str,
    *,
    texts: int = 3,
    max_frames: int = 24,
    cache_dir=None,
    provider: str = "cpu",
    threads: Optional[int] = None,
    ref_audio=None,
) -> dict:
    """{"talker": {...}, "depth": {...}} errors of `weights` against fp32 (module doc)."""
    kw = dict(cache_dir=cache_dir, provider=provider, threads=threads)
    ref = Qwen3TTS.load(model_dir, weights="fp32", **kw)
    got = Qwen3TTS.load(model_dir, weights=weights, **kw)
    talk_p, depth_p = ref.sampling()
    rows: dict = {"talker": ([], []), "depth": ([], [])}
    for i in range(int(texts)):
        text, lang = CALIBRATION_TEXTS[i % len(CALIBRATION_TEXTS)]
        req = corpus_request(ref, text, lang, i, ref_audio)
        trace: list = []
        codes = np.stack(
            list(
                ref.iter_frames(
                    text, temperature=0, seed=i, max_frames=max_frames, trace=trace, **req
                )
            )
        )
        if req.get("ref_audio") is not None:
            got._xvector = ref._xvector
        p = build_prompt(
            ref.tok,
            ref.spec,
            text,
            language=req.get("language", "auto"),
            speaker=req.get("speaker"),
            instruct=req.get("instruct"),
            speaker_vector=req.get("ref_audio") is not None,
        )
        for name, tts in (("ref", ref), ("got", got)):
            k = 0 if name == "ref" else 1
            rows["talker"][k].append(talker_logits(tts, p, codes))
            rows["depth"][k].append(
                np.stack([depth_logits(tts.depth, h, c) for (h, _), c in zip(trace, codes)])
            )
    out = {"weights": weights, "model": str(ref.ck.dir)}
    for stage, params in (("talker", talk_p), ("depth", depth_p)):
        a, b = (np.concatenate(x) for x in rows[stage])
        if stage == "talker":  # codes the talker never samples are not part of its law
            a[:, ref.spec.suppressed_ids] = b[:, ref.spec.suppressed_ids] = -np.inf
        out[stage] = _compare(a, b, params)
    return out


def grouping_error(
    model_dir,
    weights: str,
    *,
    frames: int = 8,
    cache_dir=None,
    threads: Optional[int] = None,
    seed: int = 0,
) -> dict:
    """How much the code predictor's logits depend on how a frame's positions are grouped
    into graph calls: the AR loop (one position per call, the rest in the cache) against one
    causal call over the whole frame, on random inputs of the checkpoint's shape.

    Float32 graphs differ by rounding only (~1e-6: onnxruntime's attention kernels sum in
    another order for another call shape). Quantised graphs (MatMulNBits, int8 compute)
    round every activation to 8 bits per row, which turns that rounding into whole
    quantisation steps: this is how far a speculative verify call's logits can sit from the
    AR law of the same quantised model. Reported: the largest logit difference, the mean
    total-variation distance of the two sampled laws (the checkpoint's depth sampling
    parameters) and how often the greedy codes agree.
    """
    tts = Qwen3TTS.load(
        model_dir, weights=weights, cache_dir=cache_dir, provider="cpu", threads=threads
    )
    dec = tts.depth
    _, params = tts.sampling()
    saved = dec.params
    dec.params = cs.SamplingParams(0.0, 0, 1.0)
    rng = np.random.default_rng(seed)
    steps: list = []
    orig = dec._run

    def record(call):
        orig(call)
        if call.q == 1:
            steps.append(call.logits[0].copy())

    dec._run = record
    diffs, tvs, agree = [], [], []
    try:
        for _ in range(int(frames)):
            h = rng.standard_normal(dec.config.input_width).astype(np.float32)
            c0 = int(rng.integers(0, dec.config.c0_vocab_size))
            steps.clear()
            codes = dec.decode_frame(h, c0, cs.Generator(0), "ar")
            whole = depth_logits(dec, h, codes)[1:]  # c2.. (c1 comes from the prefill call)
            ar = np.stack(steps)
            diffs.append(float(np.abs(ar - whole).max()))
            for a, b in zip(ar, whole):
                tvs.append(0.5 * float(np.abs(cs.warp(a, params) - cs.warp(b, params)).sum()))
            agree.extend(ar.argmax(-1) == whole.argmax(-1))
    finally:
        del dec._run  # the class's method again
        dec.params = saved
    return {
        "weights": tts.weights,
        "max_abs": float(np.max(diffs)),
        "tv_mean": float(np.mean(tvs)),
        "tv_max": float(np.max(tvs)),
        "argmax_agreement": float(np.mean(agree)),
        "positions": len(tvs),
    }
