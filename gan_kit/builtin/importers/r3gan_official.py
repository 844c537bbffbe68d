"""The official R3GAN networks (Huang et al. 2024, github.com/brownvc/R3GAN) as gankit's ``r3gan``.

An official snapshot's G and D are ``training.networks.Generator`` / ``Discriminator`` wrappers
around ``R3GAN.Networks.Generator`` / ``Discriminator`` (attribute ``Model``). They are plain
modules that store no constructor arguments, so everything is read back from two plain inputs per
network, whoever unpickled it:

- ``state``: the wrapper's ``state_dict()``, official dotted names -> tensors
  (``Model.MainLayers.0.Layers.0.Basis``, ...);
- ``attributes``: dotted module path -> that module's plain attributes (``attributes[""]`` the
  wrapper's ``z_dim``, ``c_dim``, ``img_resolution``; ``attributes["Model.MainLayers.1"]["DataType"]``
  ``"torch.bfloat16"`` or ``"torch.float32"``; a ``Conv2d``'s ``groups``, ``padding``,
  ``kernel_size``, ...).

``r3gan_options`` infers gankit's ``r3gan`` options from the shapes and attributes and refuses,
one line naming the network, the stage and the key, whatever gankit's networks would not compute
the same way; ``r3gan_state_dict`` renames the official tensors to gankit's (each one used once,
every gankit parameter filled). The widths, groups, blocks and embeddings are read from the weights'
shapes; a module's attributes, where given, must agree with them. The wrapper's ``z_dim``,
``c_dim`` and ``img_resolution`` and every stage's ``DataType`` come only from ``attributes`` and
are required.

The official resampling filter is a buffer of every resampler (``Resampler.Kernel``, the outer
product of ``ResamplingFilter`` convolved with [1, 1], normalised to sum 1); gankit's ``r3gan``
resamples with the default [1, 2, 1] (kernel [1, 3, 3, 1] x [1, 3, 3, 1] / 64) only, so any other
kernel is refused, naming the filter taps read back from it.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from gan_kit.base.errors import GankitError
from gan_kit.base.options import ConvertError, convert, option_fields
from gan_kit.builtin.architectures.r3gan import R3GAN, stage_resolutions
from gan_kit.plugin_api.components import BuildContext

__all__ = ["r3gan_options", "r3gan_state_dict", "gankit_key", "resampling_filter", "architecture_options",
           "RESIDUAL", "OFFICIAL_FILTER"]

#: A residual block's tensors: the official names -> gankit's.
RESIDUAL = {"LinearLayer1.Layer.weight": "conv1.weight", "LinearLayer2.Layer.weight": "conv2.weight",
            "LinearLayer3.Layer.weight": "conv3.weight", "NonLinearity1.Bias": "act1.bias",
            "NonLinearity2.Bias": "act2.bias"}

#: The only ``ResamplingFilter`` gankit's r3gan resamples with (the official default).
OFFICIAL_FILTER = [1.0, 2.0, 1.0]

_MAIN = re.compile(r"Model\.MainLayers\.(\d+)\.Layers\.(\d+)\.(.+)")
_BLOCK = "LinearLayer1.Layer.weight"
_DTYPES = {"torch.float32": False, "torch.bfloat16": True}


# ------------------------------------------------------------------------------ names --

def gankit_key(name: str, net: str, d_blocks: list[int] | None = None) -> str | None:
    """gankit's state-dict key of the official wrapper's tensor ``name`` of ``net`` ("G" or "D"),
    or None for a resampler's ``Kernel`` buffer (checked by ``resampling_filter``, not loaded:
    gankit's filters are fixed). ``d_blocks``: D's residual blocks per stage, input side first
    (its stage transitions follow its blocks). Raises GankitError for a name no official network
    has."""
    if net == "G":
        if name == "Model.AggregationLayer.Layer.weight":
            return "to_rgb.weight"
        if name == "Model.EmbeddingLayer.weight":
            return "embed.weight"
        m = _MAIN.fullmatch(name)
        if m:
            stage, layer, rest = int(m[1]), int(m[2]), m[3]
            if layer == 0:  # the stage's transition: the basis, or the upsampler
                new = {"Basis": "basis", "LinearLayer.weight": "linear.weight",
                       "LinearLayer.Layer.weight": "conv.weight", "Resampler.Kernel": None}.get(rest, "?")
            else:
                new = RESIDUAL.get(rest, "?")
            if new != "?":
                return None if new is None else f"stages.{stage}.{layer}.{new}"
    elif net == "D":
        if d_blocks is None:
            raise TypeError("gankit_key: D's names need d_blocks (its residual blocks per stage)")
        if name == "Model.ExtractionLayer.Layer.weight":
            return "blocks.0.0.weight"  # gankit's D stage 0 starts with the convolution from the image
        if name == "Model.EmbeddingLayer.weight":
            return "embed.weight"
        m = _MAIN.fullmatch(name)
        if m and int(m[1]) < len(d_blocks):
            stage, layer, rest = int(m[1]), int(m[2]), m[3]
            if layer == d_blocks[stage]:  # the transition after the blocks: downsampler, or the logit basis
                new = {"LinearLayer.Layer.weight": "conv.weight", "Resampler.Kernel": None,
                       "Basis.weight": "basis.weight", "LinearLayer.weight": "linear.weight"}.get(rest, "?")
            else:
                new = RESIDUAL.get(rest, "?") if layer < d_blocks[stage] else "?"
            if new != "?":
                return None if new is None else f"blocks.{stage}.{layer + (1 if stage == 0 else 0)}.{new}"
    else:
        raise GankitError(f"network {net!r}: an R3GAN snapshot has G and D (use \"G\" or \"D\")")
    raise GankitError(f"{net} {name}: no tensor of the official R3GAN {net} has this name (is it an R3GAN "
                      f"snapshot of github.com/brownvc/R3GAN?)")


# ---------------------------------------------------------------------------- filters --

def resampling_filter(kernel: torch.Tensor) -> list[float]:
    """The official ``ResamplingFilter`` taps behind a resampler's ``Kernel`` buffer, scaled so the
    first tap is 1 (the official kernel is ``outer(k, k) / sum``, ``k`` the filter convolved with
    [1, 1]). Raises ValueError, saying why, when ``kernel`` is no such outer product."""
    k = kernel.detach().double()
    if k.dim() != 2 or k.shape[0] != k.shape[1] or k.shape[0] < 2:
        raise ValueError(f"is no square 2-D kernel (shape {list(k.shape)})")
    row = k.sum(dim=1)
    if row.sum() == 0 or not torch.allclose(torch.outer(row, row) / row.sum(), k, atol=1e-6, rtol=1e-5):
        raise ValueError("is no separable outer product k x k")
    taps = [row[0].item()]  # undo the convolution with [1, 1]: k_i = f_i + f_(i-1)
    for v in row[1:-1].tolist():
        taps.append(v - taps[-1])
    if abs(row[-1].item() - taps[-1]) > 1e-6 * row.abs().max().item() or taps[0] == 0:
        raise ValueError(f"is no filter convolved with [1, 1] (1-D kernel {_fmt(row / row[0])})")
    return [round(t / taps[0], 6) for t in taps]


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in (values.tolist() if torch.is_tensor(values) else values)) + "]"


def _check_filter(net: str, name: str, kernel: torch.Tensor) -> None:
    try:
        taps = resampling_filter(kernel)
    except ValueError as e:
        raise GankitError(f"{net} {name}: the resampling kernel {e}; gankit's r3gan resamples with the official "
                          f"[1, 2, 1] filter only") from None
    if taps != OFFICIAL_FILTER or not torch.allclose(kernel.detach().double(), _official_kernel(), atol=1e-7):
        raise GankitError(f"{net} {name}: resampling filter {_fmt(taps)} (the official ResamplingFilter); gankit's "
                          f"r3gan resamples with the official default [1, 2, 1] only")


def _official_kernel() -> torch.Tensor:
    k = torch.tensor([1.0, 3.0, 3.0, 1.0], dtype=torch.float64)
    return torch.outer(k, k) / 64.0


# --------------------------------------------------------------------------- reading --

class _Net:
    """One official network's state and attributes, with the lookups the inference needs."""

    def __init__(self, net: str, state: dict[str, torch.Tensor], attributes: dict[str, dict]):
        self.net, self.state, self.attributes = net, state, attributes
        foreign = sorted(k for k in state if not k.startswith("Model."))
        if foreign:
            raise GankitError(f"{net} {foreign[0]}: not a tensor of the official wrapper's Model (is this "
                              f"{net} an R3GAN training.networks.{'Generator' if net == 'G' else 'Discriminator'}?)")
        self.stages = 1 + max((int(m[1]) for k in state if (m := _MAIN.fullmatch(k))), default=-1)
        if self.stages < 1:
            raise GankitError(f"{net}: no Model.MainLayers tensors; not an R3GAN network")

    def tensor(self, name: str, dims: int) -> torch.Tensor:
        if name not in self.state:
            raise GankitError(f"{self.net} {name}: missing from the state dict (a truncated or foreign snapshot)")
        t = self.state[name]
        if not torch.is_tensor(t) or t.dim() != dims or not t.is_floating_point():
            shape = list(t.shape) if torch.is_tensor(t) else type(t).__name__
            raise GankitError(f"{self.net} {name}: expected a {dims}-D floating-point tensor, got {shape}")
        return t

    def attr(self, path: str, key: str, required: bool = False) -> Any:
        """``attributes[path][key]``; None when absent, unless ``required``."""
        a = self.attributes.get(path)
        if a is None or key not in a:
            if required:
                raise GankitError(f"{self.net} {path or '(the wrapper)'}: attribute {key!r} missing (the "
                                  f"unpickled module tree must give it)")
            return None
        return a[key]

    def agree(self, path: str, key: str, expected: Any, what: str) -> None:
        """A module's attribute ``key``, where given, equals ``expected`` (read from the tensors)."""
        got = self.attr(path, key)
        if got is None:
            return
        got = list(got) if isinstance(got, (tuple, list)) else got
        exp = list(expected) if isinstance(expected, (tuple, list)) else expected
        if got != exp:
            raise GankitError(f"{self.net} {f'{path}.{key}' if path else key}: {got!r}, but {what} gives {exp!r}; gankit's r3gan computes "
                              f"{exp!r}")

    def conv(self, path: str, groups: int, kernel: int) -> None:
        """The attributes of an official ``Convolution``'s ``Conv2d`` (its forward reads ``padding``
        and ``groups``) agree with the weight and with what gankit builds."""
        self.agree(path, "groups", groups, "the weight's shape")
        self.agree(path, "kernel_size", [kernel, kernel], "the weight's shape")
        self.agree(path, "padding", [(kernel - 1) // 2] * 2, f"a {kernel}x{kernel} official Convolution")

    def dtype(self, stage: int) -> bool:
        """Whether official stage ``stage`` computes in bfloat16 (its ``DataType``)."""
        path = f"Model.MainLayers.{stage}"
        value = str(self.attr(path, "DataType", required=True))
        if value not in _DTYPES:
            raise GankitError(f"{self.net} {path}.DataType: {value}; gankit's r3gan computes a stage in torch.float32 "
                              f"or torch.bfloat16 (the official FP16Stages)")
        return _DTYPES[value]

    def blocks(self, stage: int) -> list[int]:
        """The indices of stage ``stage``'s residual blocks."""
        return sorted(int(m[2]) for k in self.state
                      if (m := _MAIN.fullmatch(k)) and int(m[1]) == stage and m[3] == _BLOCK)

    def block(self, stage: int, layer: int, width: int) -> tuple[int, int, int]:
        """A residual block's (expansion, cardinality, kernel), checked against its width."""
        path = f"Model.MainLayers.{stage}.Layers.{layer}"
        w1 = self.tensor(f"{path}.LinearLayer1.Layer.weight", 4)
        w2 = self.tensor(f"{path}.LinearLayer2.Layer.weight", 4)
        w3 = self.tensor(f"{path}.LinearLayer3.Layer.weight", 4)
        mid, k = w1.shape[0], w2.shape[-1]
        if w1.shape[1] != width or w1.shape[2:] != (1, 1) or mid % width:
            raise GankitError(f"{self.net} {path}.LinearLayer1.Layer.weight: shape {list(w1.shape)}; gankit's r3gan "
                              f"expands the stage's {width} channels by an integer factor with a 1x1 convolution")
        if w2.shape[0] != mid or w2.shape[2] != k or not k % 2 or mid % w2.shape[1]:
            raise GankitError(f"{self.net} {path}.LinearLayer2.Layer.weight: shape {list(w2.shape)}; gankit's r3gan "
                              f"needs a grouped odd square k x k convolution of the {mid} middle channels")
        groups = mid // w2.shape[1]
        if list(w3.shape) != [width, mid, 1, 1]:
            raise GankitError(f"{self.net} {path}.LinearLayer3.Layer.weight: shape {list(w3.shape)}; gankit's r3gan "
                              f"projects the {mid} middle channels back to {width} with a 1x1 convolution")
        for i in (1, 2):
            b = self.tensor(f"{path}.NonLinearity{i}.Bias", 1)
            if b.shape[0] != mid:
                raise GankitError(f"{self.net} {path}.NonLinearity{i}.Bias: {b.shape[0]} biases for {mid} channels")
        self.conv(f"{path}.LinearLayer1.Layer", 1, 1)
        self.conv(f"{path}.LinearLayer2.Layer", groups, k)
        self.conv(f"{path}.LinearLayer3.Layer", 1, 1)
        return mid // width, groups, k

    def linear_1x1(self, name: str, cin: int) -> int | None:
        """The output channels of an optional 1x1 width change ``name`` from ``cin``, None if absent."""
        if name not in self.state:
            return None
        w = self.tensor(name, 4)
        if w.shape[1] != cin or w.shape[2:] != (1, 1):
            raise GankitError(f"{self.net} {name}: shape {list(w.shape)}; gankit's r3gan changes the width from {cin} "
                              f"with a 1x1 convolution")
        self.conv(name.rsplit(".", 1)[0], 1, 1)
        return w.shape[0]


def _class_embedding(net: _Net) -> tuple[int, int]:
    """``(classes, class_dim)`` of a network's class embedding (``Model.EmbeddingLayer``, a linear
    map of the one-hot class), ``(0, 0)`` for an unconditional one."""
    if net.state.get("Model.EmbeddingLayer.weight") is None:
        return 0, 0
    embed = net.tensor("Model.EmbeddingLayer.weight", 2)
    return embed.shape[1], embed.shape[0]


def _stage_name(net: str, stage: int, res: int) -> str:
    return f"{net} stage {stage} ({res} px)"


def _read_g(g: _Net) -> dict:
    """G's structure, 4 px first."""
    n = g.stages
    res = stage_resolutions(4 * 2 ** (n - 1))
    basis = g.tensor("Model.MainLayers.0.Layers.0.Basis", 3)
    linear = g.tensor("Model.MainLayers.0.Layers.0.LinearLayer.weight", 2)
    widths = [basis.shape[0]]
    if list(basis.shape[1:]) != [4, 4] or linear.shape[0] != widths[0]:
        raise GankitError(f"G Model.MainLayers.0.Layers.0: basis {list(basis.shape)} and linear layer "
                          f"{list(linear.shape)}; gankit's r3gan modulates a [C, 4, 4] basis by a linear map to C")
    for s in range(1, n):
        path = f"Model.MainLayers.{s}.Layers.0"
        if f"{path}.Resampler.Kernel" not in g.state:
            raise GankitError(f"G {path}.Resampler.Kernel: missing; gankit's r3gan upsamples at the start of every "
                              f"stage above 4 px")
        _check_filter("G", f"{path}.Resampler.Kernel", g.tensor(f"{path}.Resampler.Kernel", 2))
        width = g.linear_1x1(f"{path}.LinearLayer.Layer.weight", widths[-1])
        widths.append(widths[-1] if width is None else width)
    out = {"widths": widths, "cards": [], "blocks": [], "bf16": [], "expansion": set(), "kernel": set()}
    for s in range(n):
        layers = g.blocks(s)
        if layers != list(range(1, len(layers) + 1)):
            raise GankitError(f"{_stage_name('G', s, res[s])}: residual blocks at Layers {layers}; gankit's r3gan "
                              f"has the transition at Layers.0, then the blocks")
        _read_stage(g, "G", s, res[s], layers, widths[s], out)
    rgb = g.tensor("Model.AggregationLayer.Layer.weight", 4)
    if rgb.shape[1] != widths[-1] or rgb.shape[2:] != (1, 1):
        raise GankitError(f"G Model.AggregationLayer.Layer.weight: shape {list(rgb.shape)}; gankit's r3gan makes the "
                          f"image from the {widths[-1]} channels of the last stage with a 1x1 convolution")
    g.conv("Model.AggregationLayer.Layer", 1, 1)
    out["channels"] = rgb.shape[0]
    out["in_dim"] = linear.shape[1]
    g.agree("Model.MainLayers.0.Layers.0.LinearLayer", "in_features", linear.shape[1], "the weight's shape")
    out["classes"], out["class_dim"] = _class_embedding(g)
    return out


def _read_stage(net: _Net, which: str, s: int, resolution: int, layers: list[int], width: int, out: dict) -> None:
    """Stage ``s``'s residual blocks (at ``Layers`` indices ``layers``) into ``out``: their
    expansion and kernel (collected, checked one per network by the caller), the stage's one
    cardinality, block count and dtype."""
    cards = set()
    for layer in layers:
        e, c, k = net.block(s, layer, width)
        out["expansion"].add(e)
        out["kernel"].add(k)
        cards.add(c)
    _one_cardinality(cards, which, s, resolution)
    out["cards"].append(cards.pop() if cards else 1)
    out["blocks"].append(len(layers))
    out["bf16"].append(net.dtype(s))


def _read_d(d: _Net) -> dict:
    """D's structure, input side (top resolution) first."""
    n = d.stages
    res = list(reversed(stage_resolutions(4 * 2 ** (n - 1))))
    first = d.tensor("Model.ExtractionLayer.Layer.weight", 4)
    if first.shape[2:] != (1, 1):
        raise GankitError(f"D Model.ExtractionLayer.Layer.weight: shape {list(first.shape)}; gankit's r3gan reads the "
                          f"image with a 1x1 convolution")
    d.conv("Model.ExtractionLayer.Layer", 1, 1)
    widths = [first.shape[0]]
    out = {"channels": first.shape[1], "cards": [], "blocks": [], "bf16": [], "expansion": set(), "kernel": set()}
    for s in range(n):
        layers = d.blocks(s)
        nb = len(layers)
        if layers != list(range(nb)):
            raise GankitError(f"{_stage_name('D', s, res[s])}: residual blocks at Layers {layers}; gankit's r3gan "
                              f"has the blocks first, then the transition")
        _read_stage(d, "D", s, res[s], layers, widths[s], out)
        path = f"Model.MainLayers.{s}.Layers.{nb}"
        if s + 1 < n:
            _check_filter("D", f"{path}.Resampler.Kernel", d.tensor(f"{path}.Resampler.Kernel", 2))
            width = d.linear_1x1(f"{path}.LinearLayer.Layer.weight", widths[-1])
            widths.append(widths[-1] if width is None else width)
        else:
            basis = d.tensor(f"{path}.Basis.weight", 4)
            linear = d.tensor(f"{path}.LinearLayer.weight", 2)
            if list(basis.shape) != [widths[-1], 1, 4, 4] or linear.shape[1] != widths[-1]:
                raise GankitError(f"D {path}: basis {list(basis.shape)} and linear layer {list(linear.shape)}; gankit's "
                                  f"r3gan ends with a depthwise 4x4 convolution of the {widths[-1]} channels and a "
                                  f"linear layer")
            d.agree(f"{path}.Basis", "groups", widths[-1], "a depthwise 4x4 convolution")
            d.agree(f"{path}.Basis", "padding", [0, 0], "the official DiscriminativeBasis")
            d.agree(f"{path}.Basis", "stride", [1, 1], "the official DiscriminativeBasis")
            out["out_dim"] = linear.shape[0]
    out["widths"] = widths
    out["classes"], out["class_dim"] = _class_embedding(d)
    return out


def _one_cardinality(cards: set[int], net: str, stage: int, res: int) -> None:
    if len(cards) > 1:
        raise GankitError(f"{_stage_name(net, stage, res)}: blocks with cardinalities {sorted(cards)}; gankit's r3gan "
                          f"has one cardinality per stage")


def _uniform(values: set[int], what: str, option: str) -> int:
    if len(values) != 1:
        raise GankitError(f"G and D: {what} {sorted(values)} across the blocks; gankit's r3gan has one {option}")
    return values.pop()


def _compact(values: list[int], stages: list[int]) -> tuple[int, dict[int, int]]:
    """One value (the 4 px stage's) and the stages that differ from it, keyed by resolution."""
    return values[0], {r: v for r, v in zip(stages, values) if v != values[0]}


def r3gan_options(G_state: dict[str, torch.Tensor], G_attributes: dict[str, dict],
                  D_state: dict[str, torch.Tensor], D_attributes: dict[str, dict]) -> dict:
    """gankit's description of an official R3GAN snapshot's G and D (Huang et al. 2024, sec. 3):
    ``{"resolution": r, "channels": c, "num_classes": k, "architecture": {...}}``, the last
    ``r3gan`` options as a TOML-able table (ints, lists, tables keyed by resolution in px):
    ``latent_dim``; ``width``, ``cardinality``, ``blocks_per_stage`` (the 4 px stage's) with
    ``width_by_resolution`` etc. for the stages that differ; ``expansion``, ``kernel_size``;
    ``bf16_resolutions`` (the official FP16Stages); ``g_class_dim``, ``d_class_dim`` when
    conditional.

    ``*_state``: the wrappers' state dicts; ``*_attributes``: dotted module path -> its plain
    attributes (the module docstring). Raises GankitError, one line naming the network, stage and
    key, for anything gankit's networks would compute differently: another resampling filter, a
    width, group count or block count D does not mirror from G, a stage in another dtype, a
    shape no official layer has, wrapper attributes that disagree with the tensors."""
    g, d = _Net("G", G_state, G_attributes), _Net("D", D_state, D_attributes)
    G, D = _read_g(g), _read_d(d)
    n = g.stages
    resolution = 4 * 2 ** (n - 1)
    stages = stage_resolutions(resolution)
    g.agree("", "img_resolution", resolution, f"G's {n} stages (4 px to {resolution} px)")
    if d.stages != n:
        raise GankitError(f"D: {d.stages} stages, G {n} ({resolution} px); gankit's r3gan builds D as G's mirror")
    z_dim, c_dim = g.attr("", "z_dim", required=True), g.attr("", "c_dim", required=True)
    if G["classes"] != c_dim or D["classes"] != c_dim:
        raise GankitError(f"G and D: c_dim {c_dim}, but G embeds {G['classes']} classes and D {D['classes']} "
                          f"(Model.EmbeddingLayer.weight); gankit's r3gan conditions both on the same classes")
    if G["in_dim"] != z_dim + G["class_dim"]:
        raise GankitError(f"G Model.MainLayers.0.Layers.0.LinearLayer.weight: {G['in_dim']} inputs, but z_dim {z_dim} "
                          f"+ class embedding {G['class_dim']}; gankit's r3gan maps z joined with the class embedding")
    expected_out = D["class_dim"] if c_dim else 1
    if D["out_dim"] != expected_out:
        raise GankitError(f"D Model.MainLayers.{n - 1}.Layers.{D['blocks'][-1]}.LinearLayer.weight: {D['out_dim']} "
                          f"outputs; gankit's r3gan gives {expected_out} ({'the class projection' if c_dim else 'the logit'})")
    if G["channels"] != D["channels"]:
        raise GankitError(f"G makes {G['channels']}-channel images, D reads {D['channels']}; gankit's r3gan builds both "
                          f"for one channel count")
    for key, what in (("widths", "width"), ("cards", "cardinality"), ("blocks", "residual blocks"),
                      ("bf16", "bfloat16")):
        mirrored = list(reversed(D[key]))
        for s, (a, b) in enumerate(zip(G[key], mirrored)):
            if a != b:
                raise GankitError(f"{_stage_name('D', n - 1 - s, stages[s])}: {what} {b}, but G's {stages[s]} px stage "
                                  f"{a}; gankit's r3gan builds D as G's mirror")
    expansion = _uniform(G["expansion"] | D["expansion"], "expansion factors", "expansion")
    kernel = _uniform(G["kernel"] | D["kernel"], "kernel sizes", "kernel_size")
    if G["bf16"][0]:
        raise GankitError("G Model.MainLayers.0.DataType: torch.bfloat16 at 4 px; the official basis runs in float32 "
                          "(its forward would fail), and gankit's r3gan keeps the 4 px stage float32")
    width, width_by = _compact(G["widths"], stages)
    card, card_by = _compact(G["cards"], stages)
    blocks, blocks_by = _compact(G["blocks"], stages)
    arch: dict[str, Any] = {"latent_dim": int(z_dim), "width": width, "width_by_resolution": width_by,
                            "cardinality": card, "cardinality_by_resolution": card_by,
                            "blocks_per_stage": blocks, "blocks_by_resolution": blocks_by,
                            "expansion": expansion, "kernel_size": kernel,
                            "bf16_resolutions": [r for r, b in zip(stages, G["bf16"]) if b]}
    if c_dim:
        arch["g_class_dim"], arch["d_class_dim"] = G["class_dim"], D["class_dim"]
    result = {"resolution": resolution, "channels": G["channels"], "num_classes": int(c_dim), "architecture": arch}
    architecture_options(result)  # gankit accepts every value
    return result


def architecture_options(options: dict) -> R3GAN.Options:
    """``options["architecture"]`` (as ``r3gan_options`` returns it, or read from TOML) as
    ``R3GAN.Options``; GankitError naming the option gankit refuses."""
    fields = {f.name: f for f in option_fields(R3GAN.Options)}
    values = {}
    for key, value in options["architecture"].items():
        if key not in fields:
            raise GankitError(f"architecture.{key}: no option of gankit's r3gan")
        try:
            values[key] = convert(value, fields[key].type)
        except (ConvertError, ValueError) as e:
            raise GankitError(f"architecture.{key}: {e}") from None
    o = R3GAN.Options(**values)
    for r in o.bf16_resolutions:
        if r not in stage_resolutions(options["resolution"])[1:]:
            raise GankitError(f"architecture.bf16_resolutions: {r} px is no stage above 4 px at "
                              f"{options['resolution']} px")
    return o


# ----------------------------------------------------------------------------- tensors --

def r3gan_state_dict(official_state: dict[str, torch.Tensor], net: str, options: dict) -> dict[str, torch.Tensor]:
    """The official wrapper's state dict of ``net`` ("G" or "D") renamed to gankit's ``r3gan``
    network built with ``options`` (what ``r3gan_options`` returned). Every official tensor is
    used once - the resamplers' ``Kernel`` buffers are checked to be the [1, 2, 1] filter, not
    loaded, gankit's being fixed - and every gankit parameter is filled with a tensor of its
    shape (float32, as the official parameters; a bf16 stage casts them on use). Raises
    GankitError naming the first tensor that has no place, or the gankit key left empty."""
    arch = R3GAN(architecture_options(options),
                 BuildContext(resolution=options["resolution"], channels=options["channels"],
                              num_classes=options["num_classes"]))
    with torch.device("meta"):  # the names and shapes only, without allocating or initialising
        G, D = arch.build(options["resolution"], options["channels"])
    target = {"G": G, "D": D}.get(net)
    if target is None:
        raise GankitError(f"network {net!r}: an R3GAN snapshot has G and D (use \"G\" or \"D\")")
    shapes = {k: tuple(v.shape) for k, v in target.state_dict().items()}
    d_blocks = list(reversed(arch.stage_blocks(options["resolution"])))
    out: dict[str, torch.Tensor] = {}
    for name, tensor in official_state.items():
        key = gankit_key(name, net, d_blocks)
        if key is None:
            _check_filter(net, name, tensor)
            continue
        if key not in shapes:
            raise GankitError(f"{net} {name}: gankit's r3gan built from these options has no {key} for it "
                              f"(options from another snapshot?)")
        if key in out:
            raise GankitError(f"{net} {name}: a second tensor for gankit's {key}")
        if tuple(tensor.shape) != shapes[key]:
            raise GankitError(f"{net} {name}: shape {list(tensor.shape)}, gankit's {key} has {list(shapes[key])}")
        if not tensor.is_floating_point():
            raise GankitError(f"{net} {name}: dtype {tensor.dtype}; expected floating-point weights")
        out[key] = tensor.detach().to(torch.float32, copy=True)
    missing = sorted(set(shapes) - set(out))
    if missing:
        raise GankitError(f"{net} {missing[0]}: no official tensor fills it ({len(missing)} gankit tensors empty; "
                          f"a truncated snapshot?)")
    return out
