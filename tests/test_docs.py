"""The docs stay true: every hook is documented with its exact signature and is called by the
engine or CLI; docs/recipes.md is the generated reference of the current Options classes; the
walk-through in docs/writing-plugins.md works as written."""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
import tomllib
from pathlib import Path

import attrs
import pytest
import torch
from click.testing import CliRunner

from gan_kit import hookimpl
from gan_kit.plugin_api import hookspecs
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.options import option_fields
from gan_kit.plugin_api.components import BuildContext
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.plugin_api.registry import NOT_TRAINING_KINDS
from gan_kit.recipe import CORE_TABLES, COMPONENT_TABLES, load_recipe

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def hook_names() -> list[str]:
    return sorted(n for n, f in vars(hookspecs).items() if getattr(f, "gankit_spec", None) is not None)


def signature(name: str) -> str:
    """``name(arg: Type, ...) -> Ret`` as written in hookspecs.py (string annotations unquoted)."""
    sig = inspect.signature(getattr(hookspecs, name))
    clean = lambda a: str(a).strip("'\"")  # noqa: E731
    params = ", ".join(f"{p.name}: {clean(p.annotation)}" for p in sig.parameters.values())
    return f"{name}({params}) -> {clean(sig.return_annotation)}"


def test_hookspecs_found():
    names = hook_names()
    assert len(names) >= 15 and "register_losses" in names and "run_finished" in names


@pytest.mark.parametrize("name", hook_names())
def test_every_hook_is_documented_with_its_exact_signature_and_an_example(name):
    text = (DOCS / "hooks.md").read_text(encoding="utf-8")
    sections = re.split(r"^### ", text, flags=re.M)
    [section] = [s for s in sections if s.startswith(name + "\n")]
    assert f"```python\ndef {signature(name)}\n```" in section
    examples = re.findall(r"```python\n(.*?)```", section, re.S)[1:]
    assert examples and any(f"def {name}(" in e for e in examples), f"no example implementing {name}"


def make_all_hooks_plugin() -> tuple[object, dict[str, dict]]:
    """A plugin implementing every hook of hookspecs.py, generated from the specs (so a new
    hook is covered automatically), recording the arguments of the first call of each."""
    called: dict[str, dict] = {}
    plugin = type("AllHooks", (), {})()
    for name in hook_names():
        params = list(inspect.signature(getattr(hookspecs, name)).parameters)

        def bind(_name, _params):
            # A real function with the hook's argument names (pluggy reads them from the code).
            namespace = {"record": lambda **kw: called.setdefault(_name, kw)}
            args = ", ".join(_params)
            exec(f"def {_name}({args}):\n    record({', '.join(f'{p}={p}' for p in _params)})\n", namespace)
            return hookimpl(namespace[_name])

        setattr(plugin, name, bind(name, params))
    return plugin, called


def test_every_hook_is_exercised(tiny_recipe):
    """Every hook is called by building the plugins, the CLI start-up (register_commands) and a
    tiny training run with a checkpoint. A hook nobody calls fails here."""
    import click

    plugin, called = make_all_hooks_plugin()
    recipe, plugins = load_recipe(tiny_recipe, ["run.total_kimg=0.016", "run.tick_kimg=0.008"],
                                  extra_plugins=[plugin])
    group = click.Group("gankit-test")
    plugins.hook.register_commands(cli=group)  # what gan_kit.cli.main does at start-up
    run = build_run(recipe, plugins)
    train(run)
    assert sorted(called) == hook_names()
    assert called["register_commands"]["cli"] is group
    assert called["checkpoint_saved"]["path"].name == "latest.pt"
    assert called["run_finished"]["stats"]["Progress/final"] is True


def test_recipes_md_is_generated_from_the_current_options():
    from gan_kit.tools import docgen

    current = (DOCS / "recipes.md").read_text(encoding="utf-8")
    assert current == docgen.generate(), "docs/recipes.md is out of date: run python -m gan_kit.tools.docgen"


def test_recipes_md_names_every_table_and_option():
    text = (DOCS / "recipes.md").read_text(encoding="utf-8")
    for key, cls in CORE_TABLES.items():
        assert f"### `[{key}]`" in text
        for f in option_fields(cls):
            assert f"| `{f.name}` |" in text
    for key, (kind, is_array, _, _) in COMPONENT_TABLES.items():
        assert (f"### `[[{key}]]`" if is_array else f"### `[{key}]`") in text
    registry = build_plugins(load_entry_points=False).registry
    for comp in registry:
        assert f"#### {comp.kind} `{comp.name}`" in text


def test_every_builtin_option_has_help_text():
    registry = build_plugins(load_entry_points=False).registry
    classes = [(f"[{k}]", c) for k, c in CORE_TABLES.items()]
    classes += [(f"{c.kind} {c.name}", c.Options) for c in registry]
    missing = [f"{where}: {f.name}" for where, cls in classes for f in option_fields(cls)
               if not f.metadata.get("help", "").strip()]
    assert missing == []
    not_frozen = []
    for where, cls in classes:
        fields = option_fields(cls)
        if fields:
            try:
                instance = cls(**{f.name: None for f in fields if f.default is attrs.NOTHING})
                setattr(instance, fields[0].name, getattr(instance, fields[0].name))
                not_frozen.append(where)
            except attrs.exceptions.FrozenInstanceError:
                pass
    assert not_frozen == []


# ------------------------------------------------------------------------ writing-plugins.md --


def doc_files(text: str) -> dict[str, str]:
    """The code blocks of writing-plugins.md that start with ``# file: <path>``."""
    out = {}
    for body in re.findall(r"```\w*\n(.*?)```", text, re.S):
        first, _, _ = body.partition("\n")
        if first.startswith("# file: "):
            out[first[len("# file: "):].strip()] = body
    return out


def test_writing_plugins_walkthrough_works(tmp_path, monkeypatch):
    """Write the files of the walk-through, 'install' the distribution (a dist-info with the
    entry points of its pyproject.toml on sys.path: what pip install produces), then check that
    list-plugins shows the loss and the doc's recipe trains with it."""
    from gan_kit.cli import cli

    files = doc_files((DOCS / "writing-plugins.md").read_text(encoding="utf-8"))
    assert {"gankit-softhinge/pyproject.toml", "gankit-softhinge/src/gankit_softhinge/__init__.py",
            "softhinge.toml", "gankit-softhinge/tests/test_softhinge.py"} <= set(files)
    for name, body in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(body, encoding="utf-8")
    project = tomllib.loads(files["gankit-softhinge/pyproject.toml"])["project"]
    eps = project["entry-points"]["gankit"]
    src = tmp_path / "gankit-softhinge" / "src"
    info = src / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("[gankit]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.delenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["list-plugins", "--kind", "loss", "--json"])
        assert result.exit_code == 0, result.output
        items = {i["name"]: i for i in json.loads(result.stdout)}
        assert items["soft-hinge"]["plugin"] == "gankit-softhinge 0.1.0"

        check = CliRunner().invoke(cli, ["recipe", "check", "softhinge.toml"])
        assert check.stdout == "softhinge.toml: ok\n", check.output
        recipe, plugins = load_recipe("softhinge.toml", ["run.total_kimg=0.05", "run.progress=false",
                                                         f"run.out_dir='{(tmp_path / 'run').as_posix()}'"])
        assert recipe.loss.name == "soft-hinge"
        stats = train(build_run(recipe, plugins), max_steps=2)
        assert stats["Loss/D"] == stats["Loss/D"]  # finite, not NaN

        bad = CliRunner().invoke(cli, ["recipe", "check", "softhinge.toml", "--set", "loss.margin=-1"])
        assert bad.stderr == ("error: softhinge.toml (--set): loss.margin: must be > 0, got -1.0 "
                              "(e.g. margin = 1.0)\n")

        monkeypatch.syspath_prepend(str(tmp_path / "gankit-softhinge" / "tests"))
        import test_softhinge  # the doc's own tests pass

        test_softhinge.test_d_loss_is_low_when_d_separates()
        test_softhinge.test_trains_two_steps(tmp_path / "doc-test")
    finally:
        for mod in [m for m in sys.modules if m.startswith("gankit_softhinge") or m == "test_softhinge"]:
            del sys.modules[mod]


# ------------------------------------------------------------------------------ docs/examples --

EXAMPLES = DOCS / "examples"

#: Each example file and the ``--set`` overrides of the tiny recipe that choose its components.
EXAMPLE_OVERRIDES: dict[str, list[str]] = {
    "loss_plugin.py": ["loss.name=ragan"],
    # class-conditional: the penalties (written without labels) get inputs.D / inputs.G with the
    # step's labels bound, and the strategy passes ctx.labels
    "penalty_plugin.py": ['penalty=[{name="fake-r2", weight=1.0}, {name="zero-gp", weight=1.0}, '
                          '{name="mode-seeking", weight=0.1, interval=2}]', "architecture.conditional=true"],
    "strategy_plugin.py": ["update.name=g-then-critics", "update.d_steps=2", "architecture.conditional=true"],
    "initializer_plugin.py": ["init.name=lecun-normal"],
    "growth_plugin.py": ['growth={name="two-stage", low_kimg=0.008, fade_kimg=0.016, batch_size=8}'],
    "architecture_plugin.py": ['architecture={name="mlp", latent_dim=8, hidden=16}',
                               'growth={name="static", batch_size=8}'],
    "dataset_plugin.py": ['data={name="blobs", resolution=8, num_images=64}'],
    "metric_plugin.py": ['metric=[{name="moment-gap", every_kimg=0.008, num_images=16}]'],
    "augment_plugin.py": ['augment={name="xflip", p=0.5}'],
    "lifecycle_plugin.py": [],
    # <tmp> is the test's folder, where the test first writes random weights of the feature network
    "projected_plugin.py": ['architecture={name="projected", features="<tmp>/features.pt", latent_dim=8, width=8, '
                            'feature_noise={schedule="linear", start=0.5, end=0.0, kimg=0.016}}',
                            'growth={name="static", batch_size=8}', 'architecture.spectral_norm="D"',
                            'init={name="normal"}'],
    "schedule_plugin.py": ['optim.lr={schedule="restarts", start=0.002, end=0.0002, period_kimg=0.012}'],
    # a distance is no part of training (gankit project builds it): the run trains with it loaded
    "distance_plugin.py": [],
    "style_plugin.py": ['architecture={name="style-mlp", latent_dim=8, w_dim=8, hidden=16, num_layers=3}',
                        'growth={name="static", batch_size=8}'],
}


def load_example(path: Path):
    """Import a docs/examples file as a module of its own (as a recipe's ``plugins = [...]`` would)."""
    import importlib.util

    name = f"gankit_doc_example_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_file_is_trained_by_the_tests_and_shown_in_the_guide():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXAMPLE_OVERRIDES)
    guide = (DOCS / "writing-plugins.md").read_text(encoding="utf-8")
    assert [f for f in EXAMPLE_OVERRIDES if f"(examples/{f})" not in guide] == []


def test_example_files_import_only_gan_kit_torch_attrs_and_the_standard_library():
    import ast

    allowed = {"gan_kit", "torch", "attrs", "__future__", *sys.stdlib_module_names}
    for path in sorted(EXAMPLES.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert roots <= allowed, (path.name, sorted(roots - allowed))


@pytest.mark.parametrize("page", ["hooks.md", "writing-plugins.md"])
def test_plugin_guides_name_no_builtin_module_or_private_name(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert "gan_kit.builtin" not in text
    assert re.findall(r"\bgan_kit(?:\.\w+)*\._\w+", text) == []
    for module in re.findall(r"\bgan_kit\.(\w+)", text):
        assert module in {"testing", *__import__("gan_kit").__all__}, f"{page} names gan_kit.{module}"


@pytest.mark.parametrize("filename", sorted(EXAMPLE_OVERRIDES))
def test_example_plugin_trains_two_steps(filename, tmp_path):
    """Each docs/examples file, loaded as a plugin, trains 2 steps of the tiny recipe with its own
    component chosen, and that component is the one the recipe used."""
    from gan_kit.testing import make_run, train_steps

    module = load_example(EXAMPLES / filename)
    if filename == "projected_plugin.py":
        module.save_random_features(tmp_path / "features.pt", channels=1)
    overrides = [o.replace("<tmp>", tmp_path.as_posix()) for o in EXAMPLE_OVERRIDES[filename]]
    run = make_run(tmp_path, plugins=[module], overrides=overrides)
    stats = train_steps(run, 2)
    assert run.step == 2
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    registered = {(c.kind, c.name) for c in run.registry if c.plugin == module.__name__}
    chosen = {(s.kind, s.name) for s in (run.recipe.data, run.recipe.architecture, run.recipe.init, run.recipe.loss,
                                         run.recipe.update, run.recipe.growth, run.recipe.augment,
                                         *run.recipe.penalties, *run.recipe.metrics, *run.recipe.schedules)}
    assert {r for r in registered if r[0] not in NOT_TRAINING_KINDS} <= chosen  # every component of the example is in use
    if filename == "penalty_plugin.py":
        # the two D penalties are in the D objective; the lazy G penalty ran at step 0 as its own step
        assert {"Loss/D/fake-r2", "Loss/D/zero-gp", "Loss/G/mode-seeking"} <= set(stats)
        assert stats["Loss/D/fake-r2"] > 0 and stats["Loss/D/zero-gp"] > 0
    if filename == "growth_plugin.py":
        # step 1 at 4 px; step 2 entered the 8 px phase at the start of its fade-in (8 images shown)
        assert (run.phase.index, run.phase.resolution, run.phase.alpha) == (1, 8, 0.0)
        assert run.growth.phase_at(16).alpha == 0.5 and run.growth.phase_at(24).alpha == 1.0
    if filename == "metric_plugin.py":
        assert 0 < stats["Metrics/moment-gap"] < 4
    if filename == "augment_plugin.py":
        assert stats["Augment/p"] == 0.5
    if filename == "projected_plugin.py":
        # the frozen features are the file's, untouched by init, spectral norm and two steps; the
        # heads were normalised; the scheduled noise reached D's buffer; checkpoints skip the file
        saved = torch.load(tmp_path / "features.pt", weights_only=True)
        assert all(torch.equal(run.D.features.state_dict()[k], v) for k, v in saved.items())
        assert not hasattr(run.D.features.stage1[0], "parametrizations") and hasattr(run.D.heads[0][0], "parametrizations")
        assert float(run.D.noise_std) == pytest.approx(0.5 * (1 - 8 / 16))
        assert run.schedule_values["architecture.feature_noise"] == pytest.approx(0.25)
        state = run.state_dict()
        assert not [k for k in state["D"] if k.startswith("features.")] and "mix.0.weight" in state["D"]
        assert state["frozen_files"]["D.features"]["path"] == str(tmp_path / "features.pt")
    if filename == "schedule_plugin.py":
        # the second iteration (8 images shown) is 2/3 of the first 12-image period down the cosine
        assert run.schedule_values["optim.lr"] == pytest.approx(0.0002 + 0.0018 * 0.5 * (1 + math.cos(math.pi * 8 / 12)))
        assert run.recipe.schedules[0].options.period_kimg == 0.012
    if filename == "distance_plugin.py":
        # the registered distance, built as gankit project builds it, compares images image by image
        comp = run.registry.get("distance", "edges")
        distance = comp.factory(comp.Options(), BuildContext(resolution=8, channels=1))
        a = torch.rand(3, 1, 8, 8) * 2 - 1
        b = a.clone().requires_grad_(True)
        assert distance.distance(a, b).tolist() == [0.0, 0.0, 0.0]
        shifted = distance.distance(a, a + 0.5)  # a brightness shift: edges unchanged, pixels off by 0.5
        assert torch.allclose(shifted, torch.full((3,), 0.1 * 0.25))
        distance.distance(torch.roll(a, 1, dims=3), b).sum().backward()
        assert b.grad.abs().sum() > 0
    if filename == "style_plugin.py":
        # G has per-layer styles; training moved w_avg; eval-mode G(z) with fixed noise is synthesis(mapping(z))
        from gan_kit import StyleGenerator

        G = run.G_ema.eval()
        assert isinstance(G, StyleGenerator) and (G.num_ws, G.w_dim) == (3, 8) and G.w_avg.abs().sum() > 0
        z = torch.randn(4, 8)
        with torch.no_grad():
            ws = G.mapping(z)
            assert ws.shape == (4, 3, 8) and torch.equal(ws[:, 0], ws[:, 2])
            assert G.synthesis(ws, noise_mode="const").shape == (4, 1, 8, 8)
            assert torch.allclose(G.mapping(z, truncation_psi=0.0)[:, 0], G.w_avg.expand(4, -1))
    if filename == "lifecycle_plugin.py":
        log = run.stash[module.log_key]
        assert (log.steps, log.phases, log.ticks) == (2, [4], 1)
        assert log.file.closed  # run_teardown closed it
        lines = (run.out_dir / "losses.csv").read_text().splitlines()
        assert lines[0] == "step,kimg,Loss/D,Loss/G" and len(lines) == 3
        assert stats["Example/steps_logged"] == 2
