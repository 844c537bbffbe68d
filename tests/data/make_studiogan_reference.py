"""Write ``tests/data/studiogan_reference.pt``: what PyTorch-StudioGAN's ResNet GANs compute for
fixed seeds, which ``tests/test_studiogan_parity.py`` compares gankit's ``sngan-resnet``,
``sagan`` and ``biggan`` with.

StudioGAN (github.com/POSTECH-CVLab/PyTorch-StudioGAN, MIT licence; recorded: commit 947b35e) is
run, not copied: point ``--official`` at its ``src`` folder.

    git clone https://github.com/POSTECH-CVLab/PyTorch-StudioGAN /tmp/studiogan
    python tests/data/make_studiogan_reference.py --official /tmp/studiogan/src

It runs on the CPU. ``models/resnet.py`` and ``models/big_resnet.py`` import ``utils.misc`` for one
name (``dummy_context_mgr``, the no-autocast context); that module pulls in plotting and data
packages the networks never use, so it is stood in for by a module holding that context alone.
The networks are built with StudioGAN's layer factories (``utils/ops.py``: ``snconv2d``,
``snlinear``, ``sn_embedding``, ``ConditionalBatchNorm2d``, ``batchnorm_2d``) chosen as its
``config.py`` ``define_modules`` does, and ReLU activations (its default).

Per case (``CASES``: SNGAN, SAGAN, BigGAN at 32 px with tiny widths and 10 classes, and an
unconditional ResNet GAN whose D has batch norm instead of spectral norm) it records, as plain
tensors and numbers:

- ``config``: the case's settings; ``G_state``, ``D_state``: the networks' state dicts (StudioGAN's
  names), moved off their initial values by seeded noise (``_perturb``: self-attention's gamma
  starts at zero and the BN statistics at 0 and 1, which would hide those terms);
- ``z``, ``labels``, ``x`` (D's input images);
- ``G_train``: G's images in training mode (batch statistics, one power iteration of every
  spectral norm), ``G_state_after``: G's buffers after it (updated ``u``, ``v`` and BN running
  statistics), ``G_eval``: then G's images in eval mode; likewise ``D_train``, ``D_state_after``,
  ``D_eval`` (D's ``adv_output``, the logits).
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch
from torch import nn

OUT = Path(__file__).resolve().parent / "studiogan_reference.pt"

BASE = {"img_size": 32, "num_classes": 10, "z_dim": 16, "g_shared_dim": 8, "g_conv_dim": 4, "d_conv_dim": 8,
        "apply_attn": False, "attn_g_loc": [], "attn_d_loc": [], "apply_g_sn": False, "apply_d_sn": True,
        "g_cond_mtd": "cBN", "d_cond_mtd": "PD", "backbone": "resnet"}
CASES = {
    "sngan": dict(BASE),
    "sagan": dict(BASE, apply_attn=True, attn_g_loc=[2], attn_d_loc=[1], apply_g_sn=True),
    "biggan": dict(BASE, backbone="big_resnet", z_dim=20, apply_attn=True, attn_g_loc=[2], attn_d_loc=[1],
                   apply_g_sn=True),
    "resnet_uncond_bn": dict(BASE, g_cond_mtd="W/O", d_cond_mtd="W/O", apply_d_sn=False, apply_attn=True,
                             attn_g_loc=[3], attn_d_loc=[2]),
}
BATCH = 4


def _stand_ins() -> None:
    misc = types.ModuleType("utils.misc")

    class dummy_context_mgr:  # the no-autocast context its forwards enter
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return False

    misc.dummy_context_mgr = dummy_context_mgr
    sys.modules["utils.misc"] = misc


def _modules(ops, cfg: dict) -> types.SimpleNamespace:
    """StudioGAN's ``define_modules`` for ``cfg`` (ReLU activations)."""
    g_sn, d_sn = cfg["apply_g_sn"], cfg["apply_d_sn"]
    m = types.SimpleNamespace(
        g_conv2d=ops.snconv2d if g_sn else ops.conv2d, g_linear=ops.snlinear if g_sn else ops.linear,
        d_conv2d=ops.snconv2d if d_sn else ops.conv2d, d_linear=ops.snlinear if d_sn else ops.linear,
        d_embedding=ops.sn_embedding if d_sn else ops.embedding,
        g_act_fn=nn.ReLU(inplace=True), d_act_fn=nn.ReLU(inplace=True))
    if cfg["g_cond_mtd"] == "cBN" or cfg["backbone"] == "big_resnet":
        m.g_bn = ops.ConditionalBatchNorm2d
    else:
        m.g_bn = ops.batchnorm_2d
    if not d_sn:
        m.d_bn = ops.batchnorm_2d
    return m


def _build(cfg: dict):
    import importlib

    import utils.ops as ops

    module = importlib.import_module(f"models.{cfg['backbone']}")
    MODULES = _modules(ops, cfg)
    MODEL = types.SimpleNamespace(info_type="N/A", g_info_injection="N/A")
    G = module.Generator(z_dim=cfg["z_dim"], g_shared_dim=cfg["g_shared_dim"], img_size=cfg["img_size"],
                         g_conv_dim=cfg["g_conv_dim"], apply_attn=cfg["apply_attn"], attn_g_loc=cfg["attn_g_loc"],
                         g_cond_mtd=cfg["g_cond_mtd"], num_classes=cfg["num_classes"], g_init="ortho", g_depth="N/A",
                         mixed_precision=False, MODULES=MODULES, MODEL=MODEL)
    D = module.Discriminator(img_size=cfg["img_size"], d_conv_dim=cfg["d_conv_dim"], apply_d_sn=cfg["apply_d_sn"],
                             apply_attn=cfg["apply_attn"], attn_d_loc=cfg["attn_d_loc"], d_cond_mtd=cfg["d_cond_mtd"],
                             aux_cls_type="W/O", d_embed_dim="N/A", normalize_d_embed=False,
                             num_classes=cfg["num_classes"], d_init="ortho", d_depth="N/A", mixed_precision=False,
                             MODULES=MODULES, MODEL=MODEL)
    return G, D


@torch.no_grad()
def _perturb(net: nn.Module, gen: torch.Generator) -> None:
    """Move every parameter and BN statistic off its initial value (seeded): attention's gamma
    from 0, biases from 0, BN running means from 0 and variances from 1, the power iteration's
    ``u`` / ``v`` to other unit vectors."""
    for name, p in net.named_parameters():
        p.add_(0.2 * torch.randn(p.shape, generator=gen))
    for name, b in net.named_buffers():
        if name.endswith("running_mean"):
            b.copy_(0.3 * torch.randn(b.shape, generator=gen))
        elif name.endswith("running_var"):
            b.copy_(0.5 + torch.rand(b.shape, generator=gen))
        elif name.endswith(("weight_u", "weight_v")):
            b.copy_(nn.functional.normalize(torch.randn(b.shape, generator=gen), dim=0, eps=1e-12))


def _state(net: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def _buffers(net: nn.Module) -> dict:
    """The state a forward changes (a training forward leaves the parameters as they are)."""
    return {k: v.detach().clone() for k, v in net.named_buffers()}


def record(cfg: dict, seed: int) -> dict:
    torch.manual_seed(seed)
    G, D = _build(cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    _perturb(G, gen)
    _perturb(D, gen)
    z = torch.randn(BATCH, cfg["z_dim"], generator=gen)
    labels = torch.randint(0, cfg["num_classes"], (BATCH,), generator=gen)
    x = torch.tanh(torch.randn(BATCH, 3, cfg["img_size"], cfg["img_size"], generator=gen))
    out = {"config": cfg, "G_state": _state(G), "D_state": _state(D), "z": z, "labels": labels, "x": x}
    with torch.no_grad():
        G.train()
        out["G_train"] = G(z, labels).clone()
        out["G_state_after"] = _buffers(G)
        G.eval()
        out["G_eval"] = G(z, labels, eval=True).clone()
        D.train()
        out["D_train"] = D(x.clone(), labels)["adv_output"].clone()
        out["D_state_after"] = _buffers(D)
        D.eval()
        out["D_eval"] = D(x.clone(), labels, eval=True)["adv_output"].clone()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official", required=True, help="StudioGAN's src folder")
    parser.add_argument("--commit", default="947b35e9835b67860fdce44d337f6d7fee7c8db3",
                        help="the StudioGAN commit the folder holds (recorded)")
    args = parser.parse_args()
    _stand_ins()
    sys.path.insert(0, str(Path(args.official).resolve()))
    torch.set_num_threads(1)
    ref = {"commit": args.commit}
    for i, (name, cfg) in enumerate(CASES.items()):
        ref[name] = record(cfg, seed=100 + i)
    torch.save(ref, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
