"""Regenerates official.npz: Resemblyzer's own VoiceEncoder (torch, librosa) on the clips here,
as its README calls it, minus the webrtcvad silence trimming (codecspec does not trim; these
espeak-ng clips have no long silence, and the trimmed embedding is stored too to show it).

    pip install --no-deps resemblyzer==0.1.4 && pip install torch librosa webrtcvad-wheels
    python tests/data/speaker/make_official.py
"""

from pathlib import Path

import librosa
import numpy as np
import soundfile as sf
from resemblyzer import VoiceEncoder, preprocess_wav
from resemblyzer.audio import normalize_volume

HERE = Path(__file__).resolve().parent


def main() -> None:
    enc = VoiceEncoder(device="cpu", verbose=False)
    out = {}
    for clip in sorted(HERE.glob("*.wav")):
        wav, sr = sf.read(clip, dtype="float32")
        untrimmed = librosa.resample(wav, orig_sr=sr, target_sr=16000)
        untrimmed = normalize_volume(untrimmed, -30, increase_only=True)
        out[clip.stem] = enc.embed_utterance(untrimmed)
        out[clip.stem + ".trimmed"] = enc.embed_utterance(preprocess_wav(clip))
    np.savez(HERE / "official.npz", **out)
    print({k: v.shape for k, v in out.items()}, "librosa", librosa.__version__)


if __name__ == "__main__":
    main()
