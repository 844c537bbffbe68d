"""Evaluate a checkpoint's G_ema with the recipe's metrics (what ``gankit eval CHECKPOINT``
prints; the command is ``gan_kit.cli.evaluate``), and a run's G_ema during training.

The recipe saved in the checkpoint rebuilds the networks and the dataset (``--set`` overrides it,
e.g. ``--set data.path=/data/faces`` when a relative image folder no longer resolves). Real images
are drawn and faded exactly as during training (``gan_kit.tools.evaluate.evaluate``), so with the
same ``num_images`` the figure equals the final ``Metrics/...`` value in metrics.jsonl.

``--baselines`` puts the figure in context, all at one image count per set: real vs real (two
disjoint halves of the data: the floor a perfect G would reach at this sample size), the
untrained G_ema (the recipe's initialisation, same seed) vs real, and the trained G_ema vs real.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from gan_kit.tools.progress import showing_progress, watched

if TYPE_CHECKING:
    import torch

__all__ = ["evaluate_checkpoint", "evaluate", "image_batches", "batch_seed", "write_reference_stats",
           "protocol_line"]


def evaluate(run, metric, num_images: int | None = None, *, truncation: float | None = None) -> dict[str, float]:
    """Run ``metric`` on ``run``'s G_ema at the current phase against real images drawn with the
    metric's seed and faded exactly as during training (the same figure as metrics.jsonl): a
    function of G_ema's weights and the metric's seed only.

    A streamed metric (``metric.streamed``: fid, kid, precision-recall, is) reads both sets batch
    by batch (``image_batches``) on every process - a collective, called by all of them; rank 0
    gets the values, the others ``{}``. Any other metric gets the sets as tensors (rank 0 only).
    ``truncation``: G_ema's latents from the normal truncated to ``[-truncation, truncation]``
    (BigGAN's truncation trick, ``gan_kit.tools.seeds.truncated_randn``); None: the standard normal."""
    from gan_kit.base.allocator import ordinary_allocation

    # Training's kept blocks (run.retain_cpu_memory) go back to the kernel, and this pass's
    # tensors, of other shapes, are not kept after it.
    with ordinary_allocation():
        return _evaluate(run, metric, num_images, truncation)


def _evaluate(run, metric, num_images: int | None, truncation: float | None) -> dict[str, float]:
    import torch

    from gan_kit.base.phase import fade_real

    if getattr(metric, "measures_generator", False):
        # A metric of G itself (the equivariance metrics transform G's input): no image sets.
        if num_images:
            metric = _with_count(metric, num_images)
        return metric.compute_generator(run.G_ema, partial(_draw_labels, run), run.device)
    if getattr(metric, "real_rule", None) is not None:
        n = num_images or metric.num_images  # a protocol's generated count is its own, never capped
    else:
        n = min(num_images or metric.num_images, len(run.metric_dataset))
    if getattr(metric, "streamed", False):
        fakes, reals = image_batches(run, metric, n, truncation=truncation)
        return metric.compute_streamed(fakes, reals, run.device)
    reals = run.real_images(n, seed=metric.seed)
    reals = fade_real(reals, run.phase.resolution, run.phase.alpha)
    g = torch.Generator().manual_seed(metric.seed + 1)
    calls = iter(range(1 << 62))

    def generate(k: int) -> torch.Tensor:
        return _fakes(run, k, g, batch_seed(metric.seed, 2, next(calls)), truncation=truncation)

    out = metric.compute(generate, reals, run.device)
    if run.num_classes and getattr(getattr(metric, "options", None), "per_class", False):
        out.update(_per_class(run, metric, reals, run.real_labels(reals.shape[0], seed=metric.seed), g, truncation))
    return out


def _with_count(metric, n: int):
    """``metric`` drawing ``n`` latents (a copy with its ``num_images`` option changed)."""
    import copy

    out = copy.copy(metric)
    out.options = attrs.evolve(metric.options, num_images=n)
    return out


def _draw_labels(run, k: int, g):
    """``k`` classes for a conditional G (None otherwise), drawn from ``g`` with the data's
    frequencies, as the generated sets of the image metrics."""
    import torch

    if not run.num_classes:
        return None
    known = getattr(run.metric_dataset, "labels", None)
    return (torch.randint(run.num_classes, (k,), generator=g) if known is None
            else known[torch.randint(len(known), (k,), generator=g)])


def batch_seed(seed: int, stream: int, index: int) -> int:
    """A seed for batch ``index`` of a metric's ``stream`` (1: latents and classes, 2: G's own
    draws), from the metric's ``seed`` alone (numpy's SeedSequence), so a figure depends only on
    the weights and the metric's seed - not on the training RNG, the process count or the
    process that generated the batch."""
    import numpy as np

    return int(np.random.SeedSequence([seed, stream, index]).generate_state(1, np.uint64)[0] >> 1)


def _fakes(run, k: int, g, noise_seed: int, labels_from=None, truncation: float | None = None):
    """``k`` images of G_ema: latents (and, conditional, classes drawn with the data's
    frequencies) from ``g``, G's own draws from ``noise_seed``. ``labels_from``: the data set whose
    items' labels a conditional G gets (a protocol's, ``realsets.protocol_labels``), else the
    metric data set's. ``truncation``: z from the truncated normal (``truncated_randn``)."""
    import torch

    from gan_kit.tools.realsets import protocol_labels
    from gan_kit.tools.seeds import truncated_randn

    z = truncated_randn(k, run.latent_dim, g, truncation)
    labels = None
    if run.num_classes and labels_from is not None:
        labels = protocol_labels(labels_from, k, g)
        if labels is None:
            labels = torch.randint(run.num_classes, (k,), generator=g)
    elif run.num_classes:
        # A conditional G draws its classes with the data's frequencies (the labels of the data
        # set, drawn with replacement): the generated set then matches the real set class for class.
        known = getattr(run.metric_dataset, "labels", None)
        labels = (torch.randint(run.num_classes, (k,), generator=g) if known is None
                  else known[torch.randint(len(known), (k,), generator=g)])
    return run.generate(z, labels=labels, seed=noise_seed, batch=max(1, k))


def image_batches(run, metric, n: int, *, truncation: float | None = None):
    """``(fakes, reals)``: this process's share of G_ema's ``n`` images and of ``n`` real images
    (drawn with the metric's seed, faded as in training), as ``ImageBatches`` of the metric's
    ``batch_size`` (64 without one). Batch ``i`` of the generated set has latents and noise from
    ``batch_seed(metric.seed, ., i)``, so every process count gives the same set. ``truncation``:
    G_ema's latents from the truncated normal (``evaluate``)."""
    import hashlib

    import torch

    from gan_kit.training.imagesets import ImageBatches
    from gan_kit.base.phase import fade_real

    from gan_kit.tools.realsets import protocol_reals

    size = int(getattr(getattr(metric, "options", None), "batch_size", 64))
    phase = run.phase
    rule = getattr(metric, "real_rule", None)
    if rule is None:
        indices, labels_from = run.data.real_indices(n, metric.seed), None
        read = run.data.real_images_at
    else:  # a published protocol: its own real set, in stylegan2-ada-pytorch's order
        labels_from, indices = protocol_reals(run, rule)
        read = partial(images_at, labels_from)
    n_real = int(indices.shape[0])

    def real(i: int) -> torch.Tensor:
        return fade_real(read(indices[i * size:(i + 1) * size]), phase.resolution, phase.alpha)

    def fake(i: int) -> torch.Tensor:
        k = min(size, n - i * size)
        g = torch.Generator().manual_seed(batch_seed(metric.seed, 1, i))
        return _fakes(run, k, g, batch_seed(metric.seed, 2, i), labels_from, truncation)

    # The generated set is known by G_ema's weights and how it was drawn (it cannot be read
    # twice for a digest); the metrics of one tick on one extractor share its features.
    with torch.no_grad():
        sums = [t.detach().double().sum().reshape(1) for t in run.G_ema.state_dict().values() if t.is_floating_point()]
        squares = [t.detach().double().square().sum().reshape(1) for t in run.G_ema.state_dict().values()
                   if t.is_floating_point()]
        weights = hashlib.sha256(torch.cat(sums + squares).cpu().numpy().tobytes()).hexdigest()
    labels = None if rule is None else ("protocol labels", rule.keep_xflip)
    key = ("G_ema", weights, metric.seed, n, size, phase.resolution, float(phase.alpha), run.num_classes,
           run.rank, run.world_size, labels, truncation)
    return (ImageBatches(n, size, watched("generated images", fake, n, size), run.rank, run.world_size, key=key),
            ImageBatches(n_real, size, watched("real images", real, n_real, size), run.rank, run.world_size))


def images_at(dataset, indices) -> "torch.Tensor":
    """The images ``[len(indices), C, R, R]`` of ``dataset`` at ``indices`` (items are images or
    ``(image, label)``)."""
    import torch

    items = [dataset[i] for i in indices.tolist()]
    return torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])


def _per_class(run, metric, reals, real_labels, g, truncation: float | None = None) -> dict[str, float]:
    """The metric's main value for each class of a conditional run - the class's real images
    against G_ema's images of that class - as ``<key>/class-<c>``, and their mean as
    ``<key>/class-mean``. Classes with fewer real images than the metric's ``min_images`` are
    left out."""
    import torch

    from gan_kit.tools.seeds import truncated_randn

    if real_labels is None:
        return {}
    values: dict[str, float] = {}
    key = None
    for c in range(run.num_classes):
        mine = reals[real_labels == c]
        if mine.shape[0] < max(2, metric.min_images):
            continue

        def generate(k: int, c: int = c) -> torch.Tensor:
            z = truncated_randn(k, run.latent_dim, g, truncation)
            return run.generate(z, labels=torch.full((k,), c, dtype=torch.int64), seed=batch_seed(metric.seed, 3, c))

        result = metric.compute(generate, mine, run.device)
        key = key or min(result, key=len)  # the main value (Metrics/swd, not its per-scale parts)
        values[f"{key}/class-{c}"] = result[key]
    if values:
        values[f"{key}/class-mean"] = sum(values.values()) / len(values)
    return values


def _metric(run, name: str, num: int | None, features: dict[str, Any] | None = None):
    """The metric ``name`` with the recipe's options for it (defaults if the recipe has none);
    ``features``: ``feature_extractor`` / ``resize`` / ``weights`` given on the command line,
    applied to a metric that computes features (others have no such options)."""
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.base.errors import GankitError

    try:
        comp = run.registry.get("metric", name)
    except KeyError as e:
        raise GankitError(f"--metric: {e.args[0]}") from None
    spec = next((s for s in run.recipe.metrics if s.name == name), None)
    options = spec.options if spec is not None else comp.Options()
    if num is not None and hasattr(options, "num_images"):
        options = attrs.evolve(options, num_images=num)
    options = with_features(options, features, name)
    return comp.factory(options, BuildContext(run.recipe.resolution, run.channels, run.recipe))


#: The command-line options of ``gankit eval`` that set a feature metric's options.
FEATURE_OPTIONS = {"feature_extractor": "--backbone", "resize": "--resize", "weights": "--weights"}


def with_features(options, features: dict[str, Any] | None, name: str):
    """``options`` with ``features`` (``feature_extractor``, ``resize``, ``weights``; None values
    left out) set where the metric has them. Raises ``GankitError`` naming the option and value a
    metric refuses (pr's backbone is VGG16 or the stub)."""
    from gan_kit.base.errors import GankitError, clip

    given = {k: v for k, v in (features or {}).items() if v is not None and hasattr(options, k)}
    if not given:
        return options
    try:
        return attrs.evolve(options, **given)
    except (TypeError, ValueError) as e:
        flags = ", ".join(f"{FEATURE_OPTIONS[k]} {v}" for k, v in given.items())
        raise GankitError(f"{name}: {flags}: {clip(str(e), 160)}") from None


def _features_from_stats(stats, features: dict[str, Any]) -> dict[str, Any]:
    """``features`` with what the command line left out taken from a gankit statistics file's
    metadata: its backbone and resize mode, and its weights file when found by name in
    ``$GANKIT_WEIGHTS_DIR`` or the torch hub cache (else the metric's own, and the weights
    check names both files)."""
    import os

    meta = stats.meta if stats is not None else {}
    out = dict(features)
    if out.get("feature_extractor") is None and meta.get("backbone"):
        out["feature_extractor"] = meta["backbone"]
        if out.get("resize") is None and meta.get("resize"):
            out["resize"] = meta["resize"]
        if out.get("weights") is None and meta.get("weights_file"):
            import torch

            folders = [os.environ.get("GANKIT_WEIGHTS_DIR"), str(Path(torch.hub.get_dir()) / "checkpoints")]
            found = [Path(f).expanduser() / meta["weights_file"] for f in folders if f]
            found = [p for p in found if p.is_file()]
            if found:
                out["weights"] = str(found[0])
    elif out.get("resize") is None and meta.get("resize") and out.get("feature_extractor") == meta.get("backbone"):
        out["resize"] = meta["resize"]
    return out


def evaluate_checkpoint(path: str | Path, metrics: tuple[str, ...] = (), num: int | None = None,
                        overrides: tuple[str, ...] = (), device: str | None = None,
                        baselines: bool = False, against: str | Path | None = None,
                        progress: bool = False, features: dict[str, Any] | None = None,
                        truncation_normal: float | None = None, standing_stats: int = 0,
                        standing_batch: int = 64) -> dict[str, Any]:
    """Evaluate ``path``'s G_ema: a checkpoint file, or a run directory (its
    ``checkpoints/latest.pt``).

    Returns ``{"checkpoint", "kimg", "phase": {...}, "dataset", "dataset_size", "results": {metric:
    {"trained": {...}, and with baselines "real": {...}, "untrained": {...}, "num_images": n; for a
    published protocol "protocol": {"protocol", "backbone", "weights", "resize", "generated",
    "protocol_count", "reals", "reals_text"}}}}`` where each inner dict maps stat names
    (``Metrics/swd``, ``Metrics/swd/16``) to values.

    ``against``: a reference statistics file (``gan_kit.tools.refstats``: clean-fid's, TTUR's or
    gankit's ``.npz``); the FID metrics compare G_ema's images with its mu and sigma instead of
    the data (default metric: the file's protocol, else ``fid50k_full``); any other metric is
    refused; the backbone, resize mode and weights not given in ``features`` are the file's
    (``_features_from_stats``). ``features``: ``feature_extractor`` / ``resize`` / ``weights``
    for every feature metric (``gankit eval --backbone / --resize / --weights``).
    ``progress``: a progress bar on a terminal (``gan_kit.tools.progress``).
    ``truncation_normal``: the trained G_ema's latents from the normal truncated to [-t, t]
    (BigGAN's truncation trick); ``standing_stats``: the trained G_ema's BatchNorm statistics
    recomputed first from that many batches of ``standing_batch`` (``gan_kit.tools.standing``,
    seed 0); the baselines' untrained G_ema is drawn as it is.
    Raises ``GankitError`` (bad checkpoint, recipe problems, unknown metric, missing data/weights,
    a statistics file that does not fit).
    """
    from gan_kit.tools.refstats import read_stats

    stats = read_stats(against) if against is not None else None
    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.runs.run import build_run
    from gan_kit.base.phase import Phase, fade_real
    from gan_kit.recipe import load_recipe

    from gan_kit.tools.seeds import check_truncation
    from gan_kit.tools.standing import check_standing
    from gan_kit.tools.trained import checkpoint_file

    check_truncation(truncation_normal)
    check_standing(standing_stats, standing_batch)
    path = checkpoint_file(path, "gankit eval")  # a run directory: its checkpoints/latest.pt
    state = ckpt.load(path, map_location="cpu")
    recipe, plugins = load_recipe(Path(f"{path}[recipe]"), list(overrides), text=state["recipe"])
    run_opts = attrs.evolve(recipe.run, progress=False, **({"device": device} if device else {}))
    recipe = attrs.evolve(recipe, run=run_opts)
    if stats is not None:
        # The file's protocol, else the recipe's first FID protocol (its options come with it).
        recipe_fid = next((s.name for s in recipe.metrics if callable(getattr(
            _metric_factory(plugins.registry, s.name), "compute_against", None))), None)
        names = tuple(metrics) or (stats.meta.get("protocol") or recipe_fid or "fid50k_full",)
    else:
        names = tuple(metrics) or tuple(dict.fromkeys(s.name for s in recipe.metrics)) or ("swd",)
    _check_against(names, stats, plugins.registry)
    from gan_kit.plugin_api.ownership import frozen_loads_deferred, load_deferred

    # The data and an untrained G_ema (the recipe's init and seed). Only G_ema draws: D's frozen
    # sub-networks are left unread (their files need not exist); G's come from their files.
    with frozen_loads_deferred():
        run = build_run(recipe, plugins)
    load_deferred(run.G)
    load_deferred(run.G_ema)
    ckpt.check_generator_files(state, run.G_ema, path)
    phase = Phase(**state["phase"]) if state.get("phase") else run.growth.phase_at(int(state["cur_nimg"]))
    run.phase = phase
    run.set_phase(phase)
    features = _features_from_stats(stats, features or {})
    built = {name: _metric(run, name, num, features) for name in names}

    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    _check_protocol_use(built, baselines, stats, run, results)
    if baselines:
        for name, metric in built.items():
            want = num or metric.num_images
            n = max(2, min(want, len(run.metric_dataset) // 2))
            metric = _metric(run, name, n, features)
            built[name] = metric
            seed = metric.seed
            halves = run.real_images(2 * n, seed=seed + 7)
            halves = fade_real(halves, phase.resolution, phase.alpha)
            a, b = halves[:n], halves[n:2 * n]
            results[name]["num_images"] = n
            results[name]["real"] = metric.compute(lambda k, a=a: a[:k], b, run.device)
            results[name]["untrained"] = evaluate(run, metric, n)
    from gan_kit.base.errors import GankitError
    from gan_kit.runs.resume import classes_problem

    problem = classes_problem(state, run)
    if problem:
        raise GankitError(f"{path}: {problem}")
    try:
        from gan_kit.plugin_api.ownership import load_without_frozen

        load_without_frozen(run.G_ema, state["G_ema"])  # a frozen sub-network came from its own file
    except (RuntimeError, KeyError):  # e.g. --set changed an architecture option
        from gan_kit.plugin_api.ownership import frozen_files
        from gan_kit.runs.checkpoint import misfit, written_by

        detail = misfit(run.G_ema.state_dict(), state.get("G_ema"), list(frozen_files(run.G_ema)))
        raise GankitError(f"{path}: {written_by(state)}; its G_ema does not fit the recipe's networks ({detail}); "
                          f"--set may change the data and metrics, not the architecture") from None
    run.set_phase(phase)
    if standing_stats:
        from gan_kit.tools.standing import standing_statistics

        standing_statistics(run.G_ema, standing_stats, standing_batch, run.latent_dim, run.num_classes,
                            device=run.device, who=f"{path}'s G_ema (architecture {recipe.architecture.name!r})")
    with showing_progress(progress):
        for name, metric in built.items():
            if stats is not None:
                fakes, _ = image_batches(run, metric, metric.num_images, truncation=truncation_normal)
                results[name]["trained"] = metric.compute_against(fakes, stats, run.device)
            else:
                results[name]["trained"] = evaluate(run, metric, results[name].get("num_images"),
                                                    truncation=truncation_normal)
    return {
        **({"against": stats.path} if stats is not None else {}),
        "checkpoint": str(path),
        "kimg": int(state["cur_nimg"]) / 1000.0,
        "phase": {"index": phase.index, "resolution": phase.resolution, "alpha": phase.alpha},
        "dataset": recipe.data.name,
        "dataset_size": len(run.metric_dataset),
        "results": results,
    }


def _metric_factory(registry, name: str):
    """The factory of metric ``name``, or None for a name the registry does not know."""
    try:
        return registry.get("metric", name).factory
    except KeyError:
        return None


def _check_against(names: tuple[str, ...], stats, registry) -> None:
    """Refuse, before anything is built, a metric a statistics file cannot serve (one line)."""
    from gan_kit.base.errors import GankitError

    if stats is None:
        return
    for name in names:
        try:
            factory = registry.get("metric", name).factory
        except KeyError as e:
            raise GankitError(f"--metric: {e.args[0]}") from None
        if not callable(getattr(factory, "compute_against", None)):
            use = stats.meta.get("protocol") or "fid50k_full"
            if name.startswith("fid"):
                raise GankitError(f"--against: {name} compares with the data itself; --against serves the FID "
                                  f"protocols (fid50k_full, fid10k_full, ...), which name their real set as a "
                                  f"statistics file does; use --metric {use}, or drop --against")
            raise GankitError(f"--against: {name} needs the real images' features, and a statistics file holds "
                              f"only their mean and covariance; --against serves the FID protocols "
                              f"(fid50k_full, fid10k_full, ...): use --metric {use}, or drop --against")


def _check_protocol_use(built: dict, baselines: bool, stats, run, results: dict) -> None:
    """Refuse what a protocol or a statistics file cannot do (one line each), and note each
    protocol's description (``results[name]["protocol"]``) for the report line."""
    from gan_kit.base.errors import GankitError
    from gan_kit.tools.realsets import protocol_reals
    from gan_kit.tools.refstats import mismatch

    for name, metric in built.items():
        rule = getattr(metric, "real_rule", None)
        if baselines and rule is not None:
            raise GankitError(f"--baselines: {name} is a published protocol with its own real set, and the baselines "
                              f"compare two halves of the data; drop --baselines, or use --metric "
                              f"{metric.spec.family if metric.spec.family != 'pr' else 'precision-recall'}")
        if rule is None:
            continue
        desc = dict(metric.describe())
        if stats is not None:
            want = {**metric.reference_meta(run.device), "resolution": run.phase.resolution,
                    "channels": run.channels}
            refusal, note = mismatch(stats, want)
            if refusal:
                raise GankitError(refusal)
            if float(run.phase.alpha) < 1.0:
                fade = (f"the checkpoint is mid-fade (alpha {float(run.phase.alpha):.2f}): direct evaluation fades "
                        f"the reals as training did, and a statistics file's are not faded")
                note = f"{note}; {fade}" if note else fade
            count = stats.meta.get("count")
            desc["reals"] = count
            desc["reals_text"] = (f"{stats.path}" + (f" ({count:,} reals, {stats.meta.get('reals')})" if count else ""))
            desc["note"] = note
        elif getattr(metric, "needs_real", True):
            dataset, indices = protocol_reals(run, rule)
            desc["reals"] = int(indices.shape[0])
            k = getattr(metric, "neighborhood", None)
            if k is not None and desc["reals"] <= k:  # refused before any feature is computed
                raise GankitError(f"{name}: neighbourhood {k} needs more than {k} real images, and the protocol's "
                                  f"real set holds {desc['reals']:,}; use a smaller neighbourhood (pr<N>k3_full)")
            desc["reals_text"] = rule.describe(len(dataset))
        else:
            desc["reals"], desc["reals_text"] = 0, "no reals"
        results[name]["protocol"] = desc


def protocol_line(name: str, value_text: str, desc: dict[str, Any]) -> str:
    """``fid50k_full 12.34  (50,000 generated vs all 1,797 reals, inception-v3-compat
    weights-inception-2015-12-05-6726825d.pth, resize legacy_tensorflow)`` - the protocol, the
    backbone and its weights file, the resize mode and the counts, on one line."""
    gen = f"{desc['generated']:,} generated"
    if desc["generated"] != desc["protocol_count"]:
        gen += f" (num_images; the protocol's {desc['protocol_count']:,})"
    vs = f" vs {desc['reals_text']}" if desc.get("reals_text") != "no reals" else ""
    return (f"{name} {value_text}  ({gen}{vs}, {desc['backbone']} {desc['weights']}, resize {desc['resize']})")


def _source_recipe(source: str, overrides: tuple[str, ...]):
    """``(recipe, plugins)`` of ``--write-stats``'s SOURCE: a recipe file (.toml), a checkpoint or
    run directory (its saved recipe), or a folder / zip of images (image-folder at the images' own
    side, unless ``--set data.resolution=N``)."""
    from gan_kit.base.errors import GankitError
    from gan_kit.recipe import load_recipe

    p = Path(source).expanduser()
    if p.suffix == ".toml":
        return load_recipe(p, list(overrides))
    if p.is_file() and p.suffix in (".pt", ".pth") or (p.is_dir() and (p / "checkpoints").is_dir()):
        from gan_kit.runs import checkpoint as ckpt
        from gan_kit.tools.trained import checkpoint_file

        path = checkpoint_file(str(p), "gankit eval --write-stats")
        state = ckpt.load(path, map_location="cpu")
        return load_recipe(Path(f"{path}[recipe]"), list(overrides), text=state["recipe"])
    if not p.exists():
        raise GankitError(f"--write-stats: {source} not found; give a recipe (.toml), a checkpoint or run directory, "
                          f"or a folder or zip of images")
    side = _first_image_side(p)
    import json

    # A JSON string is a TOML basic string: any path, quotes and backslashes included.
    text = f'[data]\nname = "image-folder"\npath = {json.dumps(str(p.resolve()))}\nresolution = {side}\n'
    return load_recipe(Path(f"{p}[data]"), list(overrides), text=text)


def _first_image_side(p: Path) -> int:
    from gan_kit.base.errors import GankitError
    from gan_kit.training.imageio import list_images, open_image

    if p.is_dir():
        first = list_images(p, True, first_only=True)
        if not first:
            raise GankitError(f"--write-stats: folder {p} holds no images")
        with open_image(first[0]) as im:
            side = min(im.size)
    else:
        import zipfile

        from PIL import Image

        with zipfile.ZipFile(p) as zf:
            names = sorted(n for n in zf.namelist() if n.lower().endswith((".png", ".jpg", ".jpeg", ".webp", ".bmp")))
            if not names:
                raise GankitError(f"--write-stats: zip archive {p} holds no images")
            with zf.open(names[0]) as f, Image.open(f) as im:
                side = min(im.size)
    if side < 4 or side & (side - 1):
        raise GankitError(f"--write-stats: the images of {p} are {side} px, not a power of two; add --set "
                          f"data.resolution=N to resize them to N px")
    return side


def write_reference_stats(source: str, out: str | Path, metric_name: str = "fid50k_full",
                          overrides: tuple[str, ...] = (), device: str | None = None,
                          overwrite: bool = False, progress: bool = False,
                          features: dict[str, Any] | None = None, resolution: int | None = None) -> dict[str, Any]:
    """Write the reference statistics (``gan_kit.tools.refstats``) of the real set of the FID
    protocol ``metric_name`` of ``source``'s data (see ``_source_recipe``) to ``out``, a ``.npz``
    checked before the long work and written atomically. ``features``: the backbone, resize mode
    and weights (``with_features``) over the recipe's entry for the metric, if any.
    ``resolution``: box-filter the reals down to this side first, as direct evaluation of a
    progressive checkpoint in a phase at that resolution reads them (``resize_real``). Returns the
    file's metadata with ``path``. Raises ``GankitError``."""
    import hashlib

    import torch

    from gan_kit.base.errors import GankitError
    from gan_kit.base.stash import Stash
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.runs.run.build import resolve_device
    from gan_kit.tools.refstats import check_destination, write_stats
    from gan_kit.tools.realsets import protocol_reals
    from gan_kit.training.imagesets import ImageBatches

    from gan_kit.base.phase import resize_real

    dest = check_destination(out, overwrite)
    recipe, plugins = _source_recipe(source, overrides)
    if resolution is not None and (resolution < 4 or resolution & (resolution - 1) or
                                   resolution > recipe.resolution):
        raise GankitError(f"--resolution: {resolution} is not a power of two from 4 to the data's "
                          f"{recipe.resolution} px; give one (a progressive phase's resolution)")
    registry = plugins.registry
    try:
        comp = registry.get("metric", metric_name)
    except KeyError as e:
        raise GankitError(f"--metric: {e.args[0]}") from None
    if not callable(getattr(comp.factory, "statistics", None)):
        raise GankitError(f"--write-stats: {metric_name} is not an FID protocol; reference statistics (mu, sigma) are "
                          f"written for one, e.g. --metric fid50k_full")
    spec = next((s for s in recipe.metrics if s.name == metric_name), None)
    res = recipe.resolution
    dataset = registry.get("dataset", recipe.data.name).factory(recipe.data.options,
                                                                BuildContext(res, 0, recipe)).build(res)
    first = dataset[0]
    channels = int((first[0] if isinstance(first, (tuple, list)) else first).shape[0])
    options = with_features(spec.options if spec is not None else comp.Options(), features, metric_name)
    metric = comp.factory(options, BuildContext(res, channels, recipe))
    dev = resolve_device(device or recipe.run.device)
    meta = metric.reference_meta(dev)
    holder = type("Data", (), {"recipe": recipe, "registry": registry, "dataset": dataset, "stash": Stash()})()
    data, indices = protocol_reals(holder, metric.real_rule)
    size = int(metric.options.batch_size)
    n = int(indices.shape[0])
    side = resolution or res
    digest, seen = hashlib.sha256(repr((n, channels, side, side)).encode()), set()

    def real(i: int) -> torch.Tensor:
        images = resize_real(images_at(data, indices[i * size:(i + 1) * size]), side)
        if i not in seen:  # the data digest, from the first pass over the images
            seen.add(i)
            digest.update(((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy().tobytes())
        return images

    with showing_progress(progress):
        mu, sigma, count = metric.statistics(ImageBatches(n, size, watched("real images", real, n, size)), dev,
                                             real=True)
    meta.update(count=count, data_sha256=digest.hexdigest(), source=str(source), dataset=recipe.data.name,
                resolution=side, channels=channels)
    write_stats(dest, mu, sigma, meta)
    return {**meta, "path": str(dest)}
