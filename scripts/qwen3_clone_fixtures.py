"""In-context voice cloning fixtures: a tiny random Base checkpoint whose speech tokenizer has
encoder weights, and what the official `qwen-tts` 0.1.1 code makes of it.

Writes tests/data/qwen3_clone/ (VARIANTS: base_icl, talker and predictor of equal width;
base_wide, a wider talker and another encoder configuration; base_third, the CustomVoice
test shape as a Base checkpoint):

  <variant>/                 the checkpoint (as scripts/qwen3_parity_fixtures.py lays it out),
                             speech_tokenizer/ with bf16 encoder weights (no decoder ones)
  ref_a.wav, ref_b.wav       two 24 kHz 16-bit reference clips (not multiples of 1920 samples)
  <variant>.fixtures.npz     per reference clip: clip_<name>_codes, the official encoder's codes
                             (`Qwen3TTSTokenizer.encode`, as generate_voice_clone calls it);
                             per case: case_<i>_prompt_ids, case_<i>_ref_ids (the wrapper's
                             tokenized reference text; empty for x-vector-only cloning),
                             case_<i>_ref_codes (empty for x-vector-only), case_<i>_codes
                             (greedy codes of `generate_voice_clone(text, ref_audio=...,
                             ref_text=... or x_vector_only_mode=True, do_sample=False,
                             subtalker_dosample=False)`), case_<i>_prefill (the talker's prompt
                             rows), case_<i>_xvector, case_<i>_streaming (1 where the official
                             call used the streaming-text layout)
  <variant>.cases.json       the requests: each key an argument the call passed, and only
                             those (no "non_streaming_mode" = the official default layout,
                             streaming text for generate_voice_clone; no "language" = its
                             default "Auto")

Needs what scripts/qwen3_parity_fixtures.py needs (torch, transformers 4.57.3, qwen-tts 0.1.1):

    OMP_NUM_THREADS=1 python scripts/qwen3_clone_fixtures.py

`--check-full-size SECONDS` writes nothing to the repository: it compares codecspec's encoder
graph with the official encoder at the published encoder shape (random weights from
`codecspec random-checkpoint`'s speech tokenizer, 0.6 GB in a temporary folder) on a clip of
that length, and prints the number of differing codes (needs codecspec importable too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_parity_fixtures as pf  # noqa: E402  (puts the sox/torchaudio stand-ins in place)
import torch  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "qwen3_clone")
# A Mimi encoder small enough for the repository. The codebook width equals the RVQ's
# projection width (the official encode needs it); sliding_window is below the clips' 25 Hz
# frame counts, so a graph that applied it would disagree with the official mask, which
# does not.
TINY_ENCODER = {
    "hidden_size": 16,
    "num_filters": 4,
    "num_residual_layers": 1,
    "upsampling_ratios": [8, 6, 5, 4],
    "codebook_size": pf.CODEBOOK,
    "codebook_dim": 8,
    "vector_quantization_hidden_dimension": 8,
    "num_quantizers": 20,  # more than the 16 kept, as the published 32
    "num_semantic_quantizers": 1,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "intermediate_size": 32,
    "sliding_window": 4,
    "upsample_groups": 16,
    "frame_rate": 12.5,
    "sampling_rate": 24000,
}

# Another one along the axes MimiConfig allows: ratios in another order, two residual
# layers with dilation growth 3 and conv shortcuts, compress 4, other kernels, grouped KV
# heads, a head_dim below hidden / heads, an RVQ projection (hidden 24 -> codebooks of 12),
# 32 quantizers of which 16 are kept, another RoPE theta and norm eps, the frame rate left
# to its derived default.
WIDE_ENCODER = {
    "hidden_size": 24,
    "num_filters": 4,
    "num_residual_layers": 2,
    "dilation_growth_rate": 3,
    "use_conv_shortcut": True,
    "compress": 4,
    "kernel_size": 5,
    "last_kernel_size": 5,
    "residual_kernel_size": 5,
    "upsampling_ratios": [4, 8, 5, 6],
    "codebook_size": pf.CODEBOOK,
    "codebook_dim": 12,
    "vector_quantization_hidden_dimension": 12,
    "num_quantizers": 32,
    "num_semantic_quantizers": 1,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 4,
    "intermediate_size": 40,
    "rope_theta": 500.0,
    "norm_eps": 1e-3,
    "upsample_groups": 24,
    "sampling_rate": 24000,
}


def clip(seconds: float, f0: float, seed: int) -> np.ndarray:
    """16-bit PCM: a gliding tone with harmonics and a little noise."""
    t = np.arange(int(seconds * 24000)) / 24000.0
    rng = np.random.default_rng(seed)
    x = 0.3 * np.sin(2 * np.pi * (f0 + 60 * t) * t) + 0.15 * np.sin(2 * np.pi * 3.1 * f0 * t)
    x += 0.02 * rng.standard_normal(len(t))
    return np.round(32767 * x).astype("<i2")


CLIPS = {"ref_a": clip(0.77, 170.0, 1), "ref_b": clip(1.13, 240.0, 2)}

# A case holds the arguments a user passes to generate_voice_clone, and only those: a case
# without "non_streaming_mode" gets the official default layout (streaming text), which is
# what codecspec must give when no layout is asked for (issue 49: the fixtures used to pass
# the layout always, so no test saw that the defaults differed).
CASES = [
    # default layout (streaming text), text shorter than the reference codes
    dict(text="Hello world.", language="english", ref_audio="ref_a", ref_text="Good morning."),
    # default layout, text longer than the reference codes (the rest trails)
    dict(
        text="The quick brown fox jumps over the lazy dog.",
        language="auto",
        ref_audio="ref_b",
        ref_text="A tiny tokenizer.",
    ),
    # streaming text chosen explicitly, text longer than the reference codes
    dict(
        text="Numbers 0123 and more words to say.",
        language="english",
        ref_audio="ref_a",
        ref_text="Hello there, how are you today?",
        non_streaming_mode=False,
    ),
    # streaming text chosen explicitly, shorter than the reference codes (tts_pad fills)
    dict(
        text="Hi.", language="chinese", ref_audio="ref_b", ref_text="Ok.", non_streaming_mode=False
    ),
    # whole text chosen explicitly
    dict(
        text="Hello world.",
        language="english",
        ref_audio="ref_a",
        ref_text="Good morning.",
        non_streaming_mode=True,
    ),
    dict(
        text="The quick brown fox jumps over the lazy dog.",
        language="auto",
        ref_audio="ref_b",
        ref_text="A tiny tokenizer.",
        non_streaming_mode=True,
    ),
    # x-vector only (no transcript), default layout
    dict(text="Hello world.", language="english", ref_audio="ref_a", x_vector_only_mode=True),
    # x-vector only, default layout and default language ("Auto")
    dict(text="Numbers 0123 and more words to say.", ref_audio="ref_b", x_vector_only_mode=True),
]

WIDE_CASES = [
    dict(
        text="A tiny tokenizer speaks.",
        language="english",
        ref_audio="ref_b",
        ref_text="Numbers 0123.",
    ),
    dict(
        text="Hello world, this is a test of the voice.",
        language="auto",
        ref_audio="ref_a",
        ref_text="The quick brown fox.",
        non_streaming_mode=False,
    ),
    dict(
        text="A tiny tokenizer speaks.",
        language="english",
        ref_audio="ref_b",
        ref_text="Numbers 0123.",
        non_streaming_mode=True,
    ),
    dict(text="Hello world, this is a test.", ref_audio="ref_a", x_vector_only_mode=True),
]

THIRD_CASES = [
    dict(text="Café, 42 times!", language="english", ref_audio="ref_a", ref_text="Hello world."),
    dict(
        text="Speak slowly and clearly.",
        language="auto",
        ref_audio="ref_b",
        ref_text="The quick brown fox jumps.",
        non_streaming_mode=False,
    ),
    dict(
        text="Café, 42 times!",
        language="english",
        ref_audio="ref_a",
        ref_text="Hello world.",
        non_streaming_mode=True,
    ),
    dict(
        text="Speak slowly and clearly.",
        language="auto",
        ref_audio="ref_b",
        x_vector_only_mode=True,
    ),
]

# Arguments a case may pass on to generate_voice_clone beside text and ref_audio (each only
# when the case has it).
OPTIONAL_ARGS = ("language", "ref_text", "x_vector_only_mode", "non_streaming_mode")

# name -> (talker / predictor shape of scripts/qwen3_parity_fixtures.py, seed, encoder, cases)
VARIANTS = {
    # equal widths (projection = identity), 0.6B-style
    "base_icl": dict(shape="base_xvector", seed=16, encoder=TINY_ENCODER, cases=CASES),
    # talker wider than the predictor (projection = Linear with bias), 1.7B-style
    "base_wide": dict(shape="design_wide", seed=21, encoder=WIDE_ENCODER, cases=WIDE_CASES),
    # the CustomVoice test shape as a Base checkpoint: a third talker / predictor layout
    "base_third": dict(shape="custom_equal", seed=34, encoder=TINY_ENCODER, cases=THIRD_CASES),
}


def write_wav(path: str, pcm: np.ndarray) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(pcm.tobytes())


def tokenizer_model(encoder: dict, seed: int):
    """The official 12 Hz tokenizer model with seeded encoder weights (codebooks included:
    their default init is all zeros, which would make every code 0)."""
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    conf = Qwen3TTSTokenizerV2Config(
        encoder_config=encoder,
        decoder_config=pf.speech_tokenizer_config()["decoder_config"],
        encoder_valid_num_quantizers=pf.GROUPS,
    )
    torch.manual_seed(seed)
    m = Qwen3TTSTokenizerV2Model(conf).eval()
    pf.redraw(m.encoder, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in m.encoder.named_buffers():
            if name.endswith("embed_sum"):
                buf.copy_(_bf16_exact(torch.randn(buf.shape, generator=g)))
            elif name.endswith("cluster_usage"):
                buf.copy_(_bf16_exact(0.5 + torch.rand(buf.shape, generator=g)))
    return m, conf


def _bf16_exact(t):
    """Values a bf16 file holds exactly: the official model runs on what the test reads."""
    return t.to(torch.bfloat16).to(torch.float32)


def save_tokenizer(d: str, m, conf) -> None:
    from safetensors.torch import save_file

    os.makedirs(d, exist_ok=True)
    # bf16 (every value is bf16-exact, see redraw): half the bytes in the repository
    state = {
        k: v.to(torch.bfloat16).contiguous()
        for k, v in m.state_dict().items()
        if k.startswith("encoder.")
    }
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(conf.to_json_string())


def official_tokenizer(m):
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer
    from transformers import EncodecFeatureExtractor

    tok = Qwen3TTSTokenizer()
    tok.model = m
    tok.feature_extractor = EncodecFeatureExtractor(
        feature_size=1, sampling_rate=24000, padding_value=0.0, return_attention_mask=True
    )
    tok.config, tok.device = m.config, torch.device("cpu")
    return tok


def build_checkpoint(d: str, shape: str, seed: int) -> object:
    """The Base checkpoint (talker, predictor, speaker encoder) with the parity script's
    tokenizer and seeded weights, saved as bf16; the returned model holds the same values."""
    v = dict(pf.variants()[shape], model_type="base", spk_id={}, spk_is_dialect={}, seed=seed)
    text_ids = pf.make_tokenizer(d)
    with open(os.path.join(d, "vocab.json"), encoding="utf-8") as f:
        text_vocab = len(json.load(f)) + len(pf.SPECIALS)
    cfg = pf.make_config(v, text_ids, text_vocab)
    torch.manual_seed(seed)
    model = pf.Qwen3TTSForConditionalGeneration(cfg).eval()
    pf.redraw(model, seed)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.to(torch.float32)
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
    for mod in model.modules():
        if hasattr(mod, "original_inv_freq") and hasattr(mod, "inv_freq"):
            mod.original_inv_freq = mod.inv_freq
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(pf.GENERATION_CONFIG, f, indent=2)
    return model


def record(wrapper, case: dict) -> dict:
    model = wrapper.model
    seen: dict = {}
    codes_out: list = []
    orig_generate, orig_decode = model.generate, model.speech_tokenizer.decode

    def spy(**kw):
        seen.update(kw)
        return orig_generate(**kw)

    def codes_only(items):
        codes_out.extend(it["audio_codes"] for it in items)
        return [np.zeros(1, np.float32)], 24000

    model.generate, model.speech_tokenizer.decode = spy, codes_only
    rec = pf.Recorder(model.talker)
    pcm = CLIPS[case["ref_audio"]]
    # only what the case passes: every other argument keeps the official method's default
    optional = {k: case[k] for k in OPTIONAL_ARGS if k in case}
    try:
        wrapper.generate_voice_clone(
            text=case["text"],
            ref_audio=(pcm.astype(np.float32) / 32768.0, 24000),
            do_sample=False,
            subtalker_dosample=False,
            **optional,
        )
    finally:
        rec.close()
        model.generate, model.speech_tokenizer.decode = orig_generate, orig_decode
    ref_code = seen["voice_clone_prompt"]["ref_code"][0]  # None in x-vector-only mode
    n_ref = 0 if ref_code is None else len(ref_code)
    ref_ids = seen["ref_ids"][0]
    return {
        "prompt_ids": seen["input_ids"][0][0].numpy().astype(np.int64),
        "ref_ids": (
            np.zeros(0, np.int64) if ref_ids is None else ref_ids[0].numpy().astype(np.int64)
        ),
        "ref_codes": (
            np.zeros((0, pf.GROUPS), np.int64)
            if ref_code is None
            else ref_code.numpy().astype(np.int64)
        ),
        # generate_voice_clone decodes reference + generated codes; keep the generated ones
        "codes": codes_out[0][n_ref:].numpy().astype(np.int64),
        "prefill": rec.embeds[0].numpy().astype(np.float32),
        "xvector": seen["voice_clone_prompt"]["ref_spk_embedding"][0].float().numpy(),
        # the layout the official call used (its own default where the case passed none)
        "streaming": np.int64(0 if seen["non_streaming_mode"] else 1),
    }


def build_variant(out: str, name: str, v: dict) -> None:
    d = os.path.join(out, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    model = build_checkpoint(d, v["shape"], v["seed"])
    m, conf = tokenizer_model(v["encoder"], v["seed"])
    save_tokenizer(os.path.join(d, "speech_tokenizer"), m, conf)
    from transformers import Qwen2TokenizerFast

    tok = Qwen2TokenizerFast.from_pretrained(d)
    wrapper = pf.Qwen3TTSModel(
        model, pf.Qwen3TTSProcessor(tokenizer=tok), dict(pf.GENERATION_CONFIG)
    )
    model.speech_tokenizer = official_tokenizer(m)
    arrays: dict = {}
    for clip_name, pcm in CLIPS.items():
        enc = model.speech_tokenizer.encode(pcm.astype(np.float32) / 32768.0, sr=24000)
        arrays[f"clip_{clip_name}_codes"] = enc.audio_codes[0].numpy().astype(np.int64)
        print(f"{name} {clip_name}: {len(pcm)} samples -> codes {enc.audio_codes[0].shape}")
    for i, case in enumerate(v["cases"]):
        r = record(wrapper, case)
        for k, a in r.items():
            arrays[f"case_{i}_{k}"] = a
        print(
            f"{name} case {i}: {len(r['prompt_ids'])} text ids, prefill {len(r['prefill'])} rows, "
            f"codes {r['codes'].shape}"
        )
    np.savez_compressed(os.path.join(out, f"{name}.fixtures.npz"), **arrays)
    with open(os.path.join(out, f"{name}.cases.json"), "w", encoding="utf-8") as f:
        json.dump(v["cases"], f, indent=2)


def check_full_size(seconds: float) -> None:
    """Codes of codecspec's encoder graph vs the official encoder's at the published shape."""
    import tempfile
    from pathlib import Path

    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )
    from safetensors.torch import load_file

    from codecspec.families.qwen3_tts import random_checkpoint as rc
    from codecspec.families.qwen3_tts.encoder import SpeechEncoder

    with tempfile.TemporaryDirectory() as tmp:
        rc._write_speech_tokenizer(rc.SHAPES["qwen3-0.6b"](), Path(tmp), 7, lambda desc: None)
        folder = os.path.join(tmp, "speech_tokenizer")
        with open(os.path.join(folder, "config.json")) as f:
            root = json.load(f)
        drop = ("architectures", "model_type", "transformers_version")
        conf = Qwen3TTSTokenizerV2Config(**{k: v for k, v in root.items() if k not in drop})
        official = Qwen3TTSTokenizerV2Model(conf).eval()
        missing, unexpected = official.load_state_dict(
            load_file(os.path.join(folder, "model.safetensors")), strict=False
        )
        assert not unexpected and not [k for k in missing if k.startswith("encoder.")]
        pcm = clip(seconds, 150.0, 3)
        wav = pcm.astype(np.float32) / 32768.0
        x = torch.from_numpy(wav)[None]
        with torch.inference_mode():
            want = official.encode(x, torch.ones_like(x, dtype=torch.long)).audio_codes[0]
        got = SpeechEncoder.load(folder, cache_dir=os.path.join(tmp, "cache")).encode(wav)
        want = want.numpy()
        same = got.shape == want.shape
        print(f"published encoder shape, {seconds} s: codes {got.shape} vs official {want.shape}")
        print(f"  differing codes: {int((got != want).sum()) if same else 'shapes differ'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-full-size", type=float, metavar="SECONDS")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_full_size:
        check_full_size(args.check_full_size)
        return
    out = os.path.abspath(OUT)
    os.makedirs(out, exist_ok=True)
    for name, pcm in CLIPS.items():
        write_wav(os.path.join(out, f"{name}.wav"), pcm)
    for name, v in VARIANTS.items():
        build_variant(out, name, v)


if __name__ == "__main__":
    main()
