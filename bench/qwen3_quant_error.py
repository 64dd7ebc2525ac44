"""The logit error weight-only quantisation introduces, on the tiny parity checkpoints built
with the official qwen-tts classes (tests/data/qwen3_tiny): per precision and stage, the
largest logit difference against the float32 graphs, top-1 agreement and the mean KL of the
warped (sampled) laws (families.qwen3_tts.quant_error.logit_error).

    python bench/qwen3_quant_error.py        # writes docs/qwen3_quant_error.{json,md}
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "qwen3_tiny"


def main() -> int:
    from codecspec.families.qwen3_tts.quant_error import logit_error

    rows, res = [], {}
    with tempfile.TemporaryDirectory() as cache:
        for variant in ("custom_equal", "design_wide", "base_xvector"):
            ref = TINY / "ref.wav" if variant == "base_xvector" else None
            for w in ("int8", "int4"):
                e = logit_error(TINY / variant, w, texts=4, cache_dir=cache, ref_audio=ref)
                e["model"] = str((TINY / variant).relative_to(ROOT))  # no machine's path
                res[f"{variant}/{w}"] = e
                for stage in ("talker", "depth"):
                    s = e[stage]
                    rows.append(
                        f"| {variant} | {w} | {stage} | {s['max_abs']:.3f} | "
                        f"{100 * s['top1_agreement']:.1f}% | {s['kl_mean']:.4f} | "
                        f"{s['positions']} |"
                    )
    md = "\n".join(
        [
            "| checkpoint | weights | stage | max abs logit error | top-1 agreement | "
            "mean KL (warped) | positions |",
            "|---|---|---|---:|---:|---:|---:|",
            *rows,
        ]
    )
    (ROOT / "docs" / "qwen3_quant_error.json").write_text(json.dumps(res, indent=1))
    (ROOT / "docs" / "qwen3_quant_error.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
