"""A tiny aligned (v3) model folder: the v2 runtime reading espeak-ng's phoneme track, with a
v1-style codec. Rewrite the checked-in fixture (needs torch): python tests/tiny_v3.py"""

import json
from pathlib import Path

import numpy as np
from tiny_models import V2_CODES, V2_LEVELS, export_v2_graphs, tiny_v2_configs

# a tiny timed manifest: espeak-ng mnemonics (what its phoneme events name), English only
V3_ROWS = [
    {"id": "a", "phonemes": "h @ l oU w 3: l d _:", "language": "en", "variant": "f1"},
    {"id": "b", "phonemes": "D I s I z a# t E s t _:", "language": "en", "variant": "m1"},
    {"id": "c", "phonemes": "v E r i g U d _:", "language": "en", "variant": "f1"},
    {"id": "d", "phonemes": "a# b I g f i: l d", "language": "en", "variant": "m1"},
]
for _r in V3_ROWS:
    _r.update(split="train", events=[[p, 60.0 * i] for i, p in enumerate(_r["phonemes"].split())])


def tiny_v3_model(stop_bias=None, seed: int = 0, window: int = 4, logit_scale: float = 1.0):
    """An untrained tiny aligned `V2Model` (eval mode)."""
    import torch

    from codecspec.families.v2.torch_model import V2Model
    from codecspec.frontend.text import Frontend

    fe = Frontend.from_manifest(V3_ROWS)
    tcfg, dcfg = tiny_v2_configs(fe, window=window, aligned=True)
    torch.manual_seed(seed)
    model = V2Model(tcfg, dcfg).eval()
    with torch.no_grad():
        if stop_bias is not None:
            for dec in (model.temporal.decoder, model.temporal.draft):
                dec.stop_head.bias.fill_(float(stop_bias))
        for dec in (model.temporal.decoder, model.temporal.draft):
            dec.c0_head.weight.mul_(logit_scale)
        model.depth.heads.mul_(logit_scale)
    return model, fe


def tiny_v3_folder(path, stop_bias=None, seed: int = 0, window: int = 4, logit_scale=1.0):
    """Writes the folder (float32 graphs, a random 16 x 32-code v1 codec) and returns it."""
    from codecspec.codec.codec import Codec, CodecConfig
    from codecspec.families.v2.model import V2_FORMAT

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model, fe = tiny_v3_model(stop_bias, seed, window, logit_scale)
    tcfg, dcfg = model.temporal.cfg, model.depth.c
    export_v2_graphs(model, out)
    ccfg = CodecConfig(pca_dim=16, n_codebooks=V2_LEVELS, codebook_size=V2_CODES)
    rng = np.random.default_rng(seed)
    comps = np.linalg.qr(rng.standard_normal((ccfg.feature_dim, ccfg.pca_dim)))[0]
    books = 0.5 * rng.standard_normal((V2_LEVELS, V2_CODES, ccfg.pca_dim))
    mean = np.full(ccfg.feature_dim, -4.0, np.float32)
    Codec(ccfg, mean, comps.astype(np.float32), books.astype(np.float32)).save(out / "codec.npz")
    meta = {
        "format": V2_FORMAT,
        "conditioning": "phoneme_track",
        "codec_file": "codec.npz",
        "frontend": fe.to_dict(),
        "sampling": {"temperature": 0.9, "top_k": 50, "top_p": 1.0},
        "voices": {"en": "en-us"},
        "espeak_rate": 170,
        "espeak_pitch": 50,
        "default_speaker": fe.speakers.names[0],
        "frames_per_phoneme": {"en": 1.0},
        "max_pace": 2.0,
        "temporal_config": tcfg.to_dict(),
        "depth_config": dcfg.to_dict(),
    }
    (out / "model.json").write_text(json.dumps(meta, indent=1))
    return out


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    tiny_v3_folder(Path(__file__).parent / "data" / "tiny_v3", stop_bias=-3.0, logit_scale=6.0)
