"""``gankit run --dry-run``'s plan: each phase's batch, ``growth.batch_gpu`` and the rounds per
optimizer step (gradient accumulation), per process under ``--nproc N``; and each network's
parameter count with how many of them are frozen (FreezeD's blocks)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


def dry_run(*args):
    result = CliRunner().invoke(cli, ["run", *map(str, args), "--dry-run"])
    assert result.exit_code == 0, result.output
    return result.stdout


def table(stdout: str) -> list[dict[str, str]]:
    """The phase table's rows as {header: cell} (rich's box drawing split on its bars)."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    names = [c.strip() for c in header.strip("┃").split("┃")]
    return [dict(zip(names, (c.strip() for c in line.strip("│").split("│")))) for line in lines if line.startswith("│")]


def test_the_plan_shows_each_phases_batch_batch_gpu_and_rounds(tiny_recipe):
    rows = table(dry_run(tiny_recipe, "--set", "growth.batch_gpu={4 = 4}"))  # batch 8: 2 rounds at 4 px only
    assert [(r["resolution"], r["batch"], r["batch_gpu"], r["rounds / step"]) for r in rows] == [
        ("4px", "8", "4", "2"), ("8px", "8", "none", "1")]
    assert all("per process" not in r for r in rows)


def test_the_plan_under_nproc_counts_rounds_of_each_process_share(tiny_recipe):
    rows = table(dry_run(tiny_recipe, "--nproc", "2", "--set", "growth.batch_gpu=2"))
    assert {(r["batch"], r["per process"], r["batch_gpu"], r["rounds / step"]) for r in rows} == {("8", "4", "2", "2")}


def test_the_plan_says_how_many_parameters_are_frozen(tiny_recipe):
    from gan_kit.tools.plan import parameter_count

    recipe, plugins = load_recipe(tiny_recipe, ["architecture.freeze_d_blocks=1"])
    run = build_run(recipe, plugins)
    first = run.arch.d_blocks(run.D)[0]
    frozen = sum(p.numel() for p in first.parameters())
    total = sum(p.numel() for p in run.D.parameters())
    count = parameter_count(run.D)
    assert (count.total, count.frozen) == (total, frozen) and 0 < frozen < total
    assert parameter_count(run.G).frozen == 0 and str(parameter_count(run.G)).endswith(" parameters")
    out = dry_run(tiny_recipe, "--set", "architecture.freeze_d_blocks=1")
    g = sum(p.numel() for p in run.G.parameters())
    assert f"G pggan: {g:,} parameters; D: {total:,} parameters ({frozen:,} frozen)\n" in out
