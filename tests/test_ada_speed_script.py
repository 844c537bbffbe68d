"""benchmarks/ada_speed.py times R3GAN's augmentation pipeline beside 'bgc' and 'gankit-subset':
its table has a column per (pipeline, p), r3gan's included, and a timing in every cell."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "ada_speed.py"


def test_the_table_times_the_r3gan_pipeline_beside_bgc_and_the_subset():
    spec = importlib.util.spec_from_file_location("ada_speed", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    header, rule, row = mod.table(shapes=[(2, 3, 8, 8)], calls=1)
    columns = [c.strip() for c in header.strip("|").split("|")][1:]
    assert {"r3gan p=0.3", "r3gan p=1", "bgc p=0.3", "gankit-subset p=1"} <= set(columns)
    assert rule.count("---") == len(columns) + 1
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "2x3x8x8" and len(cells) == len(columns) + 1
    assert all(re.fullmatch(r"\d+\.\d ms", c) for c in cells[1:]), cells
