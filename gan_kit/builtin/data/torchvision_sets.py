"""The torchvision datasets (kind ``dataset``, registered here):
``mnist``, ``fashion-mnist`` and ``cifar10`` (labels 0-9) and ``celeba`` (unlabelled), each read
from its own on-disk layout under ``data.root``; ``download = true`` fetches it with torchvision.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Literal

import attrs
import numpy as np
import torch

from gan_kit import DatasetFactory, hookimpl, option
from gan_kit.builtin.data.datasets import XFLIP_HELP, recipe_label, resize_uint8, resolve_path, warn_upscaled, written
from gan_kit.builtin.data.file_sets import file_set
from gan_kit.training.data import UInt8Images, mirrored
from gan_kit.base.errors import GankitError
from gan_kit.training.imageio import list_images, reason


class _TorchvisionSet(DatasetFactory):
    """Shared options and error handling of the torchvision datasets."""

    #: torchvision class name, the folder it keeps under root, and a human name.
    tv_class = ""
    folder = ""
    title = ""

    @attrs.frozen
    class Options:
        root: str = option("~/.cache/gankit/datasets",
                           help="Folder that holds the dataset's own folder (relative to the folder of the recipe "
                                "file that sets it; saved absolute).", path=True)
        download: bool = option(False, help="Download the set with torchvision when it is missing (needs internet).")
        split: Literal["train", "test", "all"] = option("train", help="Which part of the set to train on.")
        channels: int | None = option(None, help="1 or 3 to convert grey <-> RGB; None = the set's own channels.",
                                      validator=lambda v: None if v in (1, 3) else f"must be 1 or 3, got {v!r}")
        xflip: bool = option(False, help=XFLIP_HELP)

    def _root(self) -> Path:
        root = resolve_path(self.options.root, self.context.recipe, "data.root")
        if root.is_file() and root.name.lower().endswith(".zip"):  # e.g. dataset_tool.py's cifar10.zip
            raise GankitError(f"{recipe_label(self.context.recipe)}data.root: {root} is a zip archive, not a folder; a zip "
                              f"of images (stylegan2-ada-pytorch's dataset_tool.py layout) is read by "
                              f"name = \"image-folder\" with path = "
                              f"{json.dumps(written(self.context.recipe, 'data.root', self.options.root))}")
        return root

    def _download(self, root: Path, **kwargs) -> None:
        import torchvision.datasets as tvd

        try:
            getattr(tvd, self.tv_class)(str(root), download=True, **kwargs)
        except Exception as e:  # network errors come in many types; one line is what the user needs
            raise GankitError(f"{recipe_label(self.context.recipe)}data.download: downloading {self.title} into {root} "
                              f"failed ({type(e).__name__}: {reason(e)}); fetch it by hand into "
                              f"{root / self.folder} or check the connection") from None

    def _missing(self, root: Path, what: str) -> GankitError:
        return GankitError(
            f"{recipe_label(self.context.recipe)}data.root: {self.title} not found: {what} under {root / self.folder}; "
            f"set data.download = true (needs internet) or point data.root at the folder that holds "
            f"'{self.folder}/'")

    def _finish(self, images: torch.Tensor, resolution: int, labels: torch.Tensor | None = None,
                num_classes: int = 0):
        warn_upscaled(min(images.shape[-2:]), resolution, f"{self.title}'s images", recipe=self.context.recipe)
        ds = UInt8Images(resize_uint8(images, resolution, self.options.channels), labels, num_classes)
        return mirrored(ds, self.options.xflip)


class MNIST(_TorchvisionSet):
    """torchvision MNIST (raw idx files under ROOT/MNIST/raw), 28x28 grey digits (labels 0-9) resized to data.resolution."""

    tv_class, folder, title = "MNIST", "MNIST", "MNIST"

    def build(self, resolution: int):
        import torchvision.datasets as tvd

        root = self._root()
        cls = getattr(tvd, self.tv_class)
        trains = {"train": [True], "test": [False], "all": [True, False]}[self.options.split]
        parts, targets = [], []
        for train in trains:
            try:
                ds = cls(str(root), train=train, download=False)
            except RuntimeError:
                if self.options.download:
                    self._download(root, train=train)
                    ds = cls(str(root), train=train, download=False)
                else:
                    prefix = "train" if train else "t10k"
                    raise self._missing(root, f"raw/{prefix}-images-idx3-ubyte and raw/{prefix}-labels-idx1-ubyte "
                                              f"(and the other split's files)") from None
            parts.append(torch.as_tensor(ds.data, dtype=torch.uint8))
            targets.append(torch.as_tensor(ds.targets, dtype=torch.int64))
        return self._finish(torch.cat(parts).unsqueeze(1), resolution, torch.cat(targets), 10)


class FashionMNIST(MNIST):
    """torchvision FashionMNIST (raw idx files under ROOT/FashionMNIST/raw), 28x28 grey clothes (labels 0-9) resized to data.resolution."""

    tv_class, folder, title = "FashionMNIST", "FashionMNIST", "FashionMNIST"


class CIFAR10(_TorchvisionSet):
    """torchvision CIFAR10 (python pickle batches under ROOT/cifar-10-batches-py), 32x32 RGB (labels 0-9) resized to data.resolution."""

    tv_class, folder, title = "CIFAR10", "cifar-10-batches-py", "CIFAR10"
    TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
    TEST = ["test_batch"]

    def build(self, resolution: int):
        # The batches are read directly (their documented pickle format) rather than through
        # torchvision's class, which also requires the md5 sum of every file to match the
        # published ones; a missing file is still an error, and a download checks the md5.
        root = self._root()
        names = {"train": self.TRAIN, "test": self.TEST, "all": self.TRAIN + self.TEST}[self.options.split]
        base = root / self.folder
        missing = [n for n in names if not (base / n).is_file()]
        if missing and self.options.download:
            self._download(root)
            missing = [n for n in names if not (base / n).is_file()]
        if missing:
            raise self._missing(root, ", ".join(missing))
        arrays, labels = [], []
        for n in names:
            try:
                with open(base / n, "rb") as f:
                    entry = pickle.load(f, encoding="latin1")
                arrays.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
                labels.append(np.asarray(entry["labels"], dtype=np.int64).reshape(-1))
                if labels[-1].shape[0] != arrays[-1].shape[0] or not np.all((labels[-1] >= 0) & (labels[-1] < 10)):
                    raise ValueError(f"{labels[-1].shape[0]} labels in 0-9 expected for {arrays[-1].shape[0]} images")
            except (OSError, pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
                raise GankitError(f"{recipe_label(self.context.recipe)}data.root: {base / n} is not a CIFAR10 python "
                                  f"batch ({reason(e)}); delete it and download again") from None
        return self._finish(torch.from_numpy(np.concatenate(arrays)), resolution,
                            torch.from_numpy(np.concatenate(labels)), 10)


def celeba_face_box(w: int, h: int) -> tuple[float, float, float, float]:
    """PGGAN's CelebA crop (Karras et al. 2018, "Progressive Growing of GANs", appendix C; their
    ``dataset_tool.py create_celeba``): the 128x128 square centred at (89, 121) of the 178x218
    aligned images, scaled to the image's actual size."""
    side = 128.0 * min(w / 178.0, h / 218.0)
    cx, cy = 89.0 * w / 178.0, 121.0 * h / 218.0
    return cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2


class CelebA(_TorchvisionSet):
    """torchvision CelebA (ROOT/celeba/img_align_celeba + list_eval_partition.txt), faces cropped and resized to data.resolution (unlabelled)."""

    tv_class, folder, title = "CelebA", "celeba", "CelebA"

    @attrs.frozen
    class Options(_TorchvisionSet.Options):
        split: Literal["train", "valid", "test", "all"] = option("train", help="Partition of list_eval_partition.txt.")
        crop: Literal["face", "center"] = option(
            "face", help='"face" = PGGAN\'s 128x128 crop at (89, 121) of the aligned image; "center" = center square.')
        on_corrupt: Literal["skip", "error"] = option(
            "skip", help="A corrupt image file: skip it with a warning, or stop.")
        cache: Literal["auto", "memory", "none"] = option(
            "auto", help='"memory" decodes all images at start; "none" per batch; "auto" = memory up to 2 GiB.')

    def _files(self, root: Path, images: Path) -> list[Path]:
        """The image files of the chosen split (list_eval_partition.txt: 0 train, 1 valid, 2 test)."""
        o = self.options
        partition = images.parent / "list_eval_partition.txt"
        if o.split == "all":
            return list_images(images, recursive=False)
        if not partition.is_file():
            raise self._missing(root, "list_eval_partition.txt (or use data.split = \"all\")")
        want = {"train": "0", "valid": "1", "test": "2"}[o.split]
        names = []
        for line in partition.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1] == want:
                names.append(parts[0])
        files = [images / n for n in names]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise self._missing(root, f"{len(absent)} image(s) listed in list_eval_partition.txt, e.g. "
                                      f"img_align_celeba/{absent[0]}")
        return files

    def build(self, resolution: int):
        o = self.options
        root = self._root()
        base = root / self.folder
        images = base / "img_align_celeba"
        partition = base / "list_eval_partition.txt"
        if (not images.is_dir() or (o.split != "all" and not partition.is_file())) and o.download:
            self._download(root, split="all", target_type=[])
        if not images.is_dir():
            raise self._missing(root, "img_align_celeba/")
        files = self._files(root, images)
        if not files:
            raise self._missing(root, f"images of split {o.split!r}")
        box_fn = celeba_face_box if o.crop == "face" else None
        ds = file_set(files, None, 0, resolution, o.channels or 3, o.on_corrupt, o.cache, box_fn,
                       "data.root", images, recipe_label(self.context.recipe), check_headers=False)
        return mirrored(ds, o.xflip)


@hookimpl
def register_datasets(register):
    register("mnist", MNIST)
    register("fashion-mnist", FashionMNIST)
    register("cifar10", CIFAR10)
    register("celeba", CelebA)
