"""Talker logits of codecspec vs the official implementation on a full-size (0.6B-shaped)
checkpoint folder: prompt prefill plus a few decode steps, max abs difference.

The folder is one written by `codecspec random-checkpoint qwen3-0.6b DIR` (also what
bench/qwen3_synthetic_06b.py writes: official tensor names, 0.6B shapes, random bf16 weights).
Needs torch, transformers==4.57.3, qwen-tts==0.1.1 (--no-deps), as
scripts/qwen3_parity_fixtures.py does; codecspec itself runs torch-free.

    python scripts/qwen3_fullsize_talker_check.py /tmp/qwen3_06b_rand [--cache DIR] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import qwen3_parity_fixtures  # noqa: E402,F401  (sox / torchaudio stand-ins, then qwen_tts)
import torch  # noqa: E402
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration  # noqa: E402


def official_model(ck_dir: Path):
    cfg = json.loads((ck_dir / "config.json").read_text())
    keep = ("talker_config", "tokenizer_type", "tts_model_size", "tts_model_type")
    keep += tuple(k for k in cfg if k.endswith("_token_id"))
    conf = Qwen3TTSConfig(**{k: cfg[k] for k in keep if k in cfg})
    model = Qwen3TTSForConditionalGeneration(conf).eval()
    from safetensors.torch import load_file

    state = {}
    for f in sorted(ck_dir.glob("*.safetensors")):
        state.update({k: v.float() for k, v in load_file(str(f)).items()})
    missing, unexpected = model.load_state_dict(state, strict=False)
    talker_missing = [k for k in missing if k.startswith("talker.")]
    if talker_missing or unexpected:
        raise SystemExit(f"state dict mismatch: {talker_missing[:5]} {unexpected[:5]}")
    return model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS
    from codecspec.families.qwen3_tts.text import build_prompt

    tts = Qwen3TTS.load(args.checkpoint, cache_dir=args.cache, provider="cpu")
    p = build_prompt(tts.tok, tts.spec, "The quick brown fox jumps.", language="english")
    emb, _ = tts.prompt_embeds(p)
    rng = np.random.default_rng(0)
    steps = [
        emb[rng.integers(len(emb))] + 0.1 * rng.standard_normal(emb.shape[1])
        for _ in range(args.steps)
    ]
    steps = [s.astype(np.float32) for s in steps]
    ours = [tts.talker.logits(tts.talker.prefill(emb, capacity=len(emb) + args.steps))]
    ours += [tts.talker.logits(tts.talker.step(s)) for s in steps]
    del tts

    model = official_model(args.checkpoint)
    x = torch.from_numpy(np.concatenate([emb, np.stack(steps)]))[None]
    with torch.no_grad():
        out = model.talker.model(inputs_embeds=x, use_cache=False)
        ref = model.talker.codec_head(out.last_hidden_state)[0].numpy()
    ref = ref[len(emb) - 1 :]
    err = float(np.abs(np.stack(ours) - ref).max())
    print(
        json.dumps(
            {
                "positions": int(x.shape[1]),
                "max_abs_logit_error": err,
                "logit_scale": float(np.abs(ref).max()),
                "argmax_equal": bool((np.stack(ours).argmax(1) == ref.argmax(1)).all()),
            }
        )
    )


if __name__ == "__main__":
    main()
