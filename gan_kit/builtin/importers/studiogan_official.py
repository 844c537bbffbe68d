"""PyTorch-StudioGAN's ResNet GAN checkpoints (github.com/POSTECH-CVLab/PyTorch-StudioGAN,
``src/utils/ckpt.py``) as gankit's ``sngan-resnet`` / ``biggan``.

StudioGAN saves each network in its own file, ``model={G,G_ema,D}-{best,current}-weights-step=N.pth``:
``torch.save`` of a dict whose ``"state_dict"`` holds the network's tensors (G's file also its
optimizer's state; D's the run's seed, step, best FID and so on). The files are read with
``torch.load(weights_only=True)``, which builds tensors and plain containers only (numpy scalars,
which StudioGAN's numbers may be, are allowed as data).

``studiogan_options`` infers the architecture and its options from the tensors alone: ``biggan``
when G has a shared class embedding (``shared.weight``) or its cBN maps read G's first-layer input
width (a z chunk), else ``sngan-resnet``; the resolution from G's block count, the widths from the
convolutions (``g_conv_dim`` / ``d_conv_dim`` with StudioGAN's channel table, or explicit
multipliers), self-attention places, spectral norm (``weight_orig`` / ``weight_u`` / ``weight_v``
tensors: torch's hook-form spectral norm), z, the shared embedding and the classes.
``studiogan_state_dict`` renames the tensors to gankit's (``gankit_key``), each used once and every
gankit tensor filled. What gankit's networks would not compute (another D head - AC, 2C, MH, MD,
the InfoGAN or TAC heads -, the deep backbones, another channel table) is refused in one line.
"""

from __future__ import annotations

import math
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from gan_kit.base.errors import GankitError
from gan_kit.builtin.architectures.studiogan.layers import D_MULTIPLIERS, G_MULTIPLIERS, STUDIOGAN_RESOLUTIONS
from gan_kit.builtin.architectures.studiogan.biggan import BigGAN
from gan_kit.builtin.architectures.studiogan.resnet import SNGANResNet
from gan_kit.plugin_api.components import BuildContext

__all__ = ["gankit_key", "studiogan_options", "studiogan_state_dict", "read_studiogan_file", "sibling_files", "network_of", "build_architecture",
           "FILE_NAME"]

#: StudioGAN's checkpoint file names (``misc.save_model``).
FILE_NAME = re.compile(r"model=(G|G_ema|D)-(best|current)-weights-step=(\d+)\.pth")

_TOP = {"linear0": "linear", "bn4": "bn", "conv2d5": "to_rgb", "shared": "shared", "linear1": "linear",
        "embedding": "embed"}
_LAYER = {"conv2d0": "skip", "conv2d1": "conv1", "conv2d2": "conv2", "conv1x1_theta": "theta", "conv1x1_phi": "phi",
          "conv1x1_g": "g", "conv1x1_attn": "out", "sigma": "gamma", "bn0": "bn0", "bn1": "bn1", "bn2": "bn2"}
_SN = {"weight_orig": "parametrizations.weight.original", "weight_u": "parametrizations.weight.0.u",
       "weight_v": "parametrizations.weight.0.v"}
_BLOCK = re.compile(r"blocks\.(\d+)\.0\.(.+)")
#: D heads of StudioGAN's other conditioning methods and auxiliary classifiers.
_OTHER_HEADS = ("linear2.", "linear_mi.", "embedding_mi.", "info_discrete_linear.", "info_conti_mu_linear.",
                "info_conti_var_linear.", "info_mix_linear.", "info_proj_linear.")


def _suffix(rest: str) -> str:
    """A layer's tensor name: the hook-form spectral norm's tensors as gankit's parametrization's."""
    head, _, last = rest.rpartition(".")
    if last in _SN:
        return f"{head}.{_SN[last]}" if head else _SN[last]
    return rest


def gankit_key(name: str) -> str:
    """gankit's state-dict key of StudioGAN's G or D tensor ``name`` (``resnet.py`` /
    ``big_resnet.py``): ``blocks.i.0.`` -> ``blocks.i.``; conv2d0/1/2 -> skip / conv1 / conv2;
    the attention's conv1x1_theta/phi/g/attn -> theta / phi / g / out and sigma -> gamma;
    linear0 / linear1 -> linear, bn4 -> bn, conv2d5 -> to_rgb, embedding -> embed;
    ``weight_orig`` / ``weight_u`` / ``weight_v`` -> the ``SpectralNorm`` parametrization's
    ``original`` / ``0.u`` / ``0.v``. Raises GankitError for a name no such network has."""
    m = _BLOCK.fullmatch(name)
    if m:
        layer, _, rest = m[2].partition(".")
        if layer in _LAYER and (rest or layer == "sigma"):
            return f"blocks.{m[1]}.{_LAYER[layer]}" + (f".{_suffix(rest)}" if rest else "")
    else:
        layer, _, rest = name.partition(".")
        if layer in _TOP and rest:
            return f"{_TOP[layer]}.{_suffix(rest)}"
    raise GankitError(f"{name}: no tensor of StudioGAN's ResNet / BigGAN G or D has this name (gankit reads the "
                      f"resnet and big_resnet backbones with cBN G and projection or unconditional D)")


# ---------------------------------------------------------------------------------- files --

def _numpy_globals() -> list:
    """numpy's scalar and dtype constructors, as data (StudioGAN's best FID can be a numpy float)."""
    import numpy as np

    scalar = np._core.multiarray.scalar if hasattr(np, "_core") else np.core.multiarray.scalar
    out: list[Any] = [scalar, np.dtype, (scalar, "numpy.core.multiarray.scalar")]
    out += [type(np.dtype(t)) for t in ("float64", "float32", "int64", "int32", "bool")]
    return out


def read_studiogan_file(path: str | Path) -> dict | None:
    """The dict a StudioGAN checkpoint file holds (``torch.load(weights_only=True)`` on the CPU),
    or None when ``path`` is no torch zip file holding a dict with a ``"state_dict"`` of tensors.
    Raises GankitError (one line) for a torch file that asks for more than data."""
    path = Path(path)
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            return None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        try:
            with torch.serialization.safe_globals(_numpy_globals()):
                data = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            first = str(e).splitlines()[-1].strip() if str(e) else type(e).__name__
            raise GankitError(f"{path}: a torch file that holds more than tensors and plain data, which gankit does "
                              f"not load ({first[:160]})") from None
    except Exception:  # noqa: BLE001 - a zip that is no torch file: not this importer's
        return None
    if not isinstance(data, dict) or not isinstance(data.get("state_dict"), dict):
        return None
    state = data["state_dict"]
    if not state or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        return None
    return data


def sibling_files(path: str | Path) -> dict[str, Path]:
    """StudioGAN's files of one save beside ``path`` (named ``FILE_NAME``): ``{"G": ..., "G_ema":
    ..., "D": ...}`` with the same ``best`` / ``current`` and, where there is one, the same step;
    ``path`` itself among them. Empty when ``path`` is not named as StudioGAN names its files."""
    path = Path(path)
    m = FILE_NAME.fullmatch(path.name)
    if m is None:
        return {}
    out = {m[1]: path}
    for net in ("G", "G_ema", "D"):
        if net in out:
            continue
        same = path.with_name(f"model={net}-{m[2]}-weights-step={m[3]}.pth")
        found = [same] if same.is_file() else sorted(path.parent.glob(f"model={net}-{m[2]}-weights-step=*.pth"))
        if found:
            out[net] = found[0]
    return out


def network_of(state: dict[str, torch.Tensor]) -> str | None:
    """"G" or "D" for a StudioGAN ResNet state dict (G has ``linear0``, D ``linear1``), else None."""
    if any(k.startswith("linear0.") for k in state) and any(k.startswith("conv2d5.") for k in state):
        return "G"
    if any(k.startswith("linear1.") for k in state) and any(_BLOCK.fullmatch(k) for k in state):
        return "D"
    return None


# ------------------------------------------------------------------------------- options --

def _weight(state: dict, layer: str, net: str) -> torch.Tensor:
    for key in (f"{layer}.weight_orig", f"{layer}.weight"):
        if key in state:
            return state[key]
    raise GankitError(f"{net} {layer}.weight: missing from the state dict (a truncated or foreign checkpoint)")


def _blocks(state: dict) -> list[str]:
    """Each entry of ``blocks``: "block" (a residual block) or "attention", in order."""
    kinds: dict[int, str] = {}
    for k in state:
        m = _BLOCK.fullmatch(k)
        if m:
            kind = "attention" if m[2].startswith(("conv1x1_", "sigma")) else "block"
            kinds.setdefault(int(m[1]), kind)
    if sorted(kinds) != list(range(len(kinds))):
        raise GankitError(f"blocks {sorted(kinds)}: not numbered 0, 1, ... (a foreign checkpoint)")
    return [kinds[i] for i in range(len(kinds))]


def _places(kinds: list[str]) -> list[int]:
    """1-based residual blocks followed by self-attention."""
    places, count = [], 0
    for kind in kinds:
        if kind == "block":
            count += 1
        else:
            places.append(count)
    return places


def _conv_dim(widths: list[int], table: tuple[int, ...], net: str) -> tuple[int, list[int]]:
    """``(conv_dim, multipliers)``: multipliers empty when ``widths`` are StudioGAN's table times
    one base width, else the widths over their greatest common divisor."""
    if len(widths) != len(table):
        raise GankitError(f"{net}: {len(widths)} widths, StudioGAN's table has {len(table)}")
    base = widths[-1] // table[-1]
    if base and all(w == m * base for w, m in zip(widths, table)):
        return base, []
    g = math.gcd(*widths)
    return g, [w // g for w in widths]


def _read_g(state: dict) -> dict:
    kinds = _blocks(state)
    nblocks = kinds.count("block")
    resolution = 4 * 2 ** nblocks
    if resolution not in STUDIOGAN_RESOLUTIONS:
        raise GankitError(f"G: {nblocks} residual blocks ({resolution} px); StudioGAN's networks are defined "
                          f"for {', '.join(map(str, STUDIOGAN_RESOLUTIONS))} px")
    linear = _weight(state, "linear0", "G")
    widths = [linear.shape[0] // 16]
    for i, kind in enumerate(kinds):
        if kind == "block":
            w = _weight(state, f"blocks.{i}.0.conv2d1", "G")
            if w.shape[1] != widths[-1]:
                raise GankitError(f"G blocks.{i}.0.conv2d1: reads {w.shape[1]} channels, the block before gives "
                                  f"{widths[-1]}")
            widths.append(w.shape[0])
    rgb = _weight(state, "conv2d5", "G")
    out = {"resolution": resolution, "widths": widths, "channels": rgb.shape[0], "attention": _places(kinds),
           "sn": "linear0.weight_orig" in state, "in": linear.shape[1]}
    first = next(i for i, k in enumerate(kinds) if k == "block")
    gain = state.get(f"blocks.{first}.0.bn1.gain.weight_orig", state.get(f"blocks.{first}.0.bn1.gain.weight"))
    out["cond_dim"] = 0 if gain is None else gain.shape[1]
    shared = state.get("shared.weight")
    out["classes"], out["shared_dim"] = (0, 0) if shared is None else tuple(shared.shape)
    return out


def _read_d(state: dict) -> dict:
    foreign = sorted(k for k in state if k.startswith(_OTHER_HEADS))
    if foreign:
        raise GankitError(f"D {foreign[0]}: a head of StudioGAN's AC / 2C / D2DCE / TAC / InfoGAN conditioning; "
                          f"gankit's sngan-resnet and biggan read a projection (PD) or unconditional D")
    kinds = _blocks(state)
    widths, channels = [], None
    for i, kind in enumerate(kinds):
        if kind == "block":
            w = _weight(state, f"blocks.{i}.0.conv2d1", "D")
            channels = w.shape[1] if channels is None else channels
            widths.append(w.shape[0])
    linear = _weight(state, "linear1", "D")
    if linear.shape[0] != 1:
        raise GankitError(f"D linear1.weight: {linear.shape[0]} outputs (StudioGAN's MH or MD head); gankit's "
                          f"sngan-resnet and biggan give one logit")
    embed = state.get("embedding.weight_orig", state.get("embedding.weight"))
    return {"widths": widths, "channels": channels, "attention": _places(kinds), "sn": "linear1.weight_orig" in state,
            "classes": 0 if embed is None else embed.shape[0]}


def studiogan_options(G_state: dict[str, torch.Tensor], D_state: dict[str, torch.Tensor] | None) -> dict:
    """gankit's description of StudioGAN's G (and D, when given): ``{"name": "biggan" |
    "sngan-resnet", "resolution": r, "channels": c, "num_classes": k, "architecture": {...}}``,
    the last the architecture's options as a TOML-able table. Without D, D's options are
    StudioGAN's defaults for the architecture (its base width G's). Raises GankitError, one line,
    for what gankit's networks would compute differently."""
    G = _read_g(G_state)
    res = G["resolution"]
    big = G["classes"] > 0 or (G["cond_dim"] > 0 and G["cond_dim"] == G["in"])
    name = "biggan" if big else "sngan-resnet"
    g_dim, g_mult = _conv_dim(G["widths"], G_MULTIPLIERS[res], "G")
    arch: dict[str, Any] = {"g_conv_dim": g_dim, "g_attention": G["attention"], "g_spectral_norm": G["sn"]}
    if g_mult:
        arch["g_channel_multipliers"] = g_mult
    if big:
        chunks = len(G["widths"])
        num_classes = G["classes"]
        if G["cond_dim"] != G["in"] + G["shared_dim"]:
            raise GankitError(f"G blocks.0.0.bn1.gain: reads {G['cond_dim']} inputs; BigGAN's cBN reads the shared "
                              f"embedding ({G['shared_dim']}) and a z chunk ({G['in']})")
        arch["latent_dim"] = G["in"] * chunks
        if num_classes:
            arch["shared_dim"] = G["shared_dim"]
    else:
        num_classes = G["cond_dim"]
        arch["latent_dim"] = G["in"]
    if D_state is not None:
        D = _read_d(D_state)
        if len(D["widths"]) != len(D_MULTIPLIERS[res]):
            raise GankitError(f"D: {len(D['widths'])} residual blocks; StudioGAN's {res} px D has "
                              f"{len(D_MULTIPLIERS[res])} (G and D from different runs?)")
        if D["classes"] != num_classes:
            raise GankitError(f"D embedding.weight: {D['classes']} classes, G {num_classes}; gankit conditions G and D "
                              f"on the same classes")
        if D["channels"] != G["channels"]:
            raise GankitError(f"D reads {D['channels']}-channel images, G makes {G['channels']}")
        d_dim, d_mult = _conv_dim(D["widths"], D_MULTIPLIERS[res], "D")
        arch |= {"d_conv_dim": d_dim, "d_attention": D["attention"], "d_spectral_norm": D["sn"]}
        if d_mult:
            arch["d_channel_multipliers"] = d_mult
    else:
        arch |= {"d_conv_dim": g_dim, "d_attention": [], "d_spectral_norm": True}
    return {"name": name, "resolution": res, "channels": G["channels"], "num_classes": num_classes,
            "architecture": arch}


def build_architecture(options: dict):
    """The ``sngan-resnet`` or ``biggan`` architecture ``options`` (``studiogan_options``' answer) describe."""
    cls = BigGAN if options["name"] == "biggan" else SNGANResNet
    arch = dict(options["architecture"])
    for key in ("g_attention", "d_attention", "g_channel_multipliers", "d_channel_multipliers"):
        if key in arch:
            arch[key] = tuple(arch[key])
    return cls(cls.Options(**arch), BuildContext(resolution=options["resolution"], channels=options["channels"],
                                                 num_classes=options["num_classes"]))


# ------------------------------------------------------------------------------- tensors --

def studiogan_state_dict(state: dict[str, torch.Tensor], net: str, options: dict) -> dict[str, torch.Tensor]:
    """StudioGAN's state dict of ``net`` ("G" or "D") renamed to the gankit network built from
    ``options`` (what ``studiogan_options`` returned): every tensor used once, every gankit tensor
    filled with one of its shape. Raises GankitError naming the first tensor without a place or
    the gankit key left empty."""
    arch = build_architecture(options)
    with torch.device("meta"):  # names and shapes only
        G, D = arch.build(options["resolution"], options["channels"])
    target = {"G": G, "D": D}[net]
    shapes = {k: tuple(v.shape) for k, v in target.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        key = gankit_key(name)
        if key not in shapes:
            raise GankitError(f"{net} {name}: gankit's {options['name']} built from these options has no {key} for it")
        if tuple(tensor.shape) != shapes[key]:
            raise GankitError(f"{net} {name}: shape {list(tensor.shape)}, gankit's {key} has {list(shapes[key])}")
        out[key] = tensor.detach().clone()
    missing = sorted(set(shapes) - set(out))
    if missing:
        raise GankitError(f"{net} {missing[0]}: no StudioGAN tensor fills it ({len(missing)} gankit tensors empty; a "
                          f"truncated checkpoint?)")
    return out
