"""`codecspec bench`: the depth-loop families, autoregressive vs speculative.

The depth loop alone (`bench_depth_loop`), and the pipeline figures and the record every
such family reports (`depth_record`); the whole pipeline is timed by the one driver
(`codecspec.pipeline.bench`), and what a family reports of it is its own
(`codecspec.families.reference.bench`).

Both modes decode the same frames (h_t, c0 of held-out utterances, shipped as frames.npz) in
one run, interleaved frame by frame so that load drifting on a shared machine hits both alike;
per-frame wall times are summarised by their medians. The same run also times bare graph calls
(the prefill, the AR step and the tree shape, through the decoder's own bound calls) and
predicts the ideal speed-up from them and the measured rounds per frame: the gap between ideal
and measured is what host work (and onnxruntime switching between call shapes) costs.
The interleaving and the bare-call timing are decode/timing.py's (calibration's speed-up map
times with them too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

import codecspec as cs
from codecspec import perf
from codecspec.calibrate.decision import read_decision
from codecspec.decode.depth import DepthDecoder, stage_params
from codecspec.decode.timing import ideal_speedup, interleaved_ar_spec
from codecspec.fidelity import per_position_pvalues
from codecspec.pipeline.family import SamplingOverride, resolve_params

__all__ = [
    "load_frames",
    "load_bench_texts",
    "bench_depth_loop",
    "bench_decoder",
    "depth_reads",
]

BENCH_TEXTS = Path(__file__).with_name("bench_texts.json")


def load_frames(model_dir) -> tuple[np.ndarray, np.ndarray]:
    """(h_t float32 [N, H], c0 int64 [N]) shipped with a model folder."""
    path = Path(model_dir) / "frames.npz"
    if not path.is_file():
        raise FileNotFoundError(f"model_dir: no frames.npz in {model_dir}")
    with np.load(path, allow_pickle=False) as z:
        missing = {"hiddens", "c0s"} - set(z.files)
        if missing:
            raise ValueError(f"model_dir: {path} lacks arrays {sorted(missing)}")
        return z["hiddens"].astype(np.float32), z["c0s"].astype(np.int64)


# a folder without model.json: DepthDecoder's own default law
_DEFAULT_SAMPLING = {"temperature": 0.9, "top_k": 50, "top_p": 1.0}


def _model_params(model_dir, params=None) -> cs.SamplingParams:
    """The depth stage's law of a folder, as its model's loader would resolve `params` (a
    SamplingParams, a SamplingOverride, None). Read here because only the depth decoder is
    opened (no model is loaded to ask)."""
    if isinstance(params, cs.SamplingParams):
        return params  # a whole law: the folder's is not read
    path = Path(model_dir) / "model.json"
    meta = json.loads(path.read_text()) if path.is_file() else {"sampling": _DEFAULT_SAMPLING}
    return stage_params(meta, resolve_params(params, meta))


def bench_depth_loop(
    model_dir,
    frames: int = 300,
    *,
    seed: int = 0,
    provider: str = "auto",
    threads: Optional[int] = None,
    params: Optional[cs.SamplingParams | SamplingOverride] = None,
    progress: bool = True,
    depth: str = "positional",
) -> dict:
    """AR vs speculative on the same frames; keys as documented for `codecspec bench`.
    `params`: sampling (default: the model folder's model.json, else T 0.9, top-k 50; a
    SamplingOverride: its fields over that law).
    `depth`: the folder's "positional" or "shared" depth decoder."""
    from codecspec.decode.shared_depth import check_depth, open_depth_decoder

    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 2:
        raise ValueError(f"frames: expected an int >= 2, got {frames!r}")
    check_depth(depth)
    hiddens, c0s = load_frames(model_dir)
    params = _model_params(model_dir, params)
    dec = open_depth_decoder(model_dir, depth, provider=provider, threads=threads, params=params)
    out = {"depth": depth}
    out.update(
        bench_decoder(dec, hiddens, c0s, frames, seed=seed, params=params, progress=progress)
    )
    return out


def bench_decoder(
    dec: DepthDecoder, hiddens, c0s, frames: int, *, seed: int, params, progress: bool
) -> dict:
    """`bench_depth_loop` on an open decoder and given frames (h_t [N, H], c0 [N])."""
    run = interleaved_ar_spec(dec, hiddens, c0s, frames, seed, progress)
    times, calls = run.times, run.calls
    ar_ms, spec_ms = run.median_ms("ar"), run.median_ms("spec")
    spec_cpf = calls["spec"] / frames
    p = per_position_pvalues(run.codes["ar"][:, 1:], run.codes["spec"][:, 1:], dec.V)
    out = {
        "frames": frames,
        "provider": dec.graph.provider,
        "tree_nodes": dec.tree.num_nodes,
        "ar_host_share": run.host_share("ar"),
        "spec_host_share": run.host_share("spec"),
        "ar_calls_per_frame": calls["ar"] / frames,
        "spec_calls_per_frame": spec_cpf,
        "tokens_per_call": (dec.G - 1) / spec_cpf,
        "ar_ms_per_frame": ar_ms,
        "spec_ms_per_frame": spec_ms,
        "ar_ms_per_frame_mean": float(np.mean(times["ar"])),
        "spec_ms_per_frame_mean": float(np.mean(times["spec"])),
        "speedup": ar_ms / spec_ms,
        "fidelity_min_p": float(p.min()),
        "sampling": {
            "temperature": round(float(params.temperature), 6),
            "top_k": int(params.top_k),
            "top_p": round(float(params.top_p), 6),
        },
        "fidelity_pvalues": [round(float(x), 4) for x in p],
    }
    out.update(ideal_speedup(dec, spec_cpf))
    out["efficiency"] = out["speedup"] / out["ideal_speedup"]
    from codecspec.runtime import session_threads

    out["threads"] = session_threads(dec.graph.session)
    out["tree_depth"] = int(dec.tree.max_depth)
    out["depth_reads"] = depth_reads(dec)
    return out


# ---------------------------------------------------------------------- bytes read
def depth_reads(dec: DepthDecoder) -> Optional[dict]:
    """What the depth loop reads, for `depth_bytes`: the graph's streamed bytes and bytes per
    query row, the host heads' bytes per target / draft head read, the tree's shape."""
    r = dec.graph.weight_reads()
    if r is None:
        return None
    b = dec.bank
    heads = (
        (0, 0)
        if b is None
        else perf.head_bank_bytes(b.num_heads, b.vocab_size, b.hidden_size, b.targets_bf16)
    )
    return {
        "streamed": r.streamed,
        "per_row": r.per_row,
        "head_target": heads[0],
        "head_draft": heads[1],
        "weights": r.weights,
        "codebooks": int(dec.G),
        "tree_nodes": int(dec.tree.num_nodes),
        "tree_depth": int(dec.tree.max_depth),
    }


def depth_bytes(reads: Optional[dict], mode: str, calls_per_frame: float) -> Optional[int]:
    """Weight bytes one frame of the depth loop reads in `mode` ("ar", else speculative)
    at the measured graph calls per frame."""
    if reads is None:
        return None
    graph = perf.GraphReads(reads["streamed"], reads["per_row"], 0)
    by = perf.depth_loop_bytes(
        graph,
        reads["codebooks"],
        None if mode == "ar" else calls_per_frame,
        tree_nodes=reads["tree_nodes"],
        tree_depth=reads["tree_depth"],
        head_bytes=(reads["head_target"], reads["head_draft"]),
    )
    if mode != "ar":
        return by["spec"]
    # AR frames batched into one call per level (a temporal round's frames) read the weights
    # once per call, not once per frame: G - 1 calls per frame unbatched.
    return int(round(by["ar"] * min(1.0, calls_per_frame / (reads["codebooks"] - 1))))


def _graph_file(path: Path) -> Optional[perf.GraphReads]:
    return perf.graph_reads(path) if path.is_file() else None


def codec_reads(path: Path) -> tuple:
    """(bytes read once per utterance, bytes read per frame) by the vocoder: its matrices
    once per decode; of its codebooks one row per level per frame, as float32."""
    per_utt = per_frame = 0
    with np.load(path, allow_pickle=False) as z:
        for k in z.files:
            a = z[k]
            if a.dtype.kind not in "fiu":
                continue
            if k == "codebooks":
                per_frame += a.shape[0] * a.shape[-1] * 4
            else:
                per_utt += a.nbytes
    return per_utt, per_frame


def pipeline_totals(runs: dict, depth_mode: dict, temporal_mode: dict) -> dict:
    """Per mode: frames, utterances, audio seconds, seconds per stage and the graph calls
    of the syntheses in `runs` ({mode: [Synthesis]}), and how each side ran its depth and
    temporal loops ({mode: "ar" | "spec" | "pcg"}), for the bench record."""
    out = {}
    for m, rows in runs.items():
        ts = [r.temporal_stats for r in rows if r.temporal_stats is not None]
        out[m] = {
            "frames": int(sum(r.frames for r in rows)),
            "utterances": len(rows),
            "audio_seconds": float(sum(r.audio_seconds for r in rows)),
            "seconds": {
                "frontend": float(sum(r.frontend_seconds for r in rows)),
                "temporal": float(sum(r.temporal_seconds for r in rows)),
                "depth": float(sum(r.depth_seconds for r in rows)),
                "vocoder": float(sum(r.decode_seconds for r in rows)),
            },
            "depth_calls": int(sum(r.depth_calls for r in rows)),
            "depth_mode": depth_mode[m],
            "temporal_mode": temporal_mode[m],
            "temporal_calls": int(sum(t.target_calls for t in ts)) if ts else None,
            "draft_calls": int(sum(t.draft_calls for t in ts)) if ts else 0,
            "drafted": int(sum(t.drafted for t in ts)) if ts else 0,
        }
    return out


_STAGE_NOTES = {
    "frontend": "espeak-ng and the encoder once per utterance: host work, not weights",
    "vocoder": "Griffin-Lim FFTs: compute-bound, its weights are a few kB per frame",
}
# the pipeline_totals key saying whether a side speculated in that stage
_STAGE_MODE = {"temporal step": "temporal_mode", "depth loop": "depth_mode"}


def _stage_bytes(t: dict, graphs: dict, codec, reads: Optional[dict]) -> dict:
    """Weight bytes per frame of each pipeline stage for one side's `pipeline_totals`:
    the encoder once per utterance, the temporal target (1 + drafted rows per call) and
    draft calls, the depth loop at its calls per frame, the vocoder's codec."""
    n = max(t["frames"], 1)
    enc, tmp, draft = graphs["encoder"], graphs["temporal"], graphs["draft"]
    target_calls = t["temporal_calls"] if t["temporal_calls"] is not None else n
    temporal = [(tmp.per_call(1.0 + t["drafted"] / max(target_calls, 1)), target_calls / n)]
    if draft is not None and t["draft_calls"]:
        temporal.append((draft.per_call(1), t["draft_calls"] / n))
    return {
        "frontend": None if enc is None else enc.per_call(0) * t["utterances"] / n,
        "temporal step": None if tmp is None else perf.per_frame_bytes(temporal),
        "depth loop": depth_bytes(reads, t["depth_mode"], t["depth_calls"] / n),
        "vocoder": None if codec is None else codec[0] * t["utterances"] / n + codec[1],
    }


def pipeline_stages(model_dir, totals: dict, reads: Optional[dict], codec_file: str) -> list:
    """The record's stage rows of a synthesis pipeline (frontend, temporal step, depth loop,
    vocoder) from `pipeline_totals` {"ar": ..., "spec": ...}: ms and weight bytes per frame."""
    d = Path(model_dir)
    graphs = {k: _graph_file(d / f"{k}.onnx") for k in ("encoder", "temporal")}
    graphs["draft"] = _graph_file(d / "draft_temporal.onnx")
    codec = codec_reads(d / codec_file) if (d / codec_file).is_file() else None
    seconds = {"frontend": "frontend", "temporal step": "temporal"}
    seconds.update({"depth loop": "depth", "vocoder": "vocoder"})
    ar, sp = totals["ar"], totals.get("spec")
    by_ar = _stage_bytes(ar, graphs, codec, reads)
    by_sp = None if sp is None else _stage_bytes(sp, graphs, codec, reads)

    def ms(t, name):
        return 1e3 * t["seconds"][seconds[name]] / max(t["frames"], 1)

    out = []
    for name in seconds:
        extra = {"note": _STAGE_NOTES[name]} if name in _STAGE_NOTES else {}
        if sp is not None and sp.get(_STAGE_MODE.get(name, "")) == "ar":
            extra["spec_is_ar"] = True  # the speculative side did not speculate here
        if name == "depth loop" and sp is not None:
            c_ar = ar["depth_calls"] / max(ar["frames"], 1)
            c_sp = sp["depth_calls"] / max(sp["frames"], 1)
            if c_sp < 0.9 * c_ar and sp.get("temporal_mode") != "ar":
                extra["note"] = (
                    f"depth loop, speculative side: a temporal round's frames share each "
                    f"depth call ({c_sp:.1f} calls per frame against {c_ar:.1f})"
                )
        row = perf.stage(
            name,
            ms(ar, name),
            None if sp is None else ms(sp, name),
            by_ar[name],
            None if by_sp is None else by_sp[name],
            **extra,
        )
        out.append(row)
    return out


def depth_alone_stage(res: dict, in_total: bool) -> dict:
    """The depth loop measured alone (bench_decoder's figures) as a record row."""
    reads = res.get("depth_reads")
    return perf.stage(
        "depth loop alone" if not in_total else "depth loop",
        res["ar_ms_per_frame"],
        res["spec_ms_per_frame"],
        depth_bytes(reads, "ar", res["ar_calls_per_frame"]),
        depth_bytes(reads, "spec", res["spec_calls_per_frame"]),
        in_total=in_total,
    )


def depth_record(
    family: str, model_dir, res: dict, bandwidth: float, rss: float, codec_file: str, codecs=None
) -> dict:
    """The bench record of a depth-loop family (before `perf.finish_record`, so that the
    family adds its own keys), from `bench_depth_loop`'s figures and, when it ran, the
    pipeline's (`pipeline_totals`; its codec is `codec_file`). Without a pipeline the depth
    loop alone is the frame; `codecs`: `frame_ms`'s, for the audio per frame."""
    reads = res.get("depth_reads") or {}
    rec = {
        "family": family,
        "model": str(model_dir),
        "provider": res.get("provider"),
        "threads": res.get("threads"),
        "weights": reads.get("weights"),
        "bandwidth_gbps": bandwidth / 1e9,
        "peak_rss_mb": rss,
        "depth_speedup": res.get("speedup"),
        "tokens_per_call": res.get("tokens_per_call"),
        "calibration": {"depth": depth_choice(model_dir, res.get("depth", "positional"))},
    }
    totals = res.get("pipeline_totals")
    if totals is None:  # --no-pipeline: the depth loop is all that ran
        rec["audio_ms_per_frame"] = frame_ms(model_dir, codecs)
        rec["stages"] = [depth_alone_stage(res, in_total=True)]
        rec["pipeline_rtf"] = {"ar": None, "spec": None}
        return rec
    rec["audio_ms_per_frame"] = res["audio_ms_per_frame"]
    stages = pipeline_stages(model_dir, totals, res.get("depth_reads"), codec_file)
    rec["stages"] = stages + [depth_alone_stage(res, in_total=False)]
    rec.update(pipeline_figures(totals))
    return rec


def pipeline_figures(totals: dict) -> dict:
    """ms_per_frame and pipeline_rtf {ar, spec} of the whole pipeline, from its totals."""
    ms, rtf = {}, {}
    for m, t in totals.items():
        s = sum(t["seconds"].values())
        ms[m] = 1e3 * s / max(t["frames"], 1)
        rtf[m] = s / max(t["audio_seconds"], 1e-9)
    return {"ms_per_frame": ms, "pipeline_rtf": rtf}


def depth_choice(model_dir, depth: str = "positional") -> Optional[str]:
    """ "spec" or "ar": what the folder's calibration of that depth decoder decided
    (`calibrate.decision`, beside its device profile); None where it was not calibrated."""
    from codecspec.decode.shared_depth import profile_path

    decision = read_decision(profile_path(Path(model_dir), depth))
    return None if decision.source is None else decision.mode


def frame_ms(model_dir, codecs: Optional[dict] = None) -> Optional[float]:
    """ms of audio per frame from the folder's codec (None: the folder has none). `codecs`:
    codec file name -> the class that loads it, for a family's own codec (default: the v1
    `Codec` of codec.npz; the v2 family passes its codec_v2.npz's)."""
    from codecspec.codec.codec import Codec

    codecs = {"codec.npz": Codec, **(codecs or {})}
    d = Path(model_dir)
    meta = json.loads((d / "model.json").read_text()) if (d / "model.json").is_file() else {}
    names = [meta.get("codec_file"), *codecs]
    name = next((f for f in names if f in codecs and (d / f).is_file()), None)
    if name is None:
        return None
    return 1e3 / codecs[name].load(d / name).frame_rate


# ---------------------------------------------------------------------- whole pipeline
def load_bench_texts(count: Optional[int] = None) -> list:
    """The held-out sentences of the pipeline benchmark (text, language, espeak-ng IPA)."""
    texts = json.loads(BENCH_TEXTS.read_text(encoding="utf-8"))["texts"]
    if count is None:
        return texts
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(texts):
        raise ValueError(f"texts: expected an int in [1, {len(texts)}], got {count!r}")
    return texts[:count]
