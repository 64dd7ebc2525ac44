"""Parity fixtures for codecspec's Qwen3-TTS 12 Hz speech-decoder graph (not run in CI).

Builds a TINY random Qwen3-TTS-Tokenizer-12Hz with the official classes of `qwen-tts` 0.1.1
(`Qwen3TTSTokenizerV2Model`: a tiny Mimi encoder + the decoder under test), redraws every
decoder weight from a seeded generator (norm weights, layer scales, ConvNeXt gammas, SnakeBeta
alpha/beta and codebook usages too, so a wrong norm, scale or clamp shows), saves it with the
official `save_pretrained` (config.json + model.safetensors), and records the official float32
waveforms the tests compare against:

- `model.decode(codes)` — the official entry point (chunked_decode, 300-frame segments with 25
  frames of left context) — for 1, 5 and 30 random frames;
- the same for 302 frames (one segment boundary); only frames 0..3 and 290..301 of its audio
  are stored, to keep the fixture small;
- `model.decoder.chunked_decode(codes, chunk_size=7, left_context_size=3)` for 23 frames, to
  exercise many segment boundaries.

The tiny decoder keeps the real layout and rates (8, 5, 4, 3) x (2, 2) = 1920 samples per
frame, but uses a sliding window of 4 so that the window and the key/value state matter at
these lengths, 4 query / 2 key-value heads with head_dim 6 (GQA, head_dim != hidden/heads).

Run (needs torch, transformers==4.57.3, `qwen-tts==0.1.1 --no-deps`, accelerate, einops):
    OMP_NUM_THREADS=1 python scripts/qwen3_decoder_fixtures.py [--out DIR]
(DIR defaults to tests/data/qwen3_tiny_tokenizer).
It writes OUT/speech_tokenizer/{config.json,model.safetensors} and OUT/decoder_fixtures.npz
and prints the clipped fraction, the eager-vs-sdpa attention difference (the official
implementation's own float32 noise floor) and the fixture sizes.

`--check-full-size FRAMES` instead compares codecspec with the official decoder at the released
decoder shape (seeded random weights, `write_random_speech_tokenizer`; nothing checked in):
whole decode, streamed decode, and `chunked_decode(chunk_size=80)` for FRAMES frames
(needs codecspec importable, e.g. PYTHONPATH=python).
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import sys
import types

import numpy as np


def _stand_in(name: str) -> None:
    """qwen_tts imports sox, torchaudio, librosa and soundfile for its 25 Hz tokenizer and
    audio I/O only; put empty modules in their place when they are not installed."""
    if importlib.util.find_spec(name.split(".")[0]) is not None:
        return
    parent = None
    for part in name.split("."):
        full = part if parent is None else f"{parent}.{part}"
        if full not in sys.modules:
            mod = types.ModuleType(full)
            mod.__spec__ = importlib.machinery.ModuleSpec(full, None)

            def missing(attr, _mod=full):
                if attr.startswith("__"):
                    raise AttributeError(attr)

                def fail(*_a, **_k):
                    raise RuntimeError(f"{_mod}.{attr} is a stand-in module")

                return fail

            mod.__getattr__ = missing
            sys.modules[full] = mod
            if parent is not None:
                setattr(sys.modules[parent], part, mod)
        parent = full


def _import_official():
    import transformers  # noqa: F401  (probes optional packages before the stand-ins exist)

    for name in ("sox", "torchaudio.compliance.kaldi", "librosa.filters", "soundfile"):
        _stand_in(name)
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    return Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model


TINY_ENCODER = dict(
    hidden_size=16, num_filters=4, num_residual_layers=1, upsampling_ratios=[8, 6, 5, 4],
    kernel_size=3, last_kernel_size=3, residual_kernel_size=3, codebook_size=32, codebook_dim=8,
    num_quantizers=16, num_semantic_quantizers=1, num_hidden_layers=1, num_attention_heads=2,
    num_key_value_heads=2, head_dim=8, intermediate_size=32,
    vector_quantization_hidden_dimension=8, frame_rate=12.5, sampling_rate=24000,
    upsample_groups=16,
)  # fmt: skip
TINY_DECODER = dict(
    codebook_size=2048, codebook_dim=4, hidden_size=16, latent_dim=16, num_attention_heads=4,
    num_key_value_heads=2, head_dim=6, intermediate_size=24, num_hidden_layers=2,
    decoder_dim=32, sliding_window=4, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
)  # fmt: skip


RESIDUAL_GAIN = 0.3


def _redraw(decoder, rng: np.random.Generator) -> None:
    """Seeded values for every decoder parameter, in ranges that keep the audio mostly
    unclipped; a few codebook usages go below the 1e-5 clamp (their rows scaled to match)."""
    import torch

    for name, p in decoder.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        shape = tuple(p.shape)
        if leaf == "cluster_usage":
            a = rng.uniform(0.5, 4.0, shape)
        elif leaf == "alpha":
            a = rng.normal(0.0, 0.3, shape)
        elif leaf == "beta":  # 1/e^beta ~ 0.4: the sin^2 term matters but does not blow up
            a = rng.normal(1.0, 0.3, shape)
        elif leaf in ("scale", "gamma"):
            a = rng.uniform(0.2, 0.8, shape)
        elif "norm" in name and leaf == "weight":
            a = rng.uniform(0.7, 1.3, shape)
        elif leaf == "bias" or len(shape) == 1:
            a = rng.normal(0.0, 0.05, shape)
        else:
            a = rng.normal(0.0, 1.0 / np.sqrt(np.prod(shape[1:])), shape)
            if ".block." in name and ".conv" in name and "block.1." not in name:
                a *= RESIDUAL_GAIN  # residual branches: keep float32 noise from compounding
        with torch.no_grad():
            p.copy_(torch.from_numpy(a.astype(np.float32)))
    with torch.no_grad():
        decoder.decoder[-1].conv.weight *= 3.0  # audio std ~0.25: a few samples hit the clamp
    q = decoder.quantizer
    for part in (q.rvq_first, q.rvq_rest):
        for layer in part.vq.layers:
            cb = layer._codebook
            low = rng.choice(cb.codebook_size, 8, replace=False)
            with torch.no_grad():
                cb.cluster_usage[low] = 1e-7
                cb.embedding_sum[low] *= 1e-5  # clamped to 1e-5: rows stay O(1)


def check_full_size(frames: int, seed: int) -> None:
    """Max abs error of codecspec vs the official decoder at the released shape."""
    import tempfile

    import torch
    from safetensors.torch import load_file

    from codecspec.families.qwen3_tts.decoder import SpeechDecoder
    from codecspec.families.qwen3_tts.decoder_graph import (
        PUBLISHED_DECODER_CONFIG,
        write_random_speech_tokenizer,
    )

    _import_official()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2DecoderConfig,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Decoder,
    )

    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "speech_tokenizer")
        write_random_speech_tokenizer(folder, PUBLISHED_DECODER_CONFIG, seed)
        official = Qwen3TTSTokenizerV2Decoder(
            Qwen3TTSTokenizerV2DecoderConfig(**PUBLISHED_DECODER_CONFIG)
        ).eval()
        state = load_file(os.path.join(folder, "model.safetensors"))
        state = {k[len("decoder.") :]: v for k, v in state.items()}
        missing, unexpected = official.load_state_dict(state, strict=False)
        assert not unexpected and all("input_proj" in k for k in missing if "quantizer" in k)
        ours = SpeechDecoder.load(folder, cache_dir=os.path.join(tmp, "cache"))
        codes = np.random.default_rng(seed).integers(0, 2048, (frames, 16))
        with torch.inference_mode():
            t = torch.from_numpy(codes).T[None]
            ref = official.chunked_decode(t)[0, 0].numpy()
            ref80 = official.chunked_decode(t, chunk_size=80)[0, 0].numpy()
        whole = ours.decode(codes)
        blocks = (codes[i : i + 3] for i in range(0, frames, 3))
        streamed = np.concatenate(list(ours.stream(blocks, chunk_frames=5)))
        ours80 = SpeechDecoder(ours.session, ours.config, ours.graph_path, 80, 25)
        print(f"full size, {frames} frames: audio std {ref.std():.3f}")
        print(f"  decode vs official:           {np.max(np.abs(whole - ref)):.2e}")
        print(f"  stream vs official:           {np.max(np.abs(streamed - ref)):.2e}")
        print(f"  chunk 80 decode vs official:  {np.max(np.abs(ours80.decode(codes) - ref80)):.2e}")
        print(f"  chunk 80 vs chunk 300 (official): {np.max(np.abs(ref80 - ref)):.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/data/qwen3_tiny_tokenizer")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--check-full-size", type=int, metavar="FRAMES")
    args = ap.parse_args()
    if args.check_full_size:
        check_full_size(args.check_full_size, args.seed)
        return

    import torch

    torch.manual_seed(args.seed)
    Config, Model = _import_official()
    cfg = Config(encoder_config=TINY_ENCODER, decoder_config=TINY_DECODER)
    model = Model(cfg).eval()
    rng = np.random.default_rng(args.seed)
    _redraw(model.decoder, rng)

    folder = os.path.join(args.out, "speech_tokenizer")
    model.save_pretrained(folder)
    K, Q = TINY_DECODER["codebook_size"], 16

    def official(codes: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            (wavs,) = model.decode(torch.from_numpy(codes)[None], return_dict=False)
        return wavs[0].float().numpy()

    fixtures: dict[str, np.ndarray] = {}
    for n in (1, 5, 30):
        codes = rng.integers(0, K, (n, Q)).astype(np.int64)
        fixtures[f"codes_{n}"] = codes.astype(np.int16)
        fixtures[f"wav_{n}"] = official(codes)
    long_codes = rng.integers(0, K, (302, Q)).astype(np.int64)
    long_wav = official(long_codes)
    spf = 1920
    fixtures["codes_long"] = long_codes.astype(np.int16)
    fixtures["wav_long_head"] = long_wav[: 4 * spf]
    fixtures["wav_long_tail"] = long_wav[290 * spf :]
    fixtures["wav_long_tail_start"] = np.array(290 * spf)

    chunk_codes = rng.integers(0, K, (23, Q)).astype(np.int64)
    with torch.inference_mode():
        cw = model.decoder.chunked_decode(
            torch.from_numpy(chunk_codes).T[None], chunk_size=7, left_context_size=3
        )
    fixtures["codes_chunked"] = chunk_codes.astype(np.int16)
    fixtures["wav_chunked"] = cw[0, 0].float().numpy()
    fixtures["chunked_params"] = np.array([7, 3])

    # The official implementation's own noise floor: eager vs sdpa attention.
    model.decoder.config._attn_implementation = "eager"
    for sub in model.decoder.modules():
        if hasattr(sub, "config") and hasattr(sub.config, "_attn_implementation"):
            sub.config._attn_implementation = "eager"
    eager = official(fixtures["codes_30"].astype(np.int64))
    floor = float(np.max(np.abs(eager - fixtures["wav_30"])))

    path = os.path.join(args.out, "decoder_fixtures.npz")
    np.savez(path, **fixtures)
    w = fixtures["wav_30"]
    print(f"wav_30: std {w.std():.3f}, clipped {np.mean(np.abs(w) >= 1.0):.2%}")
    print(f"eager vs sdpa max abs difference (30 frames): {floor:.2e}")
    for f in sorted(os.listdir(folder)) + [path]:
        p = f if f == path else os.path.join(folder, f)
        print(f"{p}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
