"""PNG figures of a calibration run (matplotlib optional: without it, plots are skipped)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

log = logging.getLogger("codecspec.calibrate")

__all__ = [
    "have_matplotlib",
    "plot_acceptance",
    "plot_latency",
    "plot_speedup",
    "plot_training",
    "pyplot",
    "save",
    "write_plots",
]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def pyplot():
    """matplotlib.pyplot on the headless Agg backend (ImportError without matplotlib)."""
    import matplotlib

    # Headless machines have no display; never let the backend probe for one.
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save(fig, ax, path, legend_size=None) -> Path:
    """Grid, legend, tight layout, PNG at 120 dpi; closes the figure."""
    plt = pyplot()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_acceptance(matrix, path, title: str = "acceptance a[d][r]", max_ranks: int = 16):
    plt = pyplot()
    a = np.asarray(matrix)[:, :max_ranks]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * a.shape[1] + 1.5), 0.6 * a.shape[0] + 1.6))
    im = ax.imshow(a, cmap="viridis", vmin=0.0, vmax=max(float(a.max()), 1e-6), aspect="auto")
    for d in range(a.shape[0]):
        for r in range(a.shape[1]):
            ax.text(
                r,
                d,
                f"{a[d, r]:.2f}",
                ha="center",
                va="center",
                fontsize=6,
                color="w" if a[d, r] < 0.6 * a.max() else "k",
            )
    ax.set_xlabel("rank r")
    ax.set_ylabel("depth d")
    ax.set_yticks(range(a.shape[0]), [str(d + 1) for d in range(a.shape[0])])
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_latency(latency, path):
    plt = pyplot()
    qs = np.asarray(latency.qs)
    g = np.asarray(latency.graph_ms)
    h = np.asarray(latency.host_ms)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ov = float(getattr(latency, "overhead_ms", 0.0) or 0.0)
    if ov > 0:
        ax.plot(qs, g + h + ov, "^-", label=f"+ decoder glue ({ov:.3g} ms)")
    ax.plot(qs, g + h, "o-", label="graph + host")
    ax.plot(qs, g, "s--", label="graph call")
    ax.set_xlabel("query tokens q (tree nodes N + 1)")
    ax.set_ylabel("median ms per call")
    ax.set_title(f"verify-call latency (past {latency.past_len})")
    return save(fig, ax, path)


def plot_speedup(rows, path, chosen=None):
    plt = pyplot()
    n = [r.budget for r in rows]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(n, [r.speedup_simulated for r in rows], "o-", label="simulated (frame)")
    ax.plot(n, [r.speedup_predicted for r in rows], "s--", label="predicted (frame)")
    ax.plot(n, [r.speedup_simple for r in rows], "^:", label="tokens/round / cost ratio")
    ax.axhline(1.0, color="k", lw=0.8)
    if chosen is not None:
        ax.axvline(chosen, color="r", lw=0.8, ls="--", label=f"chosen N={chosen}")
    ax.set_xlabel("tree budget N")
    ax.set_ylabel("speed-up vs AR")
    return save(fig, ax, path, legend_size=8)


def plot_training(history, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(history.steps, history.train_loss, lw=0.8, label="train (batch)")
    if history.val:
        ax.plot(history.eval_steps, [v["mean_ce"] for v in history.val], "o-", label="held-out")
    if history.baseline:
        ax.axhline(history.baseline["mean_ce"], color="k", ls="--", lw=0.8, label="zero offsets")
    ax.set_xlabel("step")
    ax.set_ylabel("draft cross-entropy")
    return save(fig, ax, path)


def write_plots(result, out_dir) -> dict:
    """Write the calibration figures into out_dir; {} (and a log line) without matplotlib."""
    if not have_matplotlib():
        log.info("matplotlib is not installed: calibration plots skipped")
        return {}
    out = Path(out_dir)
    files = {
        "plot_acceptance": plot_acceptance(result.acceptance.matrix, out / "acceptance.png"),
        "plot_latency": plot_latency(result.latency, out / "latency.png"),
        "plot_speedup": plot_speedup(result.rows, out / "speedup.png", result.budget),
    }
    if result.train_history is not None and result.train_history.steps:
        files["plot_training"] = plot_training(result.train_history, out / "training.png")
    return files
