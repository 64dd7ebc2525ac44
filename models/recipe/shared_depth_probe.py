"""Short-run probe for seed 002's shared depth decoder on v3 (docs/shared_depth.md): what buys
held-out CE within a quarter of the per-position decoder's weights? A low-rank per-level
correction of the shared input table and head (`--rank`), or tying them to the codec's own
codebooks (`--tie codebook[-levels]`, optionally `--init-from-teacher`)?

    python models/recipe/shared_depth_probe.py --rank 12 --steps 300 --out probe.json
    python models/recipe/shared_depth_probe.py --rank 0 --tie codebook-levels \
        --init-from-teacher --steps 300 --out probe.json

Same frames (120,000 teacher-forced training frames of the shipped folder, 2,048 held-out),
seed, schedule and distillation as the 300-step probe that chose distillation for
`v3.py shared-depth`; rank 0 without --tie is that plain shared decoder. Trained here only:
the codebook tie is `v3.py shared-depth --tie codebook`'s (exported); a rank would need an
export of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))

import v3  # noqa: E402
from v2 import frozen_frames  # noqa: E402

from codecspec.train.depth_train import (  # noqa: E402
    count_parameters,
    heldout_cross_entropy,
    train_depth,
)
from codecspec.train.networks import SharedDepthModel  # noqa: E402


class LowRankShared(SharedDepthModel):
    """The shared decoder plus, per level, a [V, rank] matrix into a shared [rank, H] one on
    the input side (code embedding) and the output side (head); zero-initialised, so it starts
    as the plain shared decoder."""

    def __init__(self, c, rank: int):
        super().__init__(c)
        G, V, H = c.num_codebooks, c.codebook_size, c.hidden_size
        self.a_in = torch.nn.Parameter(torch.zeros(G - 1, V, rank))  # inputs c0..c_{G-2}
        self.b_in = torch.nn.Parameter(torch.randn(rank, H) * 0.02)
        self.a_out = torch.nn.Parameter(torch.zeros(G - 1, V, rank))  # outputs c1..c_{G-1}
        self.b_out = torch.nn.Parameter(torch.randn(rank, H) * 0.02)

    def forward(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        G = self.c.num_codebooks
        levels = torch.arange(G - 1)
        own = self.a_in[levels[None, :], codes[:, : G - 1]] @ self.b_in  # [N, G-1, H]
        x = self.table[codes[:, : G - 1]] + self._levels()[None] + own
        x = torch.cat([hidden[:, None], x], dim=1)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        z = self.final_norm(x)[:, 1:]  # [N, G-1, H]
        low = torch.einsum("nlr,lvr->nlv", z @ self.b_out.T, self.a_out)
        return z @ self.head.T + low


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(v3.SHIP_DIR), help="the v3 folder (and teacher)")
    ap.add_argument("--corpus", default="~/.cache/codecspec/corpus_v3m")
    ap.add_argument("--work", default="~/.cache/codecspec/v3m")
    ap.add_argument("--rank", type=int, default=12, help="0: the plain shared decoder")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--tie",
        choices=("none", "codebook", "codebook-levels"),
        default="none",
        help="codebook: table and head tied to the codec's codebooks "
        "(codebook-levels: one head projection per level)",
    )
    ap.add_argument(
        "--init-from-teacher",
        action="store_true",
        help="with --tie: start from the teacher's first layers and fitted tables",
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    corpus, work = Path(args.corpus).expanduser(), Path(args.work).expanduser()
    model, frontend = v3._folder_model(Path(args.model))
    train, held = frozen_frames(model, corpus, work, 120000, 2048, 0, 0, frontend)
    teacher = model.depth.eval()
    cfg = dataclasses.replace(teacher.c, num_layers=args.layers)
    if args.tie != "none":
        import numpy as np

        cb = np.load(Path(args.model) / "codec.npz")["codebooks"].astype(np.float32)
        m = SharedDepthModel(cfg, codebooks=cb, per_level_head=args.tie == "codebook-levels")
        if args.init_from_teacher:
            m.warm_start(teacher)
    else:
        m = LowRankShared(cfg, args.rank) if args.rank else SharedDepthModel(cfg)
    probe = (held[0][:1024], held[1][:1024])
    info = train_depth(
        m, *train, steps=args.steps, batch=256, lr=1.5e-3, seed=0, val=probe, eval_every=30,
        progress=True, teacher=teacher, distill=0.5,
    )  # fmt: skip
    ce = heldout_cross_entropy(m, *held)
    n, n_pos = count_parameters(m), count_parameters(teacher)
    rep = {
        "rank": args.rank, "tie": args.tie, "init": args.init_from_teacher,
        "layers": args.layers, "steps": args.steps, "parameters": n,
        "positional": n_pos, "ratio": n / n_pos, "heldout_ce": float(ce.mean()),
        "per_level": ce.round(3).tolist(), "val": info["val"], "seconds": info["seconds"],
    }  # fmt: skip
    Path(args.out).write_text(json.dumps(rep, indent=1))
    print(json.dumps({k: rep[k] for k in ("rank", "tie", "ratio", "heldout_ce", "seconds")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
