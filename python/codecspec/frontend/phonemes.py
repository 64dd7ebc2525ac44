"""Text -> phonemes -> ids, shared by the phoneme-input families (reference v1, v2/v3, FSQ).

`phonemize` runs espeak-ng (its command-line tool, else its library); `encode_input` turns a
serving request into bos + phoneme ids + eos through a model's `Frontend`. They live here,
in shared code, so that no family imports another's module for them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional

import numpy as np

from codecspec.frontend.text import BOS, EOS
from codecspec.frontend.textcheck import check_text

__all__ = ["PhonemizerError", "encode_input", "phonemize"]


class PhonemizerError(RuntimeError):
    """espeak-ng is missing or failed: text cannot be turned into phonemes here."""


def encode_input(tts, req, max_phonemes: Optional[int], strict: bool = True) -> tuple:
    """(IPA, bos + phoneme ids + eos int64) of a request (`req.input`, `input_format`,
    `language`), for the phoneme families' frontends; ValueError naming `input`. `strict`:
    IPA given must be the model's own symbols (a client's; a Python caller's may map to unk,
    as espeak-ng's may); `max_phonemes` None: no limit."""
    ipa = req.input
    if req.input_format == "text":
        ipa = phonemize(req.input, tts.meta["voices"][req.language])
    try:
        ids = tts.frontend.vocab.encode(ipa, strict=strict and req.input_format == "ipa")
    except ValueError as e:
        raise ValueError(f"input: {e}") from e
    if max_phonemes is not None and len(ids) + 2 > max_phonemes:
        raise ValueError(f"input: {len(ids)} phonemes, more than the limit")
    return ipa, np.concatenate([[BOS], ids, [EOS]]).astype(np.int64)


def phonemize(text: str, voice: str) -> str:
    """IPA of `text` by espeak-ng (clauses joined with " | ", as in the training corpus): its
    command-line tool where installed (what the corpora of the IPA-input models were made
    with), else its library (`codecspec.frontend.espeak.ipa`, the espeakng-loader wheel's: the same
    strings for the same version; 1.52 against 1.51 differs in a few vowels, e.g. oː / ɔː)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: expected a non-empty string")
    # espeak-ng (tool and library) reads C strings: a NUL would cut the text silently
    check_text(text)
    exe = shutil.which("espeak-ng")
    if exe is None:
        return _library_ipa(text, voice)
    r = subprocess.run(
        [exe, "-q", "-x", "--ipa", "-v", voice, "--stdin"],
        input=text.encode("utf-8"),
        capture_output=True,
        env=dict(os.environ, LC_ALL="C.UTF-8"),
        check=False,
    )
    if r.returncode != 0:
        raise PhonemizerError(f"espeak-ng failed: {r.stderr.decode(errors='replace')[-300:]}")
    clauses = [c.strip() for c in r.stdout.decode("utf-8").splitlines() if c.strip()]
    if not clauses:
        raise ValueError(f"text: espeak-ng found nothing to say in {text!r}")
    return " | ".join(clauses)


def _library_ipa(text: str, voice: str) -> str:
    from codecspec.frontend.espeak import EspeakError, ipa

    try:
        out = ipa(text, voice)
    except EspeakError as e:
        raise PhonemizerError(
            f"espeak-ng is needed to phonemize text ({e}); pass IPA with --phonemes"
        ) from None
    if not out:
        raise ValueError(f"text: espeak-ng found nothing to say in {text!r}")
    return out
