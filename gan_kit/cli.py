"""The ``gankit`` command line (click + rich).

Every user error (``GankitError``: recipe problems, plugin problems, bad checkpoints) prints as
plain lines on stderr and exits with code 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import attrs
import click
from rich.console import Console
from rich.table import Table

from gan_kit.version import __version__
from gan_kit.cli_errors import user_errors
from gan_kit.errors import GankitError

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class _Group(click.Group):
    """A click group whose command list shows each command's whole first sentence, wrapped,
    where click cuts it at the terminal width with '...' (plugin commands included)."""

    group_class = type  # `@cli.group()` sub-groups list their commands the same way

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=10_000)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=lambda c, p, v: _version(c, v),
              help="Show the versions of gankit, torch and Python, and exit.")
@click.option("--debug", is_flag=True, help="Show full tracebacks for every command.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Train GANs from a TOML recipe. Every component is a plugin: see `gankit list-plugins`.

    Errors print as one line each (`<file>: <key>: <what> (<fix>)`) and exit with code 2;
    --debug (or GANKIT_DEBUG=1) shows the traceback instead.
    """
    ctx.meta["gankit.debug"] = debug


def _version(ctx: click.Context, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import platform

    import torch

    click.echo(f"gankit {__version__} (torch {torch.__version__}, Python {platform.python_version()})")
    ctx.exit()


def _warn_broken(plugins) -> None:
    for b in plugins.broken:
        click.echo(f"warning: {b} (gankit list-plugins marks it; fix or uninstall it)", err=True)
    _warn_unknown_disabled(plugins)


# ------------------------------------------------------------------------------------ run ----


@cli.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run directory (default: run.out_dir of the recipe).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a recipe value, e.g. --set run.total_kimg=2 --set loss.name=bce.")
@click.option("--resume", "resume", is_flag=False, flag_value="", default=None, metavar="[RUN_DIR|CHECKPOINT]",
              help="Continue a run exactly from its checkpoints/latest.pt (or the checkpoint file given), with "
                   "the recipe saved in it: `--resume runs/x` needs nothing else; with RECIPE, its run directory "
                   "(or --out). A RECIPE or --set may change what can change mid-run (lr, betas, penalty weights, "
                   "EMA, intervals, total_kimg).")
@click.option("--init-from", "init_from", default=None, metavar="CHECKPOINT",
              help="Start this new run from another run's G, D and G_ema weights (a checkpoint file, or a run "
                   "directory for its latest.pt): fine-tuning on other data; optimizers and counters start "
                   "fresh. The architecture, its options and data.resolution must match the checkpoint's.")
@click.option("--overwrite", is_flag=True, help="Replace a run already in the run directory (its metrics, "
                                                "samples and checkpoints are deleted).")
@click.option("--dry-run", is_flag=True, help="Check the recipe, build every component, print the plan "
                                              "(with --resume: the resume point and the recipe changes); no training.")
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help="Start N processes through torchrun (one per GPU).")
@user_errors
def run(recipe: Path | None, out_dir: Path | None, overrides: tuple[str, ...], resume: str | None,
        init_from: str | None, overwrite: bool, dry_run: bool, nproc: int | None) -> None:
    """Train the GAN described by RECIPE (or continue the run in RUN_DIR with --resume)."""
    from gan_kit.engine import Run, preflight, train
    from gan_kit.launch import load_for_run, resume_source

    resuming = resume is not None
    if resuming and overwrite:
        raise GankitError("--resume and --overwrite contradict each other: --resume continues the run, "
                          "--overwrite deletes it (choose one)")
    if resuming and init_from is not None:
        raise GankitError("--resume and --init-from contradict each other: --resume continues a run with its "
                          "optimizers and counters, --init-from starts a new one from its weights (choose one)")
    source = resume_source(resume, out_dir) if resuming else None
    launcher = nproc is not None and nproc > 1 and "LOCAL_RANK" not in os.environ
    if launcher and not dry_run:
        # Problems every process would hit are reported here, once, before torchrun starts.
        r, plugins, _ = load_for_run(recipe, out_dir, overrides, resume)
        preflight(r, plugins, nproc, check_run_dir=not (resuming or overwrite), resume=resuming and source is None,
                  check_lock=True)
        if init_from is not None:
            from gan_kit.resume import check_init_from

            check_init_from(init_from, r)
        from gan_kit.distributed import launch

        sys.exit(launch(nproc, sys.argv[1:]))

    distributed = None
    if "LOCAL_RANK" in os.environ:
        from gan_kit import distributed

        distributed.init()
    clean = False
    try:
        r, plugins, changes = load_for_run(recipe, out_dir, overrides, resume)
        _warn_broken(plugins)
        the_run = Run(r, plugins)
        if init_from is not None:
            from gan_kit.resume import init_from as load_weights

            load_weights(the_run, init_from)
        if dry_run:
            if launcher:  # planned here, once; still check the batches for nproc processes
                preflight(r, plugins, nproc, check_run_dir=False)
            _print_plan(the_run, changes if resuming else None, source[1] if source else None)
            clean = True
            return
        train(the_run, resume=source[1] if source else resuming, overwrite=overwrite)
        clean = True
    finally:
        if distributed is not None:
            the_run = None  # noqa: F841 - its DDP wrappers must go before the process group
            distributed.shutdown(clean=clean)


def _print_plan(run, changes: list[str] | None = None, checkpoint: Path | None = None) -> None:
    console = Console(soft_wrap=True)  # long paths stay on one line (logs, pipes)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    r = run.recipe
    console.print(f"recipe {r.path}: ok")
    console.print(f"device {run.device} ({run.precision}); data {r.data.name}: {len(run.dataset)} images "
                  f"{run.channels}x{r.resolution}x{r.resolution}")
    console.print(f"G {r.architecture.name}: {count(run.G):,} parameters; D: {count(run.D):,} parameters")
    console.print(f"loss {r.loss.name}; penalties {', '.join(f'{p.name} x{p.weight:g}' for p in run.penalties) or 'none'}; "
                  f"update {r.update.name}; init {r.init.name}")
    table = Table("phase", "resolution", "starts at kimg", "fade kimg", "batch", "lr scale")
    for ph in run.phases():
        table.add_row(str(ph.index), f"{ph.resolution}px", f"{ph.start_nimg / 1000:g}", f"{ph.fade_nimg / 1000:g}",
                      str(ph.batch_size), f"{ph.lr_scale:g}")
    console.print(table)
    if changes is not None:
        from gan_kit.rundir import latest_checkpoint
        from gan_kit import checkpoint as ckpt

        checkpoint = checkpoint or latest_checkpoint(run.out_dir)
        state = ckpt.load(checkpoint)
        console.print(f"resume from {checkpoint} at kimg {state['cur_nimg'] / 1000:g} "
                      f"(step {state['step']}, tick {state['tick']})")
        console.print("recipe changes: " + ("; ".join(changes) if changes else "none"))
    if run.initialized_from is not None:
        console.print(f"G, D and G_ema start from the weights of {run.initialized_from}")
    console.print(f"total {run.total_nimg / 1000:g} kimg -> {run.out_dir}")


# ---------------------------------------------------------------------------- list-plugins ----


def _option_rows(options_cls) -> list[dict]:
    """Every option of an Options class: name, type (TOML terms), default (None if required), help."""
    from gan_kit.options import describe_type, field_default, option_fields

    rows = []
    for f in option_fields(options_cls):
        default = field_default(f)
        rows.append({"name": f.name, "type": describe_type(f.type),
                     "default": default if default is not attrs.NOTHING else None,
                     "required": default is attrs.NOTHING,
                     "help": f.metadata.get("help", "")})
    return rows


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


@cli.command("list-plugins")
@click.option("--kind", type=click.Choice(list(__import__("gan_kit.registry", fromlist=["KINDS"]).KINDS)),
              default=None, help="Only components of this kind.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("-v", "--verbose", is_flag=True, help="Also print every option with type, default and help.")
@user_errors
def list_plugins(kind: str | None, as_json: bool, verbose: bool) -> None:
    """List every registered component and the plugin that registered it.

    Plugins that failed to import are listed too, marked broken, with their error.
    """
    from gan_kit.options import toml_value
    from gan_kit.plugins import build_plugins

    plugins = build_plugins()
    comps = [c for c in plugins.registry if kind is None or c.kind == kind]
    if as_json:
        out = []
        for c in comps:
            item = {"kind": c.kind, "name": c.name, "plugin": c.plugin, "summary": c.summary, "broken": False}
            if verbose:
                item["options"] = _jsonable(_option_rows(c.Options))
            out.append(item)
        for b in plugins.broken:
            out.append({"kind": None, "name": b.name, "plugin": b.source, "summary": "", "broken": True,
                        "error": b.error})
        click.echo(json.dumps(out, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="gankit components")
    table.add_column("kind", no_wrap=True, min_width=6)
    table.add_column("name", no_wrap=True)
    table.add_column("plugin", no_wrap=True)
    table.add_column("summary", overflow="fold")  # wrapped, never cut mid-sentence
    for c in comps:
        table.add_row(c.kind, c.name, c.plugin, c.summary)
    for b in plugins.broken:
        dist, _, entry_point = b.source.partition(", ")
        table.add_row("[bold red]BROKEN[/]", b.name, dist, f"[red]{b.error}[/] ({entry_point})")
    console.print(table)
    if verbose:
        for c in comps:
            rows = _option_rows(c.Options)
            if not rows:
                continue
            t = Table("option", "type", "default", "help", title=f"{c.kind} {c.name}", title_justify="left")
            for row in rows:
                t.add_row(row["name"], row["type"], "(required)" if row["required"] else toml_value(row["default"]),
                          row["help"])
            console.print(t)
    for b in plugins.broken:
        click.echo(f"warning: {b}", err=True)


@cli.command("plugins")
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--hook", "hook", default=None, metavar="NAME", help="Only plugins that implement this hook.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@user_errors
def plugins_command(recipe: Path | None, hook: str | None, as_json: bool) -> None:
    """List every loaded plugin - built-in, entry point, hook-only ones included - with its
    version and the hooks it implements; with RECIPE, also the plugins its `plugins = [...]`
    loads (and without those its `disable_plugins` switches off).

    A plugin's name is what GANKIT_DISABLE_PLUGINS (and a recipe's disable_plugins) take.
    """
    from gan_kit.plugins import build_plugins, disabled_names
    from gan_kit.registry import suggest

    if recipe is not None:
        from gan_kit.recipe import load_recipe

        plugins = load_recipe(recipe)[1]
    else:
        plugins = build_plugins()
    infos = plugins.describe()
    if hook is not None:
        known = sorted({h for i in infos for h in i.hooks} | set(_hook_names()))
        if hook not in known:
            raise GankitError(f"--hook: unknown hook {hook!r}{suggest(hook, known)}; hooks: {', '.join(known)}")
        infos = [i for i in infos if hook in i.hooks]
    if as_json:
        out = [{"name": i.name, "version": i.version, "source": i.source, "hooks": list(i.hooks)} for i in infos]
        out += [{"name": b.name, "source": b.source, "hooks": [], "broken": b.error} for b in plugins.broken]
        click.echo(json.dumps(out, indent=2))
        return
    console = Console(width=None if sys.stdout.isatty() else 200)
    table = Table(title="gankit plugins")
    table.add_column("plugin", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("hooks")
    for i in infos:
        table.add_row(i.name, i.version, ", ".join(i.hooks))
    for b in plugins.broken:
        table.add_row(f"[bold red]BROKEN[/] {b.name}", b.source, f"[red]{b.error}[/]")
    console.print(table)
    if plugins.disabled:
        click.echo(f"disabled: {', '.join(plugins.disabled)}")
    _warn_unknown_disabled(plugins)


def _warn_unknown_disabled(plugins) -> None:
    for name in plugins.unknown_disabled:
        click.echo(f"warning: GANKIT_DISABLE_PLUGINS / disable_plugins names {name!r}, which matches no plugin "
                   f"(`gankit plugins` lists their names)", err=True)


def _hook_names() -> list[str]:
    from gan_kit import hookspecs

    return sorted(n for n in dir(hookspecs) if getattr(getattr(hookspecs, n), "gankit_spec", None) is not None)


# ---------------------------------------------------------------------------------- recipe ----


@cli.group()
def recipe() -> None:
    """Inspect and check recipes."""


@recipe.command("show")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
@user_errors
def recipe_show(path: Path, overrides: tuple[str, ...]) -> None:
    """Print the resolved recipe as TOML: extends merged, --set applied, every default filled in.

    The output is a recipe itself: loading it gives the same recipe.
    """
    from gan_kit.recipe import load_recipe, recipe_to_toml

    r, plugins = load_recipe(path, list(overrides))
    _warn_broken(plugins)
    click.echo(recipe_to_toml(r, f"# {path} resolved by gankit {__version__}"), nl=False)


@recipe.command("check")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
@user_errors
def recipe_check(path: Path, overrides: tuple[str, ...]) -> None:
    """Exit 0 if the recipe is valid, else print every problem and exit 2."""
    from gan_kit.recipe import load_recipe

    r, plugins = load_recipe(path, list(overrides))
    _warn_broken(plugins)
    if r.metrics or r.architecture.slot.conditional:
        # What the data set decides (a metric asking for more images than it holds, a data set
        # below a metric's minimum, labels for a conditional run) is known only once it is built.
        from gan_kit.components import BuildContext
        from gan_kit.datachecks import labels_problem, metric_cap_note, metric_problem

        ctx = BuildContext(resolution=r.resolution, channels=0, recipe=r)
        data = plugins.registry.get("dataset", r.data.name).factory(r.data.options, ctx).build(r.resolution)
        problem = labels_problem(r, data)
        problems = [f"{path}: {problem}"] if problem else []
        for spec in r.metrics:
            metric = plugins.registry.get("metric", spec.name).factory(spec.options, ctx)
            problem = metric_problem(spec, metric, len(data), r.data.name)
            if problem:
                problems.append(f"{path}: {problem}")
            note = None if problem else metric_cap_note(spec, metric, len(data), r.data.name)
            if note:
                click.echo(note, err=True)
        if problems:
            raise GankitError("\n".join(problems))
    click.echo(f"{path}: ok")


# ---------------------------------------------------------------------------------- sample ----


@cli.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-n", "--n", "num", type=click.IntRange(1), default=64, show_default=True,
              help="Number of images (with --interpolate: of rows).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the latents.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("grid.png"),
              show_default=True, help="Image file for the grid (.gif with --interpolate: an animation).")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi: W pulled toward its average (0 = the average image, 1 = none); "
                   "architectures with a mapping network (stylegan2).")
@click.option("--interpolate", "steps", type=click.IntRange(2), default=None,
              help="Latent interpolation: each row walks from one z to another in STEPS images (spherical, "
                   "as for Gaussian latents; White 2016).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs: every image of class K, an index or a class name (image-folder's "
                   "sub-folder); default: one row per class.")
@user_errors
def sample(checkpoint: Path, num: int, seed: int, out: Path, psi: float, steps: int | None,
           class_: str | None) -> None:
    """Write a grid of images from the checkpoint's G_ema at its resolution (cells upscaled to at
    least 32 px, like the run's own grids), or a latent interpolation strip or GIF. A
    class-conditional G draws class K with --class K, else one row per class."""
    import torch

    from gan_kit.checkpoint import load_generator
    from gan_kit.grids import save_grid
    from gan_kit.sampling import interpolate_latents, save_gif

    suffix = out.suffix.lower()
    if suffix not in (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".gif"):
        raise GankitError(f"--out: {str(out)!r} has no image extension (use .png or .jpg, or .gif with --interpolate)")
    if suffix == ".gif" and steps is None:
        raise GankitError("--out: a .gif needs --interpolate STEPS (a grid is written as .png or .jpg)")
    from gan_kit import checkpoint as ckpt

    state = ckpt.load(checkpoint)  # once: the generator and the class names come from it
    G_ema, phase, recipe, arch = load_generator(checkpoint, state=state)
    if psi != 1.0 and not arch.supports_truncation:
        raise GankitError(f"--truncation: architecture {recipe.architecture.name!r} has no mapping network to "
                          f"truncate (use stylegan2, or leave --truncation at 1)")
    classes = arch.context.num_classes
    if class_ is not None and not classes:
        raise GankitError(f"--class: {checkpoint} is not class-conditional (its recipe has no "
                          f"architecture.conditional = true); leave --class out")
    names = [str(n) for n in state.get("class_names") or []]
    label = _class_index(class_, checkpoint, classes, names) if class_ is not None else None
    gen = torch.Generator().manual_seed(seed)
    nrow = steps
    if classes and label is None and steps is None:
        per_row = max(1, num // classes)  # one row per class, like the run's own grids
        num, nrow = per_row * classes, per_row
        labels = torch.arange(classes).repeat_interleave(per_row)
    elif classes:  # class K everywhere, or an interpolation row per class, cycling
        labels = torch.full((num,), label, dtype=torch.int64) if label is not None else torch.arange(num) % classes
    if steps is None:
        z = torch.randn(num, arch.latent_dim, generator=gen)
    else:
        z = interpolate_latents(torch.randn(num, 2, arch.latent_dim, generator=gen), steps).flatten(0, 1)
        if classes:
            labels = labels.repeat_interleave(steps)
    kwargs = {"truncation_psi": psi, "noise_mode": "const"} if arch.supports_truncation else {}
    with torch.no_grad():
        chunks = []
        for i in range(0, len(z), 64):
            args = (z[i:i + 64],) if not classes else (z[i:i + 64], labels[i:i + 64])
            chunks.append(G_ema(*args, **kwargs).float())
        images = torch.cat(chunks)
    if suffix == ".gif":
        save_gif(images.reshape(num, steps, *images.shape[1:]), out)
    else:
        save_grid(images, out, nrow=nrow)
    what = f"{num} interpolations of {steps} images" if steps else f"{num} images"
    if classes:
        what += f" of class {label}" if label is not None else f", {classes} classes"
    click.echo(f"wrote {what} at {phase.resolution}px (alpha {phase.alpha:.2f}) to {out}")


def _class_index(value: str, checkpoint: Path, classes: int, names: list[str]) -> int:
    """``--class`` as a label: an index in ``[0, classes)`` or one of the checkpoint's class
    ``names`` (image-folder's sub-folders, in label order)."""
    if value in names:
        return names.index(value)
    try:
        index = int(value)
    except ValueError:
        known = f"its classes: {', '.join(names)}" if names else "its classes are numbered, it has no names"
        raise GankitError(f"--class: {value!r} is not a class of {checkpoint} ({known})") from None
    if not 0 <= index < classes:
        raise GankitError(f"--class: {index} is not a class of {checkpoint} (0 to {classes - 1})")
    return index


from gan_kit.evaluate import eval_command  # noqa: E402
from gan_kit.report import report  # noqa: E402
from gan_kit.sweep.commands import add_commands as add_sweep_commands  # noqa: E402

cli.add_command(eval_command, "eval")
cli.add_command(report)
add_sweep_commands(cli)  # gankit sweep, gankit compare


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                               "help_option_names": []})
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Time every update strategy side by side on a recipe (see `gankit bench --help`)."""
    # The benchmark (and its hand-written reference loop) stays out of the import path of
    # training: loaded only when asked for.
    from gan_kit.bench import bench as bench_command

    bench_command.main(args=ctx.args, prog_name="gankit bench", standalone_mode=True)


def main() -> None:
    """Console-script entry point: add plugin commands, then run the click group.

    If the plugins cannot be built (a duplicate component, a misspelled hook), their commands are
    skipped here and every command that needs the plugins reports the error itself, so
    ``--help`` and ``--version`` keep working.
    """
    try:
        from gan_kit.plugins import build_plugins

        plugins = build_plugins()
        plugins.hook.register_commands(cli=cli)
    except GankitError:
        if "--debug" in sys.argv:
            raise
    cli(prog_name="gankit")
