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
