"""The plugin manager: entry points, autoload switch, broken / duplicate / misspelled plugins,
and a plugin registered in a test used by a recipe and in training."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from gan_kit import Loss, hookimpl, option
from gan_kit.cli import cli
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import PluginError
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe


def make_dist(site: Path, dist: str, version: str, module: str, source: str, ep_name: str | None = None) -> None:
    """A minimal installed distribution on ``site``: the module and a dist-info with a gankit entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[gankit]\n{ep_name or module} = {module}\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path for fake installed distributions (module caches cleaned up)."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    before = set(sys.modules)
    yield path
    for name in set(sys.modules) - before:
        if name.startswith("fake_gankit_"):
            del sys.modules[name]


GOOD = """
    import attrs
    from gan_kit import Loss, hookimpl, option

    class Tanh(Loss):
        '''A fake loss from an installed distribution.'''

    @hookimpl
    def register_losses(register):
        register("fake-tanh", Tanh)
"""


def test_entry_point_plugin_is_loaded_with_its_distribution(site):
    make_dist(site, "fake-good", "1.2.3", "fake_gankit_good", GOOD)
    plugins = build_plugins()
    comp = plugins.registry.get("loss", "fake-tanh")
    assert comp.plugin == "fake-good 1.2.3"
    assert plugins.broken == []


def test_disable_autoload_skips_entry_points(site, monkeypatch):
    make_dist(site, "fake-good", "1.2.3", "fake_gankit_good", GOOD)
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins = build_plugins()
    assert ("loss", "fake-tanh") not in plugins.registry
    assert ("loss", "hinge") in plugins.registry  # built-ins still load
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "0")  # "0" means not disabled
    assert ("loss", "fake-tanh") in build_plugins().registry


def test_broken_plugin_is_reported_and_everything_else_still_listed(site):
    make_dist(site, "fake-broken", "0.0.1", "fake_gankit_broken", "raise RuntimeError('boom at import')\n",
              ep_name="broken")
    make_dist(site, "fake-good", "1.2.3", "fake_gankit_good", GOOD)
    plugins = build_plugins()
    [b] = plugins.broken
    assert b.name == "broken"
    assert b.source == "fake-broken 0.0.1, entry point gankit: broken = fake_gankit_broken"
    assert b.error == "RuntimeError: boom at import"
    assert str(b) == ("plugin broken (fake-broken 0.0.1, entry point gankit: broken = fake_gankit_broken) "
                      "failed to load: RuntimeError: boom at import")

    result = CliRunner().invoke(cli, ["list-plugins", "--json"])
    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)
    names = {(i["kind"], i["name"]) for i in items if not i["broken"]}
    assert {("loss", "hinge"), ("loss", "fake-tanh"), ("penalty", "r1")} <= names
    [broken] = [i for i in items if i["broken"]]
    assert broken["name"] == "broken" and broken["error"] == "RuntimeError: boom at import"
    assert "fake-broken 0.0.1" in broken["plugin"]

    table = CliRunner().invoke(cli, ["list-plugins"])
    assert table.exit_code == 0
    assert "BROKEN" in table.stdout and "boom at import" in table.stdout and "fake-tanh" in table.stdout
    assert "warning: plugin broken (fake-broken 0.0.1" in table.stderr


def test_recipe_naming_a_component_of_a_broken_plugin_says_so(site, write_recipe):
    make_dist(site, "fake-broken", "0.0.1", "fake_gankit_broken", "import no_such_dependency_x\n", ep_name="broken")
    path = write_recipe('[loss]\nname = "from-broken"\n')
    result = CliRunner().invoke(cli, ["recipe", "check", str(path)])
    assert result.exit_code == 2
    assert ("(plugin broken (fake-broken 0.0.1, entry point gankit: broken = fake_gankit_broken) failed to load "
            "and may provide it: ModuleNotFoundError: No module named 'no_such_dependency_x')") in result.stderr


class DupA:
    @hookimpl
    def register_losses(self, register):
        register("dup", Loss)


class DupB:
    @hookimpl
    def register_losses(self, register):
        register("dup", Loss)


def test_duplicate_registration_names_both_plugins():
    with pytest.raises(PluginError) as e:
        build_plugins([DupA(), DupB()], load_entry_points=False)
    assert str(e.value) == ("loss 'dup' is registered twice: by DupA-0 and by DupB-1 "
                            "(uninstall one of the two plugins, or rename one of the two components)")


def test_duplicate_of_a_builtin_from_an_installed_plugin(site):
    make_dist(site, "fake-dup", "2.0", "fake_gankit_dup",
              "from gan_kit import Loss, hookimpl\n@hookimpl\ndef register_losses(register):\n"
              "    register('hinge', Loss)\n")
    with pytest.raises(PluginError, match=r"^loss 'hinge' is registered twice: by gan_kit.builtin.objectives.losses "
                                          r"and by fake-dup 2.0 \("):
        build_plugins()
    # list-plugins reports it as one line, exit 2, no traceback
    result = CliRunner().invoke(cli, ["list-plugins"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: loss 'hinge' is registered twice: by gan_kit.builtin.objectives.losses and by fake-dup 2.0")
    assert "Traceback" not in result.output


class Misspelled:
    @hookimpl
    def register_loss(self, register):  # the hook is register_losses
        register("x", Loss)


def test_misspelled_hook_is_an_error_at_load():
    with pytest.raises(PluginError) as e:
        build_plugins([Misspelled()], load_entry_points=False)
    msg = str(e.value)
    assert msg.startswith("plugin Misspelled-0: 'register_loss' is not a gankit hook (did you mean 'register_losses'?) "
                          "(rename the @hookimpl function; hooks: ")
    assert "register_update_strategies" in msg


class WrongArgs:
    @hookimpl
    def register_losses(self, reg):  # the argument is called register
        pass


def test_hook_with_wrong_argument_names_is_an_error():
    with pytest.raises(PluginError) as e:
        build_plugins([WrongArgs()], load_entry_points=False)
    assert str(e.value) == ("plugin WrongArgs-0: hookimpl definition: register_losses(reg); Argument(s) {'reg'} "
                            "are declared in the hookimpl but can not be found in the hookspec "
                            "(match the hook's signature in docs/hooks.md)")


def test_recipe_plugin_file_misspelled_hook_is_reported(tmp_path, write_recipe):
    (tmp_path / "bad_plugin.py").write_text("from gan_kit import hookimpl\n@hookimpl\ndef run_start(run):\n    pass\n")
    path = write_recipe('plugins = ["bad_plugin.py"]\n')
    result = CliRunner().invoke(cli, ["recipe", "check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: plugin recipe plugin bad_plugin.py: 'run_start' is not a gankit hook "
                                    "(did you mean 'run_started'?)")


# ------------------------------------------------------------------ a plugin used in training --


class Counting(Loss):
    """Hinge loss that counts its calls (test plugin)."""

    calls = {"d": 0, "g": 0}

    @attrs.frozen
    class Options:
        margin: float = option(1.0, help="Hinge margin.")

    def d_loss(self, real_logits, fake_logits):
        type(self).calls["d"] += 1
        m = self.options.margin
        return (m - real_logits).relu().mean() + (m + fake_logits).relu().mean()

    def g_loss(self, fake_logits, real_logits=None):
        type(self).calls["g"] += 1
        return -fake_logits.mean()


class CountingPlugin:
    @hookimpl
    def register_losses(self, register):
        register("counting", Counting)


def test_plugin_registered_in_a_test_is_used_in_training(tiny_recipe):
    Counting.calls = {"d": 0, "g": 0}
    recipe, plugins = load_recipe(tiny_recipe, ["loss.name=counting", "loss.margin=2"], extra_plugins=[CountingPlugin()])
    assert recipe.loss.name == "counting" and recipe.loss.options.margin == 2.0
    assert plugins.registry.get("loss", "counting").plugin == "CountingPlugin-0"
    run = build_run(recipe, plugins)
    train(run, max_steps=2)
    assert Counting.calls == {"d": 2, "g": 2}


def test_recipe_plugins_list_loads_a_module_relative_to_the_recipe(tmp_path, tiny_recipe_text, write_recipe):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "my_loss.py").write_text(textwrap.dedent('''
        from gan_kit import Loss, hookimpl

        class Zero(Loss):
            """A loss of zero."""
            def d_loss(self, real_logits, fake_logits):
                return (real_logits * 0).sum() + (fake_logits * 0).sum()
            def g_loss(self, fake_logits, real_logits=None):
                return (fake_logits * 0).sum()

        @hookimpl
        def register_losses(register):
            register("zero", Zero)
    '''))
    path = write_recipe('plugins = ["my_loss.py"]\n' + tiny_recipe_text.replace('name = "hinge"', 'name = "zero"'),
                        "sub/r.toml")
    recipe, plugins = load_recipe(path)
    # the resolved recipe names the file absolutely, so a run's saved recipe.toml finds it too
    assert recipe.plugins == (str(tmp_path / "sub" / "my_loss.py"),)
    assert plugins.registry.get("loss", "zero").plugin == "recipe plugin my_loss.py"
    from gan_kit.recipe import recipe_to_toml

    saved = tmp_path / "elsewhere" / "recipe.toml"
    saved.parent.mkdir()
    saved.write_text(recipe_to_toml(recipe))
    again, plugins = load_recipe(saved)
    assert plugins.registry.get("loss", "zero").plugin.startswith("recipe plugin /")


# ------------------------------------------------------- the example third-party distribution --

INSTALL = "pip install -e plugins/gankit-lsgan"


def test_lsgan_distribution_found_through_its_entry_point(tmp_path, tiny_recipe, monkeypatch):
    """The installed plugins/gankit-lsgan is listed by a real `gankit list-plugins --json` and a
    tiny recipe trains with its loss and its initializer."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "GANKIT_DISABLE_PLUGIN_AUTOLOAD"}
    gankit = Path(sys.executable).with_name("gankit")
    proc = subprocess.run([str(gankit), "list-plugins", "--json"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    mine = {(i["kind"], i["name"]): i for i in json.loads(proc.stdout) if i["plugin"].startswith("gankit-lsgan ")}
    assert set(mine) == {("loss", "lsgan"), ("init", "truncated-normal")}, f"not installed? run: {INSTALL}"
    assert mine[("loss", "lsgan")]["plugin"] == "gankit-lsgan 0.1.0"
    assert mine[("loss", "lsgan")]["broken"] is False

    monkeypatch.delenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    out = tmp_path / "lsgan-run"
    result = CliRunner().invoke(cli, ["run", str(tiny_recipe), "--out", str(out), "--set", "loss.name=lsgan",
                                      "--set", "init.name=truncated-normal", "--set", "run.total_kimg=0.016",
                                      "--set", "run.tick_kimg=0.008"])
    assert result.exit_code == 0, result.output
    saved = (out / "recipe.toml").read_text(encoding="utf-8")
    assert "gankit-lsgan 0.1.0" in saved.splitlines()[0]  # the plugin's version is recorded
    assert '[loss]\nname = "lsgan"\na = 0.0\nb = 1.0\nc = 1.0\n' in saved
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["Progress/kimg"] == 0.016 and last["Loss/D"] >= 0.0  # a sum of squares


def test_a_hook_function_without_hookimpl_is_an_error_not_silence():
    import types

    from gan_kit.base.errors import PluginError

    mod = types.ModuleType("forgot_marker")
    mod.register_losses = lambda register: None
    with pytest.raises(PluginError, match=r"plugin forgot_marker: register_losses is not marked with "
                                          r"@gan_kit.hookimpl, so it would be ignored \(put @hookimpl above it\)"):
        build_plugins([mod], load_entry_points=False)


def test_strategy_mistakes_are_named(tmp_path, capsys):
    import torch

    from gan_kit import GankitError, UpdateStrategy, hookimpl
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    class NoG(UpdateStrategy):
        def step(self, ctx):
            n = ctx.reals[0].shape[0]
            with torch.no_grad():
                fake = ctx.G(ctx.latent(n))
            ctx.zero_grad("D")
            total, stats = ctx.d_objective(ctx.reals[0], fake)
            ctx.backward(total, "D")
            ctx.opt_step("D")
            return stats

    class ReturnsNone(NoG):
        def step(self, ctx):
            super().step(ctx)

    class Plugin:
        @hookimpl
        def register_update_strategies(self, register):
            register("no-g", NoG)
            register("returns-none", ReturnsNone)

    train(make_run(tmp_path / "a", plugins=[Plugin()], overrides=["update.name=no-g"]), max_steps=3)
    warnings = [l for l in capsys.readouterr().err.splitlines() if l.startswith("warning: update strategy")]
    assert warnings == ["warning: update strategy 'no-g' took no optimizer step for G in iteration 1, so G does not "
                        "train (call ctx.opt_step(...) if that is not intended)"]
    with pytest.raises(GankitError, match=r"update strategy 'returns-none': step\(ctx\) returned NoneType, not a dict"):
        train(make_run(tmp_path / "b", plugins=[Plugin()], overrides=["update.name=returns-none"]), max_steps=1)


@pytest.mark.parametrize("kind, annotation, expected", [
    ("augment", "int", "option 'n' is declared schedulable but is not a float (int); only float options can "
                       "follow a schedule (drop schedulable=True, or make it a float)"),
    ("dataset", "float", "option 'n' is declared schedulable, but a dataset is used only when the run is built "
                         "(drop schedulable=True)"),
    ("distance", "float", "option 'n' is declared schedulable, but a distance is never part of training "
                          "(drop schedulable=True)"),
])
def test_a_schedulable_option_that_no_schedule_can_drive_is_refused_when_the_plugin_registers(kind, annotation,
                                                                                           expected):
    """A plugin author's schedulable=True on an int option, or on a component built once, is a
    plugin error at registration, before any recipe schedules it."""
    from gan_kit.plugin_api.registry import Registry

    namespace: dict = {"option": option, "attrs": attrs}
    exec(textwrap.dedent(f"""
        @attrs.frozen
        class Options:
            n: {annotation} = option(1, help="a count", schedulable=True)
        """), namespace)

    class Component:
        Options = namespace["Options"]

        def __init__(self, options, context):
            self.options = options

    with pytest.raises(PluginError) as e:
        Registry().add(kind, "mine", Component, "my-plugin")
    assert str(e.value) == f"plugin my-plugin: {kind} 'mine': {expected}"
