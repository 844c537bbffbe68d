"""Test the gankit_lsgan of this checkout, even when another copy of the distribution is the one
installed (an editable install of a different checkout): its ``src`` goes first on sys.path, and
the ``gankit`` entry point imports the module by name, so it finds this one too."""

import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)
for name in [m for m in sys.modules if m == "gankit_lsgan" or m.startswith("gankit_lsgan.")]:
    del sys.modules[name]  # imported from elsewhere before this conftest ran
