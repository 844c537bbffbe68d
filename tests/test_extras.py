"""The optional extras: one (``tools``) brings every package an after-training command asks for,
so a newcomer does not meet them one error at a time; every extra a message names exists; the
README says how large the install is and how to install the CPU-only torch."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]


def expand(name: str, table: dict[str, list[str]]) -> set[str]:
    """The packages of extra ``name``, its ``gankit[a,b]`` entries followed."""
    out: set[str] = set()
    for req in table[name]:
        m = re.fullmatch(r"gankit\[(.+)\]", req)
        if m:
            for inner in m.group(1).split(","):
                out |= expand(inner.strip(), table)
        else:
            out.add(re.split(r"[<>=!\[; ]", req, maxsplit=1)[0])
    return out


def test_the_tools_extra_brings_every_package_the_after_training_commands_ask_for():
    table = extras()
    named = set()  # the extras gankit's messages tell the user to install
    for path in (ROOT / "gan_kit").rglob("*.py"):
        named |= set(re.findall(r"gankit\[(\w+)\]", path.read_text(encoding="utf-8")))
    assert named <= set(table), named - set(table)
    tools = expand("tools", table)
    for extra in ("report", "fid", "export", "video"):  # report, eval's FID, export's ONNX, walks' MP4
        assert expand(extra, table) <= tools, extra
    assert {"matplotlib", "torch-fidelity", "onnx", "onnxscript", "onnxruntime", "imageio-ffmpeg"} <= tools
    assert expand("all", table) == set().union(*(expand(e, table) for e in table if e not in ("test", "all")))


def test_the_readme_gives_the_install_size_the_cpu_only_torch_and_the_tools_extra():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "5.7 GB" in readme and "pip install -e '.[tools]'" in readme
