"""OpenAI's shapes, shared by the speech route (`serve.app`) and the text socket
(`serve.text_socket`): the model and voice names a server answers, the error object, the
API-key check, and the request fields both take beyond OpenAI's (seed, mode, sampling)."""

from __future__ import annotations

import hmac
from typing import Annotated, Literal, Optional

from pydantic import Field

# The fields of the speech body (`app.SpeechBody`) and the text socket's first message
# (`text_socket.StreamStart`) that are one field in both: defined once, so that a range
# cannot drift between the routes. Each model keeps its own field order and strictness.
Seed = Annotated[Optional[int], Field(ge=0, lt=2**63)]
Mode = Literal["auto", "ar", "spec"]
Temperature = Annotated[Optional[float], Field(ge=0.0, le=10.0, allow_inf_nan=False)]
TopK = Annotated[Optional[int], Field(ge=0)]
TopP = Annotated[Optional[float], Field(gt=0.0, le=1.0, allow_inf_nan=False)]

# OpenAI's model names map onto whichever model the server loaded; a family's own names only
# onto that family (engine.family.model_names).
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
# OpenAI's built-in voices, each with the speaker it prefers; a model without that speaker
# gets one of its own by the voice's position (see voice_map).
OPENAI_VOICES = {
    "alloy": "f1",
    "ash": "m5",
    "ballad": "m3",
    "coral": "f2",
    "echo": "m1",
    "fable": "f2",
    "nova": "f3",
    "onyx": "m3",
    "sage": "m7",
    "shimmer": "f4",
    "verse": "m5",
    "marin": "f4",
    "cedar": "m1",
}
ERROR_TYPES = {401: "authentication_error", 429: "rate_limit_error"}
ERROR_CODES = {
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    429: "rate_limit_exceeded",
    500: "decoding_failed",
    503: "unavailable",
}


def error_body(
    status: int, message: str, param: Optional[str] = None, code: Optional[str] = None
) -> dict:
    """OpenAI's error object: type by status class, a machine-readable code. A message that
    quotes a client's string may hold a lone surrogate, which has no UTF-8 form: escaped, so
    that rendering the error cannot itself fail."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    code = code or ERROR_CODES.get(status, "invalid_value" if status == 400 else None)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def field_of(message: str) -> Optional[str]:
    """The field an error message names ("voice: ..." -> "voice"), else None."""
    head = message.split(":", 1)[0]
    return head if head.isidentifier() else None


def key_error(key: bytes, auth: Optional[bytes]) -> Optional[str]:
    """What is wrong with an Authorization header for API key `key` (compared in constant
    time), or None."""
    if auth is None:
        return "Authorization: missing; send 'Authorization: Bearer <API key>'"
    scheme, _, token = auth.partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return "Authorization: malformed; expected 'Bearer <API key>'"
    if not hmac.compare_digest(token.strip(), key):
        return "Authorization: incorrect API key"
    return None


def served_models(engine) -> tuple:
    """The `model` names this server answers: its family's own and OpenAI's."""
    return tuple(engine.family.model_names) + OPENAI_MODELS


def model_error(engine, model: str) -> Optional[str]:
    served = served_models(engine)
    if model in served:
        return None
    return f"model: this server loaded {served[0]!r}; expected one of {list(served)}, got {model!r}"


def voice_map(speakers: list) -> dict:
    """OpenAI's voice names -> this model's speakers: each voice's preferred speaker when the
    model has it, else the model's speaker at the voice's position (so every voice works on
    every model); the speakers' own names map to themselves. A model without speakers (a
    Qwen3-TTS VoiceDesign checkpoint: its instructions describe the voice) maps every OpenAI
    voice to None."""
    if not speakers:
        return dict.fromkeys(OPENAI_VOICES)
    out = {}
    for i, (voice, preferred) in enumerate(OPENAI_VOICES.items()):
        out[voice] = preferred if preferred in speakers else speakers[i % len(speakers)]
    out.update({s: s for s in speakers})
    return out


def speaker_of(engine, voice: str) -> Optional[str]:
    """The loaded model's speaker for `voice`; ValueError naming the known voices."""
    voices = voice_map(list(engine.voices))
    if voice not in voices:
        known = list(OPENAI_VOICES) + list(engine.voices)
        raise ValueError(f"voice: expected one of {known}, got {voice!r}")
    return voices[voice]
