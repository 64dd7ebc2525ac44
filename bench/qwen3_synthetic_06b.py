"""Build-time and speed figures of the Qwen3-TTS path on a 0.6B-shaped checkpoint folder.

No real checkpoint could be downloaded here, so this writes one with the official tensor names
and the 0.6B shapes (talker 28 x 1024, GQA 16/8 x 128, text table 151936 x 2048, code
predictor 5 x 1024, bf16, random values; the tiny test tokenizer) and measures:
first load (graph build), cached load, prefill, and ms per frame of talker + depth loop (AR).
Random weights never say eos, so frames run to --frames.

    python bench/qwen3_synthetic_06b.py [--dir /tmp/qwen3_06b] [--frames 24] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from codecspec.graphs.safetensors_io import write_safetensors

TINY = Path(__file__).resolve().parents[1] / "tests" / "data" / "qwen3_tiny" / "custom_equal"


def shapes() -> dict:
    H, L, nh, kv, hd, inter = 1024, 28, 16, 8, 128, 3072
    s = {
        "talker.model.codec_embedding.weight": (3072, H),
        "talker.model.text_embedding.weight": (151936, 2048),
        "talker.model.norm.weight": (H,),
        "talker.codec_head.weight": (3072, H),
        "talker.text_projection.linear_fc1.weight": (2048, 2048),
        "talker.text_projection.linear_fc1.bias": (2048,),
        "talker.text_projection.linear_fc2.weight": (H, 2048),
        "talker.text_projection.linear_fc2.bias": (H,),
        "talker.code_predictor.model.norm.weight": (H,),
    }

    def layer(prefix):
        return {
            prefix + "input_layernorm.weight": (H,),
            prefix + "post_attention_layernorm.weight": (H,),
            prefix + "self_attn.q_proj.weight": (nh * hd, H),
            prefix + "self_attn.k_proj.weight": (kv * hd, H),
            prefix + "self_attn.v_proj.weight": (kv * hd, H),
            prefix + "self_attn.o_proj.weight": (H, nh * hd),
            prefix + "self_attn.q_norm.weight": (hd,),
            prefix + "self_attn.k_norm.weight": (hd,),
            prefix + "mlp.gate_proj.weight": (inter, H),
            prefix + "mlp.up_proj.weight": (inter, H),
            prefix + "mlp.down_proj.weight": (H, inter),
        }

    for i in range(L):
        s.update(layer(f"talker.model.layers.{i}."))
    for i in range(5):
        s.update(layer(f"talker.code_predictor.model.layers.{i}."))
    for j in range(15):
        s[f"talker.code_predictor.model.codec_embedding.{j}.weight"] = (2048, H)
        s[f"talker.code_predictor.lm_head.{j}.weight"] = (2048, H)
    return s


def write_checkpoint(d: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, shp in shapes().items():
        if name.endswith("norm.weight"):
            tensors[name] = 1.0 + 0.1 * rng.standard_normal(shp, np.float32)
        else:
            scale = 1.0 if "embedding" in name else 1.0 / np.sqrt(shp[-1])
            tensors[name] = rng.standard_normal(shp, np.float32) * np.float32(scale)
    # Two shards with an index, as the published folders have.
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for k, part in enumerate((names[:half], names[half:])):
        fname = f"model-{k + 1:05d}-of-00002.safetensors"
        write_safetensors(d / fname, {n: tensors[n] for n in part}, "bf16", {"format": "pt"})
        weight_map.update({n: fname for n in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    cfg = json.loads((TINY / "config.json").read_text())
    t = cfg["talker_config"]
    t.update(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=3072,
        text_hidden_size=2048,
        text_vocab_size=151936,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
        rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        codec_pad_id=2148,
        codec_bos_id=2149,
        codec_eos_token_id=2150,
        codec_think_id=2154,
        codec_nothink_id=2155,
        codec_think_bos_id=2156,
        codec_think_eos_id=2157,
        spk_id={"aiden": 3000},
        spk_is_dialect={"aiden": False},
        codec_language_id={"english": 2050, "chinese": 2055},
    )
    t["code_predictor_config"].update(
        hidden_size=1024,
        num_hidden_layers=5,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=2048,
        layer_types=["full_attention"] * 5,
    )
    cfg["tts_model_size"] = "0b6"
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(TINY / f, d / f)
    shutil.copytree(TINY / "speech_tokenizer", d / "speech_tokenizer", dirs_exist_ok=True)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None)
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="qwen3_06b_"))
    ck_dir, cache = root / "ckpt", root / "cache"
    from codecspec.families.qwen3_tts.pipeline import Qwen3TTS

    t0 = time.perf_counter()
    if not (ck_dir / "config.json").is_file():
        write_checkpoint(ck_dir)
    res = {"write_checkpoint_s": time.perf_counter() - t0}
    t0, c0 = time.perf_counter(), time.process_time()
    Qwen3TTS.load(ck_dir, cache_dir=cache, provider="cpu")
    res["first_load_s"] = time.perf_counter() - t0  # the build, unless --dir has a cache
    res["first_load_cpu_s"] = time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    tts = Qwen3TTS.load(ck_dir, cache_dir=cache, provider="cpu")
    res["cached_load_s"] = time.perf_counter() - t0
    # CPU seconds (all threads): what the wall figure would be on an idle machine, roughly
    res["cached_load_cpu_s"] = time.process_time() - c0
    text = "The quick brown fox jumps over the lazy dog."
    for mode in ("ar", "spec"):
        c0 = time.process_time()
        r = tts.generate_codes(
            text, speaker="aiden", language="english", mode=mode, max_frames=args.frames
        )
        s = r.seconds
        res[mode] = {
            "frames": r.frames,
            "prompt_positions": len(r.prompt),
            "prefill_ms": 1e3 * s["prefill"],
            "talker_ms_per_frame": 1e3 * s["talker"] / max(r.frames, 1),
            "depth_ms_per_frame": 1e3 * s["depth"] / max(r.frames, 1),
            "cpu_ms_per_frame": 1e3 * (time.process_time() - c0) / max(r.frames, 1),
        }
    print(json.dumps(res, indent=2))
    if not args.keep and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return res


if __name__ == "__main__":
    main()
