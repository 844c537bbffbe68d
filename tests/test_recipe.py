"""Recipe loading that works: type conversion, extends (tables merge, arrays replace), plugins,
--set, and the round trip through `recipe show`."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import load_recipe, parse_set, recipe_to_dict, recipe_to_toml

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plugins():
    return build_plugins(load_entry_points=False)


def test_values_are_converted_to_the_declared_types(write_recipe, plugins):
    path = write_recipe("""
        [run]
        total_kimg = 3          # integer where a float is declared
        seed = 2.0              # integral float where an integer is declared
        [optim]
        betas = [0, 0.9]        # array -> tuple of floats
        g_lr = "none"           # "none" -> None for an optional value
        [data]
        resolution = 16
        [growth]
        batch_size = { 4 = 8, 8 = 8, 16 = 4 }   # string keys -> integer resolutions
        fade_kimg = 1
    """)
    r, _ = load_recipe(path, plugins=plugins)
    assert r.run.total_kimg == 3.0 and type(r.run.total_kimg) is float
    assert r.run.seed == 2 and type(r.run.seed) is int
    assert r.optim.betas == (0.0, 0.9) and all(type(b) is float for b in r.optim.betas)
    assert r.optim.g_lr is None
    assert r.growth.options.batch_size == {4: 8, 8: 8, 16: 4}
    assert r.growth.options.fade_kimg == 1.0
    assert r.resolution == 16
    # defaults fill every table the recipe left out
    assert r.loss.name == "hinge" and r.update.name == "d-then-g" and r.ema.decay is None and r.ema.half_life_kimg == 10.0 and r.ema.rampup == 0.05


def test_extends_merges_tables_and_replaces_arrays(write_recipe, plugins):
    write_recipe("""
        [run]
        seed = 7
        total_kimg = 5
        [optim]
        betas = [0.5, 0.999]
        [[penalty]]
        name = "gradient-penalty"
        weight = 10.0
        [[penalty]]
        name = "drift"
        weight = 0.001
    """, "bases/base.toml")
    write_recipe("""
        extends = "base.toml"       # relative to this file's folder
        [run]
        total_kimg = 3
    """, "bases/mid.toml")
    top = write_recipe("""
        extends = "bases/mid.toml"
        [optim]
        betas = [0.0]
        lr = 0.002
        [[penalty]]
        name = "r1"
        weight = 1.0
    """, "top.toml")
    r, _ = load_recipe(top, ["optim.betas=[0.0, 0.99]"], plugins=plugins)
    assert (r.run.seed, r.run.total_kimg) == (7, 3.0)          # [run] merged key by key over two levels
    assert r.optim.lr == 0.002 and r.optim.betas == (0.0, 0.99)  # --set replaced the array
    assert [(p.name, p.slot.weight) for p in r.penalties] == [("r1", 1.0)]  # the array replaced the base's
    assert "extends" not in r.raw


def test_set_values(tiny_recipe, plugins):
    r, _ = load_recipe(tiny_recipe, [
        "loss.name=bce",                       # a bare word is a string
        "run.total_kimg=0.5",
        "penalty.0.weight=5",                  # array item by index
        "growth.batch_size={ 4 = 16, 8 = 8 }",  # an inline table
        "run.out_dir=/tmp/some/dir",           # a bare path is a string
        'run.device="cpu"',
        "optim.d_lr=0.004",                    # a key the file did not have
    ], plugins=plugins)
    assert r.loss.name == "bce"
    assert r.run.total_kimg == 0.5
    assert r.penalties[0].slot.weight == 5.0
    assert r.growth.options.batch_size == {4: 16, 8: 8}
    assert r.run.out_dir == "/tmp/some/dir"
    assert r.optim.d_lr == 0.004


def test_set_number_keys_a_table_the_recipe_left_out(plugins, tmp_path):
    """A dotted --set whose last part is a number fills a table keyed by resolution (the option
    the file did not write starts as a table, not an array), one stage at a time."""
    text = "".join(line for line in (ROOT / "recipes" / "r3gan.toml").read_text().splitlines(keepends=True)
                   if "_by_resolution" not in line)
    (tmp_path / "r3gan.toml").write_text(text)
    r, _ = load_recipe(tmp_path / "r3gan.toml", [
        "architecture.width_by_resolution.4=56", "architecture.width_by_resolution.16=16",
        "architecture.cardinality_by_resolution.16=2"], plugins=plugins)
    assert r.architecture.options.width_by_resolution == {4: 56, 16: 16}
    assert r.architecture.options.cardinality_by_resolution == {16: 2}


@pytest.mark.parametrize("item, keys, value", [
    ("a.b=1", ["a", "b"], 1),
    ("a.b = 1.5", ["a", "b"], 1.5),
    ("penalty.0.weight=2", ["penalty", 0, "weight"], 2),
    ("x=true", ["x"], True),
    ("x=[1, 2]", ["x"], [1, 2]),
    ("x=hinge", ["x"], "hinge"),
    ("x='quoted text'", ["x"], "quoted text"),
    ("x=\"a=b\"", ["x"], "a=b"),
])
def test_parse_set(item, keys, value):
    assert parse_set(item) == (keys, value)


def _same(a, b) -> bool:
    return attrs.evolve(a, path=b.path) == b and recipe_to_dict(a) == recipe_to_dict(b)


@pytest.mark.parametrize("sets", [[], ["loss.name=bce", "ema.half_life_kimg=10", "penalty.0.weight=2"],
                                  # None where the default is not: written "none", not left out
                                  ["augment={name='ada', target='none'}", "ema.rampup=none"]])
def test_recipe_toml_round_trip(tiny_recipe, tmp_path, plugins, sets):
    r, _ = load_recipe(tiny_recipe, sets, plugins=plugins)
    text = recipe_to_toml(r, "# a header comment")
    again_path = tmp_path / "again.toml"
    again_path.write_text(text, encoding="utf-8")
    again, _ = load_recipe(again_path, plugins=plugins)
    assert _same(again, r)
    assert recipe_to_toml(again, "# a header comment") == text


def test_shipped_pggan_recipe_round_trips(tmp_path, plugins):
    r, _ = load_recipe(ROOT / "recipes" / "pggan.toml", plugins=plugins)
    path = tmp_path / "pggan-resolved.toml"
    path.write_text(recipe_to_toml(r), encoding="utf-8")
    again, _ = load_recipe(path, plugins=plugins)
    assert _same(again, r)
    assert again.growth.options.batch_size == {4: 32, 8: 32, 16: 32}
