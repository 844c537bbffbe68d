"""TF-era StyleGAN2 and StyleGAN2-ADA networks in stylegan2-ada-pytorch's layout.

The TensorFlow StyleGAN2 (Karras et al. 2020, "Analyzing and Improving the Image Quality of
StyleGAN", configs E and F, sec. 4 and fig. 7) and StyleGAN2-ADA (Karras et al. 2020, "Training
Generative Adversarial Networks with Limited Data", appendix B) snapshots are pickles of a
tuple ``(G, D, Gs)`` of ``dnnlib.tflib.network.Network`` objects: each holds its build
function's ``static_kwargs``, its own variables (TF scope name -> numpy array) and its
``components`` (G's and Gs' ``synthesis`` and ``mapping`` networks). stylegan2-ada-pytorch's
``legacy.py`` turns them into its PyTorch ``Generator`` / ``Discriminator``; the functions here
compute, without that code and without TensorFlow, what it computes:

* ``tf_generator_kwargs`` / ``tf_discriminator_kwargs``: the PyTorch networks' ``init_kwargs``
  from the TF static kwargs (``latent_size`` -> ``z_dim``, ``fmap_base`` -> ``channel_base / 2``
  ...), with legacy.py's defaults;
* ``tf_generator_state_dict`` / ``tf_discriminator_state_dict``: the PyTorch ``state_dict``
  (``mapping.fc0.weight``, ``synthesis.b4.const``, ``b16.conv1.weight`` ..., in the order
  torch lists them, the resampling filters' buffers included) from the TF variables: dense
  weights ``[in, out]`` transposed to ``[out, in]``; convolution weights ``[k, k, in, out]`` to
  ``[out, in, k, k]``, and those of G's upsampling convolutions (``Conv0_up``, ``Skip``) flipped
  in both spatial axes first (TF applies them as a transposed convolution); the style biases
  ``mod_bias`` plus 1 (TF adds the 1 when it runs, PyTorch stores it); the constant input and
  the noise images without their leading unit axes; ``dlatent_avg`` as ``mapping.w_avg``.

``convert_tf_generator`` / ``convert_tf_discriminator`` do both for one TF network object (the
restricted reader's ``PickledTFNetwork``, or anything with ``version``, ``static_kwargs``,
``variables`` and ``components``); ``convert_tf_snapshot`` does all three of a snapshot's
``(G, D, Gs)`` (``is_tf_snapshot`` tells one), Gs becoming ``G_ema``.

Refusals are ``CheckpointError`` (a ``GankitError``), one line naming the network, the kwarg or
variable, its value, and why: what legacy.py refuses (a pickle version below 4, a static kwarg
it does not know, the progressive-growing layouts of StyleGAN2 configs B-D and StyleGAN1, a
variable missing or of another shape than the network its kwargs describe), every TF variable
the conversion would not use, and, unless ``gankit=False``, what gankit's ``stylegan2``
architecture cannot build (a G other than ``skip``, a D other than ``resnet``, another
activation or resampling filter than leaky ReLU and [1, 3, 3, 1], no noise inputs, mapping or
label-embedding widths other than W's).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Mapping

import numpy as np
import torch

from gan_kit import CheckpointError

__all__ = ["MIN_TF_VERSION", "G_KWARGS", "D_KWARGS", "tf_variables", "tf_generator_kwargs",
           "tf_discriminator_kwargs", "tf_generator_state_dict", "tf_discriminator_state_dict",
           "convert_tf_generator", "convert_tf_discriminator", "is_tf_snapshot", "convert_tf_snapshot"]

#: The oldest ``dnnlib.tflib.network.Network`` pickle state legacy.py converts (StyleGAN2's 4,
#: StyleGAN2-ADA's 5).
MIN_TF_VERSION = 4

#: The static kwargs of G (and Gs) that legacy.py reads: TF name -> default. The last four are
#: accepted and have no part in the PyTorch network (run-time and training settings).
G_KWARGS: dict[str, Any] = {
    "latent_size": 512, "label_size": 0, "dlatent_size": 512, "resolution": 1024, "num_channels": 3,
    "mapping_layers": 8, "label_fmaps": None, "mapping_fmaps": None, "mapping_nonlinearity": "lrelu",
    "mapping_lrmul": 0.01, "w_avg_beta": 0.995, "fmap_base": 16384, "fmap_max": 512, "num_fp16_res": 0,
    "conv_clamp": None, "architecture": "skip", "resample_kernel": [1, 3, 3, 1], "use_noise": True,
    "nonlinearity": "lrelu",
    "truncation_psi": None, "truncation_cutoff": None, "style_mixing_prob": None, "structure": None,
}

#: The static kwargs of D that legacy.py reads: TF name -> default (``structure`` accepted and
#: unused).
D_KWARGS: dict[str, Any] = {
    "label_size": 0, "resolution": 1024, "num_channels": 3, "architecture": "resnet", "fmap_base": 16384,
    "fmap_max": 512, "num_fp16_res": 0, "conv_clamp": None, "mapping_fmaps": None, "nonlinearity": "lrelu",
    "resample_kernel": [1, 3, 3, 1], "freeze_layers": 0, "mapping_layers": 0, "mapping_lrmul": 0.1,
    "mbstd_group_size": None, "mbstd_num_features": 1,
    "structure": None,
}

# What gankit's stylegan2 architecture builds (its G is the skip G, its D the residual D).
_GANKIT_FILTER = [1, 3, 3, 1]
_GANKIT_ACTIVATION = "lrelu"
_CANNOT = "gankit's stylegan2 architecture cannot build it"


def _refuse(net: str, what: str) -> CheckpointError:
    return CheckpointError(f"TF network {net!r}: {what}")


def _kwarg_problem(net: str, key: str, value: Any, why: str) -> CheckpointError:
    return _refuse(net, f"static kwarg {key} = {value!r}: {why}")


def _check_known(net: str, static_kwargs: Mapping, known: Mapping) -> None:
    for key, value in static_kwargs.items():
        if key not in known:
            raise _kwarg_problem(net, key, value, "legacy.py does not know this kwarg, so the network is not a "
                                                  "StyleGAN2 config E/F or StyleGAN2-ADA network it converts")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(net: str, key: str, value: Any, minimum: int) -> None:
    if not _is_int(value) or value < minimum:
        raise _kwarg_problem(net, key, value, f"expected a whole number >= {minimum}")


def _check_resolution(net: str, value: Any) -> None:
    if not _is_int(value) or value < 4 or value & (value - 1):
        raise _kwarg_problem(net, "resolution", value, "expected a power of two >= 4")


def _check_number(net: str, key: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise _kwarg_problem(net, key, value, "expected a finite number" + (" or None" if optional else ""))


def _is_filter(value: Any, taps: list) -> bool:
    return isinstance(value, (list, tuple)) and list(value) == taps


def _check_gankit_common(net: str, tf: Mapping, defaults: Mapping) -> None:
    for key in ("nonlinearity", "mapping_nonlinearity"):
        if key in defaults and tf.get(key, defaults[key]) not in (None, _GANKIT_ACTIVATION):
            raise _kwarg_problem(net, key, tf[key], f"{_CANNOT} (its layers use leaky ReLU, 'lrelu')")
    kernel = tf.get("resample_kernel", defaults["resample_kernel"])
    if kernel is None or not _is_filter(kernel, _GANKIT_FILTER):
        raise _kwarg_problem(net, "resample_kernel", kernel,
                             f"{_CANNOT} (it resamples with the [1, 3, 3, 1] filter)")


def tf_generator_kwargs(static_kwargs: Mapping, *, name: str = "G", gankit: bool = True) -> dict:
    """stylegan2-ada-pytorch's ``Generator`` init kwargs for a TF G / Gs, as legacy.py derives
    them: ``{"z_dim", "c_dim", "w_dim", "img_resolution", "img_channels", "mapping_kwargs":
    {...}, "synthesis_kwargs": {...}}`` (plain dicts).

    ``static_kwargs``: the TF network's static kwargs (``latent_size``, ``resolution``,
    ``fmap_base`` ...); a missing or None one takes legacy.py's default (``w_avg_beta`` None
    becomes 1, no tracking). ``name``: the network's name in messages. ``gankit``: also refuse
    what gankit's ``stylegan2`` architecture cannot build (see the module docstring).

    Raises ``CheckpointError`` naming the kwarg and its value.
    """
    tf = dict(static_kwargs)
    _check_known(name, tf, G_KWARGS)

    def kwarg(key: str, none: Any = None) -> Any:
        value = tf.get(key, G_KWARGS[key])
        return none if value is None else value

    for key in ("latent_size", "dlatent_size", "num_channels", "mapping_layers", "fmap_base", "fmap_max"):
        _check_int(name, key, kwarg(key), 1)
    for key in ("label_size", "num_fp16_res"):
        _check_int(name, key, kwarg(key), 0)
    for key in ("label_fmaps", "mapping_fmaps"):
        if kwarg(key) is not None:
            _check_int(name, key, kwarg(key), 1)
    _check_resolution(name, kwarg("resolution"))
    _check_number(name, "mapping_lrmul", kwarg("mapping_lrmul"))
    _check_number(name, "w_avg_beta", kwarg("w_avg_beta", none=1))
    _check_number(name, "conv_clamp", kwarg("conv_clamp"), optional=True)
    if kwarg("architecture") not in ("orig", "skip", "resnet"):
        raise _kwarg_problem(name, "architecture", kwarg("architecture"), "expected 'orig', 'skip' or 'resnet'")

    kwargs = {
        "z_dim": kwarg("latent_size"),
        "c_dim": kwarg("label_size"),
        "w_dim": kwarg("dlatent_size"),
        "img_resolution": kwarg("resolution"),
        "img_channels": kwarg("num_channels"),
        "mapping_kwargs": {
            "num_layers": kwarg("mapping_layers"),
            "embed_features": kwarg("label_fmaps"),
            "layer_features": kwarg("mapping_fmaps"),
            "activation": kwarg("mapping_nonlinearity"),
            "lr_multiplier": kwarg("mapping_lrmul"),
            "w_avg_beta": kwarg("w_avg_beta", none=1),
        },
        "synthesis_kwargs": {
            # TF's fmap_base is the width at 2 px (nf(stage) = fmap_base / 2^stage, stage = log2(r)
            # - 1); PyTorch's channel_base the width at 1 px.
            "channel_base": kwarg("fmap_base") * 2,
            "channel_max": kwarg("fmap_max"),
            "num_fp16_res": kwarg("num_fp16_res"),
            "conv_clamp": kwarg("conv_clamp"),
            "architecture": kwarg("architecture"),
            "resample_filter": kwarg("resample_kernel"),
            "use_noise": kwarg("use_noise"),
            "activation": kwarg("nonlinearity"),
        },
    }
    if gankit:
        if kwargs["synthesis_kwargs"]["architecture"] != "skip":
            raise _kwarg_problem(name, "architecture", kwargs["synthesis_kwargs"]["architecture"],
                                 f"{_CANNOT} (its G is the 'skip' G of StyleGAN2 configs E and F)")
        _check_gankit_common(name, tf, G_KWARGS)
        if kwargs["synthesis_kwargs"]["use_noise"] is not True:
            raise _kwarg_problem(name, "use_noise", tf.get("use_noise"), f"{_CANNOT} (its G has noise inputs)")
        w_dim, mapping = kwargs["w_dim"], kwargs["mapping_kwargs"]
        if mapping["layer_features"] not in (None, w_dim) and mapping["num_layers"] > 1:
            raise _kwarg_problem(name, "mapping_fmaps", mapping["layer_features"],
                                 f"{_CANNOT} (its mapping layers are dlatent_size = {w_dim} wide)")
        if mapping["embed_features"] not in (None, w_dim) and kwargs["c_dim"] > 0:
            raise _kwarg_problem(name, "label_fmaps", mapping["embed_features"],
                                 f"{_CANNOT} (its label embedding is dlatent_size = {w_dim} wide)")
    return kwargs


def tf_discriminator_kwargs(static_kwargs: Mapping, *, name: str = "D", gankit: bool = True) -> dict:
    """stylegan2-ada-pytorch's ``Discriminator`` init kwargs for a TF D, as legacy.py derives
    them: ``{"c_dim", "img_resolution", "img_channels", "architecture", "channel_base",
    "channel_max", "num_fp16_res", "conv_clamp", "cmap_dim", "block_kwargs", "mapping_kwargs",
    "epilogue_kwargs"}`` (plain dicts; a None kwarg stays None, as legacy.py keeps it:
    ``mbstd_group_size`` None is the whole minibatch, ``cmap_dim`` None the 4 px width).

    ``gankit``: also refuse what gankit's ``stylegan2`` D cannot be (see the module docstring).
    Raises ``CheckpointError`` naming the kwarg and its value.
    """
    tf = dict(static_kwargs)
    _check_known(name, tf, D_KWARGS)

    def kwarg(key: str) -> Any:
        return tf.get(key, D_KWARGS[key])

    for key in ("num_channels", "fmap_base", "fmap_max"):
        _check_int(name, key, kwarg(key), 1)
    for key in ("label_size", "num_fp16_res", "freeze_layers", "mapping_layers", "mbstd_num_features"):
        _check_int(name, key, kwarg(key), 0)
    for key in ("mapping_fmaps", "mbstd_group_size"):
        if kwarg(key) is not None:
            _check_int(name, key, kwarg(key), 1)
    _check_resolution(name, kwarg("resolution"))
    _check_number(name, "mapping_lrmul", kwarg("mapping_lrmul"))
    _check_number(name, "conv_clamp", kwarg("conv_clamp"), optional=True)
    if kwarg("architecture") not in ("orig", "skip", "resnet"):
        raise _kwarg_problem(name, "architecture", kwarg("architecture"), "expected 'orig', 'skip' or 'resnet'")

    kwargs = {
        "c_dim": kwarg("label_size"),
        "img_resolution": kwarg("resolution"),
        "img_channels": kwarg("num_channels"),
        "architecture": kwarg("architecture"),
        "channel_base": kwarg("fmap_base") * 2,
        "channel_max": kwarg("fmap_max"),
        "num_fp16_res": kwarg("num_fp16_res"),
        "conv_clamp": kwarg("conv_clamp"),
        "cmap_dim": kwarg("mapping_fmaps"),
        "block_kwargs": {
            "activation": kwarg("nonlinearity"),
            "resample_filter": kwarg("resample_kernel"),
            "freeze_layers": kwarg("freeze_layers"),
        },
        "mapping_kwargs": {
            "num_layers": kwarg("mapping_layers"),
            # TF's D uses one width, mapping_fmaps, for the label embedding, its mapping layers
            # and the projection (cmap).
            "embed_features": kwarg("mapping_fmaps"),
            "layer_features": kwarg("mapping_fmaps"),
            "activation": kwarg("nonlinearity"),
            "lr_multiplier": kwarg("mapping_lrmul"),
        },
        "epilogue_kwargs": {
            "mbstd_group_size": kwarg("mbstd_group_size"),
            "mbstd_num_channels": kwarg("mbstd_num_features"),
            "activation": kwarg("nonlinearity"),
        },
    }
    if gankit:
        if kwargs["architecture"] != "resnet":
            raise _kwarg_problem(name, "architecture", kwargs["architecture"],
                                 f"{_CANNOT} (its D is the residual D of StyleGAN2 configs E and F, 'resnet')")
        _check_gankit_common(name, tf, D_KWARGS)
        if kwargs["epilogue_kwargs"]["mbstd_num_channels"] > 1:
            raise _kwarg_problem(name, "mbstd_num_features", kwargs["epilogue_kwargs"]["mbstd_num_channels"],
                                 f"{_CANNOT} (its minibatch-stddev layer adds one feature map, or none)")
        c4 = _channels(kwargs["channel_base"], kwargs["channel_max"], 4)
        if kwargs["cmap_dim"] not in (None, c4) and kwargs["c_dim"] > 0:
            raise _kwarg_problem(name, "mapping_fmaps", kwargs["cmap_dim"],
                                 f"{_CANNOT} (its label mapping and projection are as wide as the 4 px "
                                 f"features, {c4})")
    return kwargs


# ------------------------------------------------------------------------------ variables --


def tf_variables(net: Any) -> dict[str, np.ndarray]:
    """A TF network's variables and its components', named as legacy.py names them: its own
    variables by their scope name (``dlatent_avg``), a component's prefixed with the component's
    key (``synthesis/4x4/Const/const``), recursively, in the stored order. ``net.variables``
    may be a mapping or the pickle's list of ``(name, value)`` pairs."""
    out: dict[str, np.ndarray] = {}

    def walk(prefix: str, node: Any) -> None:
        own = node.variables
        for key, value in (own.items() if isinstance(own, Mapping) else own):
            out[prefix + str(key)] = value
        for key, comp in dict(node.components or {}).items():
            walk(f"{prefix}{key}/", comp)

    walk("", net)
    return out


def _transpose(v: np.ndarray) -> np.ndarray:
    # Dense weights: TF [in, out] -> PyTorch [out, in].
    return v.transpose()


def _conv(v: np.ndarray) -> np.ndarray:
    # Convolution weights: TF [kh, kw, in, out] -> PyTorch [out, in, kh, kw].
    return v.transpose(3, 2, 0, 1)


def _conv_up(v: np.ndarray) -> np.ndarray:
    # TF upsamples with a transposed convolution, PyTorch's modulated_conv2d with its kernel
    # flipped: the same layer holds the kernel mirrored in both spatial axes.
    return v[::-1, ::-1].transpose(3, 2, 0, 1)


def _style_bias(v: np.ndarray) -> np.ndarray:
    # TF adds the style's initial 1 when it runs (apply_bias_act(...) + 1); PyTorch stores it
    # (FullyConnectedLayer bias_init=1).
    return v + 1


def _first(v: np.ndarray) -> np.ndarray:
    return v[0]


def _plane(v: np.ndarray) -> np.ndarray:
    return v[0, 0]


def _same(v: np.ndarray) -> np.ndarray:
    return v


def _filter_buffer(taps: Any) -> torch.Tensor:
    """A resampling filter's buffer as stylegan2-ada-pytorch's ``upfirdn2d.setup_filter`` makes
    it: 1-D taps (fewer than 8) as their outer product, normalised to sum 1."""
    f = torch.as_tensor(1 if taps is None else taps, dtype=torch.float32)
    if f.ndim == 0:
        f = f[None]
    if f.ndim == 1 and f.numel() < 8:
        f = torch.outer(f, f)
    return f / f.sum()


class _Plan:
    """The PyTorch state dict, entry by entry in torch's order: a TF variable, how it becomes
    the entry and the shape it must then have, or a constant buffer."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str | None, Callable | torch.Tensor, tuple[int, ...]]] = []

    def var(self, key: str, tf_name: str, convert: Callable, shape: tuple[int, ...]) -> None:
        self.entries.append((key, tf_name, convert, tuple(int(s) for s in shape)))

    def buffer(self, key: str, value: torch.Tensor) -> None:
        self.entries.append((key, None, value, tuple(value.shape)))


def _channels(channel_base: int, channel_max: int, res: int) -> int:
    return min(channel_base // res, channel_max)


def _fill(net: str, plan: _Plan, variables: Mapping[str, Any], unused: frozenset = frozenset()) -> dict[str, torch.Tensor]:
    variables = dict(variables)
    for tf_name in variables:
        if any(part.startswith(("ToRGB_lod", "FromRGB_lod")) for part in tf_name.split("/")):
            raise _refuse(net, f"variable {tf_name!r}: a progressive-growing network (StyleGAN2 configs B-D or "
                               f"StyleGAN1), which legacy.py does not convert and gankit does not build")
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for key, tf_name, convert, shape in plan.entries:
        if tf_name is None:
            out[key] = convert.clone()
            continue
        if tf_name not in variables:
            raise _refuse(net, f"no variable {tf_name!r} (stylegan2-ada-pytorch's {key}, {list(shape)}): the "
                               f"file does not hold the network its static kwargs describe")
        raw = variables[tf_name]
        value = np.asarray(raw)
        if value.dtype.kind != "f":
            raise _refuse(net, f"variable {tf_name!r} is of type {value.dtype}, not floating point")
        try:
            value = convert(value)
        except (IndexError, ValueError):
            value = None
        if value is None or tuple(value.shape) != shape:
            raise _refuse(net, f"variable {tf_name!r} has shape {list(np.shape(raw))}, which does not give "
                               f"{key}'s {list(shape)} of the network its static kwargs describe")
        used.add(tf_name)
        # A C-ordered float32 copy (legacy.py copies the value into float32 parameters).
        out[key] = torch.from_numpy(np.array(value, dtype=np.float32, order="C", copy=True))
    for tf_name in variables:
        if tf_name not in used and tf_name not in unused:
            raise _refuse(net, f"variable {tf_name!r} has no place in the network its static kwargs describe "
                               f"(legacy.py would drop it): not a StyleGAN2 config E/F or StyleGAN2-ADA network")
    return out


def _plan_mapping(plan: _Plan, prefix: str, tf_prefix: str, *, z_dim: int, c_dim: int, w_dim: int,
                  mapping: Mapping, has_w_avg: bool, embed_name: str, layer_name: str) -> None:
    embed = mapping.get("embed_features")
    embed = w_dim if embed is None else embed
    embed = 0 if c_dim == 0 else embed
    layer = mapping.get("layer_features")
    layer = w_dim if layer is None else layer
    num_layers = mapping.get("num_layers", 8)
    features = [z_dim + embed] + [layer] * (num_layers - 1) + [w_dim]
    if has_w_avg:
        plan.var(f"{prefix}w_avg", "dlatent_avg", _same, (w_dim,))
    if c_dim > 0:
        plan.var(f"{prefix}embed.weight", f"{tf_prefix}{embed_name}/weight", _transpose, (embed, c_dim))
        plan.var(f"{prefix}embed.bias", f"{tf_prefix}{embed_name}/bias", _same, (embed,))
    for i in range(num_layers):
        plan.var(f"{prefix}fc{i}.weight", f"{tf_prefix}{layer_name}{i}/weight", _transpose,
                 (features[i + 1], features[i]))
        plan.var(f"{prefix}fc{i}.bias", f"{tf_prefix}{layer_name}{i}/bias", _same, (features[i + 1],))


def _plan_generator(kwargs: Mapping) -> _Plan:
    plan = _Plan()
    syn = kwargs.get("synthesis_kwargs", {})
    w_dim, resolution, img_channels = kwargs["w_dim"], kwargs["img_resolution"], kwargs["img_channels"]
    architecture = syn.get("architecture", "skip")
    use_noise = syn.get("use_noise", True)
    block_filter = _filter_buffer(syn.get("resample_filter", [1, 3, 3, 1]))
    default_filter = _filter_buffer([1, 3, 3, 1])
    log2 = int(math.log2(resolution))
    ch = {2 ** i: _channels(syn.get("channel_base", 32768), syn.get("channel_max", 512), 2 ** i)
          for i in range(2, log2 + 1)}

    def layer(key: str, tf_scope: str, noise: int, c_in: int, c_out: int, res: int, up: bool) -> None:
        # SynthesisLayer: weight, noise_strength, bias; buffers resample_filter, noise_const;
        # then its affine layer.
        plan.var(f"{key}.weight", f"{tf_scope}/weight", _conv_up if up else _conv, (c_out, c_in, 3, 3))
        if use_noise:
            plan.var(f"{key}.noise_strength", f"{tf_scope}/noise_strength", _same, ())
        plan.var(f"{key}.bias", f"{tf_scope}/bias", _same, (c_out,))
        plan.buffer(f"{key}.resample_filter", block_filter if up else default_filter)
        if use_noise:
            plan.var(f"{key}.noise_const", f"synthesis/noise{noise}", _plane, (res, res))
        plan.var(f"{key}.affine.weight", f"{tf_scope}/mod_weight", _transpose, (c_in, w_dim))
        plan.var(f"{key}.affine.bias", f"{tf_scope}/mod_bias", _style_bias, (c_in,))

    for res in ch:
        b, scope, stage = f"synthesis.b{res}", f"synthesis/{res}x{res}", int(math.log2(res))
        c_in, c_out = (ch[res // 2] if res > 4 else 0), ch[res]
        if res == 4:
            plan.var(f"{b}.const", f"{scope}/Const/const", _first, (c_out, 4, 4))
        plan.buffer(f"{b}.resample_filter", block_filter)
        if res == 4:
            layer(f"{b}.conv1", f"{scope}/Conv", 0, c_out, c_out, res, up=False)
        else:
            # TF numbers the noise inputs over all layers: conv0 of block 2^s is layer 2s - 5.
            layer(f"{b}.conv0", f"{scope}/Conv0_up", 2 * stage - 5, c_in, c_out, res, up=True)
            layer(f"{b}.conv1", f"{scope}/Conv1", 2 * stage - 4, c_out, c_out, res, up=False)
        if architecture == "skip" or res == resolution:
            plan.var(f"{b}.torgb.weight", f"{scope}/ToRGB/weight", _conv, (img_channels, c_out, 1, 1))
            plan.var(f"{b}.torgb.bias", f"{scope}/ToRGB/bias", _same, (img_channels,))
            plan.var(f"{b}.torgb.affine.weight", f"{scope}/ToRGB/mod_weight", _transpose, (c_out, w_dim))
            plan.var(f"{b}.torgb.affine.bias", f"{scope}/ToRGB/mod_bias", _style_bias, (c_out,))
        if res > 4 and architecture == "resnet":
            plan.var(f"{b}.skip.weight", f"{scope}/Skip/weight", _conv_up, (c_out, c_in, 1, 1))
            plan.buffer(f"{b}.skip.resample_filter", block_filter)
    mapping = kwargs.get("mapping_kwargs", {})
    _plan_mapping(plan, "mapping.", "mapping/", z_dim=kwargs["z_dim"], c_dim=kwargs["c_dim"], w_dim=w_dim,
                  mapping=mapping, has_w_avg=mapping.get("w_avg_beta", 0.995) is not None,
                  embed_name="LabelEmbed", layer_name="Dense")
    return plan


def _plan_discriminator(kwargs: Mapping) -> _Plan:
    plan = _Plan()
    resolution, img_channels = kwargs["img_resolution"], kwargs["img_channels"]
    architecture = kwargs.get("architecture", "resnet")
    block_kwargs = kwargs.get("block_kwargs", {})
    freeze = block_kwargs.get("freeze_layers", 0)
    block_filter = _filter_buffer(block_kwargs.get("resample_filter", [1, 3, 3, 1]))
    default_filter = _filter_buffer([1, 3, 3, 1])
    log2 = int(math.log2(resolution))
    ch = {2 ** i: _channels(kwargs.get("channel_base", 32768), kwargs.get("channel_max", 512), 2 ** i)
          for i in range(2, log2 + 1)}
    c4 = ch[4]
    cmap_dim = kwargs.get("cmap_dim")
    cmap_dim = 0 if kwargs["c_dim"] == 0 else (c4 if cmap_dim is None else cmap_dim)

    def conv(key: str, tf_scope: str, shape: tuple[int, ...], filt: torch.Tensor, *, bias: bool = True,
             trainable: bool = True) -> None:
        # Conv2dLayer: weight and bias are parameters, or buffers after resample_filter when
        # Freeze-D froze the layer.
        if not trainable:
            plan.buffer(f"{key}.resample_filter", filt)
        plan.var(f"{key}.weight", f"{tf_scope}/weight", _conv, shape)
        if bias:
            plan.var(f"{key}.bias", f"{tf_scope}/bias", _same, (shape[0],))
        if trainable:
            plan.buffer(f"{key}.resample_filter", filt)

    layer_idx = 0
    for res in range(log2, 2, -1):
        res = 2 ** res
        b, scope = f"b{res}", f"{res}x{res}"
        tmp, out = ch[res], ch[res // 2]
        plan.buffer(f"{b}.resample_filter", block_filter)
        layers = []
        if res == resolution or architecture == "skip":
            layers.append(("fromrgb", "FromRGB", (tmp, img_channels, 1, 1), default_filter, True))
        layers.append(("conv0", "Conv0", (tmp, tmp, 3, 3), default_filter, True))
        layers.append(("conv1", "Conv1_down", (out, tmp, 3, 3), block_filter, True))
        if architecture == "resnet":
            layers.append(("skip", "Skip", (out, tmp, 1, 1), block_filter, False))
        for name, tf_name, shape, filt, bias in layers:
            conv(f"{b}.{name}", f"{scope}/{tf_name}", shape, filt, bias=bias, trainable=layer_idx >= freeze)
            layer_idx += 1
    if kwargs["c_dim"] > 0:
        _plan_mapping(plan, "mapping.", "", z_dim=0, c_dim=kwargs["c_dim"], w_dim=cmap_dim,
                      mapping=kwargs.get("mapping_kwargs", {}), has_w_avg=False, embed_name="LabelEmbed",
                      layer_name="Mapping")
    mbstd = kwargs.get("epilogue_kwargs", {}).get("mbstd_num_channels", 1)
    if architecture == "skip":
        conv("b4.fromrgb", "4x4/FromRGB", (c4, img_channels, 1, 1), default_filter)
    conv("b4.conv", "4x4/Conv", (c4, c4 + mbstd, 3, 3), default_filter)
    plan.var("b4.fc.weight", "4x4/Dense0/weight", _transpose, (c4, c4 * 16))
    plan.var("b4.fc.bias", "4x4/Dense0/bias", _same, (c4,))
    plan.var("b4.out.weight", "Output/weight", _transpose, (cmap_dim or 1, c4))
    plan.var("b4.out.bias", "Output/bias", _same, (cmap_dim or 1,))
    return plan


# StyleGAN2's G_main keeps the progressive-growing level ``lod`` (a scalar) for its configs B-D;
# the config E/F synthesis never reads it, and legacy.py leaves it out.
_G_UNUSED = frozenset({"lod"})


def _inputs(variables: Any, init_kwargs: Mapping | None, name: str | None, default_name: str,
            derive: Callable) -> tuple[Mapping[str, Any], Mapping, str]:
    """(flat variables, init kwargs, name) from what a state dict function was given."""
    if hasattr(variables, "components"):
        name = name or str(getattr(variables, "name", default_name))
        _check_version(variables, name)
        if init_kwargs is None:
            init_kwargs = derive(variables.static_kwargs, name=name, gankit=False)
        return tf_variables(variables), init_kwargs, name
    if init_kwargs is None:
        raise TypeError("init_kwargs is needed with a flat dict of variables (a TF network brings its own)")
    return variables, init_kwargs, name or default_name


def tf_generator_state_dict(variables: Any, init_kwargs: Mapping | None = None, *,
                            name: str | None = None) -> dict[str, torch.Tensor]:
    """stylegan2-ada-pytorch's ``Generator.state_dict()`` (float32 tensors, torch's order) from
    a TF G's or Gs' variables.

    ``variables``: the TF network itself (``init_kwargs`` then defaults to legacy.py's for its
    static kwargs, without gankit's checks; its pickle version is checked), or ``component/scope/
    name -> array`` as ``tf_variables`` gives it (``dlatent_avg``, ``mapping/Dense0/weight``,
    ``synthesis/4x4/Const/const``, ``synthesis/noise0`` ...) with ``init_kwargs`` what
    ``tf_generator_kwargs`` gave. ``name``: the network's name in messages (default: its own,
    or "G"). Every variable is used once but G_main's ``lod`` (StyleGAN2's progressive-growing
    level, which configs E and F never read); raises ``CheckpointError`` naming the variable
    that is missing, of the wrong shape, or left over.
    """
    flat, kwargs, name = _inputs(variables, init_kwargs, name, "G", tf_generator_kwargs)
    return _fill(name, _plan_generator(kwargs), flat, _G_UNUSED)


def tf_discriminator_state_dict(variables: Any, init_kwargs: Mapping | None = None, *,
                                name: str | None = None) -> dict[str, torch.Tensor]:
    """stylegan2-ada-pytorch's ``Discriminator.state_dict()`` (float32 tensors, torch's order)
    from a TF D, or its variables (``16x16/FromRGB/weight``, ``4x4/Dense0/bias``,
    ``Output/weight``, ``LabelEmbed/weight`` ...) with ``init_kwargs`` what
    ``tf_discriminator_kwargs`` gave. Raises ``CheckpointError`` as ``tf_generator_state_dict``."""
    flat, kwargs, name = _inputs(variables, init_kwargs, name, "D", tf_discriminator_kwargs)
    return _fill(name, _plan_discriminator(kwargs), flat)


def _check_version(net: Any, name: str) -> None:
    version = getattr(net, "version", None)
    if not _is_int(version) or version < MIN_TF_VERSION:
        raise _refuse(name, f"pickle version {version!r}: legacy.py converts version {MIN_TF_VERSION} and later "
                            f"(StyleGAN2 and StyleGAN2-ADA snapshots); an older TF network cannot be imported")


def convert_tf_generator(net: Any, *, gankit: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(init_kwargs, state_dict)`` of stylegan2-ada-pytorch's ``Generator`` for a TF G or Gs
    (``version``, ``static_kwargs``, ``variables``, ``components``), as legacy.py's
    ``convert_tf_generator`` makes it. Raises ``CheckpointError`` (see the module docstring)."""
    name = str(getattr(net, "name", "G"))
    _check_version(net, name)
    kwargs = tf_generator_kwargs(net.static_kwargs, name=name, gankit=gankit)
    return kwargs, tf_generator_state_dict(net, kwargs)


def convert_tf_discriminator(net: Any, *, gankit: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(init_kwargs, state_dict)`` of stylegan2-ada-pytorch's ``Discriminator`` for a TF D, as
    legacy.py's ``convert_tf_discriminator`` makes it. Raises ``CheckpointError``."""
    name = str(getattr(net, "name", "D"))
    _check_version(net, name)
    kwargs = tf_discriminator_kwargs(net.static_kwargs, name=name, gankit=gankit)
    return kwargs, tf_discriminator_state_dict(net, kwargs)


def _is_tf_network(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("version", "static_kwargs", "variables", "components"))


def is_tf_snapshot(data: Any) -> bool:
    """True when ``data`` (a pickle's content, as the restricted reader gives it) is a TF-era
    snapshot: a tuple of three TF networks (G, D, Gs), the test legacy.py applies."""
    return isinstance(data, tuple) and len(data) == 3 and all(_is_tf_network(n) for n in data)


def convert_tf_snapshot(data: Any, *, gankit: bool = True) -> dict[str, tuple[dict, dict[str, torch.Tensor]]]:
    """``{"G": (init_kwargs, state_dict), "D": (...), "G_ema": (...)}`` for a TF snapshot's
    ``(G, D, Gs)``, as legacy.py's ``load_network_pkl`` converts it (Gs becomes G_ema). Raises
    ``CheckpointError`` for anything else and for the first network that cannot be converted
    (G_ema first: a caller that needs only G_ema may convert Gs alone with
    ``convert_tf_generator``)."""
    if not is_tf_snapshot(data):
        raise CheckpointError(f"not a TF StyleGAN2 snapshot: it holds {type(data).__name__}, not the tuple of three "
                              f"TF networks (G, D, Gs)")
    G, D, Gs = data
    G_ema = convert_tf_generator(Gs, gankit=gankit)
    return {"G": convert_tf_generator(G, gankit=gankit), "D": convert_tf_discriminator(D, gankit=gankit),
            "G_ema": G_ema}
