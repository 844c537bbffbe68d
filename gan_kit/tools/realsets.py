"""The real images and the class labels of a published metric protocol (``fid50k_full``, ...), as
stylegan2-ada-pytorch's ``metrics/metric_main.py`` and ``metric_utils.py`` choose them.

metric_main rebuilds the training set's data set with ``max_size=None`` (every image, not a
limited-data subset) and, for the ``*_full`` metrics and ``is``, ``xflip=False``; the legacy
``fid50k`` / ``kid50k`` / ``pr50k3`` keep the training set's x-flips. The reals are then the first
``max_real`` items of that data set in its order (``FeatureStats(max_items=...)`` over items
``0 .. num_items - 1``): ``None`` (all) for ``fid*_full``, 1,000,000 for ``kid*_full``, 200,000 for
``pr*_full`` and the generated count for the legacy ones. Its order (``training/dataset.py``,
``ImageFolderDataset``): the image files' paths relative to the folder (members' names in a zip),
sorted as Python sorts strings; x-flipped copies follow all the originals. A conditional G gets
the label of an item drawn uniformly from that data set for every generated image
(``dataset.get_label(np.random.randint(len(dataset)))``), so classes come with the data's
frequencies.

gankit's image-folder lists a folder depth first (a folder's files before its sub-folders), so
its item ``i`` is not the official item ``i`` when a folder holds both; ``official_order`` maps
one to the other. Sets without files (digits, torchvision's, tensors) keep their index order, the
order ``dataset_tool.py`` writes them in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch

from gan_kit.base.stash import StashKey

__all__ = ["RealRule", "official_order", "protocol_dataset", "protocol_reals", "protocol_labels"]


@attrs.frozen
class RealRule:
    """Which reals a protocol compares against: the first ``max_real`` (None: all) of the data set
    without its ``max_images`` subset, in stylegan2-ada-pytorch's order; ``keep_xflip``: keep the
    training set's x-flipped copies (the legacy ``fid50k``), else none (``*_full``)."""

    max_real: int | None
    keep_xflip: bool = False

    def describe(self, total: int) -> str:
        """``all 1,797 reals`` / ``the first 50,000 of 70,000 reals`` (``total``: the set's size)."""
        flips = " (x-flips as trained)" if self.keep_xflip else ""
        if self.max_real is None or self.max_real >= total:
            return f"all {total:,} reals{flips}"
        return f"the first {self.max_real:,} of {total:,} reals{flips}"

    def text(self) -> str:
        """The rule in words, as reference statistics files record it."""
        cap = "all reals" if self.max_real is None else f"first {self.max_real} reals"
        return f"{cap}, max_images off, " + ("x-flips as trained" if self.keep_xflip else "no x-flips")


#: The data sets built for protocols, per run (keyed by the options changed).
datasets_key = StashKey[dict]()


def _unflipped(dataset: Any) -> tuple[Any, bool]:
    from gan_kit.training.data.datasets import XFlip

    return (dataset.base, True) if isinstance(dataset, XFlip) else (dataset, False)


def official_order(dataset: Any) -> list[int]:
    """gankit's item indices of ``dataset`` in stylegan2-ada-pytorch's order: position ``k`` holds
    the gankit index of the official item ``k``. Files (a folder's paths, a zip's member names)
    sort as strings, which sorts them as their paths relative to the folder do (the folder is a
    common prefix); x-flipped copies (``XFlip``) follow the originals in the same order."""
    base, flipped = _unflipped(dataset)
    n = len(base)
    files = getattr(base, "files", None)
    if files is None or len(files) != n:
        order = list(range(n))
    else:
        keys = [f.as_posix() if isinstance(f, Path) else str(f) for f in files]
        order = sorted(range(n), key=keys.__getitem__)
    return order + [n + i for i in order] if flipped else order


def protocol_dataset(run: Any, rule: RealRule) -> Any:
    """``run``'s data set as metric_main rebuilds it for ``rule``: ``max_images`` off, and x-flips
    off unless ``rule.keep_xflip``. The training set itself when that changes nothing; built once
    per run and rule."""
    from gan_kit.plugin_api.components import BuildContext

    spec = run.recipe.data
    opts = spec.options
    changes: dict[str, Any] = {}
    if getattr(opts, "max_images", None) is not None:
        changes["max_images"] = None
    if getattr(opts, "xflip", False) and not rule.keep_xflip:
        changes["xflip"] = False
    if not changes:
        return run.dataset
    cache = run.stash.setdefault(datasets_key, {})
    key = tuple(sorted(changes.items()))
    if key not in cache:
        comp = run.registry.get("dataset", spec.name)
        context = BuildContext(run.recipe.resolution, 0, run.recipe)
        cache[key] = comp.factory(attrs.evolve(opts, **changes), context).build(run.recipe.resolution)
    return cache[key]


def protocol_reals(run: Any, rule: RealRule) -> tuple[Any, torch.Tensor]:
    """``(data set, gankit indices [n] of its reals in stylegan2-ada-pytorch's order)`` for
    ``rule`` (see the module doc)."""
    dataset = protocol_dataset(run, rule)
    order = official_order(dataset)
    if rule.max_real is not None:
        order = order[:rule.max_real]
    return dataset, torch.tensor(order, dtype=torch.int64)


def protocol_labels(dataset: Any, k: int, g: torch.Generator) -> torch.Tensor | None:
    """Class labels ``int64 [k]`` for ``k`` generated images: the label of an item drawn uniformly
    from ``dataset`` (with replacement) for each, as metric_utils does; None for a set without
    labels. Draws from ``g`` only."""
    labels = getattr(dataset, "labels", None)
    if labels is None:
        return None
    return labels[torch.randint(len(labels), (k,), generator=g)]
