"""The built-in importers (kind ``importer``): the network-snapshot pickles of the field's
official code, read with ``gan_kit.read_pickle`` (nothing in the file runs) and converted into
gankit's ``stylegan2`` / ``r3gan`` networks.

* ``stylegan2-ada-pytorch``: ``network-snapshot-*.pkl`` of stylegan2-ada-pytorch (Karras et al.
  2020b, arXiv:2006.06676) and of the StyleGAN3 repository's StyleGAN2 networks
  (``networks_stylegan2``): ``dict(G, D, G_ema, augment_pipe, training_set_kwargs)`` of
  ``torch_utils.persistence`` modules whose ``init_kwargs`` name the configuration.
* ``stylegan3``: the StyleGAN3 repository's alias-free networks (Karras et al. 2021,
  arXiv:2106.12423; ``--cfg stylegan3-t`` / ``stylegan3-r``): the same snapshot dict, G and G_ema
  ``networks_stylegan3.Generator`` (magnitude EMAs and w_avg included), D its
  ``networks_stylegan2.Discriminator``, converted into gankit's ``stylegan3``.
* ``stylegan2-tf``: the TF-era StyleGAN2 / StyleGAN2-ADA pickles ``(G, D, Gs)`` of
  ``dnnlib.tflib.network.Network`` (what stylegan2-ada-pytorch's ``legacy.py`` converts).
* ``r3gan``: brownvc/R3GAN's snapshots (Huang et al. 2024, arXiv:2501.05441): plain
  ``training.networks.Generator`` / ``Discriminator`` modules wrapping ``R3GAN.Networks``; the
  configuration is read from the tensors' shapes and the modules' attributes.
* ``studiogan``: PyTorch-StudioGAN's ResNet GAN checkpoints (``model=G-*.pth``, ``model=G_ema-*``,
  ``model=D-*``: ``torch.save`` zip files, read with ``weights_only=True``), converted into
  gankit's ``sngan-resnet`` / ``biggan``; the files of one save beside the one named are read too.

Seeds: NVIDIA's codebases and R3GAN draw seed S's z as ``np.random.RandomState(S).randn(1, z_dim)``
(generate.py, gen_images.py), so an imported model keeps that rule (``ImportedModel.seeds``);
StudioGAN draws z with torch (``"torch"``).
"""

from __future__ import annotations

import copy
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import tomli_w

from gan_kit import CheckpointError, GankitError, ImportedModel, Importer, PickledModule, hookimpl
from gan_kit.builtin.importers.ada_official import ada_options_from_official
from gan_kit.builtin.importers.r3gan_official import r3gan_options, r3gan_state_dict
from gan_kit.builtin.importers.studiogan_official import (network_of, read_studiogan_file, sibling_files,
                                                          studiogan_options, studiogan_state_dict)
from gan_kit.builtin.importers.stylegan2_official import stylegan2_options, stylegan2_state_dict
from gan_kit.builtin.importers.stylegan2_tf import convert_tf_snapshot, is_tf_snapshot
from gan_kit.builtin.importers.stylegan3_official import (stylegan3_d_as_stylegan2, stylegan3_d_options,
                                                          stylegan3_networks, stylegan3_options)

__all__ = ["StyleGAN2Snapshot", "StyleGAN3Snapshot", "StyleGAN2TFSnapshot", "R3GANSnapshot", "StudioGANCheckpoint",
           "imported_recipe"]

#: The licence NVIDIA publishes StyleGAN2-ADA / StyleGAN3 code and models under.
NVIDIA_LICENSE = ("NVIDIA Source Code License for StyleGAN2 with Adaptive Discriminator Augmentation (ADA) / "
                  "StyleGAN3: non-commercial use only (research and evaluation)")
TF_LICENSE = "NVIDIA Source Code License-NC for StyleGAN2: non-commercial use only"
STUDIOGAN_LICENSE = ("PyTorch-StudioGAN's code is MIT-licensed; the weights are under the terms their publisher "
                     "states")
R3GAN_LICENSE = "as published by the R3GAN authors (brownvc/R3GAN; its code builds on NVIDIA's non-commercial code)"


def _data_name(training_set_kwargs: Any) -> str:
    """The data set's file or folder name the snapshot was trained on (its folder dropped: a
    path of the machine it was trained on means nothing here), or a placeholder."""
    path = training_set_kwargs.get("path") if isinstance(training_set_kwargs, dict) else None
    if not isinstance(path, str) or not path:
        return "your-data"
    name = PureWindowsPath(path).name if "\\" in path else PurePosixPath(path).name
    return name or "your-data"


def imported_recipe(architecture: dict, *, resolution: int, num_classes: int, data: str, family: str,
                    augment: dict | None = None, source: str = "", channels: int = 3) -> str:
    """The TOML text of a gankit recipe that builds an imported model's networks
    (``architecture``: the ``[architecture]`` table) and fine-tunes them the way its codebase
    trains (``family``: "stylegan2" - non-saturating loss, lazy R1 and path length, Adam(0.0025,
    0, 0.99), EMA half-life 10 kimg; "stylegan3" - the same without path length, G's lr 0.0025
    and D's 0.002 (the StyleGAN3 repository's train.py); "r3gan" - RpGAN + R1 + R2, its Adam settings; or
    "sngan-resnet" / "biggan" - StudioGAN's defaults: hinge loss, 5 D steps per G step,
    Adam(0.0002, 0.5, 0.999), batch 64, orthogonal init, G_ema decay 0.9999). ``data``
    names the data set (an image folder or zip) the user points it at; ``augment``: the
    ``[augment]`` table (ADA with the file's pipeline and p); ``channels``: the networks' image
    channels, which the image folder must read (1: ``channels = 1``, grey; 4: RGB with
    ``alpha = "keep"``; else RGB)."""
    arch = {"name": family, **({"conditional": True} if num_classes else {}), **architecture}
    recipe: dict[str, Any] = {
        "run": {"seed": 0, "device": "auto", "precision": "auto",
                "out_dir": f"runs/{PurePosixPath(source).stem or 'imported'}-tuned", "total_kimg": 100, "tick_kimg": 4,
                "snapshot_ticks": 5},
        "data": {"name": "image-folder", "path": data, "resolution": int(resolution), **_folder_channels(channels),
                 **({"labels": "dataset.json"} if num_classes else {})},
        "architecture": arch,
    }
    if family in ("stylegan2", "stylegan3"):
        gamma = 0.0002 * resolution ** 2 / 32  # stylegan2-ada-pytorch's --gamma auto for a batch of 32
        penalties = [{"name": "r1", "weight": round(gamma, 6), "interval": 16}]
        if family == "stylegan2":
            penalties.append({"name": "path-length", "weight": 2.0, "interval": 4})
        recipe.update({
            "init": {"name": "equalized-lr"},
            "loss": {"name": "bce"},
            "penalty": penalties,
            "update": {"name": "d-then-g"},
            "growth": {"name": "static", "batch_size": 32},
            "optim": ({"lr": 0.0025, "betas": [0.0, 0.99]} if family == "stylegan2" else
                      {"lr": 0.0025, "d_lr": 0.002, "betas": [0.0, 0.99]}),
            "ema": {"half_life_kimg": 10, "rampup": 0.05},
        })
    elif family in ("sngan-resnet", "biggan"):
        recipe.update({
            "init": {"name": "orthogonal"},
            "loss": {"name": "hinge"},
            "update": {"name": "d-then-g", "d_steps": 5},
            "growth": {"name": "static", "batch_size": 64},
            "optim": {"lr": 0.0002, "betas": [0.5, 0.999]},
            "ema": {"decay": 0.9999},
        })
    else:
        recipe.update({
            "init": {"name": "none"},
            "loss": {"name": "rpgan"},
            "penalty": [{"name": "r1", "weight": 0.05, "interval": 1}, {"name": "r2", "weight": 0.05, "interval": 1}],
            "update": {"name": "d-then-g"},
            "growth": {"name": "static", "batch_size": 32},
            "optim": {"lr": 0.0002, "betas": [0.0, 0.99]},
            "ema": {"half_life_kimg": 0.5, "rampup": "none"},
        })
    if augment:
        recipe["augment"] = augment
    head = (f"# A recipe for the networks imported from {source} (gankit import): the [architecture] table is the\n"
            f"# file's configuration - keep it to start from the file's weights (gankit run RECIPE --init-from FILE).\n"
            f"# Point data.path at your images; the other tables are the codebase's usual training settings.\n\n")
    return head + tomli_w.dumps(_toml_keys(recipe))


def _folder_channels(channels: int) -> dict:
    """The image-folder options that read images with ``channels`` channels: without them a grey
    model's recipe would read RGB and its networks would not fit the data."""
    if channels == 1:
        return {"channels": 1}
    if channels == 4:
        return {"channels": 3, "alpha": "keep"}
    return {"channels": 3}


def _toml_keys(value: Any) -> Any:
    """Tables keyed by numbers (``width_by_resolution = {8 = 96}``) with the string keys TOML
    stores."""
    if isinstance(value, dict):
        return {str(k): _toml_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_toml_keys(v) for v in value]
    return value


def _network(data: Any, key: str) -> PickledModule | None:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, PickledModule) else None


def _alias_free(G_ema: PickledModule) -> bool:
    """A networks_stylegan3 G: its synthesis network starts at a Fourier-feature ``input``."""
    return "input" in G_ema.children.get("synthesis", PickledModule()).children


def _augment(data: Any, source, components: dict) -> dict | None:
    """The ``[augment]`` table of the snapshot's ADA pipe (None without one); its state (p) goes
    into ``components``."""
    pipe = _network(data, "augment_pipe")
    if pipe is None:
        return None
    p = float(pipe.buffers["p"].reshape(-1)[0]) if "p" in pipe.buffers else 0.0
    converted = ada_options_from_official(dict(pipe.init_kwargs), p, where=f"{source.path.name}: augment_pipe")
    if converted.get("state") is not None:
        components["augment"] = converted["state"]
    return converted["table"]


class StyleGAN2Snapshot(Importer):
    """stylegan2-ada-pytorch and StyleGAN3-repository StyleGAN2 network snapshots (network-snapshot-*.pkl): G, D, G_ema and the ADA pipe's p, read without running the file's code."""

    def read(self, source):
        if not source.is_pickle:
            return None
        data = source.pickle()
        G_ema = _network(data, "G_ema")
        if G_ema is None or not G_ema.persistent or G_ema.class_name != "Generator":
            return None
        if _alias_free(G_ema):
            return None  # StyleGAN3Snapshot's
        G, D = _network(data, "G"), _network(data, "D")
        config = stylegan2_options(dict(G_ema.init_kwargs), dict(D.init_kwargs) if D is not None else None)
        # stylegan2-ada-pytorch's G takes one synthesis_kwargs dict, the StyleGAN3 repository's
        # networks_stylegan2 G its synthesis keywords directly
        origin = "stylegan2-ada-pytorch" if "synthesis_kwargs" in G_ema.init_kwargs else "stylegan3-stylegan2"
        arch = config["architecture"]
        components: dict[str, Any] = {}
        augment = _augment(data, source, components)
        recipe = imported_recipe(arch, resolution=config["resolution"], num_classes=config["num_classes"],
                                 channels=config["channels"],
                                 data=_data_name(data.get("training_set_kwargs")), family="stylegan2", augment=augment,
                                 source=source.path.name)
        return ImportedModel(
            format=origin, recipe=recipe, resolution=config["resolution"],
            channels=config["channels"], num_classes=config["num_classes"],
            G_ema=stylegan2_state_dict(G_ema.state_dict(), "G", config),
            G=stylegan2_state_dict(G.state_dict(), "G", config) if G is not None else None,
            D=stylegan2_state_dict(D.state_dict(), "D", config) if D is not None else None,
            components=components, cur_nimg=0, seeds="numpy", license=NVIDIA_LICENSE,
            notes=(f"StyleGAN2 networks of stylegan2-ada-pytorch / the StyleGAN3 repository, G source SHA-256 "
                   f"{G_ema.source_sha256 or 'unknown'}; weights renamed to gankit's layout, values unchanged.",))


class StyleGAN3Snapshot(Importer):
    """StyleGAN3-T / -R network snapshots of the StyleGAN3 repository (network-snapshot-*.pkl): G, D, G_ema (magnitude EMAs, w_avg) and the ADA pipe's p, read without running the file's code."""

    def read(self, source):
        if not source.is_pickle:
            return None
        data = source.pickle()
        G_ema = _network(data, "G_ema")
        if G_ema is None or not G_ema.persistent or G_ema.class_name != "Generator" or not _alias_free(G_ema):
            return None
        G, D = _network(data, "G"), _network(data, "D")
        try:
            config = stylegan3_options(dict(G_ema.init_kwargs))
            if D is not None:
                config["architecture"].update(stylegan3_d_options(dict(D.init_kwargs), config))
            # D is the StyleGAN3 repository's networks_stylegan2 D: stylegan2's renaming
            D_state = (stylegan2_state_dict(D.state_dict(), "D", stylegan3_d_as_stylegan2(config))
                       if D is not None else None)
            nets = stylegan3_networks(config, G_ema.state_dict(), G.state_dict() if G is not None else None, D_state)
        except GankitError as e:
            raise GankitError(f"{source.path}: {e}") from None
        arch = dict(config["architecture"])
        if arch.get("conv_clamp") is None:
            arch["conv_clamp"] = "none"  # how a recipe spells None (the option's default is 256)
        components: dict[str, Any] = {}
        augment = _augment(data, source, components)
        recipe = imported_recipe(arch, resolution=config["resolution"], num_classes=config["num_classes"],
                                 channels=config["channels"],
                                 data=_data_name(data.get("training_set_kwargs")), family="stylegan3",
                                 augment=augment, source=source.path.name)
        return ImportedModel(
            format="stylegan3", recipe=recipe, resolution=config["resolution"], channels=config["channels"],
            num_classes=config["num_classes"], G_ema=nets["G_ema"], G=nets["G"], D=nets["D"],
            components=components, cur_nimg=0, seeds="numpy", license=NVIDIA_LICENSE,
            notes=(f"StyleGAN3-{config['architecture']['config'].upper()} networks of the StyleGAN3 repository, G "
                   f"source SHA-256 {G_ema.source_sha256 or 'unknown'}; weights renamed to gankit's layout, values "
                   f"unchanged; the layers' filters equal gankit's designs.",))


class StyleGAN2TFSnapshot(Importer):
    """TF-era StyleGAN2 / StyleGAN2-ADA pickles ((G, D, Gs) of dnnlib.tflib networks), converted as stylegan2-ada-pytorch's legacy.py does, without TensorFlow and without running the file's code."""

    def read(self, source):
        if not source.is_pickle:
            return None
        data = source.pickle()
        if not is_tf_snapshot(data):
            return None
        try:
            # legacy.py's conversion as it is; what gankit's stylegan2 cannot build (a [1, 2, 1]
            # filter, ...) is refused by stylegan2_options, naming the setting
            nets = convert_tf_snapshot(data, gankit=False)
        except CheckpointError as e:
            raise CheckpointError(f"{source.path}: {e}") from None
        G_kwargs, D_kwargs = dict(nets["G_ema"][0]), copy.deepcopy(nets["D"][0])
        epilogue = D_kwargs.setdefault("epilogue_kwargs", {})
        if epilogue.get("mbstd_group_size", 4) is None:
            # legacy.py turns a TF D's missing group size into None (the whole minibatch); the TF
            # networks used 4, which is the same function for batches of up to 4.
            epilogue["mbstd_group_size"] = 4
        config = stylegan2_options(G_kwargs, D_kwargs, source="stylegan2-ada-pytorch")
        arch = config["architecture"]
        if arch.get("num_fp16_res"):
            # the TF networks ran their fp16 layers on GPUs only; legacy.py's reference conversion
            # is compared in float32 (force_fp32), which is what the CPU draws here
            arch["fp16_devices"] = "cuda"
        recipe = imported_recipe(arch, resolution=config["resolution"], num_classes=config["num_classes"],
                                 channels=config["channels"],
                                 data="your-data", family="stylegan2", source=source.path.name)
        return ImportedModel(
            format="stylegan2-tf", recipe=recipe, resolution=config["resolution"], channels=config["channels"],
            num_classes=config["num_classes"],
            G_ema=stylegan2_state_dict(nets["G_ema"][1], "G", config),
            G=stylegan2_state_dict(nets["G"][1], "G", config),
            D=stylegan2_state_dict(nets["D"][1], "D", config),
            seeds="numpy", license=TF_LICENSE,
            notes=("TF-era StyleGAN2 networks converted as stylegan2-ada-pytorch's legacy.py does (transposes and "
                   "flips of the TF variables), then renamed to gankit's layout.",))


class R3GANSnapshot(Importer):
    """brownvc/R3GAN network snapshots (network-snapshot-*.pkl): G, D and G_ema, the configuration read from the tensors, without running the file's code."""

    def read(self, source):
        if not source.is_pickle:
            return None
        data = source.pickle()
        G_ema = _network(data, "G_ema")
        if G_ema is None or G_ema.class_name != "training.networks.Generator" or "Model" not in G_ema.children:
            return None
        G, D = _network(data, "G"), _network(data, "D")
        if D is None:
            raise GankitError(f"{source.path}: an R3GAN snapshot without D; gankit reads R3GAN's configuration from "
                              f"both networks (use the network-snapshot-*.pkl the training run wrote)")
        config = r3gan_options(G_ema.state_dict(), G_ema.attributes_by_path(), D.state_dict(), D.attributes_by_path())
        arch = config["architecture"]
        recipe = imported_recipe(arch, resolution=config["resolution"], num_classes=config["num_classes"],
                                 channels=config["channels"],
                                 data=_data_name(data.get("training_set_kwargs")), family="r3gan",
                                 source=source.path.name)
        cur_nimg = data.get("cur_nimg") if isinstance(data, dict) else 0
        return ImportedModel(
            format="r3gan", recipe=recipe, resolution=config["resolution"], channels=config["channels"],
            num_classes=config["num_classes"],
            G_ema=r3gan_state_dict(G_ema.state_dict(), "G", config),
            G=r3gan_state_dict(G.state_dict(), "G", config) if G is not None else None,
            D=r3gan_state_dict(D.state_dict(), "D", config),
            cur_nimg=int(cur_nimg) if isinstance(cur_nimg, int) else 0, seeds="numpy", license=R3GAN_LICENSE,
            notes=("R3GAN networks (brownvc/R3GAN), configuration inferred from the tensors' shapes and the modules' "
                   "attributes; weights renamed to gankit's layout, values unchanged.",))


class StudioGANCheckpoint(Importer):
    """PyTorch-StudioGAN's ResNet GAN checkpoints (model=G-*.pth / model=G_ema-*.pth / model=D-*.pth, SNGAN, SAGAN, BigGAN) as sngan-resnet or biggan, read with weights_only=True; the configuration inferred from the tensors."""

    def read(self, source):
        if source.is_pickle:
            return None
        data = read_studiogan_file(source.path)
        if data is None:
            return None
        net = network_of(data["state_dict"])
        if net is None:
            return None
        files = sibling_files(source.path) or {net: source.path}
        role = next((k for k, p in files.items() if p == source.path), net)
        if ("D" if role == "D" else "G") != net:
            raise GankitError(f"{source.path}: named as StudioGAN's {role} file but holds a {net}")
        datas = {role: data}
        for other, path in files.items():
            if other not in datas:
                more = read_studiogan_file(path)
                if more is None or network_of(more["state_dict"]) != ("D" if other == "D" else "G"):
                    raise GankitError(f"{path}: not a StudioGAN {other} checkpoint beside {source.path.name}")
                datas[other] = more
        states = {k: v["state_dict"] for k, v in datas.items()}
        if "G" not in states and "G_ema" not in states:
            raise GankitError(f"{source.path}: StudioGAN's D alone; gankit imports G with it (put the save's "
                              f"model=G-*.pth or model=G_ema-*.pth beside it, or name that file)")
        G_state = states.get("G", states.get("G_ema"))
        try:
            config = studiogan_options(G_state, states.get("D"))
            nets = {k: studiogan_state_dict(v, "D" if k == "D" else "G", config) for k, v in states.items()}
        except GankitError as e:
            raise GankitError(f"{source.path}: {e}") from None
        recipe = imported_recipe(config["architecture"], resolution=config["resolution"],
                                 num_classes=config["num_classes"], data="your-data", family=config["name"],
                                 source=source.path.name)
        step = datas.get("D", {}).get("step")  # D's file holds the run's numbers
        step = step if isinstance(step, int) else None
        return ImportedModel(
            format="studiogan", recipe=recipe, resolution=config["resolution"], channels=config["channels"],
            num_classes=config["num_classes"], G_ema=nets.get("G_ema", nets.get("G")), G=nets.get("G"),
            D=nets.get("D"), seeds="torch", license=STUDIOGAN_LICENSE,
            notes=(f"PyTorch-StudioGAN {config['name']} networks ({', '.join(sorted(states))} files"
                   + (f", step {step}" if step is not None else "") + "), configuration inferred from the tensors; "
                   "weights renamed to gankit's layout, values unchanged.",))


@hookimpl
def register_importers(register):
    register("stylegan2-ada-pytorch", StyleGAN2Snapshot)
    register("stylegan3", StyleGAN3Snapshot)
    register("stylegan2-tf", StyleGAN2TFSnapshot)
    register("r3gan", R3GANSnapshot)
    register("studiogan", StudioGANCheckpoint)
