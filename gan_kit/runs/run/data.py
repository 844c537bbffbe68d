"""A run's data (``RunData``): the training set, the set metrics draw their real images from, and
what the networks are built for (channels, classes). ``build_data`` makes it from the recipe's
``[data]`` table; real images for metrics and hooks are drawn from it with a seed, never moving
the training RNG."""

from __future__ import annotations

from typing import Any, Callable

import attrs
import torch

from gan_kit.base.errors import GankitError
from gan_kit.recipe import ComponentSpec, Recipe
from gan_kit.recipe.datachecks import labels_problem

__all__ = ["RunData", "build_data"]


@attrs.define(eq=False)
class RunData:
    """The data of one run.

    ``dataset``: the training set (items ``[C, R, R]`` float images, or ``(image, label)``);
    ``metric_dataset``: where metrics and ``real_images`` draw from (the training set, or with
    ``data.metric_reals = "full"`` the same data without its ``max_images`` subset);
    ``channels`` C; ``num_classes`` (0 unless ``architecture.conditional``); ``class_names`` in
    label order where the data set has them (image-folder's sub-folders)."""

    dataset: Any
    metric_dataset: Any
    channels: int
    num_classes: int
    class_names: list[str]
    _digest: str | None = attrs.field(default=None, init=False)
    _digest_done: bool = attrs.field(default=False, init=False)

    def real_indices(self, n: int, seed: int) -> torch.Tensor:
        """The indices ``[n]`` into ``metric_dataset`` that ``real_images`` and ``real_labels``
        take for ``seed`` (a seeded permutation's first ``n``)."""
        return torch.randperm(len(self.metric_dataset), generator=torch.Generator().manual_seed(seed))[:n]

    def real_images_at(self, indices: torch.Tensor) -> torch.Tensor:
        """The real images ``[len(indices), C, R, R]`` of ``metric_dataset`` at ``indices`` (final
        resolution R), read from the data set now (a streamed metric reads one batch at a time)."""
        items = [self.metric_dataset[i] for i in indices.tolist()]
        return torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])

    def real_labels(self, n: int, seed: int = 0) -> torch.Tensor | None:
        """The class labels ``[n]`` of ``real_images(n, seed)`` (same draw), or None when the
        data set has no labels."""
        labels = getattr(self.metric_dataset, "labels", None)
        return None if labels is None else labels[self.real_indices(n, seed)]

    def real_images(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` real images at the final resolution, drawn without replacement with ``seed``
        from ``metric_dataset``."""
        return self.real_images_at(self.real_indices(n, seed))

    def digest(self) -> str | None:
        """The content digest of the training set (``gan_kit.training.data.data_digest``),
        computed once: checkpoints record it so a resume may read the data from another path."""
        if not self._digest_done:
            from gan_kit.training.data import data_digest

            self._digest, self._digest_done = data_digest(self.dataset), True
        return self._digest


def build_data(recipe: Recipe, build: Callable[[ComponentSpec], Any]) -> RunData:
    """The recipe's data set built at its resolution (``build``: a component spec -> the
    component). Raises ``GankitError`` for an empty set, images of another shape than
    ``[C, R, R]``, labels a conditional run cannot use, or ``metric_reals = "full"`` on a data set
    without ``max_images``."""
    r = recipe
    dataset = build(r.data).build(r.resolution)
    if len(dataset) == 0:
        raise GankitError(f"{r.path}: data: the {r.data.name!r} dataset is empty")
    first = dataset[0]
    first = first[0] if isinstance(first, (tuple, list)) else first
    channels = int(first.shape[0])
    if tuple(first.shape[-2:]) != (r.resolution, r.resolution):
        raise GankitError(f"{r.path}: data: dataset {r.data.name!r} gives {tuple(first.shape)} images, "
                          f"expected [C, {r.resolution}, {r.resolution}]")
    problem = labels_problem(r, dataset)
    if problem:
        raise GankitError(f"{r.path}: {problem}")
    num_classes = int(getattr(dataset, "num_classes", 0) or 0) if r.architecture.slot.conditional else 0
    class_names = [str(c) for c in getattr(dataset, "classes", None) or []] if num_classes else []
    metric_dataset = dataset
    if r.data.slot is not None and r.data.slot.metric_reals == "full":
        if not hasattr(r.data.options, "max_images"):
            raise GankitError(f'{r.path}: data.metric_reals: "full" needs a data set with a max_images option, and '
                              f'{r.data.name!r} has none (it always trains on all its images); remove the key')
        if r.data.options.max_images is not None:
            full = attrs.evolve(r.data, options=attrs.evolve(r.data.options, max_images=None))
            metric_dataset = build(full).build(r.resolution)
    return RunData(dataset=dataset, metric_dataset=metric_dataset, channels=channels, num_classes=num_classes,
                   class_names=class_names)
