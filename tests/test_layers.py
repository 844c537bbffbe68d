"""The package in declared layers that read like its folders.

* The import-linter contracts in pyproject.toml are kept: a module imports only from its own
  layer or below, siblings joined by ``|`` import nothing from each other, every module of
  gan_kit has its place, and only the built-in plugins import the ``gan_kit`` facade. Imports
  under ``if TYPE_CHECKING:`` are the only ones left out; no contract ignores an import.
* The top contract has one rung per folder of gan_kit/ (no module loose at the package root
  but the facade, ``__main__`` and ``testing``), and every package has a contract of its own.
* No module under gan_kit/ is longer than 450 lines, no class longer than 250.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gan_kit"
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250


def _importlinter_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def test_the_import_contracts_are_kept(capsys):
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # without colours, if forced
    # import-linter's report names each broken contract and every offending import with its line
    assert code == 0, "an import breaks the layers of pyproject.toml [tool.importlinter]:\n" + report
    kept = len(_importlinter_config()["contracts"])
    assert "gan_kit in layers KEPT" in report and f"{kept} kept, 0 broken" in report, report


def test_the_contracts_ignore_no_import_but_type_checking_ones():
    config = _importlinter_config()
    assert config["exclude_type_checking_imports"] is True
    contracts = {c["id"]: c for c in config["contracts"]}
    assert {"layers", "facade"} <= set(contracts)
    assert [c["id"] for c in contracts.values() if "ignore_imports" in c] == []
    assert [c["id"] for c in contracts.values() if "exhaustive_ignores" in c] == []
    layered = [c for c in contracts.values() if c["type"] == "layers"]
    assert all(c["exhaustive"] is True for c in layered), [c["id"] for c in layered if not c.get("exhaustive")]
    layers = contracts["layers"]
    assert layers["containers"] == ["gan_kit"]
    # the package's top and bottom as the design page has them
    assert layers["layers"][1] == "cli" and layers["layers"][-1] == "base"


def _rungs(contract: dict) -> set[str]:
    return {name.strip() for layer in contract["layers"] for name in layer.split("|")}


def test_the_top_contract_is_the_folders_of_the_package():
    """Every rung of the top contract is a folder (a package) of gan_kit/ but three modules, and
    every folder is a rung: a reader finds a file's layer from its folder."""
    top = _rungs({c["id"]: c for c in _importlinter_config()["contracts"]}["layers"])
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == folders | modules
    assert modules == {"__main__", "testing"}, f"modules loose at gan_kit's root: {sorted(modules)}"


def test_every_package_with_modules_of_its_own_has_a_contract():
    """A package of two or more modules has a contract over them (layers, exhaustive, or an
    independence contract naming each of its modules)."""
    contracts = _importlinter_config()["contracts"]
    covered = {container for c in contracts for container in c.get("containers", [])}
    covered |= {m.rsplit(".", 1)[0] for c in contracts if c["type"] == "independence" for m in c["modules"]}
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = init.parent
        children = [p for p in package.iterdir() if (p.suffix == ".py" and p.name != "__init__.py")
                    or (p / "__init__.py").is_file()]
        name = ".".join(package.relative_to(PACKAGE.parent).parts)
        if len(children) >= 2 and name not in covered:
            missing.append(name)
    assert missing == []


def longest_parts(path: Path) -> tuple[int, list[tuple[str, int]]]:
    """A Python file's line count and each class's length in lines (``(qualified name,
    lines)``, decorators included, nested classes on their own as well)."""
    text = path.read_text(encoding="utf-8")
    classes: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                classes.append((prefix + child.name, child.end_lineno - start + 1))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return len(text.splitlines()), classes


def test_the_measure_counts_decorators_and_nested_classes(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import attrs\n\n\n@attrs.define\nclass A:\n    x: int\n\n    class B:\n        y = 1\n\n"
                      "def f():\n    class C:\n        pass\n", encoding="utf-8")
    assert longest_parts(source) == (13, [("A", 6), ("A.B", 2), ("C", 2)])


def test_no_module_is_above_450_lines_and_no_class_above_250():
    too_long = []
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50 and PACKAGE / "runs" / "run" / "__init__.py" in files
    for path in files:
        lines, classes = longest_parts(path)
        name = path.relative_to(PACKAGE.parent).as_posix()
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES}; split it by job)")
        too_long += [f"{name}: class {cls} is {n} lines (at most {MAX_CLASS_LINES})"
                     for cls, n in classes if n > MAX_CLASS_LINES]
    assert too_long == []
