"""Plugin authors need only the public ``gan_kit`` API.

* Nothing under plugins/ or docs/ (Python files and the code blocks of Markdown pages) imports
  ``gan_kit.builtin``, a private name, or any module but the top-level ``gan_kit`` and
  ``gan_kit.testing``; and what it imports from ``gan_kit`` is in ``gan_kit.__all__``.
* The built-in update strategies and penalties act through the ``StepContext`` verbs only: their
  modules never name DDP, a GradScaler, ``torch.compile`` or ``torch.distributed``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import gan_kit

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_MODULES = {"gan_kit", "gan_kit.testing"}


# ----------------------------------------------------------------------------- the scanner --


def _is_gankit(module: str) -> bool:
    return module == "gan_kit" or module.startswith("gan_kit.")


def import_problems(source: str) -> list[str]:
    """What a piece of Python imports from gankit that a plugin must not: a module other than
    ``gan_kit`` / ``gan_kit.testing`` (``gan_kit.builtin`` included), a name starting with ``_``,
    a name missing from ``gan_kit.__all__``, or an attribute ``gan_kit._x``. Code that does not
    parse (a signature-only snippet) is read line by line instead."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _line_problems(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if _is_gankit(a.name) and a.name not in PUBLIC_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _is_gankit(node.module):
            if node.module not in PUBLIC_MODULES:
                out.append(f"from {node.module} import ...")
                continue
            for a in node.names:
                if a.name.startswith("_") and a.name != "__version__":
                    out.append(f"from {node.module} import {a.name} (private)")
                elif node.module == "gan_kit" and a.name not in gan_kit.__all__:
                    out.append(f"from gan_kit import {a.name} (not in gan_kit.__all__)")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and _dotted(node.value).startswith("gan_kit"):
            out.append(f"{_dotted(node.value)}.{node.attr} (private)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "gan_kit.builtin" in node.value:
            out.append(f"{node.value!r} (names gan_kit.builtin)")  # importlib.import_module("gan_kit.builtin...")
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?([^)#]*)", re.M)
_IMPORT = re.compile(r"^\s*import\s+([\w., ]+)", re.M)
_PRIVATE_ATTR = re.compile(r"\bgan_kit(?:\.\w+)*\._\w+")


def _line_problems(source: str) -> list[str]:
    out = []
    for module, names in _FROM.findall(source):
        if _is_gankit(module):
            out += import_problems(f"from {module} import {names.strip().rstrip(',')}")
    for modules in _IMPORT.findall(source):
        out += import_problems(f"import {modules.strip().rstrip(',')}")
    out += [f"{m} (private)" for m in _PRIVATE_ATTR.findall(source)]
    return out


def code_blocks(markdown: str) -> list[str]:
    """The fenced code blocks of a Markdown page tagged python/py or untagged."""
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", markdown, re.S | re.M)
            if lang in ("", "python", "py")]


def plugin_facing_sources() -> list[tuple[str, str]]:
    """``(label, python source)`` for every .py file and Markdown code block under plugins/ and docs/."""
    out = []
    for folder in ("plugins", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if "__pycache__" in path.parts or ".egg-info" in str(path) or not path.is_file():
                continue
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix == ".py":
                out.append((rel, path.read_text(encoding="utf-8")))
            elif path.suffix == ".md":
                out += [(f"{rel} (code block {i + 1})", b) for i, b in enumerate(code_blocks(path.read_text("utf-8")))]
    return out


# -------------------------------------------------------------------------- the scanner works --


@pytest.mark.parametrize("source", [
    "from gan_kit.builtin.objectives.penalties import per_sample_norm",
    "import gan_kit.builtin.objectives.strategies",
    "from gan_kit.training.step import StepContext",
    "from gan_kit.plugin_api.manager import build_plugins",
    "from gan_kit.testing import _helper",
    "from gan_kit import _private",
    "from gan_kit import set_phase",
    "import gan_kit\nx = gan_kit._version",
    "import importlib\nimportlib.import_module('gan_kit.builtin.objectives.losses')",
    "def register_losses(register: Register) -> None\nfrom gan_kit.recipe import load_recipe",  # no parse
    "```\nnot python\n  from gan_kit.runs.engine import train\n",
])
def test_scanner_finds_each_forbidden_import(source):
    assert import_problems(source)


def test_scanner_accepts_the_public_api():
    source = ("from gan_kit import Loss, Penalty, StepContext, hookimpl, option, Run, __version__\n"
              "from gan_kit.testing import make_run, train_steps\nimport gan_kit\nimport gan_kit.testing\n"
              "import torch\nx = gan_kit.hookimpl\n")
    assert import_problems(source) == []


def test_scanner_sees_markdown_code_blocks():
    page = "text\n\n```python\nfrom gan_kit.builtin import x\n```\n\n```bash\nimport nothing\n```\n"
    assert code_blocks(page) == ["from gan_kit.builtin import x\n"]


# ----------------------------------------------------------------------------- plugins/ docs/ --


def test_plugins_and_docs_import_only_the_public_api():
    sources = plugin_facing_sources()
    labels = {label.split(" (")[0] for label, _ in sources}
    # the scan reaches the example plugin distribution, the example files and the guides
    assert {"plugins/gankit-lsgan/src/gankit_lsgan/__init__.py", "docs/writing-plugins.md", "docs/hooks.md",
            "docs/examples/strategy_plugin.py"} <= labels
    problems = [f"{label}: {p}" for label, source in sources for p in import_problems(source)]
    assert problems == []


def test_public_names_are_exported_and_internal_ones_are_not():
    for name in gan_kit.__all__:
        assert getattr(gan_kit, name) is not None, name
    assert not [n for n in gan_kit.__all__ if n.startswith("_") and n != "__version__"]
    for internal in ("set_phase", "ComponentBase", "AugmentedD", "d_objective", "g_objective", "build_plugins"):
        assert internal not in gan_kit.__all__ and not hasattr(gan_kit, internal), internal


def test_conditional_batch_norm_is_public_and_is_the_one_the_studiogan_nets_use():
    """A plugin's class-conditional G builds ``gan_kit.ConditionalBatchNorm2d``: the class the
    built-in ResNet Gs hold, normalising with batch statistics, then a per-class gain and bias
    (zero maps leave the normalised input as it is)."""
    import torch

    from gan_kit.builtin.architectures import conditioning

    assert "ConditionalBatchNorm2d" in gan_kit.__all__
    assert conditioning.ConditionalBatchNorm2d is gan_kit.ConditionalBatchNorm2d
    cbn = gan_kit.ConditionalBatchNorm2d(3, 10)
    x = torch.randn(8, 3, 4, 4) * 5 + 2
    y = torch.nn.functional.one_hot(torch.arange(8) % 10, 10).float()
    torch.nn.init.zeros_(cbn.gain.weight)
    torch.nn.init.zeros_(cbn.bias.weight)
    out = cbn(x, y)
    assert torch.allclose(out.mean(dim=(0, 2, 3)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(out.std(dim=(0, 2, 3), unbiased=False), torch.ones(3), atol=1e-3)
    with torch.no_grad():
        cbn.bias.weight[:, 1] = 7.0  # class 1's bias
    shifted = cbn(x, y)
    assert torch.allclose(shifted[1] - out[1], torch.full_like(out[1], 7.0), atol=1e-5)
    assert torch.allclose(shifted[0], out[0], atol=1e-6)


# ------------------------------------------------------------ built-in strategies and penalties --

#: What a strategy or penalty must leave to the StepContext verbs.
MECHANICS = re.compile(r"\bDDP\b|DistributedDataParallel|GradScaler|scaler|\bcompile|torch\.distributed", re.I)


def strategy_and_penalty_modules() -> list[Path]:
    """Built-in modules that define an update strategy or a penalty (a class deriving from
    ``UpdateStrategy`` / ``Penalty``, or implementing their registration hook)."""
    out = []
    for path in sorted((ROOT / "gan_kit" / "builtin").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            bases = {_dotted(b).rsplit(".", 1)[-1] for b in getattr(node, "bases", [])}
            if (isinstance(node, ast.ClassDef) and bases & {"UpdateStrategy", "Penalty"}) or (
                    isinstance(node, ast.FunctionDef) and node.name in ("register_update_strategies", "register_penalties")):
                out.append(path)
                break
    return out


def test_mechanics_pattern_catches_each_name():
    for text in ("model = DDP(net)", "torch.nn.parallel.DistributedDataParallel", "ctx.scaler.scale(loss)",
                 "amp.GradScaler()", "torch.compile(D)", "import torch.distributed as dist", "compiled graphs"):
        assert MECHANICS.search(text), text
    assert not MECHANICS.search("ctx.backward(loss, 'D'); ctx.opt_step('D'); with ctx.frozen('D'): ...")


def test_builtin_strategies_and_penalties_name_no_ddp_scaler_compile_or_distributed():
    modules = strategy_and_penalty_modules()
    names = {p.relative_to(ROOT).as_posix() for p in modules}
    assert {"gan_kit/builtin/objectives/strategies.py", "gan_kit/builtin/objectives/penalties.py"} <= names
    found = [f"{p.relative_to(ROOT).as_posix()}:{i}: {line.strip()}"
             for p in modules for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if MECHANICS.search(line)]
    assert found == []


def test_run_called_with_a_recipe_builds_the_same_run_as_build_run(tiny_recipe, tmp_path):
    """gan_kit.Run(recipe, plugins, out_dir), the constructor scripts used before build_run,
    still builds a run: the same weights and settings as build_run's."""
    import torch
    from gan_kit import Run, build_run, load_recipe

    recipe, plugins = load_recipe(tiny_recipe)
    old_style = Run(recipe, plugins, tmp_path / "a")
    built = build_run(recipe, plugins, tmp_path / "a")
    assert isinstance(old_style, Run) and old_style.out_dir == tmp_path / "a"
    assert old_style.G is not built.G
    for a, b in zip(old_style.G.state_dict().values(), built.G.state_dict().values()):
        assert torch.equal(a, b)
    assert old_style.opt_D.param_groups[0]["lr"] == built.opt_D.param_groups[0]["lr"]
    assert old_style.G is old_style.nets.G and old_style.checkpoints.latest == built.checkpoints.latest
