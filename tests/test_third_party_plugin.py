"""A third-party plugin written with nothing but the names ``gan_kit`` exports: an update strategy with its own order (the G step first, then two D steps), a
penalty on the public input-gradient verb, a penalty calling ``torch.autograd.grad`` itself, a
metric, a growth scheduler, and a lifecycle-only plugin keeping its state in ``run.stash``.

It trains under fp32, bf16 (CPU autocast), fp16 (a GradScaler on the CPU), ``torch.compile``
(aot_eager) and two processes (gloo on the CPU; every rank ends with bit-identical weights); it
is listed with its hooks, and disabling it by name removes its components."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from gan_kit.base.errors import RecipeError
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.testing import make_run, train_steps, write_tiny_recipe

COMPONENTS = textwrap.dedent('''
    """Third-party components, on the public gan_kit API only."""
    import math

    import attrs
    import torch

    from gan_kit import GrowthScheduler, Metric, Penalty, Phase, UpdateStrategy, hookimpl, option

    __version__ = "0.3.0"


    class GFirst(UpdateStrategy):
        """G step (D frozen), then two critic steps on fresh fakes; records the order it ran."""

        order = []  # ("G" | "D", step) of every optimizer step taken, for the test

        @property
        def d_steps(self):
            return 2

        def step(self, ctx):
            n = ctx.reals[0].shape[0]
            ctx.zero_grad("G")
            with ctx.frozen("D"):
                with ctx.autocast():
                    fake = ctx.G(ctx.latent(n))
                    logits = ctx.D(fake)
                g_loss, g_stats = ctx.g_objective(logits, fake)
                ctx.backward(g_loss, "G")
            if ctx.opt_step("G"):
                self.order.append(("G", ctx.step))
            for real in ctx.reals:
                with torch.no_grad(), ctx.autocast():
                    fake = ctx.G(ctx.latent(n))
                ctx.zero_grad("D")
                total, stats = ctx.d_objective(real, fake)
                ctx.backward(total, "D")
                if ctx.opt_step("D"):
                    self.order.append(("D", ctx.step))
            return {**stats, **g_stats}


    class InputGradR1(Penalty):
        """0.5 E||grad D(real)||^2 through the public verb ctx.input_gradients."""

        def __call__(self, inputs, ctx):
            grad = ctx.input_gradients(inputs.D, inputs.real)
            return 0.5 * grad.flatten(1).square().sum(1).mean()


    class AutogradR2(Penalty):
        """0.5 E||grad D(fake)||^2, taking the gradient with torch.autograd.grad itself."""

        def __call__(self, inputs, ctx):
            x = inputs.fake.detach().float().requires_grad_(True)
            with ctx.autocast():
                logits = inputs.D(x)
            (grad,) = torch.autograd.grad(logits.float().sum(), x, create_graph=True)
            return 0.5 * grad.float().flatten(1).square().sum(1).mean()


    class MeanGap(Metric):
        unit = "px"
        higher_is_better = False
        num_images = 16

        def compute(self, generate, reals, device):
            return {"Metrics/tp-mean-gap": float((generate(reals.shape[0]).mean() - reals.mean()).abs())}


    class TwoPhases(GrowthScheduler):
        """4 px for the first iteration's 16 images, then 8 px fading in over 32 images."""

        @attrs.frozen
        class Options:
            batch_size: int = option(8, help="Global batch size.")

        def resolutions(self):
            return [4, 8]

        def phase_at(self, cur_nimg):
            b = self.options.batch_size
            if cur_nimg < 16:
                return Phase(index=0, resolution=4, alpha=1.0, batch_size=b, start_nimg=0, end_nimg=16)
            return Phase(index=1, resolution=8, alpha=min(1.0, (cur_nimg - 16) / 32), batch_size=b,
                         start_nimg=16, end_nimg=math.inf, fade_nimg=32)


    @hookimpl
    def register_update_strategies(register):
        register("tp-g-first", GFirst)


    @hookimpl
    def register_penalties(register):
        register("tp-input-grad", InputGradR1)
        register("tp-autograd", AutogradR2)


    @hookimpl
    def register_metrics(register):
        register("tp-mean-gap", MeanGap)


    @hookimpl
    def register_growth_schedulers(register):
        register("tp-two-phases", TwoPhases)
''')

EVENTS = textwrap.dedent('''
    """A lifecycle-only plugin: counts events in run.stash, writes them and closes its file in run_teardown."""
    import hashlib
    import json

    import attrs
    import torch

    from gan_kit import StashKey, hookimpl


    @attrs.define
    class Counts:
        file: object
        steps: int = 0
        ticks: int = 0
        phases: list = attrs.field(factory=list)


    counts_key = StashKey[Counts]()


    @hookimpl
    def run_started(run):
        run.stash[counts_key] = Counts(open(run.out_dir / f"events-{run.rank}.log", "w"))


    @hookimpl
    def phase_started(run, phase):
        run.stash[counts_key].phases.append(phase.resolution)


    @hookimpl
    def step_finished(run, stats):
        c = run.stash[counts_key]
        c.steps += 1
        c.file.write(f"step {run.step} D={stats['Loss/D']:.4f}\\n")


    @hookimpl
    def tick_finished(run, stats):
        run.stash[counts_key].ticks += 1


    @hookimpl
    def run_teardown(run, error):
        c = run.stash.get(counts_key, None)
        if c is None:
            return
        c.file.close()
        flat = torch.cat([p.detach().reshape(-1).cpu() for p in [*run.G.parameters(), *run.D.parameters()]])
        (run.out_dir / f"events-{run.rank}.json").write_text(json.dumps({
            "steps": c.steps, "ticks": c.ticks, "phases": c.phases, "error": repr(error),
            "closed": c.file.closed, "weights": hashlib.sha256(flat.numpy().tobytes()).hexdigest()}))
''')

#: The tiny recipe (gan_kit.testing) with the plugin's components chosen.
OVERRIDES = [
    "update.name=tp-g-first",
    'penalty=[{name="tp-input-grad", weight=1.0}, {name="tp-autograd", weight=1.0}]',
    'metric=[{name="tp-mean-gap", every_kimg=0.016}]',
    'growth={name="tp-two-phases", batch_size=8}',
]

PRECISIONS = {
    "fp32": [],
    "bf16": ["run.precision=bf16"],
    "fp16": ["run.precision=fp16"],
    "compile": ["run.compile=true", "run.compile_backend=aot_eager"],
}


def write_plugins(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    comps, events = folder / "tp_components.py", folder / "tp_events.py"
    comps.write_text(COMPONENTS, encoding="utf-8")
    events.write_text(EVENTS, encoding="utf-8")
    return comps, events


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def plugin_modules(tmp_path, request):
    comps, events = write_plugins(tmp_path / "src")
    # a module name per test: pluggy registers a plugin object once per manager, and GFirst.order
    # must start empty
    tag = request.node.name.replace("[", "_").replace("]", "").replace("-", "_")
    return load(comps, f"tp_components_{tag}"), load(events, f"tp_events_{tag}")


def test_public_imports_only():
    """The plugin's own imports: ``gan_kit`` (exported names), torch, attrs and the standard library."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_public_api import import_problems
    finally:
        sys.path.pop(0)
    assert import_problems(COMPONENTS) == [] and import_problems(EVENTS) == []


@pytest.mark.parametrize("precision", sorted(PRECISIONS))
def test_trains_under_every_precision_and_compile(precision, tmp_path, plugin_modules):
    comps, events = plugin_modules
    run = make_run(tmp_path, plugins=[comps, events], overrides=OVERRIDES + PRECISIONS[precision])
    assert run.precision == {"compile": "fp32"}.get(precision, precision)
    assert (run.scaler is not None) == (precision == "fp16")  # fp16 steps through a GradScaler
    before = {net: [p.detach().clone() for p in getattr(run, net).parameters()] for net in ("G", "D")}
    stats = train_steps(run, 3)

    assert run.step == 3 and run.d_step == 6 and run.cur_nimg == 48  # two real batches of 8 per iteration
    # the strategy's own order, every iteration: G first, then two D steps
    assert comps.GFirst.order == [(net, s) for s in range(3) for net in ("G", "D", "D")]
    for key in ("Loss/D", "Loss/G", "Loss/D/tp-input-grad", "Loss/D/tp-autograd"):
        assert math.isfinite(stats[key]), (key, stats[key])
    # both penalties really measure D's input gradient (a random D has a non-zero one)
    assert stats["Loss/D/tp-input-grad"] > 0 and stats["Loss/D/tp-autograd"] > 0
    assert 0 <= stats["Metrics/tp-mean-gap"] < 2
    for net in ("G", "D"):  # both networks were updated
        assert any(not (p.detach() == b).all() for p, b in zip(getattr(run, net).parameters(), before[net])), net

    counts = run.stash[events.counts_key]
    assert (counts.steps, counts.ticks, counts.phases) == (3, 1, [4, 8])  # grew after the first iteration
    result = json.loads((run.out_dir / "events-0.json").read_text())
    assert result["closed"] and result["error"] == "None" and result["steps"] == 3


def test_run_teardown_fires_on_error(tmp_path, plugin_modules):
    """A run that fails mid-way still reaches run_teardown, with the error (the file is closed)."""
    comps, events = plugin_modules
    run = make_run(tmp_path, plugins=[comps, events], overrides=OVERRIDES)

    def boom(ctx):
        raise RuntimeError("strategy broke")

    run.strategy.step = boom
    with pytest.raises(RuntimeError, match="strategy broke"):
        train_steps(run, 2)
    result = json.loads((run.out_dir / "events-0.json").read_text())
    assert result["closed"] and result["steps"] == 0 and "strategy broke" in result["error"]


def test_autograd_penalty_equals_the_input_gradient_verb(tmp_path, plugin_modules):
    """Under fp32 the hand-made torch.autograd.grad penalty and the same penalty through
    ctx.input_gradients agree (the verb is the documented, fp16-safe way)."""
    import torch

    from gan_kit import DInputs

    comps, _ = plugin_modules
    run = make_run(tmp_path, plugins=[comps], overrides=OVERRIDES)
    phase = run.growth.phase_at(0)
    run.set_phase(phase)
    images = torch.randn(8, 1, 4, 4)
    ctx = run.step_context(phase, [images, images])
    inputs = DInputs(D=ctx.D, real=images, fake=images)
    by_hand = comps.AutogradR2()(inputs, ctx)
    by_verb = comps.InputGradR1()(inputs, ctx)  # the same formula on `real`, here the same images
    assert by_hand > 0
    torch.testing.assert_close(by_hand, by_verb, rtol=1e-6, atol=0)


def test_two_processes_stay_in_sync(tmp_path):
    """``gankit run --nproc 2`` with the plugin as recipe plugins (gloo on the CPU): both ranks train
    3 iterations through the growth and end with bit-identical G and D."""
    comps, events = write_plugins(tmp_path / "src")
    recipe = write_tiny_recipe(tmp_path)
    out = tmp_path / "two"
    sets = [f"plugins=['{comps.as_posix()}', '{events.as_posix()}']", "run.total_kimg=0.048", *OVERRIDES]
    cmd = [sys.executable, "-m", "gan_kit", "run", str(recipe), "--nproc", "2", "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((out / f"events-{rank}.json").read_text()) for rank in (0, 1)]
    for result in ranks:
        assert result["steps"] == 3 and result["phases"] == [4, 8] and result["closed"] and result["error"] == "None"
    assert ranks[0]["weights"] == ranks[1]["weights"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(lines[-1]["Loss/D/tp-autograd"]) and "Metrics/tp-mean-gap" in lines[-1]


def test_listed_with_its_hooks_and_disabled_by_name(tmp_path, plugin_modules, monkeypatch):
    comps, events = plugin_modules
    infos = {i.name: i for i in build_plugins([comps, events], load_entry_points=False).describe()}
    assert set(infos[comps.__name__].hooks) == {"register_update_strategies", "register_penalties",
                                                 "register_metrics", "register_growth_schedulers"}
    assert set(infos[events.__name__].hooks) == {"run_started", "phase_started", "step_finished", "tick_finished",
                                                  "run_teardown"}

    # disabled by name: the hook-only plugin is gone, and so are the other's components
    plugins = build_plugins([comps, events], load_entry_points=False, disable=[events.__name__])
    assert events.__name__ not in {i.name for i in plugins.describe()} and comps.__name__ in plugins.sources
    monkeypatch.setenv("GANKIT_DISABLE_PLUGINS", comps.__name__)
    with pytest.raises(RecipeError) as e:
        make_run(tmp_path, plugins=[comps, events], overrides=OVERRIDES)
    text = "\n".join(e.value.problems)
    assert "'tp-g-first'" in text and "'tp-two-phases'" in text and "'tp-input-grad'" in text


def test_gankit_plugins_command_lists_an_installed_distribution(tmp_path, monkeypatch):
    """The plugin installed as a distribution (a dist-info with its ``gankit`` entry points on
    sys.path, what pip produces) is listed by ``gankit plugins`` with its version and hooks."""
    from gan_kit.cli import cli

    src = tmp_path / "site"
    write_plugins(src)
    info = src / "gankit_tp-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gankit-tp\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text("[gankit]\ntp-components = tp_components\ntp-events = tp_events\n")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("GANKIT_DISABLE_PLUGINS", raising=False)
    try:
        result = CliRunner().invoke(cli, ["plugins", "--json"])
        assert result.exit_code == 0, result.output
        rows = {row["name"]: row for row in json.loads(result.stdout)}
        comps, events = rows["tp-components (gankit-tp 0.3.0)"], rows["tp-events (gankit-tp 0.3.0)"]
        assert "gankit-tp 0.3.0" in (comps.get("version", ""), comps["source"])
        assert "register_penalties" in comps["hooks"] and "run_teardown" in events["hooks"]

        hook = CliRunner().invoke(cli, ["plugins", "--hook", "run_teardown", "--json"])
        names = {row["name"] for row in json.loads(hook.stdout)}
        assert "tp-events (gankit-tp 0.3.0)" in names and "tp-components (gankit-tp 0.3.0)" not in names

        monkeypatch.setenv("GANKIT_DISABLE_PLUGINS", "tp-events (gankit-tp 0.3.0)")
        gone = CliRunner().invoke(cli, ["plugins", "--json"])
        names = {row["name"] for row in json.loads(gone.stdout)}
        assert "tp-events (gankit-tp 0.3.0)" not in names and "tp-components (gankit-tp 0.3.0)" in names
    finally:
        for mod in [m for m in sys.modules if m in ("tp_components", "tp_events")]:
            del sys.modules[mod]
