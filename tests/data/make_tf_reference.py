"""Write ``tests/data/tf_reference.pt``: what stylegan2-ada-pytorch's ``legacy.py`` makes of
TF-era StyleGAN2 / StyleGAN2-ADA network pickles, which ``tests/test_stylegan2_tf.py`` compares
gankit's conversion (``gan_kit.builtin.importers.stylegan2_tf``) with, exactly.

The official code (github.com/NVlabs/stylegan2-ada-pytorch; recorded: commit d72cc7d) is run,
not copied: point ``--ada`` at a copy of it.

    git clone https://github.com/NVlabs/stylegan2-ada-pytorch /tmp/sg2ada
    python tests/data/make_tf_reference.py --ada /tmp/sg2ada

TensorFlow is not needed: the TF networks are made here as data. Their variables carry the
names and shapes the TF build functions give them (StyleGAN2's ``training/networks_stylegan2.py``
for the version-4 cases, StyleGAN2-ADA's ``training/networks.py`` for the version-5 one: scope
``4x4/Const/const``, ``{r}x{r}/Conv0_up/weight`` ``[3, 3, in, out]``, ``noise{i}``,
``mapping/Dense{i}``, ``LabelEmbed``, ``Output`` ...) and seeded random values; they are
pickled as the TF code pickles them (``tests/tf_pickles.py``), and that file is read by the
official ``legacy.load_network_pkl`` on the CPU (where its ``bias_act`` and ``upfirdn2d`` take
their reference paths).

Recorded per case (``cases[name]``):

- ``networks``: each TF network of the pickle (``G``, ``D``, ``Gs``; ``network_order`` gives
  the pickle's order): ``state`` (version, name, static_kwargs, build_func_name and, for
  version 5, input / output shapes and names), ``variables`` (scope name -> float32 tensor, in
  the stored order; 0-d ones were numpy scalars in the pickle; StyleGAN2's G and Gs hold their
  progressive-growing level ``lod`` before ``dlatent_avg``) and ``components`` (G's and Gs'
  ``synthesis`` and ``mapping``, the same form);
- ``pickle_sha256``: the SHA-256 of the pickle legacy.py read (tests/tf_pickles.py rebuilds
  those bytes from the record);
- ``init_kwargs`` and ``state_dicts`` of the converted ``G``, ``D``, ``G_ema`` (plain dicts;
  the state dicts in torch's order);
- ``outputs``: G_ema's images for seeds 0-3, ``z = np.random.RandomState(seed).randn(1, z_dim)``
  (``z``, float64) with class ``seed % c_dim`` one-hot (``c``), at truncation ``psi`` 1 and 0.7
  (``images[len(psi), 4, C, H, W]``), ``noise_mode="const"``, every layer in float32
  (``force_fp32``); and D's logits for the four psi-1 images with those labels (``d_logits[4,
  1]``).

The cases: ``config_f`` (StyleGAN2 config F's layout: skip G, residual D; unconditional;
version 4), ``ada_conditional`` (StyleGAN2-ADA: class-conditional G and D, D with a label
mapping layer and mbstd group 2, the fp16 kwargs and conv_clamp 256; version 5), and two that
gankit does not build but legacy.py converts, for the naming of the other layouts:
``config_e_gresnet_dskip`` (StyleGAN2, version 4, with the [1, 2, 1] resampling filter, so
the layers that take the configured filter differ from those that keep [1, 3, 3, 1]),
``config_e_filter_121`` (skip G and residual D with that filter; one mapping layer) and ``ada_gorig_dorig`` (StyleGAN2-ADA's
CIFAR-10 layouts, with ``w_avg_beta`` None, no minibatch-stddev layer and Freeze-D's
``freeze_layers``, whose frozen layers hold buffers instead of parameters).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "tf_reference.pt"
sys.path.insert(0, str(HERE.parent))
from tf_pickles import tf_pickle_bytes, write_tf_pickle  # noqa: E402
from checkout import checkout_commit  # noqa: E402  (beside this script, on sys.path when it runs)

_SMALL = {"resolution": 16, "num_channels": 3, "fmap_base": 32, "fmap_max": 8}

#: name -> (pickle version, G's static kwargs, D's static kwargs). fmap_max binds at 4 px, so
#: TF's nf(0) (D's Dense0 and label mapping width) equals PyTorch's 4 px width, as at 1024 px.
CASES: dict[str, tuple[int, dict, dict]] = {
    "config_f": (4, {**_SMALL, "label_size": 0, "latent_size": 16, "dlatent_size": 24, "mapping_layers": 2,
                     "mapping_fmaps": 24, "truncation_psi": 0.5},
                 {**_SMALL, "label_size": 0}),
    "ada_conditional": (5, {**_SMALL, "label_size": 3, "latent_size": 24, "dlatent_size": 24, "mapping_layers": 2,
                            "num_fp16_res": 4, "conv_clamp": 256},
                        {**_SMALL, "label_size": 3, "architecture": "resnet", "mbstd_group_size": 2,
                         "mapping_layers": 1, "num_fp16_res": 4, "conv_clamp": 256}),
    "config_e_gresnet_dskip": (4, {**_SMALL, "resolution": 8, "label_size": 0, "latent_size": 16, "dlatent_size": 16,
                                   "mapping_layers": 2, "mapping_fmaps": 16, "architecture": "resnet",
                                   "resample_kernel": [1, 2, 1]},
                               {**_SMALL, "resolution": 8, "label_size": 0, "architecture": "skip",
                                "resample_kernel": [1, 2, 1]}),
    "config_e_filter_121": (4, {**_SMALL, "resolution": 8, "label_size": 0, "latent_size": 16, "dlatent_size": 16,
                                "mapping_layers": 1, "resample_kernel": [1, 2, 1]},
                            {**_SMALL, "resolution": 8, "label_size": 0, "resample_kernel": [1, 2, 1]}),
    "ada_gorig_dorig": (5, {**_SMALL, "resolution": 8, "label_size": 0, "latent_size": 16, "dlatent_size": 16,
                            "mapping_layers": 2, "architecture": "orig", "w_avg_beta": None},
                        {**_SMALL, "resolution": 8, "label_size": 0, "architecture": "orig", "mbstd_num_features": 0,
                         "freeze_layers": 2}),
}
SEEDS = [0, 1, 2, 3]
PSI = [1.0, 0.7]

# The TF build functions' defaults that decide shapes (StyleGAN2: version 4, ADA: version 5).
_G_DEFAULTS = {4: {"mapping_fmaps": 512, "label_fmaps": None, "architecture": "skip", "use_noise": True},
               5: {"mapping_fmaps": None, "label_fmaps": None, "architecture": "skip", "use_noise": True}}
_D_DEFAULTS = {4: {"architecture": "resnet", "mbstd_group_size": 4, "mbstd_num_features": 1},
               5: {"architecture": "resnet", "mbstd_group_size": None, "mbstd_num_features": 1,
                   "mapping_layers": 0, "mapping_fmaps": None}}
# G_main's own parameters: they stay out of the components' static kwargs.
_G_MAIN_ONLY = {"truncation_psi", "truncation_cutoff", "truncation_psi_val", "truncation_cutoff_val",
                "dlatent_avg_beta", "style_mixing_prob"}


class _Vars:
    """Seeded TF variables, in creation order."""

    def __init__(self, seed: int):
        self.rng = np.random.RandomState(seed)
        self.out: dict[str, np.ndarray] = {}

    def add(self, name: str, shape, scale: float = 1.0) -> None:
        self.out[name] = np.asarray(self.rng.randn(*shape) * scale, dtype=np.float32)


def _nf(kw: dict, stage: int) -> int:
    return int(np.clip(int(kw["fmap_base"] / (2.0 ** stage)), 1, kw["fmap_max"]))


def synthesis_variables(kw: dict, seed: int) -> dict[str, np.ndarray]:
    """G_synthesis's variables (StyleGAN2's G_synthesis_stylegan2, ADA's G_synthesis)."""
    v = _Vars(seed)
    log2 = int(np.log2(kw["resolution"]))
    num_layers = 2 * log2 - 2
    w, c = kw["dlatent_size"], kw["num_channels"]
    if kw["use_noise"]:
        for i in range(num_layers - 1):
            r = 2 ** ((i + 5) // 2)
            v.add(f"noise{i}", [1, 1, r, r])

    def modconv(scope: str, c_in: int, c_out: int, k: int, noise: bool) -> None:
        v.add(f"{scope}/weight", [k, k, c_in, c_out])
        v.add(f"{scope}/mod_weight", [w, c_in])
        v.add(f"{scope}/mod_bias", [c_in], 0.2)
        if noise:
            v.add(f"{scope}/noise_strength", [], 0.3)
        v.add(f"{scope}/bias", [c_out], 0.2)

    v.add("4x4/Const/const", [1, _nf(kw, 1), 4, 4])
    modconv("4x4/Conv", _nf(kw, 1), _nf(kw, 1), 3, kw["use_noise"])
    if kw["architecture"] == "skip":
        modconv("4x4/ToRGB", _nf(kw, 1), c, 1, False)
    for res in range(3, log2 + 1):
        s = f"{2 ** res}x{2 ** res}"
        modconv(f"{s}/Conv0_up", _nf(kw, res - 2), _nf(kw, res - 1), 3, kw["use_noise"])
        modconv(f"{s}/Conv1", _nf(kw, res - 1), _nf(kw, res - 1), 3, kw["use_noise"])
        if kw["architecture"] == "resnet":
            v.add(f"{s}/Skip/weight", [1, 1, _nf(kw, res - 2), _nf(kw, res - 1)])
        if kw["architecture"] == "skip" or res == log2:
            modconv(f"{s}/ToRGB", _nf(kw, res - 1), c, 1, False)
    return v.out


def mapping_variables(kw: dict, version: int, seed: int) -> dict[str, np.ndarray]:
    """G_mapping's variables (label embedding of StyleGAN2-ADA; mapping layers)."""
    v = _Vars(seed)
    lrmul = 0.01
    x = kw["latent_size"]
    if kw["label_size"] > 0:
        assert version >= 5, "StyleGAN2's LabelConcat is not converted by legacy.py"
        fmaps = kw["label_fmaps"] if kw["label_fmaps"] is not None else kw["latent_size"]
        v.add("LabelEmbed/weight", [kw["label_size"], fmaps])
        v.add("LabelEmbed/bias", [fmaps], 0.2)
        x += fmaps
    n = kw["mapping_layers"]
    for i in range(n):
        if version >= 5:
            fmaps = kw["mapping_fmaps"] if kw["mapping_fmaps"] is not None and i < n - 1 else kw["dlatent_size"]
        else:
            fmaps = kw["dlatent_size"] if i == n - 1 else kw["mapping_fmaps"]
        v.add(f"Dense{i}/weight", [x, fmaps], 1 / lrmul)   # TF's init std 1 / lrmul
        v.add(f"Dense{i}/bias", [fmaps], 0.2 / lrmul)
        x = fmaps
    return v.out


def discriminator_variables(kw: dict, version: int, seed: int) -> dict[str, np.ndarray]:
    """D's variables (StyleGAN2's D_stylegan2, ADA's D_main)."""
    v = _Vars(seed)
    log2 = int(np.log2(kw["resolution"]))
    c = kw["num_channels"]
    mapping_fmaps = kw.get("mapping_fmaps") if kw.get("mapping_fmaps") is not None else _nf(kw, 0)
    if kw["label_size"] > 0:
        assert version >= 5
        lrmul = 0.1
        v.add("LabelEmbed/weight", [kw["label_size"], mapping_fmaps])
        v.add("LabelEmbed/bias", [mapping_fmaps], 0.2)
        for i in range(kw["mapping_layers"]):
            v.add(f"Mapping{i}/weight", [mapping_fmaps, mapping_fmaps], 1 / lrmul)
            v.add(f"Mapping{i}/bias", [mapping_fmaps], 0.2 / lrmul)

    def conv(scope: str, c_in: int, c_out: int, k: int, bias: bool = True) -> None:
        v.add(f"{scope}/weight", [k, k, c_in, c_out])
        if bias:
            v.add(f"{scope}/bias", [c_out], 0.2)

    for res in range(log2, 2, -1):
        s = f"{2 ** res}x{2 ** res}"
        if kw["architecture"] == "skip" or res == log2:
            conv(f"{s}/FromRGB", c, _nf(kw, res - 1), 1)
        conv(f"{s}/Conv0", _nf(kw, res - 1), _nf(kw, res - 1), 3)
        conv(f"{s}/Conv1_down", _nf(kw, res - 1), _nf(kw, res - 2), 3)
        if kw["architecture"] == "resnet":
            conv(f"{s}/Skip", _nf(kw, res - 1), _nf(kw, res - 2), 1, bias=False)
    if kw["architecture"] == "skip":
        conv("4x4/FromRGB", c, _nf(kw, 1), 1)
    mbstd = kw["mbstd_group_size"] is None or kw["mbstd_group_size"] > 1 if version < 5 else True
    features = kw["mbstd_num_features"] if mbstd and kw["mbstd_num_features"] > 0 else 0
    conv("4x4/Conv", _nf(kw, 1) + features, _nf(kw, 1), 3)
    v.add("4x4/Dense0/weight", [_nf(kw, 1) * 16, _nf(kw, 0)])     # dense: [in, out]
    v.add("4x4/Dense0/bias", [_nf(kw, 0)], 0.2)
    out = (mapping_fmaps if kw["label_size"] > 0 else 1) if version >= 5 else max(kw["label_size"], 1)
    v.add("Output/weight", [_nf(kw, 0), out])
    v.add("Output/bias", [out], 0.2)
    return v.out


def _tensors(variables: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(a)) for k, a in variables.items()}


def make_case(version: int, g_static: dict, d_static: dict, seed: int) -> dict:
    """The TF networks G, D, Gs of one case, as a record (see the module docstring)."""
    g_kw = {**_G_DEFAULTS[version], **g_static}
    d_kw = {**_D_DEFAULTS[version], **d_static}
    num_layers = 2 * int(np.log2(g_kw["resolution"])) - 2
    component_kwargs = {k: v for k, v in g_static.items() if k not in _G_MAIN_ONLY}
    funcs = ({"G": "G_main", "synthesis": "G_synthesis_stylegan2", "mapping": "G_mapping", "D": "D_stylegan2"}
             if version < 5 else
             {"G": "G_main", "synthesis": "G_synthesis", "mapping": "G_mapping", "D": "D_main"})
    z, c, w = g_kw["latent_size"], g_kw["label_size"], g_kw["dlatent_size"]
    r, ch = g_kw["resolution"], g_kw["num_channels"]

    def net(name, func, static, variables, components=None, shapes=None) -> dict:
        state = {"version": version, "name": name, "static_kwargs": dict(static), "build_func_name": func}
        if version >= 5:
            state.update(shapes)
        return {"state": state, "variables": _tensors(variables), "components": components or {}}

    def generator(name: str, seed: int) -> dict:
        synthesis = net("G_synthesis", funcs["synthesis"], component_kwargs, synthesis_variables(g_kw, seed),
                        shapes={"input_shapes": [[None, num_layers, w]], "output_shapes": [[None, ch, r, r]],
                                "input_names": ["dlatents_in"], "output_names": ["images_out"]})
        mapping = net("G_mapping", funcs["mapping"], {**component_kwargs, "dlatent_broadcast": num_layers},
                      mapping_variables(g_kw, version, seed + 1),
                      shapes={"input_shapes": [[None, z], [None, c]], "output_shapes": [[None, num_layers, w]],
                              "input_names": ["latents_in", "labels_in"], "output_names": ["dlatents_out"]})
        avg = {"dlatent_avg": (np.random.RandomState(seed + 2).randn(w) * 0.5).astype(np.float32)}
        if version < 5:
            # StyleGAN2's G_main creates its progressive-growing level first (0: configs E, F).
            avg = {"lod": np.zeros((), np.float32), **avg}
        # G_main builds synthesis first, then mapping (the components dict keeps that order).
        return net(name, funcs["G"], g_static, avg, {"synthesis": synthesis, "mapping": mapping},
                   shapes={"input_shapes": [[None, z], [None, c]], "output_shapes": [[None, ch, r, r]],
                           "input_names": ["latents_in", "labels_in"], "output_names": ["images_out"]})

    D = net("D", funcs["D"], d_static, discriminator_variables(d_kw, version, seed + 10),
            shapes={"input_shapes": [[None, ch, r, r], [None, c]], "output_shapes": [[None, 1]],
                    "input_names": ["images_in", "labels_in"], "output_names": ["scores_out"]})
    return {"network_order": ["G", "D", "Gs"],
            "networks": {"G": generator("G", seed), "D": D, "Gs": generator("Gs", seed + 20)}}


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


@torch.no_grad()
def record_outputs(G_ema, D) -> dict:
    z = torch.cat([torch.from_numpy(np.random.RandomState(s).randn(1, G_ema.z_dim)) for s in SEEDS])
    c = torch.zeros([len(SEEDS), G_ema.c_dim])
    if G_ema.c_dim:
        for i, s in enumerate(SEEDS):
            c[i, s % G_ema.c_dim] = 1
    images = []
    for psi in PSI:
        # One seed at a time, as generate.py does.
        images.append(torch.cat([G_ema(z[i:i + 1], c[i:i + 1], truncation_psi=psi, noise_mode="const",
                                       force_fp32=True) for i in range(len(SEEDS))]))
    images = torch.stack(images)
    logits = D(images[0], c, force_fp32=True)
    return {"seeds": list(SEEDS), "z": z, "c": c, "psi": list(PSI), "images": images, "d_logits": logits}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ada", type=Path, required=True, help="a copy of github.com/NVlabs/stylegan2-ada-pytorch")
    ap.add_argument("--commit", default=None, help="that copy's commit, when it is no git checkout")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--work", type=Path, default=Path("/tmp/tf_reference_pickles"),
                    help="where the TF pickles are written for legacy.py to read")
    args = ap.parse_args(argv)
    if not (args.ada / "legacy.py").is_file():
        print(f"--ada: {args.ada} has no legacy.py (a copy of stylegan2-ada-pytorch goes there)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(args.ada.resolve()))
    import legacy  # the official converter

    torch.set_num_threads(1)  # the same reductions whatever the machine
    args.work.mkdir(parents=True, exist_ok=True)
    cases = {}
    for i, (name, (version, g_static, d_static)) in enumerate(CASES.items()):
        case = make_case(version, g_static, d_static, seed=100 * i)
        path = write_tf_pickle(case, args.work / f"{name}.pkl")
        case["pickle_sha256"] = hashlib.sha256(tf_pickle_bytes(case)).hexdigest()
        with open(path, "rb") as f:
            data = legacy.load_network_pkl(f)
        nets = {key: data[key].eval() for key in ("G", "D", "G_ema")}
        case["init_kwargs"] = {key: _plain(net.init_kwargs) for key, net in nets.items()}
        case["state_dicts"] = {key: {k: v.detach().clone() for k, v in net.state_dict().items()}
                               for key, net in nets.items()}
        case["outputs"] = record_outputs(nets["G_ema"], nets["D"])
        cases[name] = case
        print(f"{name}: {path.stat().st_size / 1024:.0f} KB pickle, "
              f"{sum(len(s) for s in case['state_dicts'].values())} state entries")
    data = {"source": {"repository": "github.com/NVlabs/stylegan2-ada-pytorch",
                       "commit": args.commit or checkout_commit(args.ada), "torch": str(torch.__version__),
                       "numpy": str(np.__version__)},
            "cases": cases}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, args.out)
    torch.load(args.out, weights_only=True)  # the suite loads it so
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB) from {data['source']['commit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
