"""v3 streamed synthesis with the vocoder's products in numpy (OpenBLAS) vs in the Rust core.

    python bench/vocoder_threads.py [--rounds 5] [--runs 3] [--threads 2]

Each variant runs in its own process (OpenBLAS reads OPENBLAS_NUM_THREADS once, at load),
the variants interleaved and their order rotated every round. A process loads v3, streams
one sentence once to warm up, then `--runs` times; it reports the median vocoder seconds
(`AudioStream.vocoder_seconds`: the chunk decodes, what OpenBLAS's spinning workers slowed)
and total seconds, and the CPU seconds OpenBLAS's worker threads (the threads numpy's
import started) used over those streams: spinning shows there whatever the machine's load.
Variants: `numpy` puts back the products as numpy computed them before
(`z @ P.T + mean`, `mel @ pinv.T`), `rust` is the shipped `cs.Projection`; each with
OpenBLAS's default threads and with OPENBLAS_NUM_THREADS=1. Prints the medians over rounds
and the CPU's model and SIMD flags beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

TEXT = "The quick brown fox jumps over the lazy dog."
VARIANTS = (("numpy", None), ("numpy", "1"), ("rust", None), ("rust", "1"))


def numpy_products() -> None:
    """The decoder's two products as numpy computed them before the Rust maps."""
    from codecspec.codec.codec import Codec

    def unproject(self, z):
        return np.asarray(z, dtype=np.float32) @ self._p.T + self.mean

    def features_to_magnitude(self, features):
        f = np.asarray(features, dtype=np.float64)
        mel = np.maximum(np.exp(f.reshape(-1, self.cfg.n_mels)) - self.cfg.log_offset, 0.0)
        return np.maximum(mel @ self._fb_pinv.T, 0.0)

    Codec.unproject = unproject
    Codec.features_to_magnitude = features_to_magnitude


def thread_cpu_seconds(tids) -> float:
    """CPU seconds (user + system) the threads `tids` of this process used so far."""
    total = 0
    for tid in tids:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime: stat fields 14 and 15
    return total / os.sysconf("SC_CLK_TCK")


def child(variant: str, runs: int, threads: int) -> dict:
    # numpy is imported and nothing else has started a thread: the others are OpenBLAS's
    blas = [t for t in os.listdir("/proc/self/task") if int(t) != threading.get_native_id()]
    if variant == "numpy":
        numpy_products()
    from codecspec.pipeline.registry import load_model

    tts = load_model("v3", threads=threads)

    def once() -> tuple:
        t0 = time.perf_counter()
        st = tts.stream(TEXT, seed=0)
        for _ in st:
            pass
        return st.vocoder_seconds, time.perf_counter() - t0

    once()
    spun = thread_cpu_seconds(blas)
    got = [once() for _ in range(runs)]
    return {
        "vocoder_s": float(np.median([g[0] for g in got])),
        "total_s": float(np.median([g[1] for g in got])),
        "blas_workers_cpu_s": (thread_cpu_seconds(blas) - spun) / runs,
        "blas_workers": len(blas),
    }


def cpu() -> str:
    """The CPU's model and the SIMD flags the kernels care about, from /proc/cpuinfo."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown CPU"
    lines = info.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if "model name" in ln), "?")
    line = next((ln for ln in lines if ln.startswith("flags")), "")
    flags = set(line.split(":", 1)[-1].split())
    want = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni")
    have = " ".join(f for f in want if f in flags) or "none of " + " ".join(want)
    return f"{model}, {os.cpu_count()} cores, flags: {have}"


def run_variant(variant: str, blas: str | None, args) -> dict:
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if blas is not None:
        env["OPENBLAS_NUM_THREADS"] = blas
    cmd = [sys.executable, __file__, "--child", variant, "--runs", str(args.runs)]
    cmd += ["--threads", str(args.threads)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", choices=("numpy", "rust"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.threads)))
        return 0
    seen: dict = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for k in range(len(VARIANTS)):
            v = VARIANTS[(r + k) % len(VARIANTS)]
            seen[v].append(run_variant(*v, args))
    print(f"# {cpu()}; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"# median over {args.rounds} rounds (each the median of {args.runs} streams)")
    print(
        "| products | OPENBLAS_NUM_THREADS | vocoder s | total s | BLAS workers' CPU s "
        "| vocoder s per round |"
    )
    print("|---|---|---:|---:|---:|---|")
    for (variant, blas), rows in seen.items():
        voc = [row["vocoder_s"] for row in rows]
        tot = np.median([row["total_s"] for row in rows])
        spin = np.median([row["blas_workers_cpu_s"] for row in rows])
        each = " ".join(f"{x:.2f}" for x in voc)
        print(
            f"| {variant} | {blas or 'default'} | {np.median(voc):.2f} | {tot:.2f} "
            f"| {spin:.2f} ({rows[0]['blas_workers']}) | {each} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
