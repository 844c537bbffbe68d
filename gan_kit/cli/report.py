"""``gankit report RUN_DIR``: a run as pictures (``gan_kit.tools.report`` draws them)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.tools.report import write_report

__all__ = ["report"]


@click.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@user_errors
def report(run_dir: Path) -> None:
    """Write RUN_DIR/report.html with PNG plots (losses, penalties, metrics, phase sample grids)."""
    path = write_report(run_dir)
    pngs = sorted(p.name for p in (run_dir / "report").glob("*.png"))
    click.echo(f"wrote {path} and {len(pngs)} plots in {run_dir / 'report'}: {', '.join(pngs)}")
