"""Models named ``hf://OWNER/REPO/FILE`` (or ``hf://OWNER/REPO`` for an export folder) resolve
through huggingface_hub's cache: with ``HF_HUB_OFFLINE=1`` and a cache the test fills in the
Hub's own layout (models--OWNER--REPO/refs/main, snapshots/REV/FILE), ``gankit generate`` draws
the same pixels from the Hub name as from the local file, and a name missing from the cache is
one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from gan_kit.base.errors import CheckpointError
from gan_kit.cli import cli
from gan_kit.runs.hub import parse_hub, resolve_source

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _fill_cache(cache: Path, repo_id: str, files: dict[str, Path]) -> None:
    """The layout huggingface_hub keeps: the revision main points to, and its snapshot's files."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(REVISION)
    for name, source in files.items():
        target = root / "snapshots" / REVISION / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_hub_names_parse_into_repo_revision_and_file():
    assert parse_hub("hf://me/gan/network-snapshot.pkl") == ("me/gan", None, "network-snapshot.pkl")
    assert parse_hub("hf://me/gan@v1/sub/dir/model.pt") == ("me/gan", "v1", "sub/dir/model.pt")
    assert parse_hub("hf://me/gan") == ("me/gan", None, None)
    with pytest.raises(CheckpointError, match="hf://OWNER/REPO/FILE"):
        parse_hub("hf://only-owner")


def test_generate_from_a_hub_name_draws_the_local_files_pixels(trained_sg2, offline_cache, tmp_path):
    _, checkpoint, _ = trained_sg2
    _fill_cache(offline_cache, "me/tiny-sg2", {"latest.pt": checkpoint})
    assert resolve_source("hf://me/tiny-sg2/latest.pt").read_bytes() == checkpoint.read_bytes()
    runner = CliRunner()
    for name, source in (("hub", "hf://me/tiny-sg2/latest.pt"), ("local", str(checkpoint))):
        result = runner.invoke(cli, ["generate", source, "--seeds", "3", "--outdir", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    hub = Image.open(tmp_path / "hub" / "seed0003.png")
    local = Image.open(tmp_path / "local" / "seed0003.png")
    assert hub.tobytes() == local.tobytes() and hub.size == local.size


def test_an_export_folder_on_the_hub_is_named_by_its_repository(trained_sg2, offline_cache, tmp_path):
    _, _, export = trained_sg2
    root = offline_cache / "models--me--tiny-export"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(REVISION)
    shutil.copytree(export, root / "snapshots" / REVISION)
    result = CliRunner().invoke(cli, ["generate", "hf://me/tiny-export", "--seeds", "1", "--outdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "seed0001.png").is_file()


def test_a_hub_file_missing_from_the_offline_cache_is_one_line(offline_cache, tmp_path):
    result = CliRunner().invoke(cli, ["generate", "hf://me/absent/network-snapshot.pkl", "--seeds", "0",
                                      "--outdir", str(tmp_path / "out")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "hf://me/absent/network-snapshot.pkl" in lines[0] and "cache" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_hub_repository_that_is_no_export_asks_for_a_file_name(trained_sg2, offline_cache, tmp_path):
    _, checkpoint, _ = trained_sg2
    _fill_cache(offline_cache, "me/snapshots", {"latest.pt": checkpoint})
    result = CliRunner().invoke(cli, ["generate", "hf://me/snapshots", "--seeds", "0", "--outdir", str(tmp_path / "o")])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "hf://me/snapshots/FILE" in lines[0], lines
    assert str(offline_cache) not in lines[0]  # no local cache path in the message
