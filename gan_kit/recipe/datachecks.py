"""What a recipe asks of its data set that only the built data set can answer: labels for a
class-conditional run, and enough images for each metric. ``Run`` refuses to start on a problem,
``gankit recipe check`` and ``gankit sweep`` report it before any training (each returns the
one-line reason, or None)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover - typing only
    from gan_kit.recipe import Recipe

__all__ = ["labels_problem", "metric_problem", "metric_cap_note"]


def labels_problem(recipe: Recipe, dataset: Any) -> str | None:
    """Why a class-conditional recipe cannot train on ``dataset`` (it has no labels), or None."""
    if not recipe.architecture.slot.conditional:
        return None
    classes = int(getattr(dataset, "num_classes", 0) or 0)
    if not classes:
        return (f"architecture.conditional = true, but the {recipe.data.name!r} data set has no labels (digits, mnist, "
                f"fashion-mnist and cifar10 have them, image-folder with labels = \"folders\" or a dataset.json; "
                f"a plugin data set "
                f"declares num_classes and labels); use a labelled set or set conditional = false")
    labels = getattr(dataset, "labels", None)
    if isinstance(labels, torch.Tensor) and labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= classes):
        return (f"data: the {recipe.data.name!r} data set's labels lie in [{int(labels.min())}, {int(labels.max())}], "
                f"outside [0, num_classes = {classes}); class labels must be 0 .. num_classes - 1")
    return None


def metric_problem(spec: Any, metric: Any, data_size: int, data_name: str) -> str | None:
    """Why ``metric`` cannot run on a data set of ``data_size`` images, or None: the data holds
    fewer than the metric's minimum. (More ``num_images`` than the data holds is capped: see
    ``metric_cap_note``.)"""
    if metric.min_images > data_size:
        return (f"{spec.key}: {spec.name} needs at least {metric.min_images} real images, the {data_name!r} data "
                f"set holds {data_size} (use more data, or another metric)")
    return None


def metric_cap_note(spec: Any, metric: Any, data_size: int, data_name: str) -> str | None:
    """The one-line note for a metric asking for more images than the data set holds (it uses
    them all, and as many generated ones, as docs/recipes.md says), or None. The fix is spelt
    as ``--set`` takes it (``metric.0.num_images``)."""
    if metric.num_images <= data_size or getattr(metric, "real_rule", None) is not None:
        return None  # a published protocol (fid50k_full) names its real set: its generated count is not capped
    key = spec.key.replace("[", ".").replace("]", "")
    return (f"note: {spec.key}: {spec.name} asks for num_images = {metric.num_images}, the {data_name!r} data set "
            f"holds {data_size}; it uses {data_size} of each (say so with --set {key}.num_images={data_size})")
