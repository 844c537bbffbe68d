"""Write ``tests/data/official_snapshots.pt``: tiny networks of the official StyleGAN2-ADA, StyleGAN3
(its ``networks_stylegan2``) and R3GAN code, recorded as plain tensors, with what the official
generation scripts draw from them - so the suite can rebuild network-snapshot pickles of the
official layout (``tests/official_pickles.py``) and check a reader against the official outputs
without the official code or any pickle that embeds it.

The official code is run, not copied: point the options at extracted checkouts of it.

    git -C <stylegan2-ada-pytorch mirror> archive HEAD | tar -x -C /tmp/sg2ada   # likewise sg3, r3gan
    python tests/data/make_official_snapshots.py --ada /tmp/sg2ada --sg3 /tmp/sg3 --r3gan /tmp/r3gan \
        [--out tests/data/official_snapshots.pt] [--check-genuine /tmp/genuine]

``--sg3`` records the StyleGAN3 checkout's StyleGAN2 cases and its alias-free ones;
``--sg3-alias-free`` (with ``--sg3``) records only the StyleGAN3-T / -R cases (format
``"stylegan3"``: ``sg3-t``, RGB with train.py's StyleGAN3 augment pipe at p = 0.2;
``sg3-r-conditional``, grayscale, 3 classes, ``--cfg stylegan3-r``'s doubled widths, 1x1
convolutions and radial filters; both 16 px with 4 synthesis layers) and puts them into
``--out`` in place of earlier ones, keeping the file's other cases and commits.

Each checkout is imported in a subprocess of its own (the three share the module names
``dnnlib``, ``torch_utils``, ``training``, ``legacy``). Everything runs on the CPU, where the
official ``bias_act``, ``upfirdn2d``, ``conv2d_gradfix`` and ``grid_sample_gradfix`` ops take their
reference (plain PyTorch) paths. Runtime stand-ins so current torch/numpy import the old code
(their files are never edited): ``pkg_resources`` (only ``parse_version``, from ``packaging``) and
``psutil`` (empty) when absent; R3GAN train.py's Adam ``betas=[0,0]`` is given as ``[0.0, 0.0]``
(current torch's Adam refuses integer betas; the loop overwrites them before each step anyway).

The file (``torch.load(path, weights_only=True)``) is ``{"versions": ..., "commits": ...,
"cases": [case, ...]}``; each case is a dict of plain values:

- ``format``: ``"stylegan2-ada-pytorch"``, ``"stylegan3-stylegan2"`` or ``"r3gan"``; ``case``: its name.
- ``snapshot_keys``: the keys of the official training loop's snapshot dict, in its order;
  ``null_keys``: those whose value is None (ADA and StyleGAN3 write ``augment_pipe=None`` without
  augmentation); ``training_set_kwargs`` (the plain dict the loop writes); R3GAN: ``cur_nimg`` and
  ``opt_states`` (``{"D_opt_state", "G_opt_state"}``: Adam's state dicts after one step, as its loop
  writes them).
- ``nets``: ``{"G" | "D" | "G_ema" | "augment_pipe": tree}``, each as the loop pickles it (a deep
  copy in eval mode with ``requires_grad_(False)``). G_ema is G with other weights, so a reader
  that mixes them up fails. A tree is ``{"modules": {path: module}, "tensors": {name: tensor}}``;
  path ``""`` is the root, names are ``state_dict``-style and include non-persistent buffers.
  A module is ``{"kind": "persistent" | "global", "module", "qualname"`` (persistent: the
  module the class was defined in and its ``_orig_class_name``), ``"init_args", "init_kwargs",
  "init_kwargs_easydicts"`` (persistent only: dotted key paths, ``""`` the top, of the dicts that
  are ``dnnlib.EasyDict``), ``"attributes"`` (the instance ``__dict__`` less torch's own module
  internals, in order), ``"parameters", "buffers", "children"`` (names in order), ``"null_parameters",
  "null_buffers", "null_children"`` (those that are None), ``"non_persistent_buffers"``,
  ``"requires_grad"`` (parameter names that require it), ``"training"}``. Values that are not
  plain Python (``attributes``, ``init_*``) are tagged dicts: ``{"__type__": "numpy.scalar", "dtype":
  "float64", "value": v, "ref": n}``, ``{"__type__": "torch.dtype", "value": "torch.bfloat16"}``,
  ``{"__type__": "dict" | "easydict", "items": {...}}``, ``{"__type__": "numpy.ndarray", "dtype",
  "shape", "values", "fortran", "ref"}`` (StyleGAN3's layers keep sizes and rates as arrays);
  tuples stay tuples. Object identity, which
  decides what a pickle writes once and then refers to: ``ref`` numbers the numpy scalar objects of
  a snapshot (every ADA layer's ``act_gain`` is one object), ``"tuple_refs"`` (field path, e.g.
  ``"init_args"``, ``"attributes.kernel_size"``, ``"init_kwargs.x"`` -> number) the tuples (G_ema,
  a deep copy of G, shares G's).
- ``seeds`` ``[0, 1, 2, 3]``, ``class_idx`` (None unconditional), ``z`` ``[4, z_dim]`` float64 (each row
  ``np.random.RandomState(seed).randn(1, z_dim)``, as the generation scripts draw it), ``c`` ``[4,
  c_dim]`` (the one-hot label, or ``[4, 0]``).
- ``generations``: a list, one per call of G_ema with a batch of one per seed, of
  ``{"truncation_psi", "truncation_cutoff", "noise_mode", "ws", "img", "uint8"}``; ``ws`` ``[4,
  num_ws, w_dim]`` from ``G_ema.mapping`` (StyleGAN2 kinds), ``img`` ``[4, C, H, W]`` float32,
  ``uint8`` ``[4, H, W, C]`` as the scripts write it (``(img.permute(0, 2, 3, 1) * 127.5 +
  128).clamp(0, 255).to(torch.uint8)``). R3GAN's ``gen_images.py`` calls ``G(z, label)``: one
  entry with ``truncation_psi``/``noise_mode`` None and no ``ws``.
- ``w_file`` (StyleGAN2 kinds): ``{"w": [1, num_ws, w_dim], "img", "uint8"}``: a ``--projected-w``
  array and the image ``generate.py`` draws from it (``G.synthesis(w, noise_mode='const')``).
- ``d_c``, ``d_logits_fake`` (D on the psi=1 const images), ``d_inputs_random``, ``d_logits_random``
  (D on a batch of 4; G_ema runs one seed at a time; all on the snapshot copies).
- ``transform`` (``"stylegan3"``): gen_images.py's ``--translate`` / ``--rotate`` (``translate``,
  ``rotate``; ``matrix``: the inverse of its ``make_transform``, as it sets
  ``G.synthesis.input.transform``) and G_ema's images of the seeds with it (psi 1), ``img`` and
  ``uint8``.
- ``eq`` (``"stylegan3"``): the official ``metrics/equivariance.py`` values ``eqt_int``,
  ``eqt_frac``, ``eqr`` (dB, float64) on G_ema, each after ``torch.manual_seed(seed)``, for
  ``num_samples`` latents in batches of ``batch_size``; ``labels``: the one-hot classes every batch
  of a conditional G gets (the official code draws them from its data set; fixed here, by
  replacing ``metric_utils.iterate_random_labels`` for the call).
- ``augment`` (when there is an augment_pipe): ``{"kwargs", "p", "inputs", "seeds", "outputs"}``,
  the pipe's output on ``inputs`` after ``torch.manual_seed(seed)``.

``ada-fp16-clamp``: ADA's blocks with ``use_fp16`` run in float16 on the CPU as well (StyleGAN3's
``networks_stylegan2`` falls back to float32 off CUDA, so ``sg3-conditional``'s fp16 setting does
not show in its outputs): that case's outputs carry float16 rounding and conv_clamp.

The networks' initial biases are zeros and w_avg is zero, which would hide terms from a parity
check, so every parameter and w_avg is moved by seeded noise before recording (StyleGAN3's
magnitude EMAs, 1 at first, are set to seeded values in [0.5, 1.5)).

Checks it prints (``check ...`` lines): each recorded case is rebuilt by
``official_pickles.write_official_pickle`` (with the real source text in ``module_src``, to a
temporary file only) and loaded by the official code (``legacy.load_network_pkl``; R3GAN: plain
``pickle.load`` with its checkout on sys.path); all tensors and every recorded output must come
back. ``--check-genuine DIR`` also writes the genuine ``pickle.dump`` of each snapshot into DIR
(outside the repository: they embed NVIDIA's source) and checks that the writer, given this
torch's module internals, gives the same globals, tree, opcodes and memo indices.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from checkout import make_transform, put_on_path  # beside this script: on sys.path when it runs

HERE = Path(__file__).resolve().parent
OUT = HERE / "official_snapshots.pt"
SEEDS = [0, 1, 2, 3]
LAYOUT_NOTE = {"ada": "legacy.load_network_pkl", "sg3": "legacy.load_network_pkl", "sg3af": "legacy.load_network_pkl",
               "r3gan": "pickle.load"}
FORMATS = {"ada": "stylegan2-ada-pytorch", "sg3": "stylegan3-stylegan2", "sg3af": "stylegan3", "r3gan": "r3gan"}
MIRRORS = {"ada": "/work/.mirror/NVlabs+stylegan2-ada-pytorch/repo",
           "sg3": "/work/.mirror/NVlabs+stylegan3/repo",
           "sg3af": "/work/.mirror/NVlabs+stylegan3/repo",
           "r3gan": "/work/.mirror/brownvc+R3GAN/repo"}
#: gen_images.py --translate / --rotate recorded on the alias-free cases.
TRANSLATE, ROTATE = (0.3, -0.2), 25.0
#: The equivariance metrics' draws: torch.manual_seed(EQ_SEED), EQ_SAMPLES images in batches of 4.
EQ_SEED, EQ_SAMPLES, EQ_BATCH = 5, 4, 4
#: ADA's train.py augpipe_specs['bgcfnc'].
BGCFNC = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1, brightness=1, contrast=1,
              lumaflip=1, hue=1, saturation=1, imgfilter=1, noise=1, cutout=1)


# --------------------------------------------------------------------------------------------
# Importing an official checkout


# --------------------------------------------------------------------------------------------
# Recording a module tree


_SCALAR_REFS: dict[int, tuple[int, object]] = {}


def _encode(value, where: str):
    """A weights-only-loadable form of an attribute value (tagged where it is not plain)."""
    import dnnlib

    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, np.generic):
        # "ref" numbers the scalar objects of a snapshot: one object in several places (every
        # layer's act_gain is bias_act's def_gain) pickles once, then as a memo reference.
        ref = _SCALAR_REFS.setdefault(id(value), (len(_SCALAR_REFS), value))[0]
        return {"__type__": "numpy.scalar", "dtype": value.dtype.name, "value": value.item(), "ref": ref}
    if type(value) is np.ndarray:
        # StyleGAN3's layers keep sizes and sampling rates as numpy arrays; pickled as
        # ndarray.__reduce__ gives them (_reconstruct, then the dtype and the raw bytes).
        ref = _SCALAR_REFS.setdefault(id(value), (len(_SCALAR_REFS), value))[0]
        return {"__type__": "numpy.ndarray", "dtype": value.dtype.name, "shape": list(value.shape),
                "values": value.reshape(-1).tolist(), "fortran": bool(value.flags.f_contiguous and value.ndim > 1
                                                                      and not value.flags.c_contiguous),
                "ref": ref}
    if isinstance(value, torch.dtype):
        return {"__type__": "torch.dtype", "value": str(value)}
    if type(value) is tuple:
        return tuple(_encode(v, where) for v in value)
    if type(value) is list:
        return [_encode(v, where) for v in value]
    if type(value) in (dict, dnnlib.EasyDict):
        tag = "easydict" if isinstance(value, dnnlib.EasyDict) else "dict"
        return {"__type__": tag, "items": {k: _encode(v, f"{where}.{k}") for k, v in value.items()}}
    raise TypeError(f"{where}: cannot record a {type(value).__module__}.{type(value).__qualname__}")


def _plain_kwargs(value, where: str, path: str, easydicts: list[str]):
    """init kwargs as nested plain dicts; the dotted paths of EasyDicts go to ``easydicts``."""
    import dnnlib

    if type(value) in (dict, dnnlib.EasyDict):
        if isinstance(value, dnnlib.EasyDict):
            easydicts.append(path)
        return {k: _plain_kwargs(v, f"{where}.{k}", f"{path}.{k}" if path else k, easydicts)
                for k, v in value.items()}
    return _encode(value, where)


def _kwarg_fields(value, path):
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in _kwarg_fields(v, f"{path}.{k}")]
    return [(path, value)]


def record_tree(net: torch.nn.Module) -> dict:
    internals = set(torch.nn.Module().__dict__)
    modules, tensors = {}, {}

    def visit(m, path):
        cls = type(m)
        persistent = hasattr(cls, "_orig_class_name")
        # A persistent class is persistence.py's Decorator subclassing the original class.
        orig = cls.__bases__[0] if persistent else cls
        rec = {"kind": "persistent" if persistent else "global", "module": orig.__module__,
               "qualname": cls._orig_class_name if persistent else cls.__qualname__}
        if persistent:
            easy: list[str] = []
            rec["init_args"] = _encode(m._init_args, f"{path}._init_args")
            rec["init_kwargs"] = _plain_kwargs(m._init_kwargs, f"{path}._init_kwargs", "", easy)
            rec["init_kwargs_easydicts"] = easy
        rec["attributes"] = {k: _encode(v, f"{path}.{k}") for k, v in m.__dict__.items()
                             if k not in internals and k not in ("_init_args", "_init_kwargs")}
        # Tuples shared between places (deepcopy keeps a tuple of atoms: G_ema's are G's) pickle
        # once: "tuple_refs" numbers them per snapshot, field path -> ref.
        refs = {}
        fields = [(f"attributes.{k}", v) for k, v in m.__dict__.items() if k not in internals]
        if persistent:
            fields = [("init_args", m._init_args), *_kwarg_fields(m._init_kwargs, "init_kwargs"),
                      *[f for f in fields if f[0] not in ("attributes._init_args", "attributes._init_kwargs")]]
        for field, v in fields:
            if type(v) is tuple and v:
                refs[field] = _SCALAR_REFS.setdefault(id(v), (len(_SCALAR_REFS), v))[0]
        rec["tuple_refs"] = refs
        prefix = f"{path}." if path else ""
        rec["parameters"] = list(m._parameters)
        rec["null_parameters"] = [k for k, v in m._parameters.items() if v is None]
        rec["requires_grad"] = [k for k, v in m._parameters.items() if v is not None and v.requires_grad]
        rec["buffers"] = list(m._buffers)
        rec["null_buffers"] = [k for k, v in m._buffers.items() if v is None]
        rec["non_persistent_buffers"] = sorted(m._non_persistent_buffers_set)
        for k, v in [*m._parameters.items(), *m._buffers.items()]:
            if v is not None:
                tensors[prefix + k] = v.detach().clone()
        rec["children"] = list(m._modules)
        rec["null_children"] = [k for k, v in m._modules.items() if v is None]
        rec["training"] = m.training
        modules[path] = rec
        for k, v in m._modules.items():
            if v is not None:
                visit(v, prefix + k)

    visit(net, "")
    return {"modules": modules, "tensors": tensors}


def _record_nets(snap: dict) -> dict:
    _SCALAR_REFS.clear()
    return {k: record_tree(v) for k, v in snap.items() if v is not None}


def _perturb(net: torch.nn.Module, seed: int) -> None:
    """Move every parameter and w_avg by seeded noise, 0.2 of its spread (0.05 if all zero): zero
    biases, w_avg and fix-up branches would hide terms from a check. Fixed filters stay as built."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, t in [*net.named_parameters(), *[b for b in net.named_buffers() if b[0].endswith("w_avg")]]:
            if t.is_floating_point() and t.numel():
                noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
                spread = t.float().std().item() if t.numel() > 1 else abs(t.item())
                t.add_((noise * (0.2 * spread if spread > 0 else 0.05)).to(t.dtype))
        for name, b in net.named_buffers():
            if name.endswith("magnitude_ema"):  # StyleGAN3's layers: 1 at first would hide the division
                b.fill_(float(0.5 + torch.rand((), generator=gen)))


def _snapshot_copy(net):
    """What the official loops pickle: a deep copy in eval mode, no grads, on the CPU."""
    return copy.deepcopy(net).eval().requires_grad_(False).cpu()


# --------------------------------------------------------------------------------------------
# What the generation scripts draw


def _to_uint8(img: torch.Tensor) -> torch.Tensor:
    return (img.permute(0, 2, 3, 1) * 127.5 + 128).clamp(0, 255).to(torch.uint8)


def _labels(c_dim: int, class_idx):
    label = torch.zeros([1, c_dim])
    if c_dim:
        label[:, class_idx] = 1
    return label


def _zs(z_dim: int) -> torch.Tensor:
    return torch.cat([torch.from_numpy(np.random.RandomState(s).randn(1, z_dim)) for s in SEEDS])


def _record_outputs(case: dict, G_ema, D, stylegan2: bool, img_shape) -> None:
    label = _labels(G_ema.c_dim, case["class_idx"])
    z = _zs(G_ema.z_dim)
    case["z"], case["c"] = z, label.repeat(len(SEEDS), 1)
    runs = ([(1, None, "const"), (0.7, None, "const"), (0.7, 2, "const"), (1, None, "none")]
            if stylegan2 else [(None, None, None)])
    gens = []
    with torch.no_grad():
        for psi, cutoff, noise_mode in runs:
            ws, imgs = [], []
            for i in range(len(SEEDS)):
                zi = z[i:i + 1]
                if stylegan2:
                    ws.append(G_ema.mapping(zi, label, truncation_psi=psi, truncation_cutoff=cutoff))
                    imgs.append(G_ema(zi, label, truncation_psi=psi, truncation_cutoff=cutoff,
                                      noise_mode=noise_mode))
                else:
                    imgs.append(G_ema(zi, label))
            img = torch.cat(imgs).float()
            run = {"truncation_psi": psi, "truncation_cutoff": cutoff, "noise_mode": noise_mode,
                   "img": img, "uint8": _to_uint8(img)}
            if stylegan2:
                run["ws"] = torch.cat(ws)
            gens.append(run)
        case["generations"] = gens
        if stylegan2:
            # generate.py --projected-w: ws = np.load(path)['w']; G.synthesis(w, noise_mode=...).
            w = (gens[0]["ws"][:1] + 0.3 * torch.randn(gens[0]["ws"][:1].shape,
                                                       generator=torch.Generator().manual_seed(7))).numpy()
            w_t = torch.tensor(w)
            img = G_ema.synthesis(w_t, noise_mode="const").float()
            case["w_file"] = {"w": w_t.clone(), "img": img, "uint8": _to_uint8(img)}
        d_c = case["c"]
        case["d_c"] = d_c
        case["d_logits_fake"] = D(gens[0]["img"], d_c).float()
        rand = torch.randn([len(SEEDS), *img_shape], generator=torch.Generator().manual_seed(11))
        case["d_inputs_random"] = rand
        case["d_logits_random"] = D(rand, d_c).float()


def _record_augment(case: dict, pipe, kwargs: dict, p: float, img_shape) -> None:
    inputs = torch.randn([4, *img_shape], generator=torch.Generator().manual_seed(5)).clamp(-1, 1)
    seeds = [0, 1]
    outs = []
    with torch.no_grad():
        for s in seeds:
            torch.manual_seed(s)
            outs.append(pipe(inputs.clone()))
    case["augment"] = {"kwargs": dict(kwargs), "p": p, "inputs": inputs, "seeds": seeds,
                       "outputs": torch.stack(outs)}


def _dataset_kwargs(res, use_labels, max_size, **extra):
    # train.py's dataset kwargs after it has read the dataset (resolution, labels, size made explicit).
    kw = dict(class_name="training.dataset.ImageFolderDataset", path="~/datasets/tiny.zip", use_labels=use_labels,
              max_size=max_size, xflip=False, resolution=res)
    kw.update(extra)
    return kw


# --------------------------------------------------------------------------------------------
# The cases, per checkout (each run in its own subprocess)


def _stylegan2_cases(fmt: str) -> list[dict]:
    import dnnlib

    E = dnnlib.EasyDict
    if fmt == "ada":
        gcls, dcls = "training.networks.Generator", "training.networks.Discriminator"

        def kw(res, ch, c_dim, g_arch, d_arch, fp16=0, clamp=None, map_layers=2, mbstd=None, mbstd_ch=None, w_dim=16):
            # train.py's G_kwargs / D_kwargs (architecture set as a user would, via the kwargs).
            syn = E(channel_base=ch * res * 2, channel_max=ch, num_fp16_res=fp16, conv_clamp=clamp)
            if g_arch != "skip":
                syn.architecture = g_arch
            G_kwargs = E(class_name=gcls, z_dim=16, w_dim=w_dim, mapping_kwargs=E(num_layers=map_layers),
                         synthesis_kwargs=syn)
            epi = E(mbstd_group_size=4 if mbstd is None else mbstd)
            if mbstd_ch is not None:
                epi.mbstd_num_channels = mbstd_ch
            D_kwargs = E(class_name=dcls, block_kwargs=E(), mapping_kwargs=E(), epilogue_kwargs=epi,
                         channel_base=ch * res * 2, channel_max=ch, num_fp16_res=fp16, conv_clamp=clamp)
            if d_arch != "resnet":
                D_kwargs.architecture = d_arch
            return G_kwargs, D_kwargs

        return [
            dict(case="ada-skip-resnet", res=16, channels=3, c_dim=0, kw=kw(16, 16, 0, "skip", "resnet", w_dim=32),
                 augment=BGCFNC, augment_p=0.3),
            dict(case="ada-orig-orig", res=8, channels=3, c_dim=0, kw=kw(8, 16, 0, "orig", "orig")),
            dict(case="ada-resnet-skip", res=8, channels=3, c_dim=0, kw=kw(8, 16, 0, "resnet", "skip")),
            dict(case="ada-conditional", res=8, channels=3, c_dim=3, class_idx=1, kw=kw(8, 16, 3, "skip", "resnet")),
            dict(case="ada-fp16-clamp", res=8, channels=3, c_dim=0, kw=kw(8, 16, 0, "skip", "resnet", fp16=2, clamp=256)),
            dict(case="ada-grayscale", res=8, channels=1, c_dim=0, kw=kw(8, 16, 0, "skip", "resnet")),
            dict(case="ada-mapping3-mbstd2", res=8, channels=3, c_dim=0,
                 kw=kw(8, 16, 0, "skip", "resnet", map_layers=3, mbstd=2, mbstd_ch=2)),
        ]
    gcls, dcls = "training.networks_stylegan2.Generator", "training.networks_stylegan2.Discriminator"

    def kw3(res, ch, fp16=0, clamp=None):
        # StyleGAN3's train.py --cfg=stylegan2 (the kwargs at G's top, fused_modconv_default set).
        G_kwargs = E(class_name=gcls, z_dim=16, w_dim=16, mapping_kwargs=E(num_layers=2), channel_base=ch * res * 2,
                     channel_max=ch, fused_modconv_default="inference_only", num_fp16_res=fp16, conv_clamp=clamp)
        D_kwargs = E(class_name=dcls, block_kwargs=E(freeze_layers=0), mapping_kwargs=E(),
                     epilogue_kwargs=E(mbstd_group_size=4), channel_base=ch * res * 2, channel_max=ch,
                     num_fp16_res=fp16, conv_clamp=clamp)
        return G_kwargs, D_kwargs

    return [
        dict(case="sg3-skip-resnet", res=16, channels=3, c_dim=0, kw=kw3(16, 16)),
        dict(case="sg3-conditional", res=8, channels=3, c_dim=3, class_idx=2, kw=kw3(8, 16, fp16=2, clamp=256)),
    ]


def _build_stylegan2_case(fmt: str, spec: dict, seed: int) -> dict:
    import dnnlib

    G_kwargs, D_kwargs = spec["kw"]
    common = dict(c_dim=spec["c_dim"], img_resolution=spec["res"], img_channels=spec["channels"])
    torch.manual_seed(seed)
    G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
    D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
    _perturb(G, seed)
    _perturb(D, seed + 1)
    G_ema = copy.deepcopy(G).eval()
    _perturb(G_ema, seed + 2)
    pipe = None
    if spec.get("augment"):
        pipe = dnnlib.util.construct_class_by_name(class_name="training.augment.AugmentPipe",
                                                   **spec["augment"]).train().requires_grad_(False)
        pipe.p.copy_(torch.as_tensor(spec["augment_p"]))
    snap = {"G": _snapshot_copy(G), "D": _snapshot_copy(D), "G_ema": _snapshot_copy(G_ema),
            "augment_pipe": None if pipe is None else _snapshot_copy(pipe)}
    extra = {"random_seed": 0} if fmt in ("sg3", "sg3af") else {}
    tsk = _dataset_kwargs(spec["res"], spec["c_dim"] > 0, 100, **extra)
    case = {"format": FORMATS[fmt], "case": spec["case"], "seeds": SEEDS, "class_idx": spec.get("class_idx"),
            "training_set_kwargs": tsk,
            "snapshot_keys": (["training_set_kwargs", "G", "D", "G_ema", "augment_pipe"] if fmt == "ada"
                              else ["G", "D", "G_ema", "augment_pipe", "training_set_kwargs"]),
            "null_keys": [] if pipe is not None else ["augment_pipe"],
            "nets": _record_nets(snap)}
    _record_outputs(case, snap["G_ema"], snap["D"], True, (spec["channels"], spec["res"], spec["res"]))
    if fmt == "sg3af":
        _record_stylegan3(case, snap["G_ema"])
    if pipe is not None:
        # The geometric augmentations pad by the wavelet's support: inputs of 32 px, whatever G's size.
        _record_augment(case, snap["augment_pipe"], spec["augment"], spec["augment_p"], (spec["channels"], 32, 32))
    return case, snap


def _stylegan3_cases() -> list[dict]:
    import dnnlib

    E = dnnlib.EasyDict

    def kw(cfg, res, cbase, cmax, c_dim):
        # StyleGAN3's train.py --cfg stylegan3-t / -r (batch 32: magnitude_ema_beta 0.5 ** (32 / 20000)),
        # a tiny synthesis network (num_layers 4); D as train.py builds it for every --cfg.
        G_kwargs = E(class_name="training.networks_stylegan3.Generator", z_dim=16, w_dim=16,
                     mapping_kwargs=E(num_layers=2), channel_base=cbase, channel_max=cmax,
                     magnitude_ema_beta=0.5 ** (32 / (20 * 1e3)), num_layers=4)
        if cfg == "r":
            G_kwargs.conv_kernel = 1
            G_kwargs.channel_base *= 2
            G_kwargs.channel_max *= 2
            G_kwargs.use_radial_filters = True
        D_kwargs = E(class_name="training.networks_stylegan2.Discriminator", block_kwargs=E(freeze_layers=0),
                     mapping_kwargs=E(), epilogue_kwargs=E(mbstd_group_size=4), channel_base=cbase,
                     channel_max=cmax)
        return G_kwargs, D_kwargs

    # train.py's augpipe for StyleGAN3 ('bgc' without the filters, noise and cutout).
    bgc = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1, brightness=1, contrast=1,
               lumaflip=1, hue=1, saturation=1)
    return [
        dict(case="sg3-t", res=16, channels=3, c_dim=0, kw=kw("t", 16, 256, 16, 0), augment=bgc, augment_p=0.2),
        dict(case="sg3-r-conditional", res=16, channels=1, c_dim=3, class_idx=1, kw=kw("r", 16, 256, 8, 3)),
    ]


def _eq_labels(c_dim: int, batch: int) -> torch.Tensor:
    """The labels both sides of the equivariance check give a conditional G (the official metric
    draws them from the data set with numpy; a fixed cycle here, recorded)."""
    return torch.nn.functional.one_hot(torch.arange(batch) % c_dim, c_dim).float()


def _record_stylegan3(case: dict, G_ema) -> None:
    """gen_images.py's --translate / --rotate images, and the official equivariance metrics."""
    import copy as _copy

    from metrics import equivariance, metric_utils

    label = _labels(G_ema.c_dim, case["class_idx"])
    G = _copy.deepcopy(G_ema)
    m = torch.from_numpy(np.linalg.inv(make_transform(TRANSLATE, ROTATE)))
    imgs = []
    with torch.no_grad():
        G.synthesis.input.transform.copy_(m)
        for i in range(len(SEEDS)):
            imgs.append(G(case["z"][i:i + 1], label, truncation_psi=1, noise_mode="const"))
    img = torch.cat(imgs).float()
    case["transform"] = {"translate": TRANSLATE, "rotate": ROTATE, "matrix": G.synthesis.input.transform.clone(),
                         "img": img, "uint8": _to_uint8(img)}
    eq = {"seed": EQ_SEED, "num_samples": EQ_SAMPLES, "batch_size": EQ_BATCH,
          "labels": _eq_labels(G_ema.c_dim, EQ_BATCH) if G_ema.c_dim else torch.zeros(EQ_BATCH, 0)}
    orig = metric_utils.iterate_random_labels

    def labels(opts, batch_size):
        while True:
            yield eq["labels"][:batch_size]

    metric_utils.iterate_random_labels = labels
    try:
        opts = metric_utils.MetricOptions(G=G_ema, device=torch.device("cpu"))
        for key, flag in (("eqt_int", "compute_eqt_int"), ("eqt_frac", "compute_eqt_frac"), ("eqr", "compute_eqr")):
            torch.manual_seed(EQ_SEED)
            psnr = equivariance.compute_equivariance_metrics(opts, num_samples=EQ_SAMPLES, batch_size=EQ_BATCH,
                                                             **{flag: True})
            eq[key] = torch.tensor(float(psnr), dtype=torch.float64)
    finally:
        metric_utils.iterate_random_labels = orig
    case["eq"] = eq


def _r3gan_cases() -> list[dict]:
    def kw(widths, cards, blocks, fp16, c_dim):
        # train.py: D's lists reversed, D's FP16Stages shifted by len(FP16Stages).
        G_kwargs = dict(class_name="training.networks.Generator", NoiseDimension=16, WidthPerStage=widths,
                        CardinalityPerStage=cards, BlocksPerStage=blocks, ExpansionFactor=2, FP16Stages=fp16)
        D_kwargs = dict(class_name="training.networks.Discriminator", WidthPerStage=[*reversed(widths)],
                        CardinalityPerStage=[*reversed(cards)], BlocksPerStage=[*reversed(blocks)], ExpansionFactor=2,
                        FP16Stages=[x + len(fp16) for x in fp16])
        if c_dim:
            G_kwargs["ConditionEmbeddingDimension"] = 16
            D_kwargs["ConditionEmbeddingDimension"] = widths[0]
        return G_kwargs, D_kwargs

    return [
        dict(case="r3gan-unconditional", res=16, c_dim=0, kw=kw([16, 8, 8], [4, 2, 2], [1, 1, 2], [], 0)),
        dict(case="r3gan-conditional", res=8, c_dim=4, class_idx=3, kw=kw([16, 16], [2, 2], [1, 1], [], 4)),
        dict(case="r3gan-bf16", res=8, c_dim=0, kw=kw([16, 8], [2, 2], [1, 1], [-1], 0)),
    ]


def _build_r3gan_case(spec: dict, seed: int) -> dict:
    import dnnlib

    G_kwargs, D_kwargs = spec["kw"]
    common = dict(c_dim=spec["c_dim"], img_resolution=spec["res"])
    torch.manual_seed(seed)
    G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
    D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
    _perturb(G, seed)
    _perturb(D, seed + 1)
    G_ema = copy.deepcopy(G).eval()
    _perturb(G_ema, seed + 2)
    # The loop's phases (D, then G) with train.py's Adam, one step on seeded gradients with the
    # loop's per-step lr and betas, so the snapshot carries the optimizer states it would.
    from training.training_loop import remap_optimizer_state_dict

    opt_states = {}
    gen = torch.Generator().manual_seed(seed + 3)
    for name, net in (("D", D), ("G", G)):
        opt = dnnlib.util.construct_class_by_name(params=net.parameters(), class_name="torch.optim.Adam",
                                                  betas=[0.0, 0.0], eps=1e-8)  # train.py: [0,0]
        net.requires_grad_(True)
        for p in net.parameters():
            p.grad = 0.01 * torch.randn(p.shape, generator=gen)
        net.requires_grad_(False)
        for g in opt.param_groups:
            g["lr"] = 2e-4
            g["betas"] = (0, 0.9)
        opt.step()
        opt_states[f"{name}_opt_state"] = remap_optimizer_state_dict(opt.state_dict(), "cpu")
    snap = {"G": _snapshot_copy(G), "D": _snapshot_copy(D), "G_ema": _snapshot_copy(G_ema)}
    case = {"format": "r3gan", "case": spec["case"], "seeds": SEEDS, "class_idx": spec.get("class_idx"),
            "training_set_kwargs": _dataset_kwargs(spec["res"], spec["c_dim"] > 0, 100, random_seed=0),
            "snapshot_keys": ["G", "D", "G_ema", "training_set_kwargs", "cur_nimg", *opt_states],
            "null_keys": [], "cur_nimg": 12800, "opt_states": opt_states, "nets": _record_nets(snap)}
    _record_outputs(case, snap["G_ema"], snap["D"], False, (3, spec["res"], spec["res"]))
    return case, snap


# --------------------------------------------------------------------------------------------
# Checks: the rebuilt pickle loads in the official code and gives the recorded outputs


def _check_case(fmt: str, case: dict, nets: dict) -> list[str]:
    """Compare official nets ``nets`` (loaded from a pickle) with what ``case`` recorded."""
    lines = []
    stylegan2 = fmt != "r3gan"
    G_ema, D = nets["G_ema"], nets["D"]
    label = _labels(G_ema.c_dim, case["class_idx"])
    worst = 0.0
    with torch.no_grad():
        for run in case["generations"]:
            for i in range(len(SEEDS)):
                zi = case["z"][i:i + 1]
                if stylegan2:
                    img = G_ema(zi, label, truncation_psi=run["truncation_psi"],
                                truncation_cutoff=run["truncation_cutoff"], noise_mode=run["noise_mode"])
                    ws = G_ema.mapping(zi, label, truncation_psi=run["truncation_psi"],
                                       truncation_cutoff=run["truncation_cutoff"])
                    worst = max(worst, (ws - run["ws"][i:i + 1]).abs().max().item())
                else:
                    img = G_ema(zi, label)
                worst = max(worst, (img.float() - run["img"][i:i + 1]).abs().max().item())
                if not torch.equal(_to_uint8(img.float()), run["uint8"][i:i + 1]):
                    raise AssertionError(f"{case['case']}: uint8 pixels differ ({run['truncation_psi']}, "
                                         f"{run['noise_mode']}, seed {SEEDS[i]})")
        if stylegan2:
            img = G_ema.synthesis(case["w_file"]["w"], noise_mode="const").float()
            worst = max(worst, (img - case["w_file"]["img"]).abs().max().item())
        worst_d = max((D(case["generations"][0]["img"], case["d_c"]).float() - case["d_logits_fake"]).abs().max().item(),
                      (D(case["d_inputs_random"], case["d_c"]).float() - case["d_logits_random"]).abs().max().item())
        if "augment" in case:
            aug = case["augment"]
            pipe = nets["augment_pipe"]
            for s, want in zip(aug["seeds"], aug["outputs"]):
                torch.manual_seed(s)
                got = pipe(aug["inputs"].clone())
                worst = max(worst, (got - want).abs().max().item())
    extra_what = ""
    if "transform" in case:
        # gen_images.py's --translate / --rotate, and the equivariance metrics, on the loaded G_ema.
        from metrics import equivariance, metric_utils

        G = copy.deepcopy(G_ema)
        G.synthesis.input.transform.copy_(torch.from_numpy(np.linalg.inv(make_transform(TRANSLATE, ROTATE))))
        with torch.no_grad():
            img = torch.cat([G(case["z"][i:i + 1], label, truncation_psi=1, noise_mode="const")
                             for i in range(len(SEEDS))]).float()
        worst = max(worst, (img - case["transform"]["img"]).abs().max().item())
        eq = case["eq"]
        orig = metric_utils.iterate_random_labels
        metric_utils.iterate_random_labels = lambda opts, batch_size: iter(lambda: eq["labels"][:batch_size], None)
        try:
            opts = metric_utils.MetricOptions(G=G_ema, device=torch.device("cpu"))
            for key, flag in (("eqt_int", "compute_eqt_int"), ("eqt_frac", "compute_eqt_frac"),
                              ("eqr", "compute_eqr")):
                torch.manual_seed(eq["seed"])
                psnr = equivariance.compute_equivariance_metrics(opts, num_samples=eq["num_samples"],
                                                                 batch_size=eq["batch_size"], **{flag: True})
                if abs(float(psnr) - float(eq[key])) > 1e-4:
                    raise AssertionError(f"{case['case']}: {key} {psnr} != recorded {float(eq[key])}")
        finally:
            metric_utils.iterate_random_labels = orig
        extra_what = (f", translate+rotate images, EQ-T {float(eq['eqt_int']):.2f} / EQ-T frac "
                      f"{float(eq['eqt_frac']):.2f} / EQ-R {float(eq['eqr']):.2f} dB")
    for name in ("G", "D", "G_ema", "augment_pipe"):
        if name in case["nets"]:
            want = case["nets"][name]["tensors"]
            got = {**dict(nets[name].named_parameters()), **dict(nets[name].named_buffers())}
            if set(got) != set(want) or any(not torch.equal(got[k], want[k]) for k in want):
                raise AssertionError(f"{case['case']}: {name}'s tensors differ after the round trip")
    if worst > 1e-5 or worst_d > 1e-5:
        raise AssertionError(f"{case['case']}: outputs differ by {worst:g} (G) / {worst_d:g} (D)")
    # Buffers (filters, const noise) are equal in G and G_ema, as the official EMA copies them.
    g, g_ema = case["nets"]["G"]["tensors"], case["nets"]["G_ema"]["tensors"]
    params = [f"{p}.{n}" if p else n for p, rec in case["nets"]["G"]["modules"].items() for n in rec["parameters"]]
    if any(torch.equal(g[k], g_ema[k]) for k in params if k in g):
        raise AssertionError(f"{case['case']}: G and G_ema share a weight; a mix-up would pass unseen")
    what = "G_ema images, ws, W file, D logits" if stylegan2 else "G_ema images, D logits"
    what += ", augment_pipe outputs" if "augment" in case else ""
    what += extra_what
    lines.append(f"check {case['case']}: the rebuilt pickle ({LAYOUT_NOTE[fmt]}) loads in the official code; "
                 f"all tensors equal; {what} match (max |diff| {worst:.2g} G, {worst_d:.2g} D); uint8 pixels equal")
    return lines


def _module_sources(repo: str, cases: list[dict]) -> dict[str, str]:
    """The real source text of the modules of the recorded persistent classes (as
    ``inspect.getsource`` reads it: a BOM dropped), for a check-only pickle written to /tmp."""
    import tokenize

    names = {rec["module"] for case in cases for tree in case["nets"].values()
             for rec in tree["modules"].values() if rec["kind"] == "persistent"}
    out = {}
    for name in names:
        with tokenize.open(Path(repo, *name.split(".")).with_suffix(".py")) as f:
            out[name] = f.read()
    return out


def _opcodes(path) -> list[tuple]:
    """The pickle's opcodes and arguments (memo indices included), a bytes argument as its length."""
    import pickletools

    with open(path, "rb") as f:
        return [(op.name, len(arg) if isinstance(arg, bytes) else arg)
                for op, arg, _ in pickletools.genops(f) if op.name != "FRAME"]


def _compare_with_genuine(fmt: str, repo: str, case: dict, genuine: Path) -> str:
    """Check the writer against a genuine ``pickle.dump`` of the official objects in this process:
    with this torch's module internals, this numpy's ``scalar`` module and the real source text,
    both must unpickle (symbolically: nothing run) to the same tree and ask for the same globals."""
    sys.path.insert(0, str(HERE.parent))
    from official_pickles import normalized, symbolic_load, write_official_pickle

    numpy_core = np.float64(1).__reduce__()[0].__module__
    mine = genuine.with_name(genuine.stem + ".writer.pkl")
    write_official_pickle(case, mine, layout="current", module_sources=_module_sources(repo, [case]),
                          numpy_core=numpy_core)
    (g_obj, g_globals), (m_obj, m_globals) = symbolic_load(genuine), symbolic_load(mine)
    if g_globals != m_globals:
        raise AssertionError(f"{case['case']}: globals differ: {g_globals} != {m_globals}")
    if normalized(g_obj) != normalized(m_obj):
        raise AssertionError(f"{case['case']}: the writer's pickle unpickles to another tree than the genuine one")
    same_ops = _opcodes(genuine) == _opcodes(mine)
    same = genuine.read_bytes() == mine.read_bytes()
    mine.unlink()
    how = ("identical bytes" if same else "same opcodes and memo indices; bytes differ only inside the "
           "storages' torch.save streams (their keys are object ids)" if same_ops else "opcodes differ")
    return f"check {case['case']}: writer vs genuine pickle.dump: same globals in order, same tree, {how}"


def _worker(fmt: str, repo: str, out: str, check_file: str | None, genuine_dir: str | None) -> None:
    put_on_path(repo)
    torch.set_num_threads(1)
    if check_file is None:
        specs = (_r3gan_cases() if fmt == "r3gan" else _stylegan3_cases() if fmt == "sg3af"
                 else _stylegan2_cases(fmt))
        cases = []
        for i, spec in enumerate(specs):
            case, snap = (_build_r3gan_case(spec, 100 * i) if fmt == "r3gan"
                          else _build_stylegan2_case(fmt, spec, 100 * i))
            cases.append(case)
            print(f"recorded {case['case']}", flush=True)
            if genuine_dir is not None:
                import pickle

                data = {}
                for k in case["snapshot_keys"]:
                    data[k] = (case["training_set_kwargs"] if k == "training_set_kwargs" else
                               case["cur_nimg"] if k == "cur_nimg" else
                               case["opt_states"][k] if k.endswith("_opt_state") else snap.get(k))
                path = Path(genuine_dir) / f"{case['case']}.pkl"
                with open(path, "wb") as f:
                    pickle.dump(data, f, protocol=4)
                print(f"wrote genuine official pickle {path} ({path.stat().st_size} bytes)", flush=True)
                print(_compare_with_genuine(fmt, repo, case, path), flush=True)
        torch.save(cases, out)
        return
    # Check mode: rebuild each recorded case's pickle with the writer and load it officially.
    sys.path.insert(0, str(HERE.parent))
    from official_pickles import write_official_pickle

    data = torch.load(check_file, weights_only=True)
    sources = _module_sources(repo, [c for c in data["cases"] if c["format"] == FORMATS[fmt]])
    lines = []
    for case in data["cases"]:
        if case["format"] != FORMATS[fmt]:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "snapshot.pkl"
            write_official_pickle(case, path, module_sources=sources)
            with open(path, "rb") as f:
                if fmt == "r3gan":
                    import pickle

                    nets = pickle.load(f)
                else:
                    import legacy

                    nets = legacy.load_network_pkl(f)
            if list(nets) != case["snapshot_keys"] or nets["training_set_kwargs"] != case["training_set_kwargs"]:
                raise AssertionError(f"{case['case']}: snapshot keys {list(nets)} / training_set_kwargs differ")
            lines += _check_case(fmt, case, nets)
    print(json.dumps(lines), flush=True)


def _run_worker(fmt: str, repo: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, __file__, "--worker", fmt, "--repo", repo, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        sys.stdout.write(proc.stdout)
        raise SystemExit(f"the {fmt} worker failed (exit {proc.returncode})")
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ada", help="extracted stylegan2-ada-pytorch checkout")
    ap.add_argument("--sg3", help="extracted stylegan3 checkout")
    ap.add_argument("--r3gan", help="extracted R3GAN checkout")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check-genuine", metavar="DIR", help="also write genuine official pickles here (not the repo)")
    ap.add_argument("--sg3-alias-free", action="store_true",
                    help="record only the StyleGAN3-T / -R cases (from --sg3) and put them into --out in place of "
                         "earlier ones, keeping its other cases")
    ap.add_argument("--only-check", action="store_true", help="check an existing --out file, record nothing")
    ap.add_argument("--no-check", action="store_true", help="record only; skip loading rebuilt pickles")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--repo", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--check", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(args.worker, args.repo, args.tmp, args.check, args.check_genuine)
        return
    repos = {k: getattr(args, k) for k in FORMATS if k != "sg3af" and getattr(args, k)}
    if args.sg3:
        repos["sg3af"] = args.sg3  # the StyleGAN3 checkout's alias-free cases come with its StyleGAN2 ones
    kept: dict = {"cases": [], "commits": {}}
    if args.sg3_alias_free:
        if not args.sg3:
            raise SystemExit("--sg3-alias-free: name the StyleGAN3 checkout with --sg3")
        repos = {"sg3af": args.sg3}
        if os.path.exists(args.out):
            old = torch.load(args.out, weights_only=True)
            kept = {"cases": [c for c in old["cases"] if c["format"] != FORMATS["sg3af"]],
                    "commits": {k: v for k, v in old["commits"].items() if k != FORMATS["sg3af"]}}
    if args.check_genuine:
        gdir = Path(args.check_genuine).resolve()
        if HERE.parent.parent in gdir.parents or gdir == HERE.parent.parent:
            raise SystemExit(f"--check-genuine {gdir}: inside the repository; genuine pickles embed NVIDIA's source")
        gdir.mkdir(parents=True, exist_ok=True)
    if not args.only_check:
        cases = list(kept["cases"])
        for fmt, repo in repos.items():
            with tempfile.TemporaryDirectory() as tmp:
                tmp_out = os.path.join(tmp, "cases.pt")
                extra = ["--check-genuine", args.check_genuine] if args.check_genuine else []
                proc = _run_worker(fmt, repo, "--tmp", tmp_out, *extra)
                sys.stdout.write(proc.stdout)
                cases += torch.load(tmp_out, weights_only=True)
        commits = dict(kept["commits"])
        for fmt in repos:
            commits[FORMATS[fmt]] = subprocess.run(["git", "-C", MIRRORS[fmt], "rev-parse", "HEAD"],
                                                   capture_output=True, text=True).stdout.strip() or "unknown"
        data = {"versions": {"torch": str(torch.__version__), "numpy": np.__version__,
                             "python": sys.version.split()[0]},
                "commits": commits, "cases": cases}
        torch.save(data, args.out)
        print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes, {len(cases)} cases)")
    torch.load(args.out, weights_only=True)
    for fmt, repo in ([] if args.no_check else repos.items()):
        proc = _run_worker(fmt, repo, "--check", args.out)
        for line in json.loads(proc.stdout.strip().splitlines()[-1]):
            print(line)


if __name__ == "__main__":
    main()
