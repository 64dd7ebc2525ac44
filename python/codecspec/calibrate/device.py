"""Per-device calibration of the depth-speculation draft tree: the driver, `calibrate()`.

Three measurements, then a choice:

(a) acceptance a[d][r] (acceptance.py): on free-generation frames of the exact model,
    teacher-forced, the probability that the true code at depth d+1 of a round equals the
    rank-r candidate of the draft (top-k of the draft logits of the node before the round's
    root). Every frame also yields the rank of each true code, which lets any tree be
    replayed exactly: the top-k verify walk descends into the child whose token equals the
    code the target samples, and in free generation that code is the recorded one, so
    replaying the walk on the recorded frames gives the empirical calls per frame of that
    tree under the model's own law.
(b) latency (latency.py): median ms of one verify call vs query length (graph call) plus the
    host work of that call (top-k + verify_tree for a tree call, one sample for an AR step).
(c) choice (budget.py): for each node budget N, the greedy tree for a; per-frame time =
    prefill + Σ rounds cost(q_round) (rounds near the frame end use the tree cut to the
    remaining depth) against prefill + (G-2) AR steps; the N with the best simulated
    speed-up wins.

`calibrate()` does everything end to end and writes tree.json, device_profile.json (the
measurements), decision.json (what `auto` acts on: `codecspec.calibrate.decision`; both
profile.py's), the offsets and plots. See docs/calibration.md.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

import codecspec as cs
from codecspec.calibrate.acceptance import Acceptance, measure_acceptance
from codecspec.calibrate.budget import DEFAULT_BUDGETS, BudgetRow, choose_budget
from codecspec.calibrate.data import (
    collect_frames,
    open_with_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.decision import Decision
from codecspec.calibrate.latency import (
    LatencyProfile,
    measure_end_to_end,
    measure_latency,
    measure_overhead,
)
from codecspec.calibrate.offsets import (
    config_hash,
    heads_hash,
    load_offsets,
    offsets_path_for,
    save_offsets,
    split_frames,
    train_offsets,
)
from codecspec.calibrate.profile import (
    params_dict,
    write_device_profile,
    write_speculation_decision,
)

log = logging.getLogger("codecspec.calibrate")

__all__ = ["CalibrationResult", "calibrate"]


@dataclass
class CalibrationResult:
    out_dir: Path
    config: Any
    budget: int
    tree: cs.DraftTree
    offsets: np.ndarray
    acceptance: Acceptance
    acceptance_zero: Acceptance
    latency: LatencyProfile
    rows: list
    train_history: Any = None
    acceptance_medusa: Optional[Acceptance] = None
    ablation: dict = field(default_factory=dict)
    end_to_end: Optional[dict] = None
    profile: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    decision: Optional[Decision] = None  # what `auto` acts on (decision.json)

    @property
    def best(self) -> BudgetRow:
        return next(r for r in self.rows if r.budget == self.budget)

    @property
    def predicted_speedup(self) -> float:
        return self.best.speedup_predicted

    @property
    def simulated_speedup(self) -> float:
        return self.best.speedup_simulated

    def summary(self) -> str:
        b = self.best
        lines = [
            f"chosen N={self.budget}: tokens/call sim {b.simulated_tokens_per_call:.3f} "
            f"(pred {b.predicted_tokens_per_call:.3f}), calls/frame "
            f"{b.simulated_calls_per_frame:.2f}, speed-up sim {b.speedup_simulated:.3f} "
            f"(pred {b.speedup_predicted:.3f}, simple {b.speedup_simple:.3f})",
        ]
        for name, ab in self.ablation.items():
            lines.append(
                f"  {name}: tokens/call {ab['simulated_tokens_per_call']:.3f} "
                f"at N={ab['budget']}, speed-up {ab['speedup_simulated']:.3f}"
            )
        if self.end_to_end:
            e = self.end_to_end
            lines.append(
                f"  measured decoder: {e['ar_ms_per_frame']:.3f} -> "
                f"{e['spec_ms_per_frame']:.3f} ms/frame ({e['speedup']:.3f}x)"
            )
        return "\n".join(lines)


def _ablation_row(acc: Acceptance, latency, budget) -> dict:
    _, rows = choose_budget(acc, latency, [budget])
    r = rows[0]
    return {
        "budget": budget,
        "num_parameters": acc.num_parameters,
        "top1": acc.top(1).tolist(),
        "simulated_tokens_per_call": r.simulated_tokens_per_call,
        "simulated_tokens_per_round": r.simulated_tokens_per_round,
        "predicted_tokens_per_round": r.predicted_tokens_per_round,
        "speedup_simulated": r.speedup_simulated,
    }


def calibrate(
    model_path: Union[str, os.PathLike],
    out_dir: Union[str, os.PathLike],
    *,
    offsets: Union[None, str, os.PathLike, np.ndarray] = None,
    frames: int = 512,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    provider: str = "cpu",
    seed: int = 0,
    params: Optional[cs.SamplingParams] = None,
    threads: Optional[int] = None,
    inputs: Optional[tuple] = None,
    heads: Optional[np.ndarray] = None,
    val_fraction: float = 0.25,
    train_kwargs: Optional[dict] = None,
    medusa: bool = False,
    medusa_kwargs: Optional[dict] = None,
    num_ranks: Optional[int] = None,
    past_len: int = 8,
    latency_repeats: int = 30,
    end_to_end_frames: int = 32,
    overhead_frames: int = 32,
    save_beside_model: bool = True,
    plots: bool = True,
    progress: bool = True,
) -> CalibrationResult:
    """Calibrate the draft tree of `model_path` (a codecspec depth graph) on this device.

    1. frames: `frames` free-generation frames of the exact model (AR, `params`, `seed`) on
       `inputs` = (hiddens [N, H_in], c0s [N]) or synthetic ones; teacher-forced hidden states.
       `heads` [G-1, V, H]: the LM heads, needed only for a heads="hidden" graph without a
       `<model>.heads.npy` sidecar.
    2. offsets: loaded (path) / given (array), or trained on a (1 - val_fraction) share of the
       frames and written to out_dir/offsets.npz (with metadata) and out_dir/offsets.npy (bare
       array, what DepthDecoder.from_dir reads), and beside the model unless disabled.
    3. acceptance on the held-out frames (all frames when offsets were given), for the offsets
       and for zero offsets (and Medusa heads with medusa=True) as ablations.
    4. latency profile for q in {1, 2} ∪ {N + 1}; 5. best N; 6. optional end-to-end check with
       the real decoder; 7. tree.json, device_profile.json (with what int8 / int4
       speculation keeps on this device: `quantised_rows`), decision.json (the one decision
       format, `calibrate.decision`), PNG plots.
    """
    t_start = time.monotonic()
    params = params or cs.SamplingParams(0.9, 50, 1.0)
    run = _open_for_calibration(model_path, out_dir, provider, threads, heads, params, seed)
    run.progress = progress
    _collect_corpus(run, inputs, frames)  # 1.
    if offsets is None:  # 2.
        offs, history, eval_idx = _train_and_save_offsets(
            run, val_fraction, train_kwargs, save_beside_model
        )
    else:
        offs, history = _given_offsets(offsets, run.graph.config, run.heads), None
        eval_idx = np.arange(len(run.codes))
    acc, acc0, acc_med = _acceptances(  # 3.
        run, offs, budgets, num_ranks, eval_idx, medusa, medusa_kwargs, offsets is None
    )
    lat = _calibration_latency(run, budgets, past_len, latency_repeats, overhead_frames)  # 4.
    budget, rows = choose_budget(acc, lat, budgets)  # 5.
    tree = next(r for r in rows if r.budget == budget).tree
    ablation = _ablations(acc, acc0, acc_med, lat, budget)
    e2e = _end_to_end_check(run, tree, offs, end_to_end_frames)  # 6.
    (run.out / "tree.json").write_text(tree.to_json())  # 7.
    run.files["tree"] = str(run.out / "tree.json")
    result = CalibrationResult(
        out_dir=run.out, config=run.graph.config, budget=budget, tree=tree, offsets=offs,
        acceptance=acc, acceptance_zero=acc0, latency=lat, rows=rows, train_history=history,
        acceptance_medusa=acc_med, ablation=ablation, end_to_end=e2e, files=run.files,
    )  # fmt: skip
    result.profile = write_device_profile(result, run, provider, threads, eval_idx, t_start)
    result.decision = write_speculation_decision(result, run)
    _finish_calibration(result, plots=plots)
    return result


@dataclass
class _CalibrationRun:
    """What every calibration step shares: the model, the caller's settings, where files go,
    and (after step 1) the corpus of frames."""

    model_path: Path
    out: Path
    graph: Any
    heads: np.ndarray
    params: Any
    seed: int
    progress: bool = True
    files: dict = field(default_factory=dict)
    hiddens: Any = None
    c0s: Any = None
    codes: Any = None
    z: Any = None


def _open_for_calibration(model_path, out_dir, provider, threads, heads, params, seed):
    """The output folder, the depth graph and its LM heads, checked against each other: every
    later step (frames, offsets, acceptance) multiplies by these heads, so a mismatch must fail
    before any work."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model_path = Path(model_path)
    graph, heads = open_with_heads(model_path, provider, threads, heads)
    return _CalibrationRun(model_path, out, graph, heads, params, seed)


def _collect_corpus(run: _CalibrationRun, inputs, frames: int) -> None:
    """Step 1: free-generation AR frames of the exact model on the caller's inputs (cut to
    `frames`) or synthetic ones, and their teacher-forced hidden states: the data acceptance
    is measured (and offsets trained) on."""
    if inputs is None:
        hiddens, c0s = synthetic_inputs(run.graph.config, frames, run.seed)
    else:
        hiddens, c0s = (np.asarray(x) for x in inputs)
        hiddens, c0s = hiddens[:frames], c0s[:frames]
    gen = cs.Generator(run.seed)
    codes = collect_frames(
        run.graph, hiddens, c0s, gen, "ar", params=run.params, heads=run.heads,
        progress=run.progress,
    )  # fmt: skip
    run.z = teacher_forced_hidden(run.graph, hiddens, c0s, codes, progress=run.progress)
    run.hiddens, run.c0s, run.codes = hiddens, c0s, codes


def _train_and_save_offsets(
    run: _CalibrationRun, val_fraction: float, train_kwargs, save_beside_model: bool
):
    """Step 2: train offsets on a share of the frames and write them (out_dir and, unless
    disabled, beside the model, where DepthDecoder finds them). Returns (offsets, history, the
    frames acceptance is measured on: the held-out ones, or all when none were held out)."""
    c, N = run.graph.config, len(run.codes)
    train_idx, val_idx = split_frames(N, val_fraction, run.seed)
    kw = dict(epochs=20)
    kw.update(train_kwargs or {})
    offs, history = train_offsets(
        run.z, run.codes, run.heads, c.num_draft_offsets, val_frames=val_idx, seed=run.seed,
        progress=run.progress, **kw,
    )  # fmt: skip
    meta = {
        "config_hash": config_hash(c),
        "heads_hash": heads_hash(run.heads),
        "model": run.model_path.name,
        "train_loss": float(np.mean(history.train_loss[-10:])),
        "heldout": history.final,
        "heldout_zero_offsets": history.baseline,
        "frames": N,
        "num_train": history.num_train,
        "sampling": params_dict(run.params),
        "seed": run.seed,
    }
    run.files["offsets"] = str(save_offsets(run.out / "offsets.npz", offs, meta))
    np.save(run.out / "offsets.npy", offs)
    run.files["offsets_npy"] = str(run.out / "offsets.npy")
    if save_beside_model:
        try:
            run.files["offsets_beside_model"] = str(
                save_offsets(offsets_path_for(run.model_path), offs, meta)
            )
        except OSError as e:
            log.warning("could not write offsets beside the model (%s)", e)
    eval_idx = val_idx if len(val_idx) else np.arange(N)
    return offs, history, eval_idx


def _given_offsets(offsets, c, heads) -> np.ndarray:
    """Step 2 with the caller's offsets (a file, checked against the model's hashes, or an
    array), shape checked: the tree search assumes one offset row per draft depth."""
    K, H = c.num_draft_offsets, c.hidden_size
    if isinstance(offsets, (str, os.PathLike)):
        offs, _ = load_offsets(offsets, config=c, heads=heads)
    else:
        offs = np.ascontiguousarray(offsets, np.float32)
    if offs.shape != (K, H):
        raise ValueError(f"offsets: expected shape ({K}, {H}), got {offs.shape}")
    return offs


def _acceptances(
    run: _CalibrationRun, offs, budgets, num_ranks, eval_idx, medusa, medusa_kwargs, heldout
):
    """Step 3: acceptance of the offsets and, as ablations, of zero offsets and (medusa=True) of
    Medusa heads; all on the same frames so the rows compare. Medusa heads validate on the
    held-out frames only when the offsets were trained here (`heldout`)."""
    c, z, codes, heads = run.graph.config, run.z, run.codes, run.heads
    K = c.num_draft_offsets
    M = int(num_ranks or min(max(budgets), c.codebook_size))
    acc = measure_acceptance(z, codes, heads, offs, num_ranks=M, frames=eval_idx)
    acc0 = measure_acceptance(z, codes, heads, None, K=K, num_ranks=M, frames=eval_idx)
    acc_med = None
    if medusa:
        from codecspec.calibrate.medusa import train_medusa

        kw = dict(epochs=20)
        kw.update(medusa_kwargs or {})
        heads_m, _ = train_medusa(
            z, codes, heads, K, val_frames=eval_idx if heldout else None, seed=run.seed,
            progress=run.progress, **kw,
        )  # fmt: skip
        acc_med = measure_acceptance(z, codes, drafter=heads_m, num_ranks=M, frames=eval_idx)
    return acc, acc0, acc_med


def _calibration_latency(run: _CalibrationRun, budgets, past_len, repeats, overhead_frames):
    """Step 4: the latency profile at exactly the query lengths the budgets need (1 for AR, 2 for
    the prefill, N + 1 for every budget N: the tree's nodes plus its root), then the real
    decoder's per-call glue on `overhead_frames` frames."""
    qs = sorted({1, 2} | {int(b) + 1 for b in budgets})
    lat = measure_latency(
        run.graph, qs, past_len=past_len, repeats=repeats, params=run.params, heads=run.heads,
        seed=run.seed, progress=run.progress,
    )  # fmt: skip
    if overhead_frames:
        n = min(int(overhead_frames), len(run.codes))
        measure_overhead(
            run.graph, lat, run.hiddens[:n], run.c0s[:n], params=run.params, heads=run.heads,
            seed=run.seed,
        )  # fmt: skip
    return lat


def _ablations(acc, acc0, acc_med, lat, budget) -> dict:
    """Step 5's comparison: the chosen budget's row for each drafter (zero offsets, Medusa, the
    offsets), in the order device_profile.json has always listed them."""
    ablation = {"zero_offsets": _ablation_row(acc0, lat, budget)}
    if acc_med is not None:
        ablation["medusa"] = _ablation_row(acc_med, lat, budget)
    ablation["offsets"] = _ablation_row(acc, lat, budget)
    return ablation


def _end_to_end_check(run: _CalibrationRun, tree, offs, frames: int) -> Optional[dict]:
    """Step 6: the real decoder, AR vs the chosen tree, on the first `frames` frames (None when
    0); its own seed so it does not replay the corpus's draws."""
    if not frames:
        return None
    n = min(int(frames), len(run.codes))
    return measure_end_to_end(
        run.graph, tree, offs, run.hiddens[:n], run.c0s[:n], params=run.params,
        heads=run.heads, seed=run.seed + 7, progress=run.progress,
    )  # fmt: skip


def _finish_calibration(result: CalibrationResult, *, plots: bool) -> None:
    """Plots (their paths join result.files) and the log lines: a warning when no budget beats
    the AR loop, since the decoder's `auto` will then not speculate."""
    if plots:
        from codecspec.calibrate.plots import write_plots

        for k, p in write_plots(result, result.out_dir).items():
            result.files[k] = str(p)
    if not result.decision.speculate:
        log.warning(
            "no budget beats the AR loop on this device (best %.3fx at N=%d)",
            result.best.speedup_simulated,
            result.budget,
        )
    log.info("calibration:\n%s", result.summary())
