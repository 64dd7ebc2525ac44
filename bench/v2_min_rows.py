"""What the two-row padding of v2/v3 step calls costs: one-row AR step calls of the shipped v3
temporal graph with the padding (MIN_ROWS = 2, the runtime's) and without (1), interleaved,
medians. Prints the CPU's SIMD flags beside the figure.

    python bench/v2_min_rows.py [--calls 300]
"""

import argparse
import time

import numpy as np

import codecspec.families.v2.model as v2
from codecspec.graphs.row_probe import cpu_simd_flags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    tts = v2.V2TTS(threads=1, provider="cpu")
    _, ids, _, spk, enc, track = tts.prepare_text("The quick brown fox.", None, "en", None, 1.0)
    expected = tts.expected_frames(len(ids) - 2, "en", 1.0) if track is None else track
    st = tts.stepper(enc, spk, expected, draft=False)
    for j in range(12):  # a short history, as mid-utterance
        st.commit(st.score([j]), 1)
    times = {1: [], 2: []}
    for _ in range(args.calls):
        for rows in times:
            v2.MIN_ROWS = rows
            t0 = time.perf_counter()
            st.score([7])
            times[rows].append(time.perf_counter() - t0)
    v2.MIN_ROWS = 2
    med = {r: 1e3 * float(np.median(t)) for r, t in times.items()}
    flags = " ".join(cpu_simd_flags())
    print(
        f"one-row step call, median of {args.calls}: unpadded {med[1]:.3f} ms, "
        f"padded to 2 rows {med[2]:.3f} ms ({med[2] / med[1]:.2f}x); CPU flags: {flags}"
    )


if __name__ == "__main__":
    main()
