"""The texts a Qwen3-TTS checkpoint speaks to be measured (the calibration corpus, the
precision choice, the quantisation error, the bench) and the keywords each checkpoint type
needs to speak them."""

from __future__ import annotations

__all__ = ["CALIBRATION_TEXTS", "corpus_request"]

CALIBRATION_TEXTS = (
    ("The quick brown fox jumps over the lazy dog.", "english"),
    ("Please call Stella and ask her to bring these things with her from the store.", "english"),
    ("It was a bright cold day in April, and the clocks were striking thirteen.", "english"),
    ("We measured the latency of every call and kept the fastest tree.", "english"),
    ("Turn left at the second light, then keep going until you see the river.", "english"),
    ("今天天气很好，我们一起去公园散步吧。", "chinese"),
    ("Numbers like 3.14 and 2026 are read aloud as words.", "english"),
    ("Could you speak a little more slowly, please?", "english"),
)


def corpus_request(tts, text: str, language: str, i: int, ref_audio=None) -> dict:
    """The `iter_frames` keywords of the `i`-th corpus text for the loaded `tts` (a
    `Qwen3TTS`): its language where the checkpoint names it, a speaker in turn (CustomVoice),
    the reference clip (Base), a neutral description (VoiceDesign)."""
    kw: dict = {"language": language if language in tts.languages else "auto"}
    if tts.model_type == "base":
        if ref_audio is None:
            raise ValueError("ref_audio: a Base checkpoint needs a reference WAV (--ref-audio)")
        kw["ref_audio"] = ref_audio
    if tts.model_type == "custom_voice" and tts.speakers:
        kw["speaker"] = tts.speakers[i % len(tts.speakers)]
    if tts.model_type == "voice_design":
        kw["instruct"] = "A clear, calm voice at a natural pace."
    return kw
