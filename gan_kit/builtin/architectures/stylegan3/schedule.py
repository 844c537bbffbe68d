"""The layer schedule of StyleGAN3's synthesis network (Karras et al. 2021, arXiv:2106.12423,
sec. 3.2 and appendix F.1, fig. 4c): each layer's cutoff, stopband, sampling rate, size and
feature maps, from which its filters, up/down factors and padding follow.

Cutoffs ``f_c`` and minimum stopbands ``f_t`` follow a geometric progression from the first layer
(``first_cutoff``, ``first_stopband``) to the last non-critical one, then stay at the last values
(``f_c = resolution / 2``, ``f_t = f_c * last_stopband_rel``) for the ``num_critical`` critically
sampled layers at the end. Sampling rate ``s = 2 ** ceil(log2(min(2 f_t, resolution)))``,
transition band half-width ``f_h = max(f_t, s / 2) - f_c``, size ``s + 2 * margin_size`` (the
last two layers: the image resolution), feature maps ``rint(min(channel_base / 2 / f_c,
channel_max))`` (the last: the image channels). Computed in float64, as the paper's code.
"""

from __future__ import annotations

import attrs
import numpy as np

__all__ = ["LayerSpec", "layer_schedule", "num_ws"]


@attrs.frozen
class LayerSpec:
    """One synthesis layer's definition: layer ``index`` (0 .. num_layers; the last is ToRGB) maps
    ``in_channels`` maps of ``in_size`` pixels at ``in_sampling_rate`` (band-limited to
    ``in_cutoff``, transition half-width ``in_half_width``) to ``out_*`` likewise; the
    nonlinearity runs at ``tmp_sampling_rate`` (the larger rate times ``lrelu_upsampling``; ToRGB:
    times 1), so ``up_factor = tmp / in`` and ``down_factor = tmp / out``; the resampling filters
    have ``filter_size * factor`` taps (1, no filter, for factor 1 and for ToRGB); ``padding =
    [x0, x1, y0, y1]`` makes the filtered output exactly ``out_size`` with the sample points of
    the symmetric interpretation (appendix C.3)."""

    index: int
    is_torgb: bool
    is_critically_sampled: bool
    use_fp16: bool
    in_channels: int
    out_channels: int
    in_size: int
    out_size: int
    in_sampling_rate: int
    out_sampling_rate: int
    in_cutoff: float
    out_cutoff: float
    in_half_width: float
    out_half_width: float
    tmp_sampling_rate: int
    conv_kernel: int
    up_factor: int
    down_factor: int
    up_taps: int
    down_taps: int
    down_radial: bool
    padding: tuple[int, int, int, int]


def layer_schedule(resolution: int, channels: int, *, channel_base: int, channel_max: int, num_layers: int = 14,
                   num_critical: int = 2, first_cutoff: float = 2.0, first_stopband: float = 2 ** 2.1,
                   last_stopband_rel: float = 2 ** 0.3, margin_size: int = 10, num_fp16_res: int = 4,
                   conv_kernel: int = 3, filter_size: int = 6, lrelu_upsampling: int = 2,
                   use_radial_filters: bool = False) -> tuple[dict, list[LayerSpec]]:
    """``(input, layers)``: the synthesis input's ``channels``, ``size``, ``sampling_rate`` and
    ``bandwidth`` (a dict), and the ``num_layers + 1`` layers' specs (the last is ToRGB).
    ``use_radial_filters``: the downsampling filter of every non-critical layer is radial (R).
    ValueError when ``num_layers <= num_critical`` (the progression needs one non-critical
    layer)."""
    if num_layers <= num_critical:
        raise ValueError(f"layer_schedule: num_layers ({num_layers}) must exceed num_critical ({num_critical})")
    last_cutoff = resolution / 2
    last_stopband = last_cutoff * last_stopband_rel
    exponents = np.minimum(np.arange(num_layers + 1) / (num_layers - num_critical), 1)
    cutoffs = first_cutoff * (last_cutoff / first_cutoff) ** exponents
    stopbands = first_stopband * (last_stopband / first_stopband) ** exponents
    rates = np.exp2(np.ceil(np.log2(np.minimum(stopbands * 2, resolution))))
    half_widths = np.maximum(stopbands, rates / 2) - cutoffs
    sizes = rates + margin_size * 2
    sizes[-2:] = resolution
    maps = np.rint(np.minimum((channel_base / 2) / cutoffs, channel_max))
    maps[-1] = channels
    inp = dict(channels=int(maps[0]), size=int(sizes[0]), sampling_rate=float(rates[0]), bandwidth=float(cutoffs[0]))
    layers = []
    for i in range(num_layers + 1):
        p = max(i - 1, 0)
        torgb = i == num_layers
        critical = i >= num_layers - num_critical
        s_in, s_out = int(rates[p]), int(rates[i])
        tmp = max(s_in, s_out) * (1 if torgb else lrelu_upsampling)
        up, down = tmp // s_in, tmp // s_out
        kernel = 1 if torgb else conv_kernel
        up_taps = filter_size * up if up > 1 and not torgb else 1
        down_taps = filter_size * down if down > 1 and not torgb else 1
        # Output size before downsampling, minus the upsampled input, plus what the filters trim.
        total = (int(sizes[i]) - 1) * down + 1 - (int(sizes[p]) + kernel - 1) * up + up_taps + down_taps - 2
        lo = (total + up) // 2  # the symmetric interpretation's shift (appendix C.3)
        layers.append(LayerSpec(
            index=i, is_torgb=torgb, is_critically_sampled=critical,
            use_fp16=bool(rates[i] * 2 ** num_fp16_res > resolution),
            in_channels=int(maps[p]), out_channels=int(maps[i]), in_size=int(sizes[p]), out_size=int(sizes[i]),
            in_sampling_rate=s_in, out_sampling_rate=s_out, in_cutoff=float(cutoffs[p]),
            out_cutoff=float(cutoffs[i]), in_half_width=float(half_widths[p]), out_half_width=float(half_widths[i]),
            tmp_sampling_rate=tmp, conv_kernel=kernel, up_factor=up, down_factor=down, up_taps=up_taps,
            down_taps=down_taps, down_radial=use_radial_filters and not critical,
            padding=(lo, total - lo, lo, total - lo)))
    return inp, layers


def num_ws(num_layers: int) -> int:
    """Ws the synthesis network takes: one for the input, one per layer, one for ToRGB."""
    return num_layers + 2


