"""Write ``tests/data/stylegan3_reference.pt``: what the official StyleGAN3 code computes for tiny
StyleGAN3-T and -R generators with fixed seeds, which ``tests/test_stylegan3_parity.py`` compares
gankit's ``stylegan3`` architecture with.

The official code (Karras et al. 2021, "Alias-Free Generative Adversarial Networks",
github.com/NVlabs/stylegan3) is run, not copied: point ``--official`` at an extracted copy of it.

    git clone https://github.com/NVlabs/stylegan3 /tmp/sg3
    python tests/data/make_stylegan3_reference.py --official /tmp/sg3

It runs on the CPU, where ``filtered_lrelu``, ``upfirdn2d`` and ``bias_act`` take their reference
(plain PyTorch) paths: each op picks its CUDA plugin only for CUDA tensors (``impl == 'cuda' and
x.device.type == 'cuda' and _init()``), so no custom op is built;
(``pkg_resources.parse_version``, imported at the top and unused here, is stood in for by
``packaging``'s when absent); the script checks afterwards
that none was loaded. ``use_fp16`` layers compute in float32 on the CPU (the official
``SynthesisLayer`` casts to float16 on CUDA only).

Per config (``t``: 3 channels, unconditional; ``r``: 1 channel, 3 classes, 1x1 convs, radial
filters, doubled channel_base / channel_max as the official train.py's ``stylegan3-r``), it
records, as plain tensors:

- ``kwargs``: the official Generator's arguments; ``state_dict``: G's parameters and buffers
  (official key names), moved off their initial values by seeded noise (``_perturb``: the
  synthesis input's affine starts at zero weights, which would hide the learned transform).
- ``layers``: per synthesis layer (in order) the attributes that define it: sampling rates,
  cutoffs, half widths, sizes, channels, up / down factors and taps, padding, is_torgb,
  is_critically_sampled, use_fp16, conv_kernel, down_radial, the filters.
- ``input``: the synthesis input's ``freqs`` / ``phases``, its output for ``ws[:1, 0]`` without
  and with a user ``transform`` (gen_images.py's ``make_transform`` of a translate and rotate,
  inverted as gen_images.py does), and that matrix; ``out_transform_scaled``: with that matrix
  scaled by 3 (``transform_scaled``), which moves frequencies out of band.
- ``z``, ``c``, ``ws``: mapping with truncation_psi 0.7; ``img``: G(z, c, truncation_psi 0.7,
  noise_mode "const") (StyleGAN3's layers take no noise: ``noise_mode`` is only checked);
  ``img_transform``: the same with the transform set.
- ``flrelu``: layer i's (``FLRELU_LAYERS``) filtered-lrelu call in the eval forward (its input, bias, up/down,
  padding, gain, slope, clamp, and output; the first sample); ``flrelu_clamped``: the first of them again with
  ``clamp = CLAMP``, a bound the activations reach.
- ``train``: one training-mode forward (``update_emas=True``) on ``z_train``: the images, the
  ``w_avg`` and each layer's ``magnitude_ema`` after it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from checkout import make_transform, put_on_path  # beside this script: on sys.path when it runs

CONFIGS = {
    "t": dict(z_dim=32, c_dim=0, w_dim=32, img_resolution=32, img_channels=3,
              mapping_kwargs=dict(num_layers=2), channel_base=256, channel_max=16, num_layers=6,
              magnitude_ema_beta=0.99, conv_clamp=256),
    "r": dict(z_dim=32, c_dim=3, w_dim=32, img_resolution=32, img_channels=1,
              mapping_kwargs=dict(num_layers=2), channel_base=512, channel_max=32, num_layers=6,
              magnitude_ema_beta=0.99, conv_clamp=256, conv_kernel=1, use_radial_filters=True),
}
# The layers whose filtered-lrelu call is recorded: one that upsamples and downsamples (a
# non-critical layer, radial in "r"), one critically sampled, and ToRGB (no filters, no lrelu).
FLRELU_LAYERS = (2, 5, 6)
CLAMP = 0.3
TRANSLATE, ROTATE = (0.3, -0.2), 25.0


def _perturb(G, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in G.named_parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
        G.mapping.w_avg.copy_(0.5 * torch.randn(G.mapping.w_avg.shape, generator=gen))
        for name, b in G.named_buffers():
            if name.endswith("magnitude_ema"):
                b.fill_(float(0.5 + torch.rand((), generator=gen)))


def _layer_record(layer):
    t = torch.tensor
    rec = {
        "in_sampling_rate": t(float(layer.in_sampling_rate), dtype=torch.float64),
        "out_sampling_rate": t(float(layer.out_sampling_rate), dtype=torch.float64),
        "tmp_sampling_rate": t(float(layer.tmp_sampling_rate), dtype=torch.float64),
        "in_cutoff": t(float(layer.in_cutoff), dtype=torch.float64),
        "out_cutoff": t(float(layer.out_cutoff), dtype=torch.float64),
        "in_half_width": t(float(layer.in_half_width), dtype=torch.float64),
        "out_half_width": t(float(layer.out_half_width), dtype=torch.float64),
        "in_size": t([int(v) for v in layer.in_size]),
        "out_size": t([int(v) for v in layer.out_size]),
        "in_channels": t(layer.in_channels), "out_channels": t(layer.out_channels),
        "up_factor": t(layer.up_factor), "down_factor": t(layer.down_factor),
        "up_taps": t(layer.up_taps), "down_taps": t(layer.down_taps),
        "padding": t(layer.padding), "is_torgb": t(bool(layer.is_torgb)),
        "is_critically_sampled": t(bool(layer.is_critically_sampled)), "use_fp16": t(bool(layer.use_fp16)),
        "conv_kernel": t(layer.conv_kernel), "down_radial": t(bool(layer.down_radial)),
        "magnitude_ema": layer.magnitude_ema.detach().clone(),
    }
    for key in ("up_filter", "down_filter"):
        f = getattr(layer, key)
        rec[key] = torch.zeros(0) if f is None else f.detach().clone()
    return rec


def record(name, kwargs, seed):
    from torch_utils.ops import filtered_lrelu
    from training import networks_stylegan3 as net

    torch.manual_seed(seed)
    G = net.Generator(**kwargs).eval()
    _perturb(G, seed + 1)
    S = G.synthesis
    out = {"kwargs": {k: v for k, v in kwargs.items()}}
    out["state_dict"] = {k: v.detach().clone() for k, v in G.state_dict().items()}
    out["layers"] = [_layer_record(getattr(S, n)) for n in S.layer_names]
    out["layer_names"] = list(S.layer_names)

    gen = torch.Generator().manual_seed(seed + 2)
    n = 3
    z = torch.randn(n, kwargs["z_dim"], generator=gen)
    labels = torch.tensor([0, 2, 1])[:n]
    c = torch.nn.functional.one_hot(labels, kwargs["c_dim"]).float() if kwargs["c_dim"] else torch.zeros(n, 0)
    out.update(z=z, labels=labels, c=c)

    calls = []
    orig = filtered_lrelu.filtered_lrelu

    def spy(x, fu=None, fd=None, b=None, up=1, down=1, padding=0, gain=np.sqrt(2), slope=0.2, clamp=None,
            flip_filter=False, impl="cuda"):
        y = orig(x, fu=fu, fd=fd, b=b, up=up, down=down, padding=padding, gain=gain, slope=slope, clamp=clamp,
                 flip_filter=flip_filter, impl=impl)
        # The first sample only (the op is per sample), to keep the file small.
        calls.append({"x": x[:1].detach().clone(), "b": b.detach().clone(), "up": torch.tensor(up),
                      "down": torch.tensor(down), "padding": torch.tensor(padding),
                      "gain": torch.tensor(float(gain), dtype=torch.float64),
                      "slope": torch.tensor(float(slope), dtype=torch.float64),
                      "clamp": torch.tensor(float("nan") if clamp is None else float(clamp), dtype=torch.float64),
                      "y": y[:1].detach().clone()})
        return y

    with torch.no_grad():
        ws = G.mapping(z, c, truncation_psi=0.7)
        out["ws"] = ws.clone()
        out["ws_psi1"] = G.mapping(z, c).clone()
        out["input"] = {"freqs": S.input.freqs.clone(), "phases": S.input.phases.clone(),
                        "out": S.input(ws[:1, 0]).clone()}
        filtered_lrelu.filtered_lrelu = spy
        try:
            out["img"] = G(z, c, truncation_psi=0.7, noise_mode="const").clone()
        finally:
            filtered_lrelu.filtered_lrelu = orig
        out["flrelu"] = {i: calls[i] for i in FLRELU_LAYERS}
        # The resampling layer's call again with a clamp the activations reach (256 never is here).
        c2 = calls[FLRELU_LAYERS[0]]
        layer = getattr(S, S.layer_names[FLRELU_LAYERS[0]])
        y = orig(c2["x"], fu=layer.up_filter, fd=layer.down_filter, b=c2["b"], up=layer.up_factor,
                 down=layer.down_factor, padding=layer.padding, gain=np.sqrt(2), slope=0.2, clamp=CLAMP)
        out["flrelu_clamped"] = {"layer": torch.tensor(FLRELU_LAYERS[0]), "clamp": torch.tensor(CLAMP),
                                 "y": y.clone()}
        m = torch.from_numpy(np.linalg.inv(make_transform(TRANSLATE, ROTATE))).float()
        S.input.transform.copy_(m)
        out["input"]["transform"] = m.clone()
        out["input"]["out_transform"] = S.input(ws[:1, 0]).clone()
        # A transform that also scales by 3: frequencies beyond the bandwidth, so the input's
        # damping of out-of-band features acts (a pure rotation keeps every |f|).
        scaled = m @ torch.diag(torch.tensor([3.0, 3.0, 1.0]))
        S.input.transform.copy_(scaled)
        out["input"]["transform_scaled"] = scaled.clone()
        out["input"]["out_transform_scaled"] = S.input(ws[:1, 0]).clone()
        S.input.transform.copy_(m)
        out["img_transform"] = G(z, c, truncation_psi=0.7, noise_mode="const").clone()
        S.input.transform.copy_(torch.eye(3))

        z_train = torch.randn(4, kwargs["z_dim"], generator=gen)
        labels_train = torch.tensor([1, 0, 2, 1])
        c_train = (torch.nn.functional.one_hot(labels_train, kwargs["c_dim"]).float() if kwargs["c_dim"]
                   else torch.zeros(4, 0))
        G.train()
        img_train = G(z_train, c_train, update_emas=True)
        out["train"] = {"z": z_train, "labels": labels_train, "c": c_train, "img": img_train.clone(),
                        "w_avg": G.mapping.w_avg.clone(),
                        "magnitude_ema": torch.stack([getattr(S, n).magnitude_ema.clone() for n in S.layer_names])}
    # No custom op was built or loaded: everything above ran the reference paths.
    from torch_utils.ops import bias_act, upfirdn2d
    assert filtered_lrelu._plugin is None and bias_act._plugin is None and upfirdn2d._plugin is None
    print(name, "layers", S.layer_names, "img", tuple(out["img"].shape))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True, help="an extracted copy of github.com/NVlabs/stylegan3")
    ap.add_argument("--out", default=str(Path(__file__).with_name("stylegan3_reference.pt")))
    args = ap.parse_args()
    put_on_path(args.official)
    torch.set_grad_enabled(True)
    data = {"translate": torch.tensor(TRANSLATE), "rotate": torch.tensor(ROTATE)}
    for i, (name, kwargs) in enumerate(CONFIGS.items()):
        data[name] = record(name, kwargs, seed=100 + 10 * i)
    torch.save(data, args.out)
    print("wrote", args.out, Path(args.out).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
