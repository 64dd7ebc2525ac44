"""Speaker similarity: how much a clip sounds like a reference voice, by a speaker-embedding
model whose weights ship in a package ([quality] extra).

The model is Resemblyzer's GE2E voice encoder (Wan et al., "Generalized End-to-End Loss for
Speaker Verification", 2018; 3 LSTM layers of 256 over 40 mel bands at 16 kHz, a 256-d
embedding; weights trained on LibriSpeech, VoxCeleb 1 and 2, Apache-2.0). Its wheel carries
the weights (`resemblyzer/pretrained.pt`) but depends on torch, librosa and webrtcvad, so it
is installed without its dependencies (`pip install --no-deps resemblyzer==0.1.4`, hash-pinned
in requirements/asr-weights.txt) and codecspec runs the encoder itself: the checkpoint read
without torch (`torch_legacy`), librosa's mel spectrogram and the LSTM in numpy, the
utterance cut into 1.6 s windows 1.3 times a second and their embeddings averaged, as the
package's `VoiceEncoder.embed_utterance` does (checked against it to 1e-5,
tests/evaluation/test_speaker_similarity.py). One difference: the package trims long
silences with webrtcvad before embedding; here the waveform is only brought up to -30 dBFS.
The fixtures compare both on the same trimmed-or-not waveform.

    enc = SpeakerEncoder()
    score = enc.similarity(enc.embed(clip, 24000), enc.embed(reference, 22050))  # cosine
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np

from codecspec.codec.audio import as_mono_float
from codecspec.codec.features import slaney_mel_filterbank

from .torch_legacy import read_legacy_checkpoint

__all__ = ["SAMPLE_RATE", "SpeakerEncoder", "SpeakerEncoderMissing", "encoder_weights"]

SAMPLE_RATE = 16000
_N_FFT, _HOP, _MELS = 400, 160, 40  # 25 ms windows every 10 ms
_PARTIAL = 160  # frames per window (1.6 s)
_RATE, _MIN_COVERAGE = 1.3, 0.75  # windows per second; the last one's share of real audio
_TARGET_DBFS = -30.0
_INSTALL = "pip install --no-deps resemblyzer==0.1.4 (without its torch, librosa, webrtcvad)"


class SpeakerEncoderMissing(ImportError):
    """The package carrying the speaker encoder's weights is not installed."""


def encoder_weights() -> Path:
    """Path of the weights file inside the installed Resemblyzer package (not imported: its
    module imports torch)."""
    spec = importlib.util.find_spec("resemblyzer")
    if spec is None or not spec.submodule_search_locations:
        raise SpeakerEncoderMissing(f"speaker similarity needs Resemblyzer's weights: {_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "pretrained.pt"
    if not path.exists():
        raise SpeakerEncoderMissing(f"{path} is missing; reinstall: {_INSTALL}")
    return path


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for large |x|


class SpeakerEncoder:
    """The GE2E voice encoder: `embed(wav, sample_rate)` -> unit 256-d vector; cosine of two
    embeddings by `similarity`."""

    def __init__(self, weights: Optional[Path] = None) -> None:
        state = read_legacy_checkpoint(weights or encoder_weights())["model_state"]
        self.layers = []
        for k in range(3):
            w_ih, w_hh = state[f"lstm.weight_ih_l{k}"], state[f"lstm.weight_hh_l{k}"]
            bias = state[f"lstm.bias_ih_l{k}"] + state[f"lstm.bias_hh_l{k}"]
            self.layers.append((w_ih.T.copy(), w_hh.T.copy(), bias))
        self.linear_w, self.linear_b = state["linear.weight"].T.copy(), state["linear.bias"]
        self.mel_basis = slaney_mel_filterbank(SAMPLE_RATE, _N_FFT, _MELS, 0.0, SAMPLE_RATE / 2)

    # ------------------------------------------------------------------ front end
    @staticmethod
    def prepare(wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """Mono float32 at 16 kHz (soxr, as librosa's default resampler), raised to -30 dBFS
        when quieter (never lowered)."""
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
            raise ValueError(f"sample_rate: expected an integer in Hz, got {sample_rate!r}")
        if sample_rate < 4000:
            raise ValueError(f"sample_rate: expected at least 4000 Hz, got {sample_rate}")
        x = as_mono_float(wav)
        if sample_rate != SAMPLE_RATE:
            import soxr

            x = soxr.resample(x, sample_rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
        rms = float(np.sqrt(np.mean((x.astype(np.float64) * 32767) ** 2)))
        if rms > 0:
            change = _TARGET_DBFS - 20 * np.log10(rms / 32767)
            if change > 0:
                x = (x * 10 ** (change / 20)).astype(np.float32)
        return x

    def mel(self, wav16: np.ndarray) -> np.ndarray:
        """[frames, 40] power mel spectrogram (librosa.feature.melspectrogram's defaults:
        centred frames padded with zeros, periodic Hann window)."""
        pad = _N_FFT // 2
        y = np.pad(np.asarray(wav16, np.float32), (pad, pad))
        n = 1 + (len(y) - _N_FFT) // _HOP
        idx = np.arange(_N_FFT)[None, :] + _HOP * np.arange(n)[:, None]
        window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_N_FFT) / _N_FFT)
        spec = np.fft.rfft(y[idx] * window.astype(np.float32), axis=1)
        power = (spec.real**2 + spec.imag**2).astype(np.float32)
        return power @ self.mel_basis.T

    @staticmethod
    def windows(n_samples: int) -> list:
        """Frame ranges of the 1.6 s windows covering `n_samples` (16 kHz): one every
        1/1.3 s; the last kept when at least 75% of it is audio, or when it is the only one."""
        n_frames = int(np.ceil((n_samples + 1) / _HOP))
        step = int(np.round((SAMPLE_RATE / _RATE) / _HOP))
        starts = list(range(0, max(1, n_frames - _PARTIAL + step + 1), step))
        last = starts[-1] * _HOP
        if len(starts) > 1 and (n_samples - last) / (_PARTIAL * _HOP) < _MIN_COVERAGE:
            starts.pop()
        return [(s, s + _PARTIAL) for s in starts]

    # ------------------------------------------------------------------ network
    def embed_windows(self, mels: np.ndarray) -> np.ndarray:
        """[B, 256] unit embeddings of [B, frames, 40] mel windows."""
        x = np.asarray(mels, np.float32)
        for w_ih, w_hh, bias in self.layers:
            gates_in = x @ w_ih + bias  # [B, T, 4H]
            H = w_hh.shape[0]
            h = np.zeros((x.shape[0], H), np.float32)
            c = np.zeros_like(h)
            out = np.empty((x.shape[0], x.shape[1], H), np.float32)
            for t in range(x.shape[1]):
                g = gates_in[:, t] + h @ w_hh
                i, f = _sigmoid(g[:, :H]), _sigmoid(g[:, H : 2 * H])
                cell, o = np.tanh(g[:, 2 * H : 3 * H]), _sigmoid(g[:, 3 * H :])
                c = f * c + i * cell
                h = o * np.tanh(c)
                out[:, t] = h
            x = out
        e = np.maximum(h @ self.linear_w + self.linear_b, 0.0)
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    def embed(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """Unit 256-d embedding of a clip: its windows' embeddings averaged, normalised."""
        x = self.prepare(wav, sample_rate)
        spans = self.windows(len(x))
        need = spans[-1][1] * _HOP
        if need >= len(x):
            x = np.pad(x, (0, need - len(x)))
        mel = self.mel(x)
        partial = self.embed_windows(np.stack([mel[a:b] for a, b in spans]))
        mean = partial.mean(axis=0)
        return (mean / np.linalg.norm(mean)).astype(np.float32)

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> float:
        """Cosine similarity of two embeddings (1: the same direction)."""
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
