"""``OutputPath``: the click type of every option that names where a command writes
(``--out``, ``--outdir``). An empty value - an unset shell variable, ``--outdir "$DIR"`` - is
refused as a usage error (one line, exit 2) instead of writing into the working folder, which
``Path("")`` would name."""

from __future__ import annotations

import click

__all__ = ["OutputPath"]


class OutputPath(click.Path):
    """``click.Path`` that refuses an empty or blank value."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            what = "folder" if not self.file_okay else "file"
            self.fail(f"{value!r} names no {what} (an unset shell variable?); name the {what} to write", param, ctx)
        return super().convert(value, param, ctx)
