"""A byte-level BPE text tokenizer of Qwen's vocabulary size, for random-weight checkpoints.

Qwen's vocab.json / merges.txt could not be downloaded here, and the embedding-table size is
what matters for speed, so `write_text_tokenizer` trains one with the `tokenizers` library on
generated text — a few hundred common English words at the head of a Zipf distribution, then
seeded pseudo-words made of syllables — with Qwen2's pre-tokenizer (its split regex and
byte-level mapping, as `text.load_text_tokenizer` assembles it). If training stops short of the
size asked, deterministic extra merges (concatenations of existing tokens) fill the vocabulary
up, so the regular ids are exactly 0 .. n_regular-1 and the added tokens follow at the ids
config.json names. English text tokenizes to roughly Qwen's count (the 44-character benchmark
sentence to ~10 tokens); Chinese falls back to bytes more often than with Qwen's merges.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np

__all__ = ["write_text_tokenizer"]

# Common English words (frequent ones first), so benchmark sentences are whole tokens mostly.
_ENGLISH = """
the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by word but what some we can out other were all there when up use your how said
an each she which do their time if will way about many then them write would like so these
her long make thing see him two has look more day could go come did number sound no most
people my over know water than call first who may down side been now find any new work part
take get place made live where after back little only round man year came show every good me
give our under name very through just form sentence great think say help low line differ turn
cause much mean before move right boy old too same tell does set three want air well also play
small end put home read hand port large spell add even land here must big high such follow act
why ask men change went light kind off need house picture try us again animal point mother
world near build self earth father head stand own page should country found answer school grow
study still learn plant cover food sun four between state keep eye never last let thought city
tree cross farm hard start might story saw far sea draw left late run while press close night
real life few north open seem together next white children begin got walk example ease paper
group always music those both mark often letter until mile river car feet care second book
carry took science eat room friend began idea fish mountain stop once base hear horse cut sure
watch color face wood main enough plain girl usual young ready above ever red list though feel
talk bird soon body dog family direct pose leave song measure door product black short numeral
class wind question happen complete ship area half rock order fire south problem piece told
knew pass since top whole king space heard best hour better true during hundred five remember
step early hold west ground interest reach fast verb sing listen six table travel less morning
ten simple several vowel toward war lay against pattern slow center love person money serve
appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall
lead cry dark machine note wait plan figure star box noun field rest correct able pound done
beauty drive stood contain front teach week final gave green oh quick develop ocean warm free
minute strong special mind behind clear tail produce fact street inch multiply nothing course
stay wheel full force blue object decide surface deep moon island foot system busy test record
boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate
hot miss brought heat snow tire bring yes distant fill east paint language among assistant
user system hello please thank today speak slowly brown fox jumps lazy store bright clocks
striking thirteen April measured latency fastest going until river Stella things
""".split()

_ONSETS = (
    "b c d f g h j k l m n p r s t v w y z bl br ch cl cr dr fl fr gl gr pl pr sc sh sk sl sm sn "
    "sp st sw th tr wh"
).split()
_VOWELS = "a e i o u ai au ea ee ie oa oo ou y".split()
_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "nt", "st", "ck", "rd", "ll", "ss"]


def _pseudo_word(rng: np.random.Generator) -> str:
    parts = []
    for _ in range(1 + int(rng.integers(0, 4))):
        parts.append(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            + _CODAS[rng.integers(len(_CODAS))]
        )
    return "".join(parts)


def _corpus(n_regular: int, seed: int) -> Iterator[str]:
    """Lines of generated text: Zipf-distributed words (English ones most frequent),
    capitalised sentence starts, punctuation and numbers; then every word once."""
    rng = np.random.default_rng([int(seed), 0x7E47])
    words = list(_ENGLISH)
    seen = set(words)
    for _ in range(3 * n_regular):
        w = _pseudo_word(rng)
        if w not in seen:
            seen.add(w)
            words.append(w)
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    per_line, lines = 5000, max(4, min(200, n_regular // 500))
    for _ in range(lines):
        ids = rng.choice(len(words), size=per_line, p=p)
        out = []
        for k, j in enumerate(ids):
            w = words[j]
            if k % 12 == 0:
                w = w[:1].upper() + w[1:]
            out.append(w + (". " if k % 12 == 11 else (", " if k % 7 == 6 else " ")))
            if k % 97 == 0:
                out.append(f"{int(rng.integers(0, 10000))} ")
        yield "".join(out)
    yield from words


def _pad_merges(vocab: dict, merges: list, n_regular: int) -> None:
    """Extra merges (a, b) -> a+b over existing tokens, in a fixed order, until the vocabulary
    has n_regular entries. Valid BPE: both parts exist and the result is new."""
    tokens = sorted(vocab, key=vocab.get)
    base = [t for t in tokens if len(t) > 1][:512] or tokens
    for a in base:
        for b in tokens:
            if len(vocab) >= n_regular:
                return
            ab = a + b
            if ab not in vocab:
                vocab[ab] = len(vocab)
                merges.append((a, b))


def _train(n_regular: int, seed: int) -> tuple[dict, list]:
    from .text import _QWEN2_SPLIT, _import_tokenizers

    tk = _import_tokenizers()
    tok = tk.Tokenizer(tk.models.BPE())
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = tk.trainers.BpeTrainer(
        vocab_size=n_regular,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        min_frequency=1,
    )
    tok.train_from_iterator(_corpus(n_regular, seed), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise RuntimeError("trained vocabulary ids are not contiguous")
    _pad_merges(vocab, merges, n_regular)
    return vocab, merges


def _tokenizer_config(n_regular: int, added: list) -> dict:
    decoder = {
        str(n_regular + i): {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for i, (special, content) in enumerate(added)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for s, c in added if s and c.startswith("<|im_")],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_text_tokenizer(folder, n_regular: int, added: list, seed: int = 0) -> Optional[int]:
    """vocab.json, merges.txt and tokenizer_config.json in `folder` (regular ids 0 ..
    n_regular-1, then `added` [(special, content)]); returns the id of the token "assistant"
    when it is one token (config.json's assistant_token_id), else None."""
    from .text import load_text_tokenizer

    if n_regular < 512:
        raise ValueError(f"n_regular: a byte-level BPE needs >= 512 tokens, got {n_regular}")
    d = Path(folder)
    vocab, merges = _train(int(n_regular), seed)
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (d / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = _tokenizer_config(int(n_regular), added)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tok = load_text_tokenizer(d)  # checks every added token lands on its declared id
    if tok.get_vocab_size() != n_regular + len(added):
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, not {n_regular}+")
    return vocab.get("assistant")
