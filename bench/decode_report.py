"""Runs bench/test_bench_decode.py and prints the depth-loop figures as one markdown table.

    python bench/decode_report.py            # all, including the Qwen-size latency sweep
    python bench/decode_report.py --fast     # without the Qwen-size sweep

Writes bench/results/decode.json (raw pytest-benchmark output) and bench/results/decode.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def run(fast: bool) -> dict:
    RESULTS.mkdir(exist_ok=True)
    raw = RESULTS / "decode.json"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE / "test_bench_decode.py"),
        "-q",
        "--benchmark-enable",
        f"--benchmark-json={raw}",
        "-p",
        "no:cacheprovider",
    ]
    if fast:
        cmd += ["-m", "not slow"]
    subprocess.run(cmd, check=True)
    return json.loads(raw.read_text())


def table(data: dict) -> str:
    by = {b["name"]: b for b in data["benchmarks"]}
    lines = ["| figure | value |", "|---|---|"]
    ar, spec = by.get("test_depth_frame[ar]"), by.get("test_depth_frame[spec]")
    if ar and spec:
        a, s = ar["stats"]["median"] * 1e3, spec["stats"]["median"] * 1e3
        n = ar["extra_info"]["frames"]
        lines += [
            f"| AR ms per frame (median) | {a / n:.2f} |",
            f"| speculative ms per frame (median) | {s / n:.2f} |",
            f"| wall-clock speed-up (same run) | {a / s:.2f}x |",
            f"| AR calls per frame | {ar['extra_info']['calls_per_frame']:.2f} |",
            f"| speculative calls per frame | {spec['extra_info']['calls_per_frame']:.2f} |",
            f"| tokens per call | {spec['extra_info']['tokens_per_call']:.2f} |",
            f"| tree nodes (incl. root) | {spec['extra_info']['tree_nodes']} |",
        ]
    host = by.get("test_host_share_of_a_round")
    if host:
        e = host["extra_info"]
        lines += [
            f"| host µs per speculative round | {e['host_us']:.0f} |",
            f"| verify call µs (bound, alone) | {e['verify_call_us']:.0f} |",
            f"| host / verify call (target <= 0.05) | {e['ratio']:.3f} |",
        ]
    lat = sorted(
        (b for b in data["benchmarks"] if b["name"].startswith("test_verify_latency")),
        key=lambda b: b["extra_info"]["q"],
    )
    if lat:
        base = lat[0]["stats"]["median"]
        row = " | ".join(
            f"q={b['extra_info']['q']}: {b['stats']['median'] * 1e3:.1f} ms "
            f"({b['stats']['median'] / base:.2f})"
            for b in lat
        )
        lines.append(f"| Qwen-size verify latency (ratio to q=1) | {row} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fast", action="store_true", help="skip the Qwen-size latency sweep")
    ap.add_argument("--from-json", help="report an existing pytest-benchmark JSON file")
    args = ap.parse_args()
    data = json.loads(Path(args.from_json).read_text()) if args.from_json else run(args.fast)
    md = table(data)
    (RESULTS / "decode.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
