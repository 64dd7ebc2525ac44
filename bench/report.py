"""Run the core micro-benchmarks and report medians, numpy/codecspec ratios and targets.

Usage (from the repository root):

    python bench/report.py                      # run everything (~2-3 min, incl. V=65536 groups)
    python bench/report.py --fast               # skip the slow V=65536 groups benchmarks
    python bench/report.py --from-json FILE     # report a saved pytest-benchmark JSON, no run
    python bench/report.py --paired             # also: interleaved codecspec/numpy timing
    python bench/report.py -- -k verify         # extra arguments after -- go to pytest

It runs ``pytest bench/test_bench_core.py --benchmark-enable --benchmark-only
--benchmark-json=bench/results/raw.json``, prints a markdown table, and writes
``bench/results/core.json`` (summary), ``bench/results/core.md`` (the table) and, when
matplotlib is importable, ``bench/results/core.png`` (bar chart of medians, log scale).
Exit status: 0 when every target with a measurement is met, 1 otherwise (2: the run failed).

``--paired`` adds a second table measured outside pytest-benchmark: for every non-slow group
the codecspec and numpy cases (the same ``case_*`` builders the tests use) run in alternating
~10 ms blocks, 30 rounds, so both see the same background load; the ratio is the median of the
per-round ratios. On a shared machine this is the more trustworthy ratio.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
BENCH_FILE = "bench/test_bench_core.py"


def _run_pytest(raw: Path, fast: bool, extra: list[str]) -> tuple[int, list[str]]:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        BENCH_FILE,
        "--benchmark-enable",
        "--benchmark-only",
        "--benchmark-group-by=group",
        f"--benchmark-json={raw}",
        "-q",
    ]
    if fast:
        cmd += ["-m", "not slow"]
    cmd += extra
    print("$ python " + " ".join(cmd[1:]), file=sys.stderr)
    rc = subprocess.call(cmd, cwd=ROOT)
    return rc, ["python"] + cmd[1:]


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "—"
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def summarise(raw: dict) -> list[dict]:
    """One row per benchmark group: codecspec and numpy stats, ratio, targets, verdict."""
    groups: dict[str, dict] = {}
    for b in raw.get("benchmarks", []):
        info = b.get("extra_info", {})
        impl = info.get("impl") or b["params"].get("impl", b["name"])
        st = b["stats"]
        row = groups.setdefault(b["group"], {"group": b["group"], "targets": {}})
        row[impl] = {
            "median_s": st["median"],
            "min_s": st["min"],
            "iqr_s": st["iqr"],
            "rounds": st["rounds"],
            "name": b["name"],
        }
        for key in ("target_s", "min_speedup"):
            if info.get(key) is not None:
                row["targets"][key] = info[key]
        for key, val in info.items():
            if key not in ("impl", "target_s", "min_speedup"):
                row.setdefault("extra", {})[f"{impl}.{key}"] = val
    rows = []
    for name in groups:  # benchmark (file) order
        row = groups[name]
        cs, npy = row.get("codecspec"), row.get("numpy")
        row["ratio"] = npy["median_s"] / cs["median_s"] if cs and npy else None
        checks = []
        tgt = row["targets"]
        if "target_s" in tgt:
            checks.append(cs is not None and cs["median_s"] <= tgt["target_s"])
        if "min_speedup" in tgt:
            checks.append(row["ratio"] is not None and row["ratio"] >= tgt["min_speedup"])
        row["pass"] = None if not checks else all(checks)
        row["status"] = (
            "" if not checks else "not measured" if cs is None else "yes" if row["pass"] else "NO"
        )
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    out = [
        "| benchmark | codecspec median | numpy median | numpy / codecspec | target | met "
        "| notes |",
        "|---|---:|---:|---:|---|:---:|---|",
    ]
    for r in rows:
        cs, npy = r.get("codecspec"), r.get("numpy")
        tgt = []
        if "target_s" in r["targets"]:
            tgt.append(f"≤ {_fmt_time(r['targets']['target_s'])}")
        if "min_speedup" in r["targets"]:
            tgt.append(f"≥ {r['targets']['min_speedup']:g}× numpy")
        verdict = "**NO**" if r["status"] == "NO" else r["status"]
        notes = "; ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in sorted(r.get("extra", {}).items())
        )
        out.append(
            "| {} | {} | {} | {} | {} | {} | {} |".format(
                r["group"],
                _fmt_time(cs and cs["median_s"]),
                _fmt_time(npy and npy["median_s"]),
                f"{r['ratio']:.1f}×" if r["ratio"] is not None else "—",
                ", ".join(tgt) or "—",
                verdict,
                notes,
            )
        )
    return "\n".join(out)


def paired(groups: list[str] | None = None, rounds: int = 30, block_s: float = 0.01) -> list[dict]:
    """Interleaved timing of each group's codecspec / numpy cases (see module doc)."""
    import time

    import numpy as np

    sys.path.insert(0, str(HERE))
    import test_bench_core as tbc

    rows = []
    for name, build in tbc.CASES.items():
        if name in tbc.SLOW or (groups and name not in groups):
            continue
        try:
            cases = {impl: build(impl) for impl in ("codecspec", "numpy")}
        except BaseException as e:  # pytest.skip when codecspec is missing, or a failure
            print(f"paired: {name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        times: dict[str, list[float]] = {"codecspec": [], "numpy": []}
        ratios = []
        n_rounds = rounds if name != tbc.G_GROUPS_SMALL else 3
        for r in range(n_rounds):
            order = ("codecspec", "numpy") if r % 2 == 0 else ("numpy", "codecspec")
            block = {}
            for impl in order:
                run = cases[impl].run
                ts = []
                t_end = time.perf_counter() + block_s
                while True:
                    t0 = time.perf_counter_ns()
                    run()
                    ts.append((time.perf_counter_ns() - t0) * 1e-9)
                    if time.perf_counter() >= t_end:
                        break
                block[impl] = float(np.median(ts))
                times[impl].extend(ts)
            ratios.append(block["numpy"] / block["codecspec"])
        c = cases["codecspec"]
        row = {
            "group": name,
            "codecspec_median_s": float(np.median(times["codecspec"])),
            "numpy_median_s": float(np.median(times["numpy"])),
            "paired_ratio": float(np.median(ratios)),
            "ratio_q25_q75": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))],
            "calls": {k: len(v) for k, v in times.items()},
            "targets": {
                k: v for k, v in (("target_s", c.target_s), ("min_speedup", c.min_speedup)) if v
            },
        }
        checks = []
        if c.target_s is not None:
            checks.append(row["codecspec_median_s"] <= c.target_s)
        if c.min_speedup is not None:
            checks.append(row["paired_ratio"] >= c.min_speedup)
        row["pass"] = None if not checks else all(checks)
        rows.append(row)
    return rows


def paired_markdown(rows: list[dict]) -> str:
    out = [
        "| benchmark (interleaved) | codecspec median | numpy median | paired ratio "
        "(IQR) | target | met |",
        "|---|---:|---:|---:|---|:---:|",
    ]
    for r in rows:
        tgt = []
        if "target_s" in r["targets"]:
            tgt.append(f"≤ {_fmt_time(r['targets']['target_s'])}")
        if "min_speedup" in r["targets"]:
            tgt.append(f"≥ {r['targets']['min_speedup']:g}× numpy")
        q1, q3 = r["ratio_q25_q75"]
        verdict = {None: "", True: "yes", False: "**NO**"}[r["pass"]]
        out.append(
            f"| {r['group']} | {_fmt_time(r['codecspec_median_s'])} | "
            f"{_fmt_time(r['numpy_median_s'])} | {r['paired_ratio']:.1f}× ({q1:.1f}–{q3:.1f}) | "
            f"{', '.join(tgt) or '—'} | {verdict} |"
        )
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [r["group"] for r in rows]
    y = range(len(rows))
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.5))
    h = 0.38
    for off, impl, color in ((-h / 2, "codecspec", "#1f77b4"), (h / 2, "numpy", "#aaaaaa")):
        vals = [r[impl]["median_s"] if r.get(impl) else 0.0 for r in rows]
        ax.barh([i + off for i in y], vals, height=h, color=color, label=impl)
    for i, r in enumerate(rows):
        if "target_s" in r["targets"]:
            t = r["targets"]["target_s"]
            ax.plot([t, t], [i - h, i + h], color="red", lw=2)
        if r["ratio"] is not None:
            ax.annotate(
                f"{r['ratio']:.1f}×",
                (max(r["codecspec"]["median_s"], r["numpy"]["median_s"]), i),
                xytext=(4, -4),
                textcoords="offset points",
                fontsize=8,
            )
    ax.plot([], [], color="red", lw=2, label="target")
    ax.set_xscale("log")
    longest = max(max(r[i]["median_s"] for i in ("codecspec", "numpy") if r.get(i)) for r in rows)
    ax.set_xlim(right=longest * 6)  # room for the ratio labels
    ax.set_yticks(list(y))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("median time per call [s] (log scale)")
    ax.set_title("codecspec core vs numpy oracle")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _machine() -> dict:
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        import codecspec

        info["codecspec"] = getattr(codecspec, "__version__", "?")
    except ImportError:
        info["codecspec"] = None
    return info


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fast", action="store_true", help="deselect slow (V=65536) benchmarks")
    ap.add_argument("--from-json", type=Path, help="pytest-benchmark JSON to report; no run")
    ap.add_argument("--out", type=Path, default=RESULTS, help="output folder (bench/results)")
    ap.add_argument("--paired", action="store_true", help="also run interleaved paired timing")
    args = ap.parse_args(argv)

    args.out.mkdir(parents=True, exist_ok=True)
    command = None
    if args.from_json:
        raw_path = args.from_json
    else:
        raw_path = args.out / "raw.json"
        rc, command = _run_pytest(raw_path, args.fast, extra)
        if rc not in (0, 1) or not raw_path.exists():  # 1: some test failed, still report
            print(f"pytest exited with {rc}; no benchmark JSON", file=sys.stderr)
            return 2
    raw = json.loads(raw_path.read_text())
    rows = summarise(raw)
    table = markdown(rows)
    print(table)
    prows = None
    if args.paired:
        prows = paired()
        ptable = paired_markdown(prows)
        print("\n" + ptable)
        table += "\n\n" + ptable

    summary = {
        "date": raw.get("datetime") or _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "command": " ".join(command) if command else f"(from {raw_path})",
        "machine": _machine(),
        "pytest_benchmark_machine_info": raw.get("machine_info", {}),
        "groups": rows,
        "paired": prows,
    }
    (args.out / "core.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (args.out / "core.md").write_text(table + "\n")
    png = args.out / "core.png"
    if plot(rows, png):
        print(f"\nwrote {args.out / 'core.json'}, {args.out / 'core.md'}, {png}", file=sys.stderr)
    else:
        print(f"\nwrote {args.out / 'core.json'} (matplotlib missing: no plot)", file=sys.stderr)
    failed = [r["group"] for r in rows if r["pass"] is False]
    if failed:
        print("targets missed: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
