"""Drafter ablation (the paper's table): head reuse vs learned offsets vs Medusa heads.

The offsets and the Medusa heads are trained on the same train split of the model's own
free-generation frames; all three drafters are then measured on the same held-out frames. For
every node budget N each drafter gets the greedy tree of its own acceptance matrix, replayed on
the held-out frames (`simulate_tree`: the exact tokens per verify call of the top-k walk) and
predicted under the independence model (`predict_tree`). No latency is measured: tokens per
call depends on the drafter and the tree, not on the device, so the table transfers across
machines.

The claim under test: offsets reach >= 95% of Medusa's tokens per call with < 1% of its
parameters, and clearly beat plain head reuse.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

import codecspec as cs
from codecspec.calibrate.acceptance import Acceptance, measure_acceptance
from codecspec.calibrate.budget import predict_tree, simulate_tree
from codecspec.calibrate.data import (
    collect_frames,
    open_with_heads,
    synthetic_inputs,
    teacher_forced_hidden,
)
from codecspec.calibrate.medusa import train_medusa
from codecspec.calibrate.offsets import OffsetDrafter, split_frames, train_offsets
from codecspec.calibrate.profile import params_dict, utc_now

log = logging.getLogger("codecspec.train")

__all__ = ["AblationResult", "AblationRow", "ablate", "plot_ablation"]

ABLATION_FORMAT = "codecspec.ablation"
ABLATION_VERSION = 1
DRAFTERS = ("head_reuse", "offsets", "medusa")
LABELS = {"head_reuse": "head reuse", "offsets": "offsets", "medusa": "Medusa"}
TARGET_RATIO = 0.95  # offsets / Medusa tokens per call
TARGET_PARAM_FRACTION = 0.01  # offsets / Medusa parameters
# "Clearly beat head reuse", made concrete: at least this relative gain in tokens per call. A
# judgment call: on a few hundred held-out frames, smaller gains are easily replay noise.
TARGET_MIN_GAIN = 0.02


@dataclass
class AblationRow:
    """One drafter at one node budget."""

    drafter: str
    budget: int
    nodes: int  # incl. the root
    max_depth: int
    simulated_tokens_per_call: float
    predicted_tokens_per_call: float
    simulated_calls_per_frame: float
    simulated_tokens_per_round: float
    num_parameters: int
    paths: list = field(default_factory=list, repr=False)


@dataclass
class AblationResult:
    out_dir: Path
    config: Any
    budgets: list
    rows: list  # AblationRow, drafter-major in DRAFTERS order, budgets ascending
    acceptance: dict  # drafter -> Acceptance (held-out frames)
    num_parameters: dict  # drafter -> parameters, plus "lm_heads" for reference
    meta: dict = field(default_factory=dict)  # sampling, seed, frame counts, training, timing
    files: dict = field(default_factory=dict)

    def row(self, drafter: str, budget: int) -> AblationRow:
        return next(r for r in self.rows if r.drafter == drafter and r.budget == budget)

    def tokens_per_call(self, drafter: str) -> list:
        """Simulated tokens per call of `drafter`, one per budget."""
        return [self.row(drafter, n).simulated_tokens_per_call for n in self.budgets]

    def ratios(self) -> dict:
        """N -> offsets / Medusa simulated tokens per call."""
        off, med = self.tokens_per_call("offsets"), self.tokens_per_call("medusa")
        return {n: o / m for n, o, m in zip(self.budgets, off, med)}

    def target(self) -> dict:
        """How the offsets fare against the claim (>= 95% of Medusa, < 1% of its parameters,
        >= 2% more tokens per call than head reuse), per budget."""
        p = self.num_parameters
        frac = p["offsets"] / max(p["medusa"], 1)
        off, reuse = self.tokens_per_call("offsets"), self.tokens_per_call("head_reuse")
        per = {}
        for n, r, o, h in zip(self.budgets, self.ratios().values(), off, reuse):
            gain = o / h - 1.0
            met = r >= TARGET_RATIO and frac < TARGET_PARAM_FRACTION and gain >= TARGET_MIN_GAIN
            per[n] = {"ratio_vs_medusa": r, "gain_vs_head_reuse": gain, "met": bool(met)}
        return {
            "min_ratio_vs_medusa": TARGET_RATIO,
            "max_param_fraction": TARGET_PARAM_FRACTION,
            "min_gain_vs_head_reuse": TARGET_MIN_GAIN,
            "param_fraction": frac,
            "per_budget": per,
            "met_at": [n for n in self.budgets if per[n]["met"]],
        }

    def to_dict(self) -> dict:
        return {
            "format": ABLATION_FORMAT,
            "version": ABLATION_VERSION,
            **self.meta,
            "config": self.config.to_dict(),
            "budgets": list(self.budgets),
            "num_parameters": dict(self.num_parameters),
            "drafters": {k: a.to_dict() for k, a in self.acceptance.items()},
            "rows": [asdict(r) for r in self.rows],
            "ratio_offsets_vs_medusa": {str(n): r for n, r in self.ratios().items()},
            "target": self.target(),
            "files": dict(self.files),
        }

    def markdown(self) -> str:
        G, K = self.config.num_codebooks, self.config.num_draft_offsets
        held = self.meta.get("frames", {}).get("heldout", "?")
        head = "| N | " + " | ".join(LABELS[d] for d in DRAFTERS) + " | offsets ÷ Medusa |"
        lines = [
            f"Tokens per verify call (replayed on {held} held-out frames; G={G}, K={K}; "
            "AR = 1.00):",
            "",
            head,
            "|" + "---:|" * (len(DRAFTERS) + 2),
        ]
        ratios = self.ratios()
        for n in self.budgets:
            cells = [f"{self.row(d, n).simulated_tokens_per_call:.3f}" for d in DRAFTERS]
            lines.append(f"| {n} | " + " | ".join(cells) + f" | {100 * ratios[n]:.1f}% |")
        p = self.num_parameters
        lines += ["", _params_line(p, K, self.config.hidden_size)]
        return "\n".join(lines)

    def summary(self) -> str:
        t = self.target()
        r = list(self.ratios().values())
        g = [v["gain_vs_head_reuse"] for v in t["per_budget"].values()]
        met = ", ".join(map(str, t["met_at"])) or "none"
        return (
            f"offsets reach {100 * min(r):.1f}-{100 * max(r):.1f}% of Medusa's tokens per call "
            f"with {100 * t['param_fraction']:.3g}% of its parameters; "
            f"{100 * min(g):+.1f} to {100 * max(g):+.1f}% tokens per call vs head reuse; "
            f"target met at N = {met}"
        )


def _params_line(p: dict, K: int, H: int) -> str:
    frac = p["offsets"] / max(p["medusa"], 1)
    return (
        f"Parameters: head reuse 0, offsets {p['offsets']:,} (K×H = {K}×{H}), "
        f"Medusa {p['medusa']:,}; offsets = {100 * frac:.3g}% of Medusa "
        f"(LM heads, shared by all: {p['lm_heads']:,})."
    )


# ---------------------------------------------------------------------- steps
def _check_budgets(budgets) -> list:
    try:
        out = sorted({int(b) for b in budgets})
    except (TypeError, ValueError) as e:
        raise ValueError(f"budgets: expected node counts >= 1, got {budgets!r}") from e
    if not out or out[0] < 1:
        raise ValueError(f"budgets: expected a non-empty list of node counts >= 1, got {budgets}")
    return out


def _inputs(config, inputs, frames: int, seed: int):
    """(hiddens, c0s) of at most `frames` frames: given ones, or synthetic."""
    if inputs is None:
        return synthetic_inputs(config, frames, seed)
    hiddens, c0s = (np.asarray(x) for x in inputs)
    if hiddens.ndim != 2 or c0s.shape != (hiddens.shape[0],):
        raise ValueError(
            f"inputs: expected (hiddens [N, H_in], c0s [N]), got {hiddens.shape}, {c0s.shape}"
        )
    hiddens, c0s = hiddens[:frames], c0s[:frames]
    if len(c0s) < 2:
        raise ValueError(f"inputs: need >= 2 frames (train + held-out), got {len(c0s)}")
    return hiddens.astype(np.float32), c0s.astype(np.int64)


def _train(z, codes, heads, K, select_idx, seed, train_kwargs, medusa_kwargs, progress):
    """The two trained drafters, fit on the frames outside `select_idx` (same split for both);
    Medusa keeps its best checkpoint on `select_idx`, which the measurement never sees."""
    kw = {"epochs": 20, **(train_kwargs or {})}
    offs, h_off = train_offsets(
        z, codes, heads, K, val_frames=select_idx, seed=seed, progress=progress, **kw
    )
    kw = {"epochs": 20, "keep_best": True, **(medusa_kwargs or {})}
    med, h_med = train_medusa(
        z, codes, heads, K, val_frames=select_idx, seed=seed, progress=progress, **kw
    )
    drafters = {
        "head_reuse": OffsetDrafter(heads, np.zeros_like(offs), "head_reuse"),
        "offsets": OffsetDrafter(heads, offs, "offsets"),
        "medusa": med,
    }
    return drafters, {"offsets": h_off, "medusa": h_med}


def _measure(drafters, z, codes, val_idx, M, progress) -> dict:
    acc = {}
    for name, d in drafters.items():
        acc[name] = measure_acceptance(
            z, codes, drafter=d, num_ranks=M, frames=val_idx, progress=progress
        )
    # Head reuse drafts through zero "offsets": nothing is learned, so nothing is counted.
    acc["head_reuse"].num_parameters = 0
    return acc


def _rows(name: str, acc: Acceptance, budgets, K: int, G: int) -> list:
    rows = []
    for n in budgets:
        tree = cs.DraftTree.greedy(acc.matrix, n, max_depth=K)
        sim = simulate_tree(tree, acc.ranks)
        pred = predict_tree(tree, acc.matrix, G)
        rows.append(
            AblationRow(
                drafter=name,
                budget=n,
                nodes=tree.num_nodes,
                max_depth=tree.max_depth,
                simulated_tokens_per_call=sim.tokens_per_call,
                predicted_tokens_per_call=pred["tokens_per_call"],
                simulated_calls_per_frame=sim.calls_per_frame,
                simulated_tokens_per_round=sim.tokens_per_round,
                num_parameters=acc.num_parameters,
                paths=[list(p) for p in tree.paths],
            )
        )
    return rows


def _training_dict(h) -> dict:
    return {"final": h.final, "baseline": h.baseline, "steps": len(h.steps), "seconds": h.seconds}


def _write(result: AblationResult, plots: bool) -> None:
    out = result.out_dir
    result.files["markdown"] = str(out / "ablation.md")
    (out / "ablation.md").write_text(result.markdown() + "\n", encoding="utf-8")
    if plots:
        from codecspec.calibrate.plots import have_matplotlib

        if have_matplotlib():
            result.files["plot"] = str(plot_ablation(result, out / "ablation.png"))
        else:
            log.info("matplotlib is not installed: ablation plot skipped")
    # Last, so that the JSON lists every file written.
    result.files["json"] = str(out / "ablation.json")
    (out / "ablation.json").write_text(json.dumps(result.to_dict(), indent=1))


def plot_ablation(result: AblationResult, path):
    """Tokens per call vs N (log2 axis), one line per drafter; dashed: independence model."""
    from codecspec.calibrate.plots import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    n = result.budgets
    for d, style in zip(DRAFTERS, ("o-", "s-", "^-")):
        p = result.num_parameters[d]
        (line,) = ax.plot(n, result.tokens_per_call(d), style, label=f"{LABELS[d]} ({p:,} params)")
        pred = [result.row(d, b).predicted_tokens_per_call for b in n]
        ax.plot(n, pred, "--", color=line.get_color(), lw=0.8, alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(n, [str(b) for b in n])
    ax.set_xlabel("tree budget N (draft nodes)")
    ax.set_ylabel("tokens per verify call")
    ax.set_title("drafter ablation (dashed: predicted)")
    return save(fig, ax, path, legend_size=8)


# ---------------------------------------------------------------------- end to end
def ablate(
    model_path: Union[str, os.PathLike],
    out_dir: Union[str, os.PathLike],
    *,
    inputs: Optional[tuple] = None,
    frames: int = 1024,
    budgets: Sequence[int] = (4, 8, 16, 32),
    params: Optional[cs.SamplingParams] = None,
    seed: int = 0,
    val_fraction: float = 0.25,
    provider: str = "cpu",
    threads: Optional[int] = None,
    heads: Optional[np.ndarray] = None,
    train_kwargs: Optional[dict] = None,
    medusa_kwargs: Optional[dict] = None,
    plots: bool = True,
    progress: bool = True,
) -> AblationResult:
    """Head reuse vs offsets vs Medusa heads on `model_path` (a codecspec depth graph).

    `frames` free-generation frames (AR, `params`, `seed`) on `inputs` = (hiddens [N, H_in],
    c0s [N]) or synthetic ones; offsets and Medusa heads trained on a (1 - val_fraction) share
    (`train_kwargs` / `medusa_kwargs` go to train_offsets / train_medusa, default 20 epochs);
    acceptance and tokens per call on the rest, for every N in `budgets`. `heads` [G-1, V, H]
    only for a heads="hidden" graph without a `.heads.npy` sidecar. Writes ablation.json,
    ablation.md and (with matplotlib) ablation.png into out_dir.
    """
    t_start = time.monotonic()
    budgets = _check_budgets(budgets)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: must be in (0, 1), got {val_fraction}")
    if inputs is None and int(frames) < 2:
        raise ValueError(f"frames: need >= 2 (train + held-out), got {frames}")
    model_path = Path(model_path)
    graph, heads = open_with_heads(model_path, provider, threads, heads)
    c = graph.config
    K, G = c.num_draft_offsets, c.num_codebooks
    params = params or cs.SamplingParams(0.9, 50, 1.0)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    codes, z = _free_frames(graph, inputs, int(frames), seed, params, heads, progress)
    train_idx, val_idx = split_frames(len(codes), val_fraction, seed)
    select = _medusa_selection(len(train_idx), seed)
    drafters, hist = _train(
        z[train_idx], codes[train_idx], heads, K, select, seed, train_kwargs, medusa_kwargs,
        progress,
    )  # fmt: skip
    M = int(min(max(budgets), c.codebook_size))
    acc = _measure(drafters, z, codes, val_idx, M, progress)
    rows = [r for d in DRAFTERS for r in _rows(d, acc[d], budgets, K, G)]

    result = AblationResult(
        out_dir=out,
        config=c,
        budgets=budgets,
        rows=rows,
        acceptance=acc,
        num_parameters={**{d: acc[d].num_parameters for d in DRAFTERS}, "lm_heads": heads.size},
        meta={
            "date": utc_now(),
            "model": str(model_path),
            "provider": graph.provider,
            "sampling": params_dict(params),
            "seed": seed,
            "inputs": "synthetic" if inputs is None else "given",
            "frames": _frame_counts(codes, train_idx, val_idx, select),
            "val_fraction": val_fraction,
            "num_ranks": M,
            "training": {k: _training_dict(h) for k, h in hist.items()},
        },
    )
    result.meta["seconds"] = round(time.monotonic() - t_start, 2)
    _write(result, plots)
    log.info("ablation:\n%s\n%s", result.markdown(), result.summary())
    return result


def _free_frames(graph, inputs, frames: int, seed: int, params, heads, progress: bool):
    """(codes, z): free-generation AR frames of the exact model and their teacher-forced
    hidden states, what every drafter is trained and measured on."""
    hiddens, c0s = _inputs(graph.config, inputs, frames, seed)
    gen = cs.Generator(seed)
    codes = collect_frames(
        graph, hiddens, c0s, gen, "ar", params=params, heads=heads, progress=progress
    )
    z = teacher_forced_hidden(graph, hiddens, c0s, codes, progress=progress)
    return codes, z


def _frame_counts(codes, train_idx, val_idx, select) -> dict:
    return {
        "total": len(codes),
        "train": len(train_idx),
        "heldout": len(val_idx),
        "medusa_selection": len(select),
    }


def _medusa_selection(n_train: int, seed: int) -> np.ndarray:
    """Drafters see only the training frames; a sixth of them (indices into that subset) is
    the selection split for Medusa's early stopping."""
    return np.sort(np.random.default_rng(seed + 11).permutation(n_train)[: n_train // 6])
