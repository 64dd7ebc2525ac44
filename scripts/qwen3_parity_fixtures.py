"""Tiny random Qwen3-TTS checkpoints + the official implementation's outputs on them.

Writes tests/data/qwen3_tiny/<variant>/ (a checkpoint folder laid out as published: config.json,
generation_config.json, model.safetensors, vocab.json, merges.txt, tokenizer_config.json,
speech_tokenizer/) and tests/data/qwen3_tiny/<variant>.fixtures.npz with what the official
`qwen-tts` 0.1.1 code produces on it:

  case_<i>_prompt_ids      the text ids the official wrapper tokenizes (assistant text)
  case_<i>_instruct_ids    the instruct ids (empty when there is none)
  case_<i>_codes           greedy codes [frames, G] of the wrapper's method for the model type
                           (generate_custom_voice, generate_voice_design, generate_voice_clone)
                           with do_sample=False, subtalker_dosample=False and the case's own
                           arguments only: a case without "non_streaming_mode" gets the
                           method's default layout (whole text for CustomVoice / VoiceDesign,
                           streaming text for a voice clone), one without "language" "Auto"
  case_<i>_streaming       1 where the official call used the streaming-text layout
  case_<i>_embeds          the talker's input embeddings along that run [T, H] (prompt, then
                           one row per decode step)
  case_<i>_logits          the talker's logits at every one of those positions [T, V]
                           (teacher-forced on the official trajectory; only for case 0)
  case_<i>_xvector         Base: the speaker encoder's x-vector of ref.wav
and the case texts / speakers / languages / instructs in <variant>.cases.json. Variants:
custom_equal (CustomVoice, equal widths, speakers + a dialect speaker), design_wide
(VoiceDesign, talker wider than the predictor), base_xvector (Base, voice clone in
x-vector-only mode from tests/data/qwen3_tiny/ref.wav, generate_voice_clone).

`--configs [NAME ...]` builds the configuration sweep instead (SWEEP below, every entry by
default) into tests/data/qwen3_configs/: checkpoints that walk the axes the published config
allows, issue 26's among them, each with 2-3 requests, in the same layout with these changes:
case 0 keeps only the prompt rows of case_0_embeds, the talker logits from the prompt's last
row over the first SWEEP_FRAMES frames, and adds
  case_0_prompt_rows       prefill rows of the official run
  case_0_depth_hidden      the talker hidden states those frames' code predictor started from
  case_0_depth_logits      the code predictor's teacher-forced logits on them [F, G-1, V]
                           (talker.forward_sub_talker_finetune)
Sweep folders carry no speech-tokenizer weights (the tests compare codes, not audio).

Needs torch, transformers==4.57.3, `pip install qwen-tts==0.1.1 --no-deps`, accelerate, einops
(plus librosa, soundfile as qwen_tts imports them). qwen_tts imports sox and torchaudio for its
25 Hz tokenizer only; empty stand-in modules are put in sys.modules before the import.

    OMP_NUM_THREADS=1 python scripts/qwen3_parity_fixtures.py [--out tests/data/qwen3_tiny]
    OMP_NUM_THREADS=1 python scripts/qwen3_parity_fixtures.py --configs [issue26 ...]

Everything is seeded; a rerun writes the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import types
import zlib

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


def default_mrope(head_dim: int) -> list:
    """M-RoPE sections summing to head_dim / 2, shaped like the released [24, 20, 20]."""
    return [head_dim // 2 - 2 * (head_dim // 6)] + [head_dim // 6] * 2


def make_config(v: dict, text_ids: dict, text_vocab: int) -> Qwen3TTSConfig:
    """The official config of variant `v`. Keys a variant leaves out keep the values the
    three original variants were built with, so those rebuild unchanged."""
    t, p = v["talker"], v["predictor"]
    codebook = v.get("codebook", CODEBOOK)
    groups = v.get("groups", GROUPS)
    talker = dict(
        vocab_size=v.get("vocab", TALKER_VOCAB),
        hidden_size=t["hidden"],
        intermediate_size=t["inter"],
        num_hidden_layers=t["layers"],
        num_attention_heads=t["heads"],
        num_key_value_heads=t["kv"],
        head_dim=t["head_dim"],
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=t.get("eps", 1e-6),
        rope_theta=t.get("theta", 10000.0),
        rope_scaling={
            "interleaved": t.get("interleaved", True),
            "mrope_section": t.get("mrope")
            or default_mrope(t["head_dim"] or t["hidden"] // t["heads"]),
            "rope_type": "default",
        },
        num_code_groups=groups,
        text_hidden_size=v.get("text_hidden", t["hidden"] + 8),
        text_vocab_size=max(text_vocab, v.get("text_vocab", 0)),
        spk_id=v["spk_id"],
        spk_is_dialect=v["spk_is_dialect"],
        codec_language_id=v["languages"],
        code_predictor_config=dict(
            vocab_size=codebook,
            hidden_size=p["hidden"],
            intermediate_size=p["inter"],
            num_hidden_layers=p["layers"],
            num_attention_heads=p["heads"],
            num_key_value_heads=p["kv"],
            head_dim=p["head_dim"],
            rms_norm_eps=p.get("eps", 1e-6),
            rope_theta=p.get("theta", 1000000.0),
            max_position_embeddings=64,
            num_code_groups=groups,
        ),
        **v.get("codec", codec_ids()),
    )
    # None: leave the key out, so the official class default applies
    talker = {k: x for k, x in talker.items() if x is not None}
    cp = talker["code_predictor_config"]
    talker["code_predictor_config"] = {k: x for k, x in cp.items() if x is not None}
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
    """Captures the talker's input embeddings, final-norm hidden states (the code predictor's
    `past_hidden`) and logits over one generate() call."""

    def __init__(self, talker) -> None:
        self.embeds: list[torch.Tensor] = []
        self.hidden: list[torch.Tensor] = []
        self.logits: list[torch.Tensor] = []
        self._h = [
            talker.model.register_forward_pre_hook(self._pre, with_kwargs=True),
            talker.model.register_forward_hook(self._hidden),
            talker.codec_head.register_forward_hook(self._post),
        ]

    def _hidden(self, module, args, out):
        self.hidden.append(out.last_hidden_state[0].detach().clone())

    def _pre(self, module, args, kwargs):
        self.embeds.append(kwargs["inputs_embeds"][0].detach().clone())

    def _post(self, module, args, out):
        self.logits.append(out[0].detach().clone())

    def close(self) -> None:
        for h in self._h:
            h.remove()


# A case holds the arguments a user passes to the wrapper's method, and only those: the
# official defaults (layout, language) apply to what a case leaves out, and codecspec must
# give the same codes when it leaves the same things out (issue 49). "non_streaming_mode":
# False asks for the streaming-text layout, True for the whole text.
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
                non_streaming_mode=False,
            ),
            dict(text="The quick brown fox.", speaker="eric"),  # default language: a dialect
        ]
    if model_type == "base":  # x-vector only: the user passes x_vector_only_mode=True
        return [
            dict(text="Hello world.", language="english", ref_audio="ref.wav"),
            dict(
                text="The quick brown fox.",
                language="auto",
                ref_audio="ref.wav",
                non_streaming_mode=True,
            ),
            dict(
                text="A tiny tokenizer.",
                language="english",
                ref_audio="ref.wav",
                non_streaming_mode=False,
            ),
            dict(text="The quick brown fox.", ref_audio="ref.wav"),
        ]
    return [
        dict(text="Hello world.", instruct="Speak slowly and clearly.", language="english"),
        dict(text="A tiny tokenizer.", instruct="", language="auto"),
        dict(
            text="Numbers 0123.",
            instruct="A warm and friendly voice.",
            language="Chinese",
            non_streaming_mode=False,
        ),
        dict(text="Hello world.", instruct="A warm and friendly voice."),
    ]


def _passed(case: dict, *names: str) -> dict:
    """The case's own values of these optional arguments (those it has, no others)."""
    return {k: case[k] for k in names if k in case}


def record(wrapper: Qwen3TTSModel, case: dict, keep_logits: bool, detail: bool = False) -> dict:
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
    try:
        if model.tts_model_type == "base":
            wrapper.generate_voice_clone(
                text=case["text"],
                ref_audio=(REF_AUDIO, 24000),
                x_vector_only_mode=True,
                **_passed(case, "language", "non_streaming_mode"),
                **greedy,
            )
        elif model.tts_model_type == "custom_voice":
            wrapper.generate_custom_voice(
                text=case["text"],
                speaker=case["speaker"],
                **_passed(case, "language", "instruct", "non_streaming_mode"),
                **greedy,
            )
        else:
            wrapper.generate_voice_design(
                text=case["text"],
                instruct=case["instruct"],
                **_passed(case, "language", "non_streaming_mode"),
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
        # the layout the official call used (its own default where the case passed none)
        "streaming": np.int64(0 if seen["non_streaming_mode"] else 1),
    }
    if model.tts_model_type == "base":
        xvec = seen["voice_clone_prompt"]["ref_spk_embedding"][0]
        out["xvector"] = xvec.float().numpy().astype(np.float32)
    if keep_logits:
        out["logits"] = torch.cat(rec.logits).numpy().astype(np.float32)
    if detail:
        out["hidden"] = torch.cat(rec.hidden).numpy().astype(np.float32)
        out["prompt_rows"] = np.int64(len(rec.embeds[0]))
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


# ---------------------------------------------------------------------- configuration sweep
# Parity as a property of the loader: checkpoints that walk the axes the published config
# allows, each with the official outputs on a few texts. Written to tests/data/qwen3_configs/
# by `--configs`; tests/families/qwen3_tts/test_qwen3_parity_configs.py replays them without torch.
SWEEP_OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "qwen3_configs"
)
SWEEP_FRAMES = 6  # frames whose talker / predictor logits are kept teacher-forced
SPECIAL_KEYS = (
    "codec_pad_id",
    "codec_bos_id",
    "codec_eos_token_id",
    "codec_think_id",
    "codec_nothink_id",
    "codec_think_bos_id",
    "codec_think_eos_id",
)


def special_layout(layout: str, codebook: int, vocab: int) -> tuple[dict, int, int]:
    """(special codec ids, first language id, first speaker id) placed by `layout`:
    "qwen" as the released checkpoints (codebook + 100 ...), "low" right after the codebook,
    "top" at the top of the vocabulary with eos the last id."""
    b, t = codebook, vocab - 1
    if layout == "qwen":
        ids, lang0, spk0 = [b + 100, b + 101, b + 102, b + 106, b + 107, b + 108, b + 109], 200, 300
        return dict(zip(SPECIAL_KEYS, ids)), b + lang0, b + spk0
    if layout == "low":
        return dict(zip(SPECIAL_KEYS, range(b, b + 7))), b + 10, b + 20
    if layout == "top":
        ids = [t - 2, t - 1, t, t - 6, t - 5, t - 4, t - 3]
        return dict(zip(SPECIAL_KEYS, ids)), t - 40, t - 60
    raise ValueError(f"layout {layout!r}")


def sweep_variant(name: str, spec: dict) -> dict:
    """A variant dict as make_config reads it, from a sweep entry (SWEEP's shorthand)."""
    v = dict(SWEEP_BASE, **spec)
    v["talker"] = dict(SWEEP_BASE["talker"], **spec.get("talker", {}))
    v["predictor"] = dict(SWEEP_BASE["predictor"], **spec.get("predictor", {}))
    v["vocab"] = v["codebook"] + 1024 + v.get("extra_vocab", 0)
    codec, lang0, spk0 = special_layout(v["layout"], v["codebook"], v["vocab"])
    v["codec"] = codec
    v["languages"] = {n: lang0 + i for i, n in enumerate(v["language_names"])}
    speakers = v["speaker_dialects"] if v["model_type"] == "custom_voice" else {}
    v["spk_id"] = {n: spk0 + i for i, n in enumerate(speakers)}
    v["spk_is_dialect"] = dict(speakers)
    v.setdefault("seed", zlib.crc32(name.encode()) % 10000)  # adding an entry moves no other
    return v


SWEEP_BASE = dict(
    model_type="custom_voice",
    size="0b6",
    talker=dict(hidden=16, layers=2, heads=2, kv=1, head_dim=8, inter=32, theta=1e4),
    predictor=dict(hidden=16, layers=2, heads=2, kv=1, head_dim=8, inter=24, theta=1e6),
    codebook=32,
    layout="qwen",
    language_names=["english", "chinese", "german", "sichuan_dialect"],
    speaker_dialects={"aiden": False, "vivian": False, "eric": "sichuan_dialect"},
    generation=dict(repetition_penalty=1.05, max_new_tokens=14),
)
T_HELLO = "Hello world."
T_FOX = "The quick brown fox, 42 times: caf\u00e9!"
T_DIGITS = "Numbers 0123456789; punctuation? (yes) - 'quoted'!"
T_ZH = "\u4f60\u597d\uff0c\u4e16\u754c\u3002"
T_MIXED = "\u00dcber 3.14 \u20ac \u2014 na\u00efve r\u00e9sum\u00e9."


def cv(text, speaker="aiden", language="english", **kw) -> dict:
    return dict(text=text, speaker=speaker, language=language, **kw)


def vd(text, instruct, language="english", **kw) -> dict:
    return dict(text=text, instruct=instruct, language=language, **kw)


def vc(text, language="english", **kw) -> dict:
    return dict(text=text, language=language, ref_audio="ref.wav", **kw)


# name -> what differs from SWEEP_BASE, and the requests (case 0 keeps the teacher-forced
# logits). Axes: widths equal / different, heads, KV heads, head_dim (also != hidden / heads),
# layers, codebook and vocabulary sizes, where the special ids sit, both RoPE thetas, M-RoPE
# sections, RMSNorm eps, repetition penalty, model types, prompt modes, texts.
SWEEP: dict = {
    # issue 26: the reported configuration (widths differ: the projection is a Linear)
    "issue26": dict(
        talker=dict(hidden=64, heads=4, kv=2, head_dim=16, inter=128, theta=1e6, mrope=[4, 2, 2]),
        predictor=dict(hidden=48, heads=4, kv=2, head_dim=16, inter=96, theta=1e4),
        codebook=128,
        text_hidden=32,
        text_vocab=384,
        language_names=["english", "chinese"],
        speaker_dialects={"ryan": False, "vivian": False},
        generation=dict(repetition_penalty=1.25, max_new_tokens=8192),
        cases=[cv(T_HELLO, "ryan"), cv(T_FOX, "ryan")],
        seed=107,  # says eos after 37 and 51 frames (max_new_tokens is 8192)
    ),
    "mha_equal": dict(  # MHA, head_dim = hidden / heads, CustomVoice 1.7B reads instruct
        size="1b7",
        talker=dict(kv=2),
        predictor=dict(kv=2),
        cases=[cv(T_FOX), cv(T_HELLO, "vivian", "auto", instruct="Whisper it."), cv(T_ZH, "eric")],
    ),
    "mqa_wide_heads": dict(  # one KV head, head_dim > hidden / heads in both models
        model_type="voice_design",
        size="1b7",
        talker=dict(heads=2, kv=1, head_dim=32, mrope=[8, 4, 4]),
        predictor=dict(hidden=24, heads=3, kv=1, head_dim=16, inter=40),
        cases=[vd(T_HELLO, "A calm low voice."), vd(T_DIGITS, "Fast and bright.", "auto")],
    ),
    "narrow_heads": dict(  # head_dim < hidden / heads, predictor wider than the talker
        talker=dict(hidden=24, heads=2, kv=1, head_dim=8, inter=48),
        predictor=dict(hidden=32, heads=4, kv=2, head_dim=4, inter=40),
        cases=[cv(T_DIGITS, "vivian"), cv(T_HELLO, non_streaming_mode=False)],
    ),
    "deep_talker": dict(
        talker=dict(layers=3),
        predictor=dict(layers=1),
        codebook=64,
        layout="low",
        cases=[cv(T_HELLO), cv(T_MIXED, "eric", "auto")],
    ),
    "deep_predictor": dict(
        talker=dict(layers=1),
        predictor=dict(layers=4),
        layout="top",
        cases=[cv(T_FOX, "vivian"), cv(T_ZH, "aiden", "chinese", non_streaming_mode=False)],
    ),
    "vocab_gap": dict(  # ids between the codebook and the suppressed top 1024 stay allowed
        codebook=16,
        extra_vocab=40,
        layout="top",
        cases=[cv(T_HELLO), cv(T_DIGITS, "eric", "auto")],
    ),
    "theta_swapped": dict(  # talker theta large, predictor theta small (as issue 26)
        talker=dict(theta=5e5),
        predictor=dict(theta=2e3),
        cases=[cv(T_FOX), cv(T_HELLO, "vivian", "german")],
    ),
    "theta_equal": dict(
        talker=dict(theta=1e6),
        predictor=dict(theta=1e6),
        cases=[cv(T_MIXED), cv(T_HELLO, non_streaming_mode=False)],
    ),
    "mrope_blocks": dict(  # non-interleaved M-RoPE, uneven sections
        talker=dict(head_dim=16, interleaved=False, mrope=[2, 3, 3]),
        cases=[cv(T_HELLO, "vivian"), cv(T_FOX, non_streaming_mode=False)],
    ),
    "mrope_interleaved_uneven": dict(
        talker=dict(head_dim=16, mrope=[6, 1, 1]),
        predictor=dict(head_dim=16),
        cases=[cv(T_DIGITS), cv(T_ZH, "eric", "auto")],
    ),
    "penalty_off": dict(
        generation=dict(repetition_penalty=1.0, max_new_tokens=14),
        cases=[cv(T_HELLO), cv(T_FOX, "vivian")],
    ),
    "penalty_strong": dict(
        generation=dict(repetition_penalty=2.0, max_new_tokens=14),
        cases=[cv(T_FOX), cv(T_DIGITS, "eric", "chinese", non_streaming_mode=False)],
    ),
    "norm_eps": dict(  # different RMSNorm eps per model; text hidden wider than the talker
        talker=dict(eps=1e-5),
        predictor=dict(eps=1e-3),
        text_hidden=48,
        cases=[cv(T_MIXED, "vivian"), cv(T_HELLO)],
    ),
    "dialects": dict(  # several dialect speakers: "auto" picks the speaker's dialect tag
        language_names=["english", "chinese", "beijing_dialect", "sichuan_dialect"],
        speaker_dialects={"dylan": "beijing_dialect", "eric": "sichuan_dialect", "ryan": False},
        cases=[cv(T_ZH, "dylan", "auto"), cv(T_ZH, "eric", "chinese"), cv(T_HELLO, "ryan", "auto")],
    ),
    "design_instruct": dict(
        model_type="voice_design",
        size="1b7",
        talker=dict(hidden=32, inter=48),
        predictor=dict(head_dim=16, kv=2),
        cases=[
            vd(T_FOX, "Speak slowly and clearly, with a warm and friendly voice."),
            vd(T_HELLO, "Loud.", "auto", non_streaming_mode=False),
            vd(T_ZH, "\u6e29\u67d4\u3002", "chinese"),
        ],
    ),
    "base_wide": dict(  # voice clone, x-vector only, talker wider than the predictor
        model_type="base",
        talker=dict(hidden=24, heads=3, kv=3),
        predictor=dict(hidden=12, heads=2, kv=1, head_dim=12, inter=24),
        # the clone's default layout (streaming text), then the whole text asked for
        cases=[vc(T_HELLO), vc(T_FOX, "auto", non_streaming_mode=True)],
    ),
    "base_top_layout": dict(
        model_type="base",
        layout="top",
        generation=dict(repetition_penalty=1.3, max_new_tokens=14),
        cases=[vc(T_DIGITS), vc(T_MIXED, "german", non_streaming_mode=True)],
    ),
    "groups8": dict(  # eight code groups: seven predictor steps per frame
        groups=8,
        cases=[cv(T_HELLO, "vivian"), cv(T_FOX, non_streaming_mode=False)],
    ),
    "class_defaults": dict(  # a hand-written config.json: keys at their class default left out
        talker=dict(head_dim=None, theta=None, eps=None),
        predictor=dict(theta=None, eps=None),
        minimal_json=True,
        cases=[cv(T_FOX, "eric", "auto"), cv(T_MIXED)],
    ),
    "frame_limit": dict(  # max_new_tokens ends every request
        generation=dict(repetition_penalty=1.05, max_new_tokens=5),
        cases=[cv(T_FOX), cv(T_HELLO, non_streaming_mode=False)],
    ),
}


def predictor_logits(talker, codes: np.ndarray, hidden: np.ndarray) -> np.ndarray:
    """The code predictor's teacher-forced logits [frames, G-1, V] of the official
    fine-tuning path (forward_sub_talker_finetune)."""
    with torch.no_grad():
        logits, _ = talker.forward_sub_talker_finetune(
            torch.from_numpy(codes).long(), torch.from_numpy(hidden)
        )
    return logits.numpy().astype(np.float32)


def trim_detail(model, r: dict) -> dict:
    """Case 0: keeps the prompt rows, the talker logits from the prompt's last row over
    SWEEP_FRAMES frames, and the predictor's teacher-forced logits of those frames."""
    n, codes = int(r["prompt_rows"]), r["codes"]
    k = min(SWEEP_FRAMES, len(codes))
    hidden = r.pop("hidden")[n - 1 : n - 1 + k]
    r["embeds"] = r["embeds"][:n]
    r["logits"] = r["logits"][n - 1 : n + k]
    r["depth_hidden"] = hidden
    r["depth_logits"] = predictor_logits(model.talker, codes[:k], hidden)
    return r


def write_generation_config(d: str, gen: dict) -> dict:
    cfg = dict(GENERATION_CONFIG, **gen)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


def build_sweep_entry(out_root: str, name: str, v: dict) -> None:
    d = os.path.join(out_root, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    text_ids = make_tokenizer(d)
    with open(os.path.join(d, "vocab.json"), encoding="utf-8") as f:
        text_vocab = len(json.load(f)) + len(SPECIALS)
    torch.manual_seed(v["seed"])
    model = Qwen3TTSForConditionalGeneration(make_config(v, text_ids, text_vocab)).eval()
    redraw(model, v["seed"])
    save_bf16(model, d)
    os.chmod(os.path.join(d, "model.safetensors"), 0o644)  # safetensors writes 0600
    if v.get("minimal_json"):
        minimal_config_json(os.path.join(d, "config.json"))
    gen = write_generation_config(d, v["generation"])
    write_speech_tokenizer(os.path.join(d, "speech_tokenizer"), False)
    if v["model_type"] == "base":
        write_ref_wav(os.path.join(out_root, "ref.wav"))
    from transformers import Qwen2TokenizerFast

    tok = Qwen2TokenizerFast.from_pretrained(d)
    wrapper = Qwen3TTSModel(model, Qwen3TTSProcessor(tokenizer=tok), gen)
    arrays: dict = {}
    for i, case in enumerate(v["cases"]):
        r = record(wrapper, case, keep_logits=i == 0, detail=i == 0)
        if i == 0:
            r = trim_detail(model, r)
        else:
            r.pop("embeds")
        arrays.update({f"case_{i}_{k}": a for k, a in r.items()})
        print(f"{name} case {i}: {len(r['prompt_ids'])} text ids, codes {r['codes'].shape}")
    np.savez_compressed(os.path.join(out_root, f"{name}.fixtures.npz"), **arrays)
    with open(os.path.join(out_root, f"{name}.cases.json"), "w", encoding="utf-8") as f:
        json.dump(v["cases"], f, indent=2, ensure_ascii=False)


def _without_defaults(section: dict, defaults: dict) -> dict:
    return {k: x for k, x in section.items() if k not in defaults or defaults[k] != x}


def minimal_config_json(path: str) -> None:
    """Rewrites a saved config.json the way a person writes one: talker and code-predictor
    keys equal to their class defaults are left out (the loader must supply the same ones),
    and the speaker-encoder section keeps only what its class accepts back."""
    from qwen_tts.core.models.configuration_qwen3_tts import (
        Qwen3TTSTalkerCodePredictorConfig,
        Qwen3TTSTalkerConfig,
    )

    with open(path, encoding="utf-8") as f:
        root = json.load(f)
    talker = root["talker_config"]
    cp = _without_defaults(
        talker.pop("code_predictor_config"), Qwen3TTSTalkerCodePredictorConfig().to_dict()
    )
    talker = _without_defaults(talker, Qwen3TTSTalkerConfig().to_dict())
    talker["code_predictor_config"] = cp
    root["talker_config"] = talker
    root["speaker_encoder_config"].pop("model_type", None)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(root, f, indent=2)


def save_bf16(model, d: str) -> None:
    """save_pretrained in bf16 (the weights are bf16-exact), then the f32 model restored
    with its RoPE buffers, which the bf16 cast rounds."""
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.to(torch.float32)
    with torch.no_grad():
        for n, b in model.named_buffers():
            b.copy_(buffers[n])
    for m in model.modules():  # the rotary modules keep a second reference, not a buffer
        if hasattr(m, "original_inv_freq") and hasattr(m, "inv_freq"):
            m.original_inv_freq = m.inv_freq


def build_sweep(out_root: str, names=None) -> None:
    os.makedirs(out_root, exist_ok=True)
    for name in sorted(SWEEP) if not names else names:
        build_sweep_entry(out_root, name, sweep_variant(name, SWEEP[name]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "qwen3_tiny"))
    ap.add_argument(
        "--configs",
        nargs="*",
        metavar="NAME",
        help="build the configuration sweep (all of SWEEP, or these entries) into "
        "tests/data/qwen3_configs instead (or --out)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.configs is not None:
        out = args.out if args.out != ap.get_default("out") else SWEEP_OUT
        build_sweep(out, args.configs)
        return
    os.makedirs(args.out, exist_ok=True)
    for i, (name, v) in enumerate(variants().items()):
        build_variant(args.out, name, v, with_speech_weights=i == 0)


if __name__ == "__main__":
    main()
