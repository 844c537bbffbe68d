"""Resuming a run exactly: which recipe a resumed run uses, what may change, restoring the state.

A run resumes from ``<out_dir>/checkpoints/latest.pt`` (or a checkpoint file named) with the
recipe saved in it; ``init_from`` starts a new run from another run's weights instead. A recipe file
or ``--set`` given with ``--resume`` may change what can change mid-run (``MUTABLE``: the
``[run]`` table but its seed, learning rates, Adam's betas and eps, the EMA, penalty weights,
metrics, and every component option declared schedulable - a constant or a schedule, as for the
others), and every such change takes effect (the run is built from the new recipe; optimizer
hyper-parameters are written into the restored optimizer state). Any other change is refused
with one line naming the key.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

from gan_kit.runs import checkpoint as ckpt
from gan_kit.base.errors import CheckpointError, GankitError, clip
from gan_kit.runs.exported import is_export_dir, load_weights, read_config
from gan_kit.plugin_api.ownership import load_without_frozen
from gan_kit.base.options import toml_value
from gan_kit.recipe import Recipe, recipe_to_toml
from gan_kit.runs.hub import resolve_source
from gan_kit.runs.layout import CheckpointLayout

__all__ = ["MUTABLE", "ResumePoint", "SAME_DATA", "data_problem", "finished_problem", "mutable", "recipe_changes", "refused_override", "resume_run", "saved_recipe_text",
           "check_init_from", "init_from", "init_problem", "init_source"]

#: Recipe keys (prefixes) that may change when a run resumes; every other change is refused:
#: what shapes the networks, the data, the optimizer's state, the objective or the growth
#: schedule must stay as the checkpoint was trained (a changed schedule would, e.g., skip a fade).
MUTABLE = ("run.", "optim.lr", "optim.g_lr", "optim.d_lr", "optim.betas", "optim.eps", "ema.", "metric",
           "plugins", "disable_plugins", "tracker")
_PENALTY_WEIGHT = re.compile(r"penalty\[\d+\]\.weight(\..+)?$")  # a constant, or its schedule's keys


#: Keys that may change on resume when the data they lead to is the same: checked by content
#: digest once the run's data set is built (``resume_run``; ``gan_kit.training.data.digest``).
SAME_DATA = ("data.path",)


def mutable(key: str, schedulable: tuple[str, ...] = ()) -> bool:
    """Whether recipe key ``key`` (dotted, arrays as ``penalty[0].weight``) may change on resume.
    ``schedulable``: the recipe's component options that may follow a schedule
    (``schedulable_keys``), which may change as well - constant or schedule."""
    if any(key == k or key.startswith((k + ".", k + "[")) for k in schedulable):
        return True
    return (key.startswith(MUTABLE) and key != "run.seed") or bool(_PENALTY_WEIGHT.match(key))


def schedulable_keys(recipe: Recipe) -> tuple[str, ...]:
    """The dotted keys of ``recipe``'s component options declared ``schedulable`` in the tables
    a schedule may drive (``loss.x``, ``penalty[0].x``, ``update.x``, ``augment.x``,
    ``architecture.x``): what may change mid-run may change on resume too."""
    from gan_kit.base.options import option_fields, schedulable

    specs = (recipe.loss, *recipe.penalties, recipe.update, recipe.augment, recipe.architecture)
    return tuple(f"{s.key}.{f.name}" for s in specs for f in option_fields(type(s.options)) if schedulable(f))


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, item in enumerate(v):
                out.update(_flatten(item, f"{key}[{i}]."))
        else:
            out[key] = v
    return out


def _resolved(saved_text: str, plugins: Any) -> str:
    """The checkpoint's recipe with every default filled in by this gankit, so an option added
    since it was written compares equal to its default instead of '(unset)'."""
    from gan_kit.base.errors import RecipeError
    from gan_kit.recipe import load_recipe

    if plugins is None:
        return saved_text
    try:
        return recipe_to_toml(load_recipe(Path("[checkpoint recipe]"), text=saved_text, plugins=plugins)[0])
    except RecipeError:
        return saved_text  # compare what was written; a key this gankit no longer knows shows as a change


def recipe_changes(saved_text: str, recipe: Recipe, checkpoint: Path, run_dir: Path, plugins: Any = None) -> list[str]:
    """``"key: old -> new"`` for every key ``recipe`` changes against the checkpoint's recipe.

    Raises ``CheckpointError`` (one line naming the key) for a change that is not ``mutable``.
    """
    old = _flatten(tomllib.loads(_resolved(saved_text, plugins)))
    new = _flatten(tomllib.loads(recipe_to_toml(recipe)))
    free = schedulable_keys(recipe)
    changes = []
    for key in sorted(set(old) | set(new)):
        if key == "run.out_dir" or old.get(key) == new.get(key):
            continue
        # as the recipe spells them (`true`, `"bf16"`), not as Python does (`True`, `'bf16'`)
        before, after = (toml_value(t[key]) if key in t else "(unset)" for t in (old, new))
        if not mutable(key, free) and key not in SAME_DATA:
            raise CheckpointError(
                f"--resume: {checkpoint} was trained with {key} = {before}, the recipe now says {after}; this "
                f"cannot change in a resumed run: resume with the run's own recipe (`gankit run --resume {run_dir}`) "
                f"or start a new run with --out")
        changes.append(f"{key}: {before} -> {after}")
    return changes


def refused_override(overrides, run_dir: Path, saved_text: str = "") -> None:
    """Refuse, in one line, a ``--set`` that changes a key that cannot change on resume - before
    the saved recipe is validated with it (``--set architecture.name=dcgan`` would otherwise be
    reported as the saved recipe's options that dcgan does not take). Re-typing the value the
    run already has is fine."""
    from gan_kit.recipe import parse_set

    saved = tomllib.loads(saved_text) if saved_text else {}
    for item in overrides:
        try:
            keys, value = parse_set(item)
        except ValueError:
            continue  # reported by the recipe loader with the other problems
        key = ".".join(map(str, keys))
        before = _lookup(saved, keys)
        dotted = re.sub(r"\.(\d+)", r"[\1]", key)
        if mutable(dotted) or key in SAME_DATA or before == value or _same_components(value, before):
            continue
        if mutable(dotted, _saved_schedulable(saved_text)):  # a component's schedulable option
            continue
        raise CheckpointError(
            f"--resume: --set {key}: {key} cannot change in a resumed run (it may change: the [run] table but "
            f"run.seed, optim.lr/g_lr/d_lr/betas/eps, [ema], penalty weights, metrics, schedulable options); "
            f"start a new run with --out")


def _saved_schedulable(saved_text: str) -> tuple[str, ...]:
    """``schedulable_keys`` of the saved recipe (its plugins loaded), or none if it cannot load."""
    from gan_kit.base.errors import RecipeError
    from gan_kit.recipe import load_recipe

    try:
        return schedulable_keys(load_recipe(Path("[checkpoint recipe]"), text=saved_text)[0]) if saved_text else ()
    except (RecipeError, GankitError):
        return ()


def _same_components(value: Any, saved: Any) -> bool:
    """A table (or array of tables) given whole that names the same components as the saved one
    (``--set 'augment={name="ada"}'``): its defaults are filled in only when the recipe loads, so
    whether anything changed is left to ``recipe_changes``, which compares the resolved recipes
    and refuses a real change in one line."""
    if isinstance(value, dict) and isinstance(saved, dict):
        return value.get("name") == saved.get("name")
    if isinstance(value, list) and isinstance(saved, list) and len(value) == len(saved) and value:
        return all(_same_components(v, b) for v, b in zip(value, saved))
    return False


def _lookup(table: Any, keys: list) -> Any:
    for k in keys:
        try:
            table = table[k]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return table


_MISSING = object()


@attrs.frozen
class ResumePoint:
    """Where ``gankit run --resume`` continues, resolved once: the checkpoint file, its state
    (read once, on the CPU) and the recipe changes against it (already checked: a refused
    change raised). ``resume_run`` restores a run from it without reading the file again."""

    checkpoint: Path
    state: dict = attrs.field(repr=False)
    changes: tuple[str, ...] = ()

    @property
    def saved_recipe(self) -> str:
        """The resolved recipe stored in the checkpoint."""
        return self.state["recipe"]


def saved_recipe_text(checkpoint: Path) -> str:
    """The resolved recipe stored in a checkpoint (``CheckpointError`` if unreadable)."""
    return ckpt.load(checkpoint, map_location="cpu")["recipe"]


def resume_run(run: Any, path: str | Path | ResumePoint | None = None) -> list[str]:
    """Restore ``run`` from its latest (or the given) checkpoint exactly; returns the recipe
    changes (see ``recipe_changes``), which already took effect. Given a ``ResumePoint``, its
    state is used (moved to the run's device) and the file is not read again.

    Raises ``GankitError`` when there is no checkpoint, ``CheckpointError`` for a refused change
    or a checkpoint that does not fit the networks.
    """
    from gan_kit.runs.rundir import no_checkpoint_problem

    if isinstance(path, ResumePoint):  # read once by launch, on the host
        point, path = path, path.checkpoint
        state, changes = point.state, list(point.changes)
    else:
        path = Path(path) if path else CheckpointLayout(run.out_dir).latest
        if not path.is_file():
            raise GankitError(no_checkpoint_problem(run.out_dir))
        # On the host, whatever the run's device: load_state_dict copies weights and optimizer state
        # to where the networks live, and the RNG states must be CPU tensors (torch.set_rng_state
        # refuses a CUDA ByteTensor).
        state = ckpt.load(path, map_location="cpu")
        changes = recipe_changes(state["recipe"], run.recipe, path, run.out_dir, run.plugins)
    problem = classes_problem(state, run) or data_problem(state, run, changes)
    if problem:
        raise GankitError(f"--resume: {path}: {problem}")
    from gan_kit.plugin_api.ownership import check_frozen_files

    check_frozen_files(state.get("frozen_files", {}), run.frozen_files(), path)
    try:
        run.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"--resume: {path} does not fit this recipe's networks ({clip(first)})") from None
    run.last_checkpoint = run.resumed_from = path
    return changes


def finished_problem(cur_nimg: int, train_seconds: float, recipe: Recipe) -> str | None:
    """Why a run at ``cur_nimg`` images after ``train_seconds`` of training has nothing left to
    train under ``recipe`` (``run.total_kimg`` reached, or ``run.max_minutes``), with the key to
    raise; None when it may train on."""
    total = int(round(recipe.run.total_kimg * 1000))
    if cur_nimg >= total:
        return (f"--resume: the run is already at {cur_nimg / 1000:g} kimg >= run.total_kimg = {total / 1000:g}; "
                f"raise it to train further (--set run.total_kimg=...)")
    limit = recipe.run.max_minutes
    if limit is not None and train_seconds >= limit * 60:
        return (f"--resume: the run has trained {train_seconds / 60:.4g} minutes >= run.max_minutes = {limit:g}; "
                f"raise it to train further (--set run.max_minutes=...)")
    return None


def data_problem(state: dict, run: Any, changes: list[str]) -> str | None:
    """Why the run may not resume on the data set its recipe now names (``data.path`` changed,
    the images there differ from those the checkpoint trained on, by content digest), else None."""
    if not any(c.startswith("data.path:") for c in changes):
        return None
    now_path = getattr(run.recipe.data.options, "path", "?")
    saved = state.get("data_digest")
    if saved is None:
        return (f"data.path changed to {now_path}, but the checkpoint holds no digest of its data (written by an "
                f"older gankit, or the data was read lazily with cache = \"none\"): resume with the old data.path "
                f"(a symlink there works), or start a new run with --out")
    now = run.data.digest()
    if now is None:
        return (f"data.path changed to {now_path}, read lazily (cache = \"none\"): gankit cannot check it holds "
                f"the same images; resume with the old data.path (a symlink there works)")
    if now != saved:
        return (f"data.path changed to {now_path}, and the images there are not the ones this run trained on "
                f"(content digest {now[:12]} != {saved[:12]}): point data.path at a copy of the run's data, or "
                f"start a new run with --out")
    return None


def classes_problem(state: dict, run: Any) -> str | None:
    """Why a class-conditional checkpoint cannot continue on this run's data set: another number
    of classes, or the same number under other names (a renamed class folder would silently
    swap what each label means)."""
    saved, now = int(state.get("num_classes", 0)), run.num_classes
    if saved != now:
        return (f"the checkpoint was trained on {saved} classes, the data set now has {now}; "
                f"resume with the data it was trained on, or start a new run")
    old_names, new_names = list(state.get("class_names") or []), list(run.class_names)
    if old_names and new_names and old_names != new_names:
        diff = next(f"label {i}: {a!r} then, {b!r} now" for i, (a, b) in enumerate(zip(old_names, new_names)) if a != b)
        return (f"the data set's classes changed ({diff}), so each label would mean another class; "
                f"restore the class folders or start a new run")
    return None


def init_source(value: str | Path) -> Path:
    """What ``--init-from`` names: a checkpoint file, a run folder (its latest checkpoint) or a
    folder written by ``gankit export`` (the folder itself); an ``hf://`` name is resolved
    through huggingface_hub's cache first (``gan_kit.runs.hub``)."""
    path = resolve_source(value)
    if path.is_dir() and not is_export_dir(path):
        latest = CheckpointLayout(path).latest
        if not latest.is_file():
            raise CheckpointError(f"--init-from {path}: a folder that is neither a run (no checkpoints/latest.pt) nor "
                                  f"a gankit export (no config.json with format = 'gankit-export'); name a "
                                  f"checkpoint file, a run folder or an export folder")
        return latest
    return path


def _init_state(path: Path) -> dict:
    """The part of an ``--init-from`` source that ``init_problem`` reads: a checkpoint's dict, or an
    exported folder's config.json (its recipe and channels; no D, no optimizer)."""
    if is_export_dir(path):
        config = read_config(path)
        return {"recipe": config["recipe"], "channels": config["channels"], "exported": True}
    return ckpt.load(path)


def init_problem(state: dict, recipe: Recipe, channels: int | None = None) -> str | None:
    """Why the checkpoint ``state``'s networks cannot start a run of ``recipe``, told before the
    weights are tried: another architecture, final resolution or (``channels``, once the data
    set is built) image channels. None when they may fit (the weights are then loaded strictly)."""
    try:
        saved = tomllib.loads(state["recipe"])
    except (KeyError, tomllib.TOMLDecodeError):
        return "it holds no readable recipe"
    arch = saved.get("architecture", {}).get("name")
    if arch != recipe.architecture.name:
        return (f"its networks are architecture {toml_value(arch)}, this recipe builds "
                f"{toml_value(recipe.architecture.name)} (set architecture.name = {toml_value(arch)} and its options)")
    res = saved.get("data", {}).get("resolution")
    if res != recipe.resolution:
        return (f"it was trained at data.resolution = {res}, this recipe trains at {recipe.resolution} "
                f"(set data.resolution = {res})")
    if channels is not None and int(state.get("channels", channels)) != channels:
        return (f"its G makes {state['channels']}-channel images, this data set has {channels} "
                f"(convert the images: data.channels = {state['channels']} where the data set has that option)")
    return None


def check_init_from(value: str | Path, recipe: Recipe) -> None:
    """``--init-from``'s file and architecture, checked once before torchrun starts N processes
    (``CheckpointError``, one line)."""
    path = init_source(value)
    problem = init_problem(_init_state(path), recipe)
    if problem:
        raise CheckpointError(f"--init-from {path}: {problem}")


def init_from(run: Any, value: str | Path) -> Path:
    """Start ``run`` from another run's G, D and G_ema weights (fine-tuning, transfer learning;
    stylegan2-ada-pytorch's ``--resume`` with a pretrained network): the optimizers, counters,
    RNG and component state (ADA's p, path-length mean) stay fresh, as the recipe built them.

    ``value``: a checkpoint file, a run folder (its ``latest.pt``) or a folder written by
    ``gankit export`` (its ``model.safetensors`` starts both G and G_ema, read without pickle; D
    stays as the recipe initialised it, since an export carries no D), or a model file of
    another codebase (a network-snapshot pickle, read by its importer: G, D and G_ema, and ADA's
    p when the file holds its augmentation pipe and the recipe uses ADA). Raises
    ``CheckpointError`` in one line when the file is unreadable or its networks do not fit the
    recipe's (another architecture, its options, resolution or channels). Returns the path.
    """
    path = init_source(value)
    exported = is_export_dir(path)
    state = _init_state(path)  # CheckpointError names a missing or foreign file
    problem = init_problem(state, run.recipe, run.channels)
    if problem is None:
        if exported:
            weights = {"G_ema": load_weights(path, run.device)}
            weights["G"] = weights["G_ema"]
        else:
            weights = state
        names = ("G", "G_ema") if exported else tuple(n for n in ("G", "D", "G_ema") if weights.get(n) is not None)
        try:
            for name in names:
                load_without_frozen(getattr(run, name), weights[name])  # frozen sub-networks come from their files
        except (RuntimeError, KeyError, ValueError) as e:
            text = " ".join(str(e).split()).replace("Error(s) in loading state_dict for ", "")
            problem = (f"its {name} does not fit this recipe's (the architecture's options must match the "
                       f"{'exported model' if exported else 'checkpoint'}'s run: {clip(text, 500)})")
    if problem:
        raise CheckpointError(f"--init-from {path}: {problem}")
    if state.get("imported"):
        _start_components(run, state.get("components") or {})
    # the licence and origin of an imported model follow the weights into the new run's files
    run.derived_from = state.get("imported") or state.get("derived_from")
    run.initialized_networks = names
    run.initialized_from = path
    return path


def _start_components(run: Any, saved: dict) -> None:
    """An imported model's component states (ADA's p from the snapshot's augment pipe) given to
    the run's components of the same key, so a fine-tune continues with the file's
    augmentation strength; keys the recipe has no component for are left out."""
    augment = getattr(run, "augment", None)
    if "augment" in saved and augment is not None and hasattr(augment, "load_state_dict"):
        try:
            augment.load_state_dict(saved["augment"])
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise CheckpointError(f"--init-from: the imported augmentation state does not fit the recipe's [augment] "
                                  f"{run.recipe.augment.name!r} ({type(e).__name__}: {e}); use the [augment] table "
                                  f"gankit import wrote") from None
