"""The low-pass filters of StyleGAN3's layers (Karras et al. 2021, "Alias-Free Generative
Adversarial Networks", arXiv:2106.12423, sec. 3.2 and appendix C.1): Kaiser-windowed ideal
low-pass filters, separable (sinc) for the T config and radially symmetric (jinc) for the
downsampling filters of the R config's non-critical layers.

Both use the Kaiser window of Kaiser's design rule for ``numtaps`` taps and a transition band of
``width`` (Hz, at sampling rate ``fs``): attenuation ``A = 2.285 (numtaps - 1) pi width / (fs /
2) + 7.95`` dB, ``beta`` from ``A`` (Oppenheim & Schafer, eq. 7.62 and 7.75; scipy's
``kaiser_atten`` / ``kaiser_beta``). Taps are computed in float64 and returned as float32, as
the paper's code stores them.
"""

from __future__ import annotations

import numpy as np
import scipy.special
import torch

__all__ = ["kaiser_beta", "lowpass_filter"]


def kaiser_beta(numtaps: int, width: float, fs: float) -> float:
    """Kaiser's ``beta`` for ``numtaps`` taps and a transition band ``width`` wide at sampling rate
    ``fs`` (Kaiser's empirical rule from the stopband attenuation, in dB)."""
    atten = 2.285 * (numtaps - 1) * np.pi * (width / (fs / 2)) + 7.95
    if atten > 50:
        return 0.1102 * (atten - 8.7)
    if atten > 21:
        return 0.5842 * (atten - 21) ** 0.4 + 0.07886 * (atten - 21)
    return 0.0


def lowpass_filter(numtaps: int, cutoff: float, width: float, fs: float, radial: bool = False) -> torch.Tensor | None:
    """The windowed low-pass filter with cutoff ``cutoff`` (Hz) at sampling rate ``fs``.

    ``numtaps == 1``: None (the identity; the layer does not filter). Separable (``radial``
    False): ``[numtaps]``, ``h[m] = (2 f_c / fs) sinc(2 f_c m / fs) * kaiser(m)`` for ``m = k -
    (numtaps - 1) / 2``, scaled to sum 1 (unit gain at DC), applied along x and then y. Radial:
    ``[numtaps, numtaps]``, ``h(r) = J1(2 pi f_c r) / (pi r)`` (the 2-D ideal low-pass, a jinc)
    at ``r = |(x, y)| / fs`` times the outer product of the Kaiser window, scaled to sum 1
    (appendix C.1 / the paper's code). ValueError for ``numtaps < 1``."""
    if numtaps < 1:
        raise ValueError(f"lowpass_filter: numtaps must be >= 1, got {numtaps}")
    if numtaps == 1:
        return None
    window = np.kaiser(numtaps, kaiser_beta(numtaps, width, fs))
    m = np.arange(numtaps) - (numtaps - 1) / 2
    if not radial:
        c = 2.0 * cutoff / fs
        h = c * np.sinc(c * m) * window
        return torch.as_tensor(h / h.sum(), dtype=torch.float32)
    x = m / fs
    r = np.hypot(*np.meshgrid(x, x))
    # numtaps is even for every resampling filter (filter_size * factor), so r is never 0.
    h = scipy.special.j1(2 * cutoff * (np.pi * r)) / (np.pi * r)
    h = h * np.outer(window, window)
    return torch.as_tensor(h / h.sum(), dtype=torch.float32)
