"""Tiny random Qwen3-TTS checkpoints + the official implementation's outputs on them.

Writes tests/data/qwen3_tiny/<variant>/ (a checkpoint folder laid out as published: config.json,
generation_config.json, model.safetensors, vocab.json, merges.txt, tokenizer_config.json,
speech_tokenizer/) and tests/data/qwen3_tiny/<variant>.fixtures.npz with what the official
`qwen-tts` 0.1.1 code produces on it:

  case_<i>_prompt_ids      the text ids the official wrapper tokenizes (assistant text)
  case_<i>_instruct_ids    the instruct ids (empty when there is none)
  case_<i>_codes           greedy codes [frames, G] (generate(do_sample=False,
                           subtalker_dosample=False)), the wrapper's default non-streaming mode
                           unless case_<i>_streaming is 1
  case_<i>_embeds          the talker's input embeddings along that run [T, H] (prompt, then
                           one row per decode step)
  case_<i>_logits          the talker's logits at every one of those positions [T, V]
                           (teacher-forced on the official trajectory; only for case 0)
  case_<i>_xvector         Base: the speaker encoder's x-vector of ref.wav
and the case texts / speakers / languages / instructs in <variant>.cases.json. Variants:
custom_equal (CustomVoice, equal widths, speakers + a dialect speaker), design_wide
(VoiceDesign, talker wider than the predictor), base_xvector (Base, voice clone in
x-vector-only mode from tests/data/qwen3_tiny/ref.wav, generate_voice_clone).

Needs torch, transformers==4.57.3, `pip install qwen-tts==0.1.1 --no-deps`, accelerate, einops
(plus librosa, soundfile as qwen_tts imports them). qwen_tts imports sox and torchaudio for its
25 Hz tokenizer only; empty stand-in modules are put in sys.modules before the import.

    OMP_NUM_THREADS=1 python scripts/qwen3_parity_fixtures.py [--out tests/data/qwen3_tiny]

Everything is seeded; a rerun writes the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import types

import numpy as np


def _stand_ins() -> None:
    """sox / torchaudio are imported by qwen_tts's 25 Hz tokenizer only. transformers is
    imported first, so that its probe for an installed torchaudio sees the real (absent) one."""
    import transformers  # noqa: F401

    for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]


_stand_ins()

import torch  # noqa: E402
from qwen_tts.core.models import (  # noqa: E402
    Qwen3TTSConfig,
    Qwen3TTSForConditionalGeneration,
    Qwen3TTSProcessor,
)
from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel  # noqa: E402

# ---------------------------------------------------------------------- tiny text tokenizer
# Special tokens after the BPE vocabulary, in the order the Qwen vocabulary has them.
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tts_pad|>",
    "<|tts_text_bos|>",
    "<|tts_text_eod|>",
]
BPE_SIZE = 360
CORPUS = [
    "assistant user system assistant user",
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, this is a tiny tokenizer for parity tests.",
    "Speak slowly and clearly, with a warm and friendly voice.",
    "Numbers 0123456789 and punctuation: ; ! ? ' \" ( ) -",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002",
]


def make_tokenizer(out: str) -> dict:
    """Byte-level BPE (Qwen2's pre-tokenizer) saved as vocab.json + merges.txt, and a
    tokenizer_config.json listing the special tokens with their ids. Returns name -> id."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    pattern = (
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
        r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.model.save(out)
    n = tok.get_vocab_size()
    ids = {s: n + i for i, s in enumerate(SPECIALS)}
    cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": s,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for s, i in ids.items()
        },
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    return ids


# ---------------------------------------------------------------------- tiny checkpoints
CODEBOOK = 32  # code predictor vocabulary (codes 0..31)
TALKER_VOCAB = CODEBOOK + 1024  # the official suppression covers the top 1024 ids
GROUPS = 16


def codec_ids() -> dict:
    """Special codec ids inside [CODEBOOK, TALKER_VOCAB), laid out like the real ones."""
    base = CODEBOOK
    return {
        "codec_pad_id": base + 100,
        "codec_bos_id": base + 101,
        "codec_eos_token_id": base + 102,
        "codec_think_id": base + 106,
        "codec_nothink_id": base + 107,
        "codec_think_bos_id": base + 108,
        "codec_think_eos_id": base + 109,
    }


def variants() -> dict:
    langs = {
        "english": CODEBOOK + 200,
        "chinese": CODEBOOK + 201,
        "sichuan_dialect": CODEBOOK + 205,
    }
    spk = {"aiden": CODEBOOK + 300, "vivian": CODEBOOK + 301, "eric": CODEBOOK + 302}
    dialect = {"aiden": False, "vivian": False, "eric": "sichuan_dialect"}
    return {
        # CustomVoice, talker and predictor of equal width (projection = identity), 0.6B-style
        # (the wrapper drops instruct for "0b6").
        "custom_equal": dict(
            model_type="custom_voice",
            size="0b6",
            talker=dict(hidden=32, layers=2, heads=4, kv=2, head_dim=16, inter=64),
            predictor=dict(hidden=32, layers=2, heads=4, kv=2, head_dim=16, inter=48),
            spk_id=spk,
            spk_is_dialect=dialect,
            languages=langs,
            seed=1,
        ),
        # Base (voice clone, x-vector-only mode): a tiny speaker encoder gives the speaker row.
        "base_xvector": dict(
            model_type="base",
            size="0b6",
            talker=dict(hidden=32, layers=2, heads=4, kv=2, head_dim=16, inter=64),
            predictor=dict(hidden=32, layers=1, heads=4, kv=2, head_dim=16, inter=48),
            spk_id={},
            spk_is_dialect={},
            languages=langs,
            seed=3,
        ),
        # VoiceDesign, talker wider than the predictor (projection = Linear with bias).
        "design_wide": dict(
            model_type="voice_design",
            size="1b7",
            talker=dict(hidden=48, layers=3, heads=4, kv=1, head_dim=16, inter=80),
            predictor=dict(hidden=32, layers=2, heads=4, kv=4, head_dim=8, inter=40),
            spk_id={},
            spk_is_dialect={},
            languages=langs,
            seed=2,
        ),
    }


def make_config(v: dict, text_ids: dict, text_vocab: int) -> Qwen3TTSConfig:
    t, p = v["talker"], v["predictor"]
    talker = dict(
        vocab_size=TALKER_VOCAB,
        hidden_size=t["hidden"],
        intermediate_size=t["inter"],
        num_hidden_layers=t["layers"],
        num_attention_heads=t["heads"],
        num_key_value_heads=t["kv"],
        head_dim=t["head_dim"],
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        rope_scaling={
            "interleaved": True,
            "mrope_section": [t["head_dim"] // 2 - 2 * (t["head_dim"] // 6)]
            + [t["head_dim"] // 6] * 2,
            "rope_type": "default",
        },
        num_code_groups=GROUPS,
        text_hidden_size=t["hidden"] + 8,
        text_vocab_size=text_vocab,
        spk_id=v["spk_id"],
        spk_is_dialect=v["spk_is_dialect"],
        codec_language_id=v["languages"],
        code_predictor_config=dict(
            vocab_size=CODEBOOK,
            hidden_size=p["hidden"],
            intermediate_size=p["inter"],
            num_hidden_layers=p["layers"],
            num_attention_heads=p["heads"],
            num_key_value_heads=p["kv"],
            head_dim=p["head_dim"],
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            max_position_embeddings=64,
            num_code_groups=GROUPS,
        ),
        **codec_ids(),
    )
    return Qwen3TTSConfig(
        talker_config=talker,
        speaker_encoder_config={
            "enc_dim": t["hidden"],
            "sample_rate": 24000,
            "enc_channels": [16, 16, 16, 32],
            "enc_kernel_sizes": [5, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 1],
            "enc_attention_channels": 8,
            "enc_res2net_scale": 8,
            "enc_se_channels": 8,
        },
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size=v["size"],
        tts_model_type=v["model_type"],
        im_start_token_id=text_ids["<|im_start|>"],
        im_end_token_id=text_ids["<|im_end|>"],
        tts_pad_token_id=text_ids["<|tts_pad|>"],
        tts_bos_token_id=text_ids["<|tts_text_bos|>"],
        tts_eos_token_id=text_ids["<|tts_text_eod|>"],
    )


def redraw(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights at bf16-exact values (so the bf16 file holds the f32 model exactly).

    Norm weights are drawn too (around 1), so a wrong norm shows; matrices get a larger
    spread than the default init so that greedy choices are far from ties.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, prm in model.named_parameters():
            if name.endswith("norm.weight"):
                v = 0.6 + 0.8 * torch.rand(prm.shape, generator=g)
            elif prm.ndim == 1:
                v = 0.2 * torch.randn(prm.shape, generator=g)
            elif "embedding" in name:
                v = torch.randn(prm.shape, generator=g)
            else:  # fan-in: input width (x kernel size for convolutions)
                fan_in = int(np.prod(prm.shape[1:]))
                v = torch.randn(prm.shape, generator=g) * (1.5 / fan_in**0.5)
            prm.copy_(v.to(torch.bfloat16).to(torch.float32))


GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 20,
}


def speech_tokenizer_config() -> dict:
    """A tiny 12 Hz speech tokenizer config (decoder sized down; the encoder is unused)."""
    return {
        "architectures": ["Qwen3TTSTokenizerV2Model"],
        "model_type": "qwen3_tts_tokenizer_12hz",
        "encoder_valid_num_quantizers": GROUPS,
        "input_sample_rate": 24000,
        "output_sample_rate": 24000,
        "decode_upsample_rate": 1920,
        "encode_downsample_rate": 1920,
        "decoder_config": {
            "codebook_size": CODEBOOK,
            "codebook_dim": 16,
            "hidden_size": 32,
            "latent_dim": 32,
            "max_position_embeddings": 8000,
            "rope_theta": 10000,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "sliding_window": 8,
            "intermediate_size": 48,
            "hidden_act": "silu",
            "layer_scale_initial_scale": 0.01,
            "rms_norm_eps": 1e-5,
            "num_hidden_layers": 2,
            "num_quantizers": GROUPS,
            "upsample_rates": [8, 5, 4, 3],
            "upsampling_ratios": [2, 2],
            "decoder_dim": 64,
        },
    }


# A reference recording for voice cloning: 0.6 s of a gliding two-tone signal at 24 kHz as
# 16-bit samples; the official code gets exactly what codecspec's read_wav gives back (int/32768).
_t = np.arange(int(0.6 * 24000)) / 24000.0
REF_PCM = np.round(
    32767 * 0.3 * (np.sin(2 * np.pi * (180 + 90 * _t) * _t) + 0.5 * np.sin(2 * np.pi * 770 * _t))
).astype("<i2")
REF_AUDIO = (REF_PCM.astype(np.float32) / 32768.0).astype(np.float32)


def write_ref_wav(path: str) -> None:
    import wave

    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(REF_PCM.tobytes())


# ---------------------------------------------------------------------- recording
class Recorder:
    """Captures the talker's input embeddings and logits over one generate() call."""

    def __init__(self, talker) -> None:
        self.embeds: list[torch.Tensor] = []
        self.logits: list[torch.Tensor] = []
        self._h = [
            talker.model.register_forward_pre_hook(self._pre, with_kwargs=True),
            talker.codec_head.register_forward_hook(self._post),
        ]

    def _pre(self, module, args, kwargs):
        self.embeds.append(kwargs["inputs_embeds"][0].detach().clone())

    def _post(self, module, args, out):
        self.logits.append(out[0].detach().clone())

    def close(self) -> None:
        for h in self._h:
            h.remove()


def cases(model_type: str) -> list[dict]:
    if model_type == "custom_voice":
        return [
            dict(text="Hello world.", speaker="aiden", language="english"),
            dict(text="The quick brown fox.", speaker="Vivian", language="Auto"),
            dict(text="\u4f60\u597d\u3002", speaker="eric", language="chinese"),  # dialect
            dict(text="Speak slowly!", speaker="aiden", language="auto", instruct="Warm."),
            dict(
                text="Hello world, this is a test.",
                speaker="aiden",
                language="english",
                streaming=True,
            ),
        ]
    if model_type == "base":
        return [
            dict(text="Hello world.", language="english", ref_audio="ref.wav"),
            dict(text="The quick brown fox.", language="auto", ref_audio="ref.wav"),
            dict(text="A tiny tokenizer.", language="english", ref_audio="ref.wav", streaming=True),
        ]
    return [
        dict(text="Hello world.", instruct="Speak slowly and clearly.", language="english"),
        dict(text="A tiny tokenizer.", instruct="", language="auto"),
        dict(
            text="Numbers 0123.",
            instruct="A warm and friendly voice.",
            language="Chinese",
            streaming=True,
        ),
    ]


def record(wrapper: Qwen3TTSModel, case: dict, keep_logits: bool) -> dict:
    model = wrapper.model
    seen: dict = {}
    orig = model.generate

    def spy(**kw):
        seen.update(kw)
        return orig(**kw)

    codes_out: list = []

    class CodesOnly:
        def decode(self, items):
            codes_out.extend(it["audio_codes"] for it in items)
            return [np.zeros(1, np.float32)], 24000

        def encode(self, wavs, sr):  # x-vector-only mode computes, then drops, these codes
            return types.SimpleNamespace(audio_codes=[torch.zeros(1, GROUPS, dtype=torch.long)])

    model.speech_tokenizer = CodesOnly()
    model.generate = spy
    rec = Recorder(model.talker)
    greedy = dict(do_sample=False, subtalker_dosample=False)
    nonstream = not case.get("streaming", False)
    try:
        if model.tts_model_type == "base":
            wrapper.generate_voice_clone(
                text=case["text"],
                language=case["language"],
                ref_audio=(REF_AUDIO, 24000),
                x_vector_only_mode=True,
                non_streaming_mode=nonstream,
                **greedy,
            )
        elif model.tts_model_type == "custom_voice":
            wrapper.generate_custom_voice(
                text=case["text"],
                speaker=case["speaker"],
                language=case["language"],
                instruct=case.get("instruct"),
                non_streaming_mode=nonstream,
                **greedy,
            )
        else:
            wrapper.generate_voice_design(
                text=case["text"],
                instruct=case["instruct"],
                language=case["language"],
                non_streaming_mode=nonstream,
                **greedy,
            )
    finally:
        rec.close()
        model.generate = orig
    instruct = (seen.get("instruct_ids") or [None])[0]
    out = {
        "prompt_ids": seen["input_ids"][0][0].numpy().astype(np.int64),
        "instruct_ids": (
            np.zeros(0, np.int64) if instruct is None else instruct[0].numpy().astype(np.int64)
        ),
        "codes": codes_out[0].numpy().astype(np.int64),
        "embeds": torch.cat(rec.embeds).numpy().astype(np.float32),
        "streaming": np.int64(0 if nonstream else 1),
    }
    if model.tts_model_type == "base":
        xvec = seen["voice_clone_prompt"]["ref_spk_embedding"][0]
        out["xvector"] = xvec.float().numpy().astype(np.float32)
    if keep_logits:
        out["logits"] = torch.cat(rec.logits).numpy().astype(np.float32)
    return out


def build_variant(out_root: str, name: str, v: dict, with_speech_weights: bool) -> None:
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    text_ids = make_tokenizer(d)
    with open(os.path.join(d, "vocab.json"), encoding="utf-8") as f:
        text_vocab = len(json.load(f)) + len(SPECIALS)
    cfg = make_config(v, text_ids, text_vocab)
    torch.manual_seed(v["seed"])
    model = Qwen3TTSForConditionalGeneration(cfg).eval()
    redraw(model, v["seed"])
    # Casting to bf16 for saving also rounds the RoPE inv_freq buffers: put them back after.
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.to(torch.float32)
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
    for m in model.modules():  # the rotary modules keep a second reference, not a buffer
        if hasattr(m, "original_inv_freq") and hasattr(m, "inv_freq"):
            m.original_inv_freq = m.inv_freq
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
    write_speech_tokenizer(os.path.join(d, "speech_tokenizer"), with_speech_weights)
    if v["model_type"] == "base":
        write_ref_wav(os.path.join(out_root, "ref.wav"))

    from transformers import Qwen2TokenizerFast

    tok = Qwen2TokenizerFast.from_pretrained(d)
    wrapper = Qwen3TTSModel(model, Qwen3TTSProcessor(tokenizer=tok), dict(GENERATION_CONFIG))
    arrays: dict = {}
    cs = cases(v["model_type"])
    for i, case in enumerate(cs):
        r = record(wrapper, case, keep_logits=i == 0)
        for k, a in r.items():
            arrays[f"case_{i}_{k}"] = a
        print(f"{name} case {i}: {len(r['prompt_ids'])} text ids, codes {r['codes'].shape}")
    np.savez_compressed(os.path.join(out_root, f"{name}.fixtures.npz"), **arrays)
    with open(os.path.join(out_root, f"{name}.cases.json"), "w", encoding="utf-8") as f:
        json.dump(cs, f, indent=2, ensure_ascii=False)


def write_speech_tokenizer(d: str, with_weights: bool) -> None:
    """speech_tokenizer/config.json (+ weights of a tiny official 12 Hz tokenizer model)."""
    os.makedirs(d, exist_ok=True)
    cfg = speech_tokenizer_config()
    if with_weights:
        from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Config,
        )
        from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
            Qwen3TTSTokenizerV2Model,
        )

        enc = tiny_mimi_config()
        conf = Qwen3TTSTokenizerV2Config(
            encoder_config=enc,
            decoder_config=cfg["decoder_config"],
            encoder_valid_num_quantizers=GROUPS,
        )
        torch.manual_seed(7)
        m = Qwen3TTSTokenizerV2Model(conf).eval()
        redraw(m.decoder, 7)
        # Only the decoder is used for synthesis; drop the encoder to keep the folder small.
        state = {k: v for k, v in m.state_dict().items() if k.startswith("decoder.")}
        from safetensors.torch import save_file

        save_file(  # bf16: half the bytes in the repository
            {k: v.to(torch.bfloat16).contiguous() for k, v in state.items()},
            os.path.join(d, "model.safetensors"),
            metadata={"format": "pt"},
        )
        cfg = json.loads(conf.to_json_string())
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def tiny_mimi_config() -> dict:
    return {
        "hidden_size": 16,
        "upsample_groups": 16,
        "num_filters": 4,
        "num_residual_layers": 1,
        "upsampling_ratios": [8, 6, 5, 4],
        "codebook_size": CODEBOOK,
        "codebook_dim": 16,
        "num_quantizers": GROUPS,
        "num_semantic_quantizers": 1,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "intermediate_size": 32,
        "sliding_window": 8,
        "frame_rate": 12.5,
        "sampling_rate": 24000,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "qwen3_tiny"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    for i, (name, v) in enumerate(variants().items()):
        build_variant(args.out, name, v, with_speech_weights=i == 0)


if __name__ == "__main__":
    main()
