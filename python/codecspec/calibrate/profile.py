"""What a calibration writes: device_profile.json and decision.json (by the one rule,
`speculation_wins`), with the machine's name and the date stamp."""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Optional

import codecspec as cs
from codecspec.calibrate.decision import DECISION_FILE, Decision, write_decision
from codecspec.calibrate.offsets import config_hash, heads_hash
from codecspec.runtime.session import session_threads

__all__ = [
    "PROFILE_FORMAT",
    "SPECULATION_RULE",
    "cpu_model",
    "decision_device",
    "params_dict",
    "speculation_wins",
    "utc_now",
    "write_device_profile",
    "write_speculation_decision",
]

PROFILE_FORMAT = "codecspec.device_profile"
PROFILE_VERSION = 1


def cpu_model() -> str:
    """This CPU's model name (/proc/cpuinfo; the platform's processor name elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def utc_now() -> str:
    """The time now, UTC ISO 8601 to the second: the date stamp of calibration files."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _quantised_rows(provider: str, threads: Optional[int], hidden: int, tree_nodes: int) -> dict:
    """What speculation over int8 / int4 weights keeps on this device: per precision, whether
    a MatMulNBits row is the same bits alone and in a verify call, or how far it moves
    against float rounding (graphs.row_probe), for an [H, H] MatMul and calls of up to the
    chosen tree's size."""
    from codecspec.graphs.row_probe import cpu_simd_flags, probe_weights

    rows = sorted({2, 5, 17, max(2, tree_nodes)})
    out: dict[str, Any] = {"cpu_simd": cpu_simd_flags(), "size": [hidden, hidden]}
    for weights in ("int8", "int4"):
        try:
            probe = probe_weights(
                weights, (hidden, hidden), rows=rows, provider=provider, threads=threads
            )
            out[weights] = probe.to_dict()
        except ValueError as e:  # no quantiser (onnx_ir) or no kernel on this provider
            out[weights] = {"error": str(e)}
    return out


def _device_header(graph, model_path: Path, heads) -> dict:
    """Where the profile was measured (machine, runtime, model): what decides whether a later
    run may reuse it."""
    import onnxruntime as ort

    c = graph.config
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "date": utc_now(),
        "provider": graph.provider,
        "heads_in_graph": bool(getattr(graph, "heads_in_graph", True)),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": int(session_threads(graph.session)),
        "onnxruntime_version": ort.__version__,
        "codecspec_version": cs.__version__,
        "platform": platform.platform(),
        "model": {
            "path": str(model_path),
            "config_hash": config_hash(c),
            "heads_hash": heads_hash(heads),
            "config": c.to_dict(),
        },
    }


def write_device_profile(r, run, provider, threads, eval_idx, t_start: float) -> dict:
    """Step 7 of `device.calibrate`: device_profile.json (keys in their historical order) of
    the result `r` of the calibration `run`, written to its out_dir."""
    best, history, tree = r.best, r.train_history, r.tree
    acc_med = r.acceptance_medusa
    profile = {
        **_device_header(run.graph, run.model_path, run.heads),
        "sampling": params_dict(run.params),
        "seed": run.seed,
        "frames": len(run.codes),
        "acceptance_frames": int(len(eval_idx)),
        "latency": r.latency.to_dict(),
        "acceptance": r.acceptance.matrix.tolist(),
        "acceptance_counts": r.acceptance.counts.tolist(),
        "acceptance_zero_offsets": r.acceptance_zero.matrix.tolist(),
        "acceptance_medusa": None if acc_med is None else acc_med.matrix.tolist(),
        "budgets": [row.to_dict() for row in r.rows],
        "chosen_budget": r.budget,
        "tree_paths": [list(p) for p in tree.paths],
        "predicted_speedup": best.speedup_predicted,
        "simulated_speedup": best.speedup_simulated,
        "predicted_tokens_per_call": best.predicted_tokens_per_call,
        "simulated_tokens_per_call": best.simulated_tokens_per_call,
        # The profile's record of the rule, kept for the readers of older profiles (model
        # cards, recipes); `auto` acts on decision.json, written from the same rule.
        "speculation_pays": speculation_wins(best.speedup_simulated, r.end_to_end),
        "ablation": r.ablation,
        "end_to_end": r.end_to_end,
        "training": None
        if history is None
        else {
            "final": history.final,
            "baseline": history.baseline,
            "steps": len(history.steps),
            "seconds": history.seconds,
        },
        "offsets_file": run.files.get("offsets"),
        "quantised_rows": _quantised_rows(
            provider, threads, run.graph.config.hidden_size, tree.num_nodes
        ),
        "seconds": None,
    }
    profile["seconds"] = round(time.monotonic() - t_start, 2)
    (run.out / "device_profile.json").write_text(json.dumps(profile, indent=1))
    run.files["device_profile"] = str(run.out / "device_profile.json")
    return profile


def decision_device(profile: dict) -> dict:
    """The device a calibration decided on, from its profile's header: what to compare
    before trusting the decision on another machine (CPU, its SIMD flags, threads, runtime)."""
    from codecspec.graphs.row_probe import cpu_simd_flags

    keys = ("cpu_model", "cpu_count", "threads", "provider", "platform", "onnxruntime_version")
    device = {k: profile[k] for k in keys if k in profile}
    device["cpu_flags"] = cpu_simd_flags()
    return device


SPECULATION_RULE = "simulated_speedup > 1 and end_to_end_speedup > 1"


def speculation_wins(simulated: float, end_to_end: Optional[dict]) -> bool:
    """The calibration's rule: the best tree's replayed frame time beats the AR loop's, and so
    does the real decoder timed end to end where that was measured. The replay leaves out
    the Python glue and KV copies, so a tree it puts a few percent ahead can run behind
    (a v3 depth decoder: replayed 1.017x, timed 0.924x); the timed figure has the last word."""
    timed = (end_to_end or {}).get("speedup")
    return bool(simulated > 1.0 and (timed is None or timed > 1.0))


def write_speculation_decision(r, run) -> Decision:
    """Step 7's decision.json, of the result `r` of the calibration `run`: speculate by
    `speculation_wins` (the rule device_profile.json's `speculation_pays` records too)."""
    best, e2e = r.best, r.end_to_end or {}
    speculate = speculation_wins(best.speedup_simulated, r.end_to_end)
    timed = e2e.get("speedup")
    why = (
        f"the best tree (N={r.budget}) replays at {best.speedup_simulated:.3f}x the AR loop"
        + (f" and runs at {timed:.3f}x it timed end to end" if timed is not None else "")
        + f" on this device: {'speculate' if speculate else 'decode AR'}"
    )
    measured = {
        "rule": SPECULATION_RULE,
        "chosen_budget": r.budget,
        "simulated_speedup": best.speedup_simulated,
        "predicted_speedup": best.speedup_predicted,
        "simulated_tokens_per_call": best.simulated_tokens_per_call,
        "simulated_calls_per_frame": best.simulated_calls_per_frame,
        "end_to_end_speedup": e2e.get("speedup"),
    }
    device = decision_device(r.profile)
    decision = write_decision(
        run.out / DECISION_FILE, speculate=speculate, why=why, measured=measured, device=device
    )
    run.files["decision"] = str(decision.source)
    return decision


def params_dict(p) -> dict:
    """SamplingParams as the JSON object calibration files record."""
    return {"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p}
