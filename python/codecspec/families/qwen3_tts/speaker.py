"""The Base checkpoints' speaker encoder (x-vector) in numpy, for voice cloning.

Follows qwen_tts's `mel_spectrogram` (librosa's Slaney mel filterbank, 128 bands, n_fft 1024,
hop 256, periodic Hann window, reflect padding of (n_fft - hop) / 2, no centring, magnitude
sqrt(re^2 + im^2 + 1e-9), log of max(., 1e-5)) and `Qwen3TTSSpeakerEncoder` (ECAPA-TDNN:
a TDNN, SE-Res2Net blocks, multi-layer aggregation, attentive statistics pooling, a 1x1 conv
to the talker width). Every convolution pads "same" with reflection, as the official one.
One call per request on a few seconds of audio: numpy is fast enough and keeps torch away.
"""

from __future__ import annotations

import numpy as np

from codecspec.codec.features import slaney_mel_filterbank

__all__ = ["mel_spectrogram", "SpeakerEncoder", "SAMPLE_RATE"]

SAMPLE_RATE = 24000
_N_FFT, _HOP, _WIN, _MELS, _FMAX = 1024, 256, 1024, 128, 12000.0


def mel_spectrogram(wav: np.ndarray) -> np.ndarray:
    """[frames, 128] log-mel of a 24 kHz mono float waveform."""
    y = np.asarray(wav, np.float32).reshape(-1)
    pad = (_N_FFT - _HOP) // 2
    y = np.pad(y, (pad, pad), mode="reflect")
    n = 1 + (len(y) - _N_FFT) // _HOP
    idx = np.arange(_N_FFT)[None, :] + _HOP * np.arange(n)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(_WIN) / _WIN)  # periodic Hann
    spec = np.fft.rfft(y[idx].astype(np.float64) * window, axis=1)
    mag = np.sqrt(spec.real**2 + spec.imag**2 + 1e-9)
    fb = slaney_mel_filterbank(SAMPLE_RATE, _N_FFT, _MELS, 0.0, _FMAX)
    mel = mag @ fb.astype(np.float64).T
    return np.log(np.maximum(mel, 1e-5)).astype(np.float32)


def _conv1d(x: np.ndarray, w: np.ndarray, b: np.ndarray, dilation: int = 1) -> np.ndarray:
    """x [C_in, T], w [C_out, C_in, k]: "same" output length with reflect padding."""
    k = w.shape[2]
    total = dilation * (k - 1)
    if total:
        x = np.pad(x, ((0, 0), (total // 2, total - total // 2)), mode="reflect")
    T = x.shape[1] - total
    out = np.zeros((w.shape[0], T), np.float64)
    for j in range(k):
        out += w[:, :, j] @ x[:, j * dilation : j * dilation + T]
    return out + b[:, None]


class SpeakerEncoder:
    """ECAPA-TDNN forward from the checkpoint's `speaker_encoder.*` tensors (float64 math)."""

    def __init__(self, tensors, config: dict) -> None:
        self.cfg = {
            "enc_channels": [512, 512, 512, 512, 1536],
            "enc_kernel_sizes": [5, 3, 3, 3, 1],
            "enc_dilations": [1, 2, 3, 4, 1],
            "enc_res2net_scale": 8,
        }
        self.cfg.update({k: v for k, v in (config or {}).items() if k in self.cfg})
        self.t = tensors
        ch = self.cfg["enc_channels"]
        if len(ch) != len(self.cfg["enc_kernel_sizes"]) or len(ch) != len(
            self.cfg["enc_dilations"]
        ):
            raise ValueError("model: speaker_encoder_config channel/kernel/dilation lists differ")

    def _w(self, name: str) -> np.ndarray:
        return self.t[f"speaker_encoder.{name}"].astype(np.float64)

    def _tdnn(self, p: str, x, dilation: int = 1):
        return np.maximum(
            _conv1d(x, self._w(p + ".conv.weight"), self._w(p + ".conv.bias"), dilation), 0.0
        )

    def _conv(self, p: str, x):
        return _conv1d(x, self._w(p + ".weight"), self._w(p + ".bias"))

    def _se_res2net(self, i: int, x):
        p = f"blocks.{i}"
        d = self.cfg["enc_dilations"][i]
        scale = self.cfg["enc_res2net_scale"]
        h = self._tdnn(p + ".tdnn1", x)
        parts = np.split(h, scale, axis=0)
        outs, prev = [parts[0]], None
        for j in range(1, scale):
            inp = parts[j] if j == 1 else parts[j] + prev
            prev = self._tdnn(f"{p}.res2net_block.blocks.{j - 1}", inp, d)
            outs.append(prev)
        h = self._tdnn(p + ".tdnn2", np.concatenate(outs, axis=0))
        s = h.mean(axis=1, keepdims=True)
        s = np.maximum(self._conv(p + ".se_block.conv1", s), 0.0)
        s = 1.0 / (1.0 + np.exp(-self._conv(p + ".se_block.conv2", s)))
        return h * s + x

    def _pool(self, x):
        eps = 1e-12
        T = x.shape[1]

        def stats(w):
            mean = (w * x).sum(axis=1)
            std = np.sqrt(np.maximum((w * (x - mean[:, None]) ** 2).sum(axis=1), eps))
            return mean, std

        mean, std = stats(np.full((1, T), 1.0 / T))
        a = np.concatenate([x, np.repeat(mean[:, None], T, 1), np.repeat(std[:, None], T, 1)])
        a = self._conv("asp.conv", np.tanh(self._tdnn("asp.tdnn", a)))
        a = np.exp(a - a.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        mean, std = stats(a)
        return np.concatenate([mean, std])[:, None]

    def __call__(self, wav: np.ndarray) -> np.ndarray:
        """The x-vector [enc_dim] of a 24 kHz waveform."""
        x = mel_spectrogram(wav).T.astype(np.float64)  # [128, frames]
        n = len(self.cfg["enc_channels"])
        h = self._tdnn("blocks.0", x, self.cfg["enc_dilations"][0])
        hs = [h]
        for i in range(1, n - 1):
            h = self._se_res2net(i, h)
            hs.append(h)
        h = self._tdnn("mfa", np.concatenate(hs[1:], axis=0), self.cfg["enc_dilations"][-1])
        h = self._pool(h)
        return self._conv("fc", h)[:, 0].astype(np.float32)
