"""Loading details: a UTF-8 byte-order mark, the keys given with --set, declared
ranges with their exact one-line messages and their place in the help text, and the wgan-gp clash
fix for --set users."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.base.errors import RecipeError
from gan_kit.base.options import Range, option_range, range_problems
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.recipe import OptimOptions, RunOptions, load_recipe
from gan_kit.recipe.schema import SEED_MAX


@pytest.fixture(scope="module")
def plugins():
    return build_plugins(load_entry_points=False)


def test_utf8_bom_recipe_loads(tmp_path, tiny_recipe_text, plugins):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + tiny_recipe_text.encode("utf-8"))
    r, _ = load_recipe(path, plugins=plugins)
    assert r.run.total_kimg == 0.2 and r.resolution == 8
    r2, _ = load_recipe(path, plugins=plugins, text="\ufeff" + tiny_recipe_text)  # text= too (saved recipes)
    assert r2.run.total_kimg == 0.2


def test_cli_keys_record_what_came_from_set(write_recipe, tiny_recipe_text, plugins):
    path = write_recipe(tiny_recipe_text)
    r, _ = load_recipe(path, ["data.resolution=8", "penalty.0.weight=5", "run.seed=3"], plugins=plugins)
    assert r.cli_keys == frozenset({"data.resolution", "penalty.0.weight", "run.seed"})
    assert r.from_cli("data.resolution") and r.from_cli("penalty[0].weight")
    assert not r.from_cli("data.path") and not r.from_cli("run.total_kimg")
    r2, _ = load_recipe(path, ['data={ name = "digits", resolution = 8 }'], plugins=plugins)
    assert r2.from_cli("data.path")  # a whole table from the command line covers its keys
    r3, _ = load_recipe(path, plugins=plugins)
    assert r3.cli_keys == frozenset()


BAD = [
    ("optim.betas=[0.5, 1.0]", "optim.betas[1]: must be in [0, 1), got 1.0 (Adam's beta2, e.g. 0.99)"),
    ("optim.betas=[-0.1, 0.9]", "optim.betas[0]: must be >= 0, got -0.1 (Adam's beta1, e.g. 0.0 as in PGGAN)"),
    ("optim.g_lr=-0.001", "optim.g_lr: must be > 0, got -0.001 (use a positive number)"),
    ("optim.lr=nan", "optim.lr: must be a finite number > 0, got nan (use a positive number)"),
    ("growth.stable_kimg=inf",
     "growth.stable_kimg: must be a finite number >= 0, got inf (see gankit list-plugins --kind growth -v)"),
    ("growth.fade_kimg={8=inf}",
     "growth.fade_kimg.8: must be a finite number >= 0, got inf (see gankit list-plugins --kind growth -v)"),
    ("run.seed=20000000000000", "run.seed: must be in [0, 2**32), got 20000000000000 (e.g. seed = 0)"),
    ("run.seed=-1", "run.seed: must be >= 0, got -1 (e.g. seed = 0)"),
    ("ema.half_life_kimg=-10", 'ema.half_life_kimg: must be > 0, got -10.0 (e.g. half_life_kimg = 10)'),
    ("ema.rampup=-0.05", 'ema.rampup: must be >= 0, got -0.05 (e.g. rampup = 0.05; "none" = no ramp-up)'),
    ("run.total_kimg=inf", "run.total_kimg: must be a finite number > 0, got inf (use a positive number)"),
    ("run.total_kimg=2e9", "run.total_kimg: must be in (0, 1000000000], got 2000000000.0 (use a value in (0, 1000000000])"),
    ("run.sample_grid=0", "run.sample_grid: must be >= 1, got 0 (e.g. sample_grid = 64 (an 8x8 grid))"),
    ("optim.eps=0", "optim.eps: must be > 0, got 0.0 (use a positive number)"),
    ("optim.eps=2", "optim.eps: must be in (0, 1], got 2.0 (use a value in (0, 1])"),
    ("architecture.mbstd_group_size=-1",
     "architecture.mbstd_group_size: must be >= 0, got -1 (see gankit list-plugins --kind architecture -v)"),
    (f"optim.lr={10**330}",
     f"optim.lr: expected float, got integer {10**330} (too large for a float) (e.g. lr = 0.001)"),
]


@pytest.mark.parametrize("item,line", BAD, ids=[b[0][:30] for b in BAD])
def test_out_of_range_values_give_one_exact_line(write_recipe, tiny_recipe_text, plugins, item, line):
    path = write_recipe(tiny_recipe_text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path, [item], plugins=plugins)
    assert e.value.problems == [f"{path} (--set): {line}"]


def test_recipe_check_cli_exit_2_one_line(in_tmp_recipe):
    result = CliRunner().invoke(cli, ["recipe", "check", str(in_tmp_recipe), "--set", "optim.betas=[0.5, 1.0]"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {in_tmp_recipe} (--set): optim.betas[1]: must be in [0, 1), got 1.0 (Adam's beta2, e.g. 0.99)"]


@pytest.fixture
def in_tmp_recipe(write_recipe, tiny_recipe_text, monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    return write_recipe(tiny_recipe_text)


def test_range_edges_and_elementwise():
    beta = Range(min=0, max=1, max_exclusive=True)
    assert beta.check(0.0) is None and beta.check(0.999999) is None
    assert beta.check(1.0) == "must be in [0, 1), got 1.0"
    assert Range(min=0, min_exclusive=True).check(0.0) == "must be > 0, got 0.0"
    assert Range(allow_inf=True).check(float("inf")) is None
    assert Range().check(float("-inf")) == "must be a finite number, got -inf"
    assert Range().check(2**63 - 1) is None and Range().check(-(2**63)) is None
    assert Range().check(2**63) == f"must fit a 64-bit integer, got {2**63}"
    assert Range(min=1).check(-(2**63) - 1) == f"must be >= 1, got {-(2**63) - 1}"
    assert Range(min=1).check(2**64) == f"must be >= 1 and fit a 64-bit integer, got {2**64}"
    assert Range(min=1).check(True) is None  # booleans are not numbers here
    assert range_problems({4: 1.0, 8: float("inf")}, Range(min=0)) == [(".8", "must be a finite number >= 0, got inf")]
    assert range_problems((0.5, 2.0), beta) == [("[1]", "must be in [0, 1), got 2.0")]
    seed = option_range(next(f for f in RunOptions.__attrs_attrs__ if f.name == "seed"))
    assert seed.check(SEED_MAX - 1) is None and seed.check(SEED_MAX) is not None


def test_range_is_in_help_of_list_plugins_and_docs():
    betas = next(f for f in OptimOptions.__attrs_attrs__ if f.name == "betas")
    assert betas.metadata["help"].endswith("Allowed: in [0, 1).")
    result = CliRunner().invoke(cli, ["list-plugins", "--kind", "growth", "-v", "--json"])
    assert result.exit_code == 0
    assert "Allowed: in [0, 1000000000]" in result.output  # fade_kimg / stable_kimg


def test_wgan_gp_clash_gives_the_set_fix(write_recipe, tiny_recipe_text, plugins):
    path = write_recipe(tiny_recipe_text)
    with pytest.raises(RecipeError) as e:
        load_recipe(path, ["loss.name=wgan-gp"], plugins=plugins)
    (line,) = e.value.problems
    assert line.startswith(f"{path}: penalty[0].name: 'gradient-penalty' is already part of loss 'wgan-gp'")
    assert "--set 'penalty=[]'" in line and "loss.gp_weight" in line
    r, _ = load_recipe(path, ["loss.name=wgan-gp", "penalty=[]"], plugins=plugins)  # the fix it gives works
    assert r.penalties == ()


def test_unknown_compile_backend_is_one_recipe_line(tmp_path, tiny_recipe_text, plugins):
    """A misspelt torch.compile backend is a recipe error at load (`recipe check` too), not a
    dynamo exception once training starts; known backends, debugging ones included, load."""
    path = tmp_path / "r.toml"
    path.write_text(tiny_recipe_text)
    for sets in (["run.compile=true", "run.compile_backend=nosuch"], ["run.compile_backend=nosuch"]):
        with pytest.raises(RecipeError) as e:
            load_recipe(path, sets, plugins=plugins)
        (line,) = e.value.problems
        assert "run.compile_backend" in line and "'nosuch'" in line and "'inductor'" in line, line
    for backend in ("aot_eager", "eager", "inductor"):
        recipe, _ = load_recipe(path, ["run.compile=true", f"run.compile_backend={backend}"], plugins=plugins)
        assert recipe.run.compile_backend == backend
