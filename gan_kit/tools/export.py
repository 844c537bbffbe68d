"""``gankit export``: a checkpoint's G_ema as a folder that leaves gankit.

The folder has the layout the Hugging Face Hub expects of a model repository, so
``huggingface_hub.upload_folder(folder_path=DIR, repo_id=...)`` publishes it unchanged:

- ``model.safetensors`` - G_ema's state dict (buffers included: StyleGAN2's ``w_avg``, the
  constant noise), read back by ``gankit sample DIR`` and ``gankit run --init-from DIR`` without
  pickle;
- ``config.json`` - what G is: architecture and options, resolution, alpha, channels, latent
  size, classes, truncation, the versions, the whole resolved recipe;

No file of the folder names a folder, user or host of the machine it was made on: the recipe's
absolute paths are cut to their last part, URLs to their scheme, the checkpoint is named from its
run directory's name on, and the TorchScript and ONNX files leave out the source-file records
torch writes into them (``gan_kit.tools.shareable``).
- ``README.md`` - the model card (YAML front matter for the Hub; how it was trained, the run's
  metrics, a sample grid, how to load it);
- ``samples.png`` - a grid of G_ema's images on latents of seed 0;
- ``model.ts`` (TorchScript) and ``model.onnx`` - G_ema traced with constant noise and the chosen
  truncation: ``images[N, C, r, r] = model(z[N, latent_dim])`` (``model(z, labels[N])`` for a
  class-conditional G), values in about [-1, 1]; they run with only ``torch`` or only
  ``onnxruntime`` installed.

The folder is checked before the checkpoint is read: a run directory, the checkpoint's own
folder or a folder holding checkpoints is refused (an export there would shadow the run for the
commands given that folder), and a folder that cannot be written fails in one line. Every file
is written under a temporary name and renamed once all are written, so a failed export leaves
the folder as it was.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
import tomllib
from safetensors.torch import save_file
from torch import nn

from gan_kit.runs.checkpoint import load as load_checkpoint
from gan_kit.runs.checkpoint import load_generator
from gan_kit.base.errors import GankitError, clip
from gan_kit.runs.layout import CheckpointLayout
from gan_kit.runs.exported import CONFIG_FILE, EXPORT_FORMAT, EXPORT_FORMAT_VERSION, WEIGHTS_FILE
from gan_kit.tools.grids import save_grid
from gan_kit.tools.shareable import shareable_recipe, strip_onnx_stack_traces, without_source_paths
from gan_kit.tools.outputs import check_folder, staged_outputs
from gan_kit.tools.trained import check_finite_psi, checkpoint_file
from gan_kit.tools.seeds import check_truncation, truncated_randn
from gan_kit.tools.standing import check_standing, standing_statistics
from gan_kit.base.version import __version__

__all__ = ["FORMATS", "ExportedGenerator", "export_model"]

#: What ``--format`` accepts; the default writes all of them.
FORMATS = ("safetensors", "torchscript", "onnx")
ONNX_OPSET = 18


class ExportedGenerator(nn.Module):
    """G_ema fixed for export: deterministic (constant noise, no style mixing, no ``w_avg``
    update), truncation ``psi`` baked in. ``forward(z[N, latent_dim], labels[N] int64 = None)
    -> images[N, C, r, r]``; ``labels`` only for a class-conditional G. With ``transform_input``
    (an architecture with ``set_output_transform``: stylegan3) a last input ``transform[3, 3]``
    float32 follows: the synthesis input's user transform, the inverse of the output's rotation
    and translation (``user_transform(translate, rotate)``; the identity draws G's images)."""

    def __init__(self, G: nn.Module, *, conditional: bool, kwargs: dict, transform_input: bool = False):
        super().__init__()
        self.G = G
        self.conditional = conditional
        self.transform_input = transform_input
        self.kwargs = dict(kwargs)

    def forward(self, z: torch.Tensor, second: torch.Tensor | None = None,
                third: torch.Tensor | None = None) -> torch.Tensor:
        # Positional, so a trace takes (z), (z, labels), (z, transform) or (z, labels, transform).
        labels = second if self.conditional else None
        transform = (third if self.conditional else second) if self.transform_input else None
        args = (z, labels) if self.conditional else (z,)
        kwargs = dict(self.kwargs, transform=transform) if self.transform_input else self.kwargs
        return self.G(*args, **kwargs)


def export_model(checkpoint: str | Path, out: str | Path, formats: Sequence[str] = FORMATS,
                 truncation_psi: float = 1.0, *, seed: int = 0, truncation_normal: float | None = None,
                 standing_stats: int = 0, standing_batch: int = 64) -> dict:
    """Write the export folder ``out`` from ``checkpoint``'s G_ema (a checkpoint file, or a run
    directory: its ``checkpoints/latest.pt``); return its ``config.json``.

    ``formats``: any of ``FORMATS`` (config.json, README.md and samples.png are always written).
    ``truncation_psi`` is baked into the TorchScript and ONNX files and recorded in config.json;
    values other than 1 need an architecture with a mapping network (StyleGAN2).
    ``standing_stats``: G_ema's BatchNorm running statistics recomputed first from that many
    batches of ``standing_batch`` latents (seed 0; ``gan_kit.tools.standing``), so the weights,
    model.ts and model.onnx carry them. ``truncation_normal``: the latents the model is meant
    for are the normal truncated to [-t, t] (BigGAN's truncation trick): config.json's ``z``
    input says so and samples.png is drawn from them; the traced model takes any z. Raises
    ``GankitError`` for an unknown format or a truncation the architecture cannot apply, and
    ``CheckpointError`` / ``RecipeError`` for an unreadable checkpoint.
    """
    if not formats:
        raise GankitError(f"--format: no format named (choose one or more of {', '.join(FORMATS)})")
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise GankitError(f"--format: unknown format {unknown[0]!r} (choose from {', '.join(FORMATS)})")
    if "onnx" in formats:
        _require_onnx()  # before anything is written: no half-written folder that reads as foreign
    check_finite_psi(truncation_psi)
    check_truncation(truncation_normal)
    check_standing(standing_stats, standing_batch)
    checkpoint, out = checkpoint_file(checkpoint, "gankit export"), Path(out)  # a run directory: its latest.pt
    _check_out(out, checkpoint)
    state = load_checkpoint(checkpoint)
    G, phase, recipe, arch = load_generator(checkpoint, state=state)
    if truncation_psi != 1.0 and not arch.supports_truncation:
        raise GankitError(f"--truncation: architecture {recipe.architecture.name!r} has no mapping network to "
                          f"truncate (use 1, or export a stylegan2 checkpoint)")
    num_classes = int(arch.context.num_classes)
    if standing_stats:
        standing_statistics(G, standing_stats, standing_batch, int(arch.latent_dim), num_classes,
                            who=f"{checkpoint}'s G_ema (architecture {recipe.architecture.name!r})")
    kwargs = {"truncation_psi": float(truncation_psi), "noise_mode": "const"} if arch.supports_truncation else {}
    transform_input = hasattr(arch, "set_output_transform")
    model = ExportedGenerator(arch.export_view(G), conditional=num_classes > 0, kwargs=kwargs,
                              transform_input=transform_input).eval()
    config = _config(state, recipe, arch, phase, truncation_psi, formats, checkpoint, truncation_normal,
                     standing_stats and {"batches": standing_stats, "batch_size": standing_batch, "seed": 0})
    identity = (torch.eye(3),) if transform_input else ()
    example = _example_inputs(arch.latent_dim, num_classes, batch=2, seed=seed) + identity
    grid_inputs = _example_inputs(arch.latent_dim, num_classes, batch=_grid_count(num_classes), seed=seed,
                                  truncation=truncation_normal) + identity
    # Every file under a temporary name beside its own, all renamed once the last is written: a
    # failed or interrupted export leaves the folder as it was (a previous export whole).
    with staged_outputs("--out") as staged:
        if "safetensors" in formats:
            # Tied or shared storages would be refused by safetensors: every tensor saved on its own.
            save_file({k: v.detach().cpu().contiguous().clone() for k, v in G.state_dict().items()},
                      str(staged.path(out / WEIGHTS_FILE)), metadata={"format": EXPORT_FORMAT,
                                                                      "gankit_version": __version__})
        if "torchscript" in formats or "onnx" in formats:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                warnings.simplefilter("ignore", FutureWarning)  # torch marks jit.trace deprecated; the file format stays
                traced = torch.jit.trace(model, example, check_trace=False)
            if "torchscript" in formats:
                traced = without_source_paths(traced)
                traced.save(str(staged.path(out / "model.ts")))
            if "onnx" in formats:
                _export_onnx(model, example, staged.path(out / "model.onnx"), num_classes > 0, transform_input)
        with torch.no_grad():
            save_grid(model(*grid_inputs).float(), staged.path(out / "samples.png"), nrow=_grid_rows(num_classes))
        staged.path(out / CONFIG_FILE).write_text(json.dumps(config, indent=2, allow_nan=False) + "\n",
                                                  encoding="utf-8")
        staged.path(out / "README.md").write_text(model_card(config, _run_metrics(checkpoint)), encoding="utf-8")
        for plugin in _plugin_files(state["recipe"]):
            # the recipe names its plugin files by their last part (shareable_recipe): they travel
            # with the export, so G rebuilds from the folder alone
            staged.path(out / plugin.name).write_bytes(plugin.read_bytes())
    # A model file of a format not exported now is an earlier export's (another checkpoint's
    # weights beside this config.json): removed once the new files are in place, so a failed
    # export still leaves the previous one whole.
    for name, file in {"safetensors": WEIGHTS_FILE, "torchscript": "model.ts", "onnx": "model.onnx"}.items():
        if name not in formats:
            (out / file).unlink(missing_ok=True)
    return config


def _plugin_files(recipe_text: str) -> list[Path]:
    """The recipe's ``plugins`` entries that are .py files on this machine (module names are
    installed packages, which do not travel)."""
    plugins = tomllib.loads(recipe_text).get("plugins") or []
    return [Path(p) for p in plugins if isinstance(p, str) and p.endswith(".py") and Path(p).is_file()]


def _check_out(out: Path, checkpoint: Path) -> None:
    """Refuse (one line) an ``--out`` that is a run directory or the folder of the checkpoint:
    an export's config.json there would make ``gankit sample RUN`` read the export (frozen at
    export time) instead of the run's latest checkpoint. Then prove the folder can be written
    (``check_folder``), before the checkpoint is read."""
    from gan_kit.runs.rundir import RUN_FILES

    here = out.resolve()
    run_dir = CheckpointLayout.run_dir_of(checkpoint.resolve())
    if here == checkpoint.resolve().parent or (run_dir is not None and here == run_dir):
        what = "the run directory of" if run_dir is not None and here == run_dir else "the folder of"
        raise GankitError(f"--out: {out} is {what} {checkpoint}; export into a folder of its own (e.g. --out "
                          f"{(run_dir or checkpoint.parent).name}-export), so that the run and the export stay apart")
    if out.is_dir() and any((out / name).exists() for name in RUN_FILES[:4]):
        raise GankitError(f"--out: {out} is a run directory; export into a folder of its own, so that commands "
                          f"given the run keep reading its checkpoints")
    if out.is_dir() and any(out.glob("*.pt")):
        raise GankitError(f"--out: {out} holds checkpoint files (.pt); export into a folder of its own")
    check_folder(out, "--out")


def _example_inputs(latent_dim: int, num_classes: int, *, batch: int, seed: int, truncation: float | None = None):
    gen = torch.Generator().manual_seed(seed)
    z = truncated_randn(batch, latent_dim, gen, truncation)
    labels = torch.arange(batch, dtype=torch.int64) % num_classes if num_classes else None
    return (z, labels) if num_classes else (z,)


def _grid_count(num_classes: int) -> int:
    return num_classes * max(1, 64 // num_classes) if num_classes else 64


def _grid_rows(num_classes: int) -> int | None:
    return max(1, 64 // num_classes) if num_classes else None


def _require_onnx() -> None:
    """Raise ``GankitError`` (what to install) unless torch.onnx's exporter can import its packages."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401  (torch.onnx's exporter imports it; say what to install)
    except ImportError:
        raise GankitError("--format onnx needs onnx and onnxscript: pip install 'gankit[export]' ('gankit[tools]' "
                          "brings every after-training command's packages at once), or leave onnx out of --format, "
                          "e.g. --format safetensors,torchscript") from None


def _export_onnx(model: nn.Module, example: tuple, path: Path, conditional: bool, transform_input: bool = False) -> None:
    """``model.onnx`` through torch.export (the exporter torch maintains; it needs ``onnxscript``:
    ``pip install 'gankit[export]'``; ``export_model`` checks for it before writing anything), the
    batch size left free (``transform[3, 3]`` fixed)."""
    batch = torch.export.Dim("batch", min=1)
    names = (["z", "labels"] if conditional else ["z"]) + (["transform"] if transform_input else [])
    shapes = tuple(None if name == "transform" else {0: batch} for name in names)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, str(path), dynamo=True, input_names=names, output_names=["images"],
                              dynamic_shapes=shapes, opset_version=ONNX_OPSET, external_data=False, verbose=False)
    except Exception as e:  # torch.export / onnxscript raise many kinds; one line names the cause
        first = clip(str(e), 300) or type(e).__name__
        raise GankitError(f"--format onnx: this G could not be exported to ONNX ({type(e).__name__}: {first}); "
                          f"export the other formats with --format safetensors,torchscript") from None
    strip_onnx_stack_traces(path)



def _config(state: dict, recipe: Any, arch: Any, phase: Any, psi: float, formats: Sequence[str],
            checkpoint: Path, truncation_normal: float | None = None, standing: Any = None) -> dict:
    saved = tomllib.loads(state["recipe"])
    num_classes = int(arch.context.num_classes)
    z_input = {"name": "z", "shape": ["batch", arch.latent_dim], "dtype": "float32",
               "distribution": "standard normal"}
    if truncation_normal is not None:
        z_input["distribution"] = f"standard normal truncated to [-{truncation_normal:g}, {truncation_normal:g}]"
    inputs = [z_input]
    if num_classes:
        inputs.append({"name": "labels", "shape": ["batch"], "dtype": "int64", "range": [0, num_classes - 1]})
    if hasattr(arch, "set_output_transform"):
        inputs.append({"name": "transform", "shape": [3, 3], "dtype": "float32",
                       "meaning": "inverse of the output's [[cos a, sin a, tx], [-sin a, cos a, ty], [0, 0, 1]] "
                                  "(a: rotation, tx, ty: translation in image widths); identity: no transform"})
    return {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "architecture": recipe.architecture.name,
        "architecture_options": saved.get("architecture", {}),
        "resolution": phase.resolution,
        "final_resolution": recipe.resolution,
        "alpha": phase.alpha,
        # strict JSON: the last phase's end (infinity) is written as null
        "phase": {k: (None if k == "end_nimg" and not math.isfinite(getattr(phase, k)) else getattr(phase, k))
                  for k in ("index", "resolution", "alpha", "batch_size", "lr_scale", "end_nimg")},
        "channels": int(state["channels"]),
        "latent_dim": int(arch.latent_dim),
        "num_classes": num_classes,
        "class_names": [str(n) for n in state.get("class_names") or []],
        "truncation_psi": float(psi),
        # BigGAN's sampling tricks the export was made with: z's truncation (None: none) and the
        # standing statistics baked into G's BatchNorm buffers (None: the trained ones)
        "truncation_normal": None if truncation_normal is None else float(truncation_normal),
        "standing_stats": standing or None,
        "supports_truncation": bool(arch.supports_truncation),
        "noise_mode": "const" if arch.supports_truncation else None,
        "inputs": inputs,
        "output": {"name": "images", "shape": ["batch", int(state["channels"]), phase.resolution, phase.resolution],
                   "range": [-1.0, 1.0]},
        "files": {"safetensors": WEIGHTS_FILE if "safetensors" in formats else None,
                  "torchscript": "model.ts" if "torchscript" in formats else None,
                  "onnx": "model.onnx" if "onnx" in formats else None, "samples": "samples.png"},
        "kimg": round(int(state.get("cur_nimg", 0)) / 1000, 3),
        "source_checkpoint": _run_relative(checkpoint),
        "versions": {"gankit": __version__, "torch": torch.__version__, "checkpoint_gankit": state.get("gankit_version")},
        "recipe": shareable_recipe(state["recipe"]),
        # a model imported from another codebase: its format, file name, SHA-256, licence and seed rule
        "imported": state.get("imported"),
        # a run fine-tuned from an imported model: where its weights came from, and their licence
        "derived_from": state.get("derived_from"),
    }


def _run_relative(checkpoint: Path) -> str:
    """The checkpoint named from its run directory's name on (``pggan/checkpoints/latest.pt``), or
    by its file name outside a run directory: no folder of this machine leaves it."""
    path = checkpoint.resolve()
    run_dir = CheckpointLayout.run_dir_of(path)
    return f"{run_dir.name}/{path.relative_to(run_dir).as_posix()}" if run_dir is not None else path.name


def _run_metrics(checkpoint: Path) -> dict[str, float]:
    """The last value of each ``Metrics/*`` key in the run's metrics.jsonl (the checkpoint's
    ``checkpoints/`` folder's parent), up to the checkpoint's kimg; empty when there is none."""
    run_dir = CheckpointLayout.run_dir_of(checkpoint.resolve())
    path = run_dir / "metrics.jsonl" if run_dir is not None else None
    if path is None or not path.is_file():
        return {}
    last: dict[str, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        for key, value in row.items():
            if key.startswith("Metrics/") and isinstance(value, (int, float)) and math.isfinite(value):
                last[key[len("Metrics/"):]] = float(value)
        if "Progress/kimg" in row:
            last["at kimg"] = float(row["Progress/kimg"])
    return last


def model_card(config: dict, metrics: dict[str, float]) -> str:
    """The ``README.md`` of an export folder: Hub front matter, then what the model is, how it was
    trained (from the recorded recipe), its metrics and how to load it."""
    recipe = tomllib.loads(config["recipe"])
    arch, res, ch = config["architecture"], config["resolution"], config["channels"]
    penalties = ", ".join(p.get("name", "?") for p in recipe.get("penalty", [])) or "none"
    data = recipe.get("data", {})
    conditional = config["num_classes"] > 0
    tags = ["gan", "gankit", arch, "image-generation"] + (["class-conditional"] if conditional else [])
    origin = config.get("imported") or config.get("derived_from")
    # a model of another codebase keeps its licence (NVIDIA's are non-commercial): the Hub's
    # front matter says so instead of leaving the field to a default
    licence = ["license: other", f"license_name: {json.dumps(origin.get('license') or 'see the original')}"] if origin else []
    front = ["---", "library_name: gankit", *licence,
             "pipeline_tag: unconditional-image-generation" if not conditional else "pipeline_tag: image-generation",
             "tags:"] + [f"- {t}" for t in tags] + ["---", ""]
    imported = config.get("imported")
    what = (f"G_ema of a {arch} GAN trained with {imported.get('format')} (its file `{imported.get('file')}`), "
            f"imported into gankit without retraining" if imported else
            f"G_ema of a {arch} GAN trained with [gankit](https://pypi.org/project/gankit/) "
            f"{config['versions']['checkpoint_gankit'] or ''} for {config['kimg']} kimg on `{data.get('name', '?')}`")
    lines = [f"# {arch} generator, {res}x{res}, {ch} channel{'s' if ch != 1 else ''}", "",
             what + (f" ({config['num_classes']} classes)" if conditional else "") + ".", "",
             "![samples](samples.png)", "", "## Training" if not imported else "## Recipe to fine-tune it", "",
             "| | |", "|---|---|",
             f"| architecture | `{arch}` |",
             f"| loss | `{recipe.get('loss', {}).get('name', '?')}` |",
             f"| penalties | {penalties} |",
             f"| update strategy | `{recipe.get('update', {}).get('name', '?')}` |",
             f"| growth | `{recipe.get('growth', {}).get('name', '?')}` |",
             f"| data | `{data.get('name', '?')}` at {config['final_resolution']} px |",
             f"| images shown | {config['kimg']} kimg |",
             f"| truncation psi (of the traced model.ts / model.onnx) | {config['truncation_psi']} |"
             if config["files"]["torchscript"] or config["files"]["onnx"] else
             f"| truncation psi | {config['truncation_psi']} |", ""]
    imported, derived = config.get("imported"), config.get("derived_from")
    if imported:
        lines += ["## Source", "",
                  f"Imported by `gankit import` from `{imported.get('file')}` ({imported.get('format')}), SHA-256 "
                  f"`{imported.get('sha256')}`. Licence of the original: {imported.get('license') or 'not stated'}.",
                  "", *imported.get("notes", ()), "",
                  "Seed S draws `z = np.random.RandomState(S).randn(1, z_dim)`, as the original codebase's generate "
                  "script does." if imported.get("seeds") == "numpy" else "", ""]
    elif derived:
        lines += ["## Source", "",
                  f"Fine-tuned from `{derived.get('file')}` ({derived.get('format')}, SHA-256 `{derived.get('sha256')}`), "
                  f"imported by `gankit import`. Licence of the original, which this derivative inherits: "
                  f"{derived.get('license') or 'not stated'}.", ""]
    metrics = dict(metrics)
    at = metrics.pop("at kimg", None)
    if metrics:
        lines += ["## Metrics", "", f"The run's last values (metrics.jsonl{f', at {at} kimg' if at is not None else ''}):",
                  "", "| metric | value |", "|---|---|"] + [f"| {k} | {v:.4g} |" for k, v in sorted(metrics.items())] + [""]
    z_torch = f"torch.randn(16, {config['latent_dim']})"
    z_numpy = f"np.random.default_rng(0).standard_normal((16, {config['latent_dim']}), dtype=np.float32)"
    transform = any(i["name"] == "transform" for i in config["inputs"])
    call = ("model(z, labels" if conditional else "model(z") + (", transform)" if transform else ")")
    k = config["num_classes"]
    label_torch = f"labels = torch.arange(16) % {k}  # int64 class indices\n" if conditional else ""
    label_numpy = f"labels = np.arange(16, dtype=np.int64) % {k}\n" if conditional else ""
    if transform:  # StyleGAN3: the identity, G's own view (see the Inputs line)
        label_torch += "transform = torch.eye(3)\n"
        label_numpy += "transform = np.eye(3, dtype=np.float32)\n"
    feeds = ('{"z": z, "labels": labels' if conditional else '{"z": z') + (', "transform": transform}' if transform else "}")
    files = config["files"]
    use_ts = ["With PyTorch only (TorchScript):", "", "```python", "import torch", "",
              'model = torch.jit.load("model.ts")', f"z = {z_torch}", label_torch + f"images = {call}", "```", ""]
    use_onnx = ["With onnxruntime only:", "", "```python", "import numpy as np", "import onnxruntime", "",
                'session = onnxruntime.InferenceSession("model.onnx")', f"z = {z_numpy}", label_numpy
                + f"images = session.run(None, {feeds})[0]", "```", ""]
    use_gankit = ["With gankit (the safetensors weights; fine-tune with `--init-from`):", "", "```bash",
                  "gankit sample . -n 64 --out grid.png",
                  "gankit run RECIPE --init-from .   # G and G_ema from here, D fresh", "```", ""]
    lines += ["## Use", "",
              f"Inputs: `z` float32 `[N, {config['latent_dim']}]` from a standard normal"
              + (f", `labels` int64 `[N]` in 0..{config['num_classes'] - 1}" if conditional else "")
              + (", `transform` float32 `[3, 3]`: the inverse of the output's rotation by a and translation by "
                 "tx, ty image widths, inv([[cos a, sin a, tx], [-sin a, cos a, ty], [0, 0, 1]]); the identity "
                 "draws G's own view" if transform else "")
              + f"; output: images float32 `[N, {ch}, {res}, {res}]` in about [-1, 1].", "",
              ] + (use_ts if files["torchscript"] else []) + (use_onnx if files["onnx"] else []) + (
              use_gankit if files["safetensors"] else []) + ["## Recipe", "", "The recipe that builds these networks (gankit "
              "import wrote it; its training settings are the codebase's usual ones, not the file's):" if imported else
              "The resolved recipe the model was trained with:", "", "```toml",
              config["recipe"].rstrip(), "```", ""]
    return "\n".join(front + lines)
