"""Train the reference codec-LM TTS on the encoded corpus ([train] extra: PyTorch).

    python models/recipe/tts.py train --minutes 50     # -> ~/.cache/codecspec/tts/model.pt

Reads corpus.py's manifest and codec.py's codes/codec tables; writes to --out:
    model.pt      state dict, both configs, the latent scale, the frontend tables
    train.json    training curves (train and held-out losses, per-level depth CE) and timings

The later stages (export, calibration, model card) are `models/recipe/ship.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

try:
    import codecspec  # noqa: F401
except ImportError:  # running from a checkout whose package is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))


def log(msg: str) -> None:
    print(f"[tts] {msg}", file=sys.stderr, flush=True)


def cmd_train(args) -> int:
    import torch

    from codecspec.codec.codec import Codec
    from codecspec.families.reference.train import train_tts
    from codecspec.train.common import reference_depth_config
    from codecspec.train.dataset import TTSDataset
    from codecspec.train.networks import TemporalConfig

    torch.set_num_threads(args.threads)
    corpus, codec_dir = Path(args.corpus).expanduser(), Path(args.codec).expanduser()
    out = Path(args.out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    codes = codec_dir / "codes.npz"
    train = TTSDataset(corpus, codes, "train")
    val = TTSDataset(corpus, codes, "test", frontend=train.frontend)
    codec = Codec.load(codec_dir / "codec.npz")
    f = train.frontend
    tcfg = TemporalConfig(
        vocab_size=len(f.vocab),
        num_languages=len(f.languages),
        num_speakers=len(f.speakers),
        latent_dim=codec.cfg.pca_dim,
        c0_vocab_size=codec.cfg.codebook_size,
    )
    dcfg = reference_depth_config(codec.cfg.codebook_size)
    resume = None
    if args.resume:
        resume = torch.load(Path(args.resume).expanduser(), map_location="cpu", weights_only=False)
        prev = Path(args.resume).expanduser().with_name("train.json")
        if prev.is_file():
            resume["curves"] = json.loads(prev.read_text())["curves"]
        log(f"resuming from {args.resume} at step {len(resume.get('curves', {}).get('steps', []))}")
    log(f"train {train.stats()['frames']} frames, held-out {val.stats()['frames']} frames")
    t0 = time.monotonic()
    model, curves, scale = train_tts(
        train,
        val,
        codec,
        tcfg,
        dcfg,
        minutes=args.minutes,
        max_steps=args.max_steps,
        seed=args.seed + (1 if resume else 0),
        depth_frames=args.depth_frames,
        lr=args.lr,
        resume=resume,
    )
    # training seconds over all phases (curves carry the clock across a resume)
    seconds = curves.seconds[-1] if curves.seconds else time.monotonic() - t0
    torch.save(
        {
            "state_dict": model.state_dict(),
            "temporal_config": tcfg.to_dict(),
            "depth_config": dcfg.to_dict(),
            "latent_scale": scale,
            "frontend": f.to_dict(),
            "seed": args.seed,
        },
        out / "model.pt",
    )
    summary = {
        "seconds": round(seconds, 1),
        "threads": args.threads,
        "steps": curves.steps[-1] if curves.steps else 0,
        "parameters": {
            "temporal": sum(
                p.numel()
                for n, p in model.temporal.named_parameters()
                if not n.startswith("draft.")
            ),
            "draft_temporal": sum(p.numel() for p in model.temporal.draft.parameters()),
            "depth": sum(p.numel() for p in model.depth.parameters()),
        },
        "curves": curves.to_dict(),
        "train_stats": train.stats(),
        "heldout_stats": val.stats(),
    }
    (out / "train.json").write_text(json.dumps(summary))
    log(
        f"done: {summary['steps']} steps in {seconds / 60:.1f} min; final held-out {curves.val[-1]}"
    )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train temporal + depth + draft models")
    t.add_argument("--corpus", default="~/.cache/codecspec/corpus")
    t.add_argument("--codec", default="~/.cache/codecspec/codec")
    t.add_argument("--out", default="~/.cache/codecspec/tts")
    t.add_argument("--minutes", type=float, default=50.0, help="wall-clock budget")
    t.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--depth-frames", type=int, default=384, help="depth-loss frames per step")
    t.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate")
    t.add_argument("--resume", default=None, help="model.pt to continue from (warm restart)")
    t.set_defaults(fn=cmd_train)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    raise SystemExit(main())
