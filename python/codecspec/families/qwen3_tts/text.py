"""Text front end of Qwen3-TTS: the Qwen tokenizer and the official prompt layout.

Tokenizer: the checkpoint's own files through the `tokenizers` library. tokenizer.json is used
as is when present; otherwise vocab.json + merges.txt are assembled the way transformers'
Qwen2 slow-to-fast conversion does (NFC, Qwen2's split regex, byte-level BPE without a prefix
space) and the added tokens of tokenizer_config.json keep their declared ids.

Prompt: the rows Qwen3TTSForConditionalGeneration.generate feeds the talker for one request,
as Qwen3TTSModel.generate_custom_voice / generate_voice_design build them. Every row is the sum
of a text part (a text token through the text projection) and a codec part (a codec token or
the speaker's codec embedding), either of which may be absent:
  instruct   "<|im_start|>user\n{instruct}<|im_end|>\n"          text only
  role       "<|im_start|>assistant\n"  (the first 3 text ids)    text only
  tags       tts_pad ... tts_pad, tts_bos  +  [think | nothink, think_bos, (language), think_eos,
             (speaker), pad]  (the codec prefix without its last entry, codec_bos)
  non-streaming (whole text; the official default of generate_custom_voice and
             generate_voice_design): every text id of the assistant text (ids[3:-5]) +
             codec_pad, tts_eos + codec_pad, tts_pad + codec_bos; later steps add tts_pad
  streaming text (the official default of generate_voice_clone): ids[3] + codec_bos; later
             step g adds text id ids[4+g] (then tts_eos, then tts_pad) to the frame's codec
             embedding sum
  in-context clone (Base, a reference clip and its transcript; `generate_icl_prompt`): after
             the tags, the text [reference transcript ids, ids[3:-5], tts_eos] meets the codec
             [codec_bos, one row per reference frame (the sum of its 16 code embeddings)]:
             non-streaming, all text rows (+ codec_pad) then all codec rows (+ tts_pad);
             streaming, row i pairs text i with codec i, the text left over trails (or
             tts_pad fills the text side when the codec is longer)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = [
    "load_text_tokenizer",
    "Prompt",
    "build_prompt",
    "official_streaming_text",
    "NONE",
    "SPEAKER",
    "REF_FRAME",
]

NONE = -1  # no text / codec part in this row
SPEAKER = -2  # codec part = the speaker embedding (CustomVoice: codec table row of the speaker)
REF_FRAME = -3  # codec part = the next reference frame's code embeddings (in-context clone)

# transformers' Qwen2Converter split pattern (convert_slow_tokenizer.py).
_QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def _err(msg: str) -> ValueError:
    return ValueError(f"model: {msg}")


def _import_tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "Qwen3-TTS needs the `tokenizers` package: pip install 'codecspec[qwen3]'"
        ) from None
    return tokenizers


def _read_merges(path: Path) -> list[tuple[str, str]]:
    merges = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        line = line.strip()
        # Only the first line's "#version" header is skipped, as transformers' Qwen2Tokenizer
        # does: a merge may start with "#" (e.g. "# #" -> "##").
        if not line or (i == 0 and line.startswith("#version")):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise _err(f"{path}: malformed merge line {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def _added_tokens(cfg_path: Path) -> list[tuple[int, dict]]:
    if not cfg_path.is_file():
        return []
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        added = cfg.get("added_tokens_decoder") or {}
        return sorted((int(i), dict(t)) for i, t in added.items())
    except (ValueError, TypeError, AttributeError) as e:
        raise _err(f"{cfg_path}: malformed added_tokens_decoder ({e})") from None


def load_text_tokenizer(directory):
    """A `tokenizers.Tokenizer` from the checkpoint folder's own tokenizer files."""
    tk = _import_tokenizers()
    d = Path(directory)
    if (d / "tokenizer.json").is_file():
        try:
            return tk.Tokenizer.from_file(str(d / "tokenizer.json"))
        except Exception as e:
            raise _err(f"{d / 'tokenizer.json'} cannot be read ({e})") from None
    vocab_p, merges_p = d / "vocab.json", d / "merges.txt"
    for p in (vocab_p, merges_p):
        if not p.is_file():
            raise _err(f"no {p.name} (or tokenizer.json) in {d}: the text tokenizer is missing")
    try:
        vocab = json.loads(vocab_p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise _err(f"{vocab_p} is not valid JSON ({e})") from None
    if not isinstance(vocab, dict) or not vocab:
        raise _err(f"{vocab_p} is not a token -> id object")
    try:
        model = tk.models.BPE(
            vocab=vocab,
            merges=_read_merges(merges_p),
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    except Exception as e:
        raise _err(f"{vocab_p.name} / {merges_p.name} do not form a BPE model ({e})") from None
    tok = tk.Tokenizer(model)
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = tk.decoders.ByteLevel()
    for want, t in _added_tokens(d / "tokenizer_config.json"):
        tokens = [
            tk.AddedToken(
                t["content"],
                single_word=bool(t.get("single_word", False)),
                lstrip=bool(t.get("lstrip", False)),
                rstrip=bool(t.get("rstrip", False)),
                normalized=bool(t.get("normalized", not t.get("special", False))),
                special=bool(t.get("special", False)),
            )
        ]
        if t.get("special", False):
            tok.add_special_tokens(tokens)
        else:
            tok.add_tokens(tokens)
        got = tok.token_to_id(t["content"])
        if got != want:
            raise _err(
                f"tokenizer_config.json: added token {t['content']!r} has id {want} but the "
                f"vocabulary gives it {got}"
            )
    return tok


def encode(tok, text: str) -> np.ndarray:
    return np.asarray(tok.encode(text).ids, np.int64)


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def reference_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


@dataclasses.dataclass
class Prompt:
    """The talker's prefill rows and what later steps add.

    text_ids[i] / codec_ids[i]: the two parts of row i (NONE = absent; codec SPEAKER = the
    speaker embedding, REF_FRAME = the next reference frame). trailing_ids: the text ids added
    at decode steps 0, 1, ... (then tts_pad). prompt_ids / instruct_ids / ref_ids: the
    tokenized texts, as the official wrapper has them.
    """

    text_ids: np.ndarray
    codec_ids: np.ndarray
    trailing_ids: np.ndarray
    speaker_id: Optional[int]
    prompt_ids: np.ndarray
    instruct_ids: np.ndarray
    ref_ids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    # leading rows the text does not change (instruction, role tokens, think / language /
    # speaker tags): the talker runs them as a call of their own and caches their K/V
    fixed_rows: int = 0
    # the layout these rows follow (streaming text or whole text), once a request's
    # default has been resolved: callers report it, and tests check which one a mode got
    streaming_text: bool = False

    def __len__(self) -> int:
        return len(self.text_ids)


def language_codec_id(spec, language: str, speaker: Optional[str]) -> Optional[int]:
    """The codec language tag (None = "auto", the nothink prefix), with the official dialect
    rule: a dialect speaker speaking Chinese or "auto" gets its dialect's tag."""
    lang = language.lower()
    lang_id = None if lang == "auto" else int(spec.languages[lang])
    if speaker and lang in ("chinese", "auto"):
        dialect = spec.speaker_dialect.get(speaker.lower(), False)
        if dialect is not False and dialect is not None:
            if str(dialect).lower() not in spec.languages:
                raise _err(f"config.json: speaker {speaker!r} has unknown dialect {dialect!r}")
            lang_id = int(spec.languages[str(dialect).lower()])
    return lang_id


def official_streaming_text(clone: bool) -> bool:
    """The prompt layout the official method of a request's mode uses when the caller does
    not choose one (qwen-tts 0.1.1): generate_voice_clone (a Base checkpoint, in context or
    x-vector only) defaults to non_streaming_mode=False, the streaming-text layout;
    generate_custom_voice and generate_voice_design default to non_streaming_mode=True, the
    whole text in the prompt. Every entry point (Python, CLI, server) resolves an unset
    layout here, so their defaults give the official method's codes."""
    return bool(clone)


def build_prompt(
    tok,
    spec,
    text: str,
    *,
    language: str = "auto",
    speaker: Optional[str] = None,
    instruct: Optional[str] = None,
    streaming_text: Optional[bool] = None,
    speaker_vector: bool = False,
    ref_text: Optional[str] = None,
    ref_frames: int = 0,
    ids: Optional[np.ndarray] = None,
) -> Prompt:
    """The official prompt rows for one request (arguments already validated).
    streaming_text: the layout; None = the official default of the request's mode
    (`official_streaming_text`: streaming for a voice clone, whole text otherwise).
    speaker_vector: a Base checkpoint's x-vector takes the speaker row (its value is added by
    the caller; Prompt.speaker_id stays None); every Base request is a clone, so this is
    also what tells the clone mode apart. ref_text: the in-context clone's transcript of
    a reference clip of `ref_frames` frames (their embeddings are the caller's too).
    ids: the tokenized assistant_text(text) where the caller has it instead of the text (a
    text still arriving: the ids known so far and the template's suffix, text_stream.py)."""
    if streaming_text is None:
        streaming_text = official_streaming_text(clone=speaker_vector)
    streaming_text = bool(streaming_text)
    c, t = spec.codec, spec.text
    ids = encode(tok, assistant_text(text)) if ids is None else np.asarray(ids, np.int64)
    ins = encode(tok, instruct_text(instruct)) if instruct else np.zeros(0, np.int64)
    lang_id = language_codec_id(spec, language, speaker)
    if lang_id is None:
        tags = [c["nothink"], c["think_bos"], c["think_eos"]]
    else:
        tags = [c["think"], c["think_bos"], lang_id, c["think_eos"]]
    spk = None
    if speaker_vector:  # Base voice clone: the speaker row is the reference's x-vector
        tags = tags + [SPEAKER]
    elif speaker:
        spk = spec.speakers[speaker.lower()]
        spk = int(spk[0] if isinstance(spk, (list, tuple)) else spk)
        tags = tags + [SPEAKER]
    prefix = tags + [c["pad"], c["bos"]]
    text_rows: list[int] = list(ins) + list(ids[:3])
    codec_rows: list[int] = [NONE] * (len(ins) + 3)
    text_rows += [t["tts_pad"]] * (len(prefix) - 2) + [t["tts_bos"]]
    codec_rows += prefix[:-1]
    body = ids[3:-5]
    ref_ids = np.zeros(0, np.int64)
    if ref_text:
        ref_ids = encode(tok, reference_text(ref_text))
        icl_text = np.concatenate([ref_ids[3:-2], body, [t["tts_eos"]]]).astype(np.int64)
        codec = [c["bos"]] + [REF_FRAME] * ref_frames
        rows, trailing = _icl_rows(icl_text, codec, t["tts_pad"], c["pad"], streaming_text)
        text_rows += rows[0]
        codec_rows += rows[1]
    elif streaming_text:
        text_rows.append(int(ids[3]))
        codec_rows.append(c["bos"])
        trailing = np.concatenate([ids[4:-5], [t["tts_eos"]]]).astype(np.int64)
    else:
        text_rows += list(body) + [t["tts_eos"], t["tts_pad"]]
        codec_rows += [c["pad"]] * (len(body) + 1) + [c["bos"]]
        trailing = np.zeros(0, np.int64)
    return Prompt(
        text_ids=np.asarray(text_rows, np.int64),
        codec_ids=np.asarray(codec_rows, np.int64),
        trailing_ids=trailing,
        speaker_id=spk,
        prompt_ids=ids,
        instruct_ids=ins,
        ref_ids=ref_ids,
        fixed_rows=len(ins) + 3 + len(prefix) - 1,
        streaming_text=streaming_text,
    )


def _icl_rows(text: np.ndarray, codec: list, tts_pad: int, codec_pad: int, streaming: bool):
    """((text parts, codec parts) of the in-context rows, trailing text ids), as
    generate_icl_prompt pairs the text with the reference codec."""
    if not streaming:
        rows = (list(text) + [tts_pad] * len(codec), [codec_pad] * len(text) + codec)
        return rows, np.zeros(0, np.int64)
    n = len(codec)
    if len(text) > n:
        return (list(text[:n]), codec), text[n:].astype(np.int64)
    return (list(text) + [tts_pad] * (n - len(text)), codec), np.zeros(0, np.int64)
