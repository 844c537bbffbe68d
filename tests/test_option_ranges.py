"""Property test of option ranges: for every numeric option of every
registered component (built-in and entry-point plugins alike) and of the core tables, values drawn
out of range, infinite, NaN and huge are either refused at load with exactly one line naming the
key, or accepted; an accepted value passes `gankit recipe check` (exit 0), and the first accepted
value of each option trains one step without any error but a one-line GankitError.

Each option is tried on the tiny recipe of conftest.py with only its own component swapped in,
set with one `--set KEY=VALUE`.
"""

from __future__ import annotations

import itertools
import math
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import pytest
import tomli_w
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conftest import TINY_RECIPE
from gan_kit.cli import cli
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.base.options import option_fields, toml_value
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import COMPONENT_TABLES, CORE_TABLES, load_recipe

PLUGINS = build_plugins()

EDGE_FLOATS = [math.inf, -math.inf, math.nan, -1.0, 0.0, 1e308, -1e308, 5e-324]
EDGE_INTS = [-1, 0, 2**31, 2**32, 2**63 - 1, -(2**63), 2**64, 10**30]

#: Options whose accepted values are checked at load and by `recipe check`, but not trained with.
NOT_TRAINED = {"run.num_workers": "starts that many data-loader processes (up to 1024) on a 2-core machine"}


def _numeric(tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return False
    if tp in (int, float):
        return True
    return any(_numeric(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _values(tp: Any) -> st.SearchStrategy:
    """Values of ``tp``'s shape, numbers drawn out of range, infinite, NaN and huge."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return st.one_of([_values(a) for a in args if a is not type(None) and _numeric(a)])
    if tp is float:
        return st.one_of(st.sampled_from(EDGE_FLOATS), st.floats())
    if tp is int:
        return st.one_of(st.sampled_from(EDGE_INTS), st.integers())
    if origin is tuple and args and args[-1] is not Ellipsis:
        return st.tuples(*[_values(a) for a in args])
    if origin in (tuple, list):
        return st.lists(_values(args[0]), min_size=1, max_size=3)
    if origin is dict:  # keyed by the tiny recipe's resolutions
        return st.fixed_dictionaries({4: _values(args[1]), 8: _values(args[1])})
    raise AssertionError(f"no strategy for {tp}")


def _base(table: str, name: str | None, folder: Path) -> dict:
    """The tiny recipe with component ``name`` in ``table`` (kept options where it is the same one)."""
    raw = tomllib.loads(TINY_RECIPE.format(out_dir=(folder / "run").as_posix()))
    if name is None:
        return raw
    kind, is_array, default, _ = COMPONENT_TABLES[table]
    if is_array:
        raw[table] = [{"name": name}]
    elif raw.get(table, {}).get("name", default) != name:
        raw[table] = {"name": name}
    if table == "loss" and name == "wgan-gp":
        raw["penalty"] = []  # the preset adds its own penalties
    if table == "architecture" and name == "dcgan":
        raw["growth"] = {"name": "static", "batch_size": 8}
    if table == "data" and name == "image-folder":
        from PIL import Image

        (folder / "imgs").mkdir(exist_ok=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (60 * i, 90, 120)).save(folder / "imgs" / f"{i}.png")
        raw["data"]["path"] = (folder / "imgs").as_posix()
        raw["data"]["resolution"] = 8
    return raw


def _targets() -> list:
    out = []
    for table, cls in CORE_TABLES.items():
        out += [pytest.param(table, None, f.name, f.type, id=f"{table}.{f.name}")
                for f in option_fields(cls) if _numeric(f.type)]
    for table, (kind, is_array, _, slot) in COMPONENT_TABLES.items():
        for name in PLUGINS.registry.names(kind):
            fields = [*(option_fields(slot) if slot else ()), *option_fields(PLUGINS.registry.get(kind, name).Options)]
            out += [pytest.param(table, name, f.name, f.type, id=f"{table}:{name}.{f.name}")
                    for f in fields if _numeric(f.type)]
    return out


_KEY = re.compile(r"^\S*r\.toml(?: \(--set\))?: (?P<key>[^:]+): ")
_counter = itertools.count()
_trained: set[str] = set()


def _numbers(value: Any) -> list:
    if isinstance(value, dict):
        value = list(value.values())
    return [n for v in value for n in _numbers(v)] if isinstance(value, (list, tuple)) else [value]


_NUMBER = re.compile(r"[-+]?(?:inf|nan|\d+(?:\.\d*)?(?:e[-+]?\d+)?)")


def _names_value(line: str, value: Any) -> bool:
    """Whether ``line`` names one of the numbers of ``value`` (as written, or rounded as by %g)."""
    shown = [float(t) for t in _NUMBER.findall(line)]
    return any(str(n) in line or any(math.isclose(n, x, rel_tol=1e-5) or (math.isnan(n) and math.isnan(x))
                                     for x in shown) for n in _numbers(value))


def _normalised(key: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", key)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ranges")


@pytest.mark.parametrize("table,name,option,tp", _targets())
def test_every_numeric_option_refuses_bad_values_in_one_line_or_runs(folder, table, name, option, tp):
    here = folder / f"{table}-{name}-{option}"
    here.mkdir()
    path = here / "r.toml"
    path.write_text(tomli_w.dumps(_base(table, name, here)), encoding="utf-8")
    key = f"{table}.0.{option}" if name is not None and COMPONENT_TABLES[table][1] else f"{table}.{option}"
    try:
        load_recipe(path, plugins=PLUGINS)
        baseline: list[str] = []
    except RecipeError as e:  # e.g. fid without Inception weights, mnist without its files
        baseline = e.problems

    @settings(max_examples=8, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(_values(tp))
    def check(value):
        item = f"{key}={toml_value(value)}"
        try:
            recipe, _ = load_recipe(path, [item], plugins=PLUGINS)
        except RecipeError as e:
            # One line for the option, or one per bad item of an array or table option.
            new = [line for line in e.problems if line not in baseline]
            if not new and baseline:
                return  # accepted; the recipe's other problem (baseline) stands
            assert 1 <= len(new) <= len(_numbers(value)), (item, e.problems)
            for line in new:
                m = _KEY.match(line)
                assert "\n" not in line and m, (item, line)
                named = _normalised(m["key"]).startswith(key)
                # a cross-option check may sit on the other key of the pair and name this one in its text
                across = re.search(rf"\b{option}\b", line[m.end():])
                assert named or across, (item, line)
                assert _names_value(line, value), (item, line)
            return
        assert not baseline
        result = CliRunner().invoke(cli, ["recipe", "check", str(path), "--set", item])
        if result.exit_code == 2:
            # What only the built data set can decide (a metric asking for more images than it
            # holds) is refused by `recipe check` too - in one line naming the key - not trained.
            (line,) = result.output.strip().splitlines()
            assert line.startswith("error: ") and key.split(".")[0] in line, (item, line)
            return
        assert result.exit_code == 0, (item, result.output)
        if key in _trained or key in NOT_TRAINED:
            return
        from gan_kit.runs.run import build_run
        from gan_kit.runs.session import train

        try:
            train(build_run(recipe, PLUGINS, out_dir=here / f"run{next(_counter)}"), max_steps=1)
        except GankitError as e:
            assert len(str(e).splitlines()) == 1, (item, str(e))
        _trained.add(key)  # after it passed, so a failing value fails again when hypothesis replays it

    check()


def test_targets_cover_core_tables_builtins_and_plugins():
    ids = {p.id for p in _targets()}
    assert {"optim.betas", "run.seed", "ema.half_life_kimg", "growth:progressive.fade_kimg",
            "penalty:r1.weight", "architecture:pggan.latent_dim"} <= ids
    if ("loss", "lsgan") in PLUGINS.registry:  # plugins/gankit-lsgan installed: its options are drawn too
        assert "loss:lsgan.a" in ids
