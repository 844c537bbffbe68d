"""Shared fixtures: tiny recipes that train in a second on the CPU."""

from __future__ import annotations

import logging
import os
import textwrap
from pathlib import Path

import pytest
import torch

from gan_kit.testing import TINY_RECIPE  # the recipe plugin authors test with too


@pytest.fixture
def tiny_recipe_text(tmp_path: Path) -> str:
    """TOML of a tiny growing recipe (8x8 digits, 4 -> 8 px, batch 8) writing under tmp_path."""
    return TINY_RECIPE.format(out_dir=(tmp_path / "run").as_posix())


@pytest.fixture
def write_recipe(tmp_path: Path):
    """``write_recipe(text, name="r.toml") -> Path``: write a recipe file into tmp_path."""

    def write(text: str, name: str = "r.toml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def tiny_recipe(tmp_path: Path, tiny_recipe_text: str, write_recipe) -> Path:
    """Path of the tiny recipe file."""
    return write_recipe(tiny_recipe_text, "tiny.toml")


# One intra-op thread: the tests use tiny tensors, where a second thread only adds
# synchronisation (and, on a shared 2-core machine, contention between test processes).
torch.set_num_threads(1)
# ... and runs keep it: with OMP_NUM_THREADS set, a run whose recipe leaves run.threads unset does
# not sample the free cores (gan_kit/base/threads.py), a quarter second per run.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def metric_cache_dir(tmp_path: Path, monkeypatch) -> Path:
    """The feature metrics' on-disk cache of this test ($GANKIT_CACHE_DIR/metrics under tmp_path),
    and no extractor or features kept in memory from another test, before or after it."""
    from gan_kit.builtin.metrics import feature_extractors as fx

    monkeypatch.setenv("GANKIT_CACHE_DIR", str(tmp_path / "cache"))
    fx.clear_caches()
    yield tmp_path / "cache" / "metrics"
    fx.clear_caches()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    # Libraries that configure logging in-process (import-linter's lint_imports, alembic under an
    # Optuna SQLite storage) disable every logger that exists then; gankit's own warnings are
    # what several tests read, so each test starts with them enabled.
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("gankit") and isinstance(logger, logging.Logger):
            logger.disabled = False
    yield
    torch.set_num_threads(1)  # a test whose recipe sets run.threads must not slow the ones after it


#: A tiny StyleGAN2 (16 px digits, z and W of 8, num_ws 6) and a tiny growing PGGAN (at 4 px
#: after 3 steps): the trained generators `gankit generate` / `style-mix` / `sample` read.
TINY_SG2 = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, channel_max=8}",
            "growth={name='static', batch_size=8}", "data.resolution=16", "data.upscale='allow'", "penalty=[]"]


def _trained(folder: Path, overrides: list[str], steps: int = 3) -> Path:
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    run = make_run(folder, overrides=overrides)
    train(run, max_steps=steps)  # a few real steps: w_avg and the noise strengths have moved off zero
    run.save_checkpoint("latest")
    return run.out_dir


@pytest.fixture(scope="session")
def trained_sg2(tmp_path_factory):
    """``(run_dir, checkpoint, export)`` of a tiny StyleGAN2 trained 3 steps and exported as
    safetensors and TorchScript (ONNX takes seconds more: the one test that needs it exports it
    itself). Read-only for the tests: they write elsewhere."""
    from gan_kit.tools.export import export_model

    folder = tmp_path_factory.mktemp("sg2")
    run_dir = _trained(folder, TINY_SG2)
    export_model(run_dir / "checkpoints" / "latest.pt", folder / "export", formats=["safetensors", "torchscript"])
    return run_dir, run_dir / "checkpoints" / "latest.pt", folder / "export"


@pytest.fixture(scope="session")
def trained_pggan(tmp_path_factory) -> Path:
    """The checkpoint of the tiny growing PGGAN trained 3 steps (no mapping network, no noise)."""
    return _trained(tmp_path_factory.mktemp("pggan"), []) / "checkpoints" / "latest.pt"


@pytest.fixture(scope="session")
def trained_style_mlp(tmp_path_factory) -> Path:
    """The checkpoint of docs/examples/style_plugin.py's ``style-mlp`` (a plugin G with per-layer
    styles, loaded through the recipe's ``plugins``, so the checkpoint reopens with it) trained 3
    steps on 8 px digits: num_ws 3, W of 8."""
    plugin = Path(__file__).resolve().parent.parent / "docs" / "examples" / "style_plugin.py"
    return _trained(tmp_path_factory.mktemp("style-mlp"), [
        f"plugins=['{plugin.as_posix()}']", "growth={name='static', batch_size=8}",
        "architecture={name='style-mlp', latent_dim=8, w_dim=8, hidden=16, num_layers=3}"]) / "checkpoints" / "latest.pt"
