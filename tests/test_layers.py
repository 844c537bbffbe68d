"""The package in declared layers that read like its folders.

* The import-linter contracts in pyproject.toml are kept: a module imports only from its own
  layer or below, siblings joined by ``|`` import nothing from each other, every module of
  gan_kit has its place, and only the built-in plugins import the ``gan_kit`` facade. Imports
  under ``if TYPE_CHECKING:`` are the only ones left out; no contract ignores an import.
* The top contract has one rung per folder of gan_kit/ (no module loose at the package root
  but the facade, ``__main__`` and ``testing``), and every package has a contract of its own.
* No import cycle anywhere in the package (inside functions too), and no private name (``_x``)
  imported across modules, in gan_kit or the plugins/ distributions.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gan_kit"


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


def _table(markdown: str, heading: str) -> list[list[str]]:
    """The cells of the Markdown table under ``heading`` (header and rule rows left out), ``\\|``
    inside a cell read as ``|``."""
    section = markdown.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in row.replace("\\|", "\0").strip("|").split("|")] for row in rows]


def _names(cell: str) -> list[str]:
    return [n.rstrip("/") for n in re.findall(r"`([^`]+)`", cell)]


def _layer_text(cell: str) -> list[str]:
    """``a`` | ``b`` > ``c`` -> ["a | b", "c"]."""
    return [" | ".join(_names(part)) for part in cell.split(" > ")]


def test_the_architecture_page_names_every_layer_of_the_contracts_in_order():
    """docs/architecture.md's two tables are the contracts: the top one lists the rungs of the
    folders' contract top to bottom, the second every package's own layers (or its independent
    modules), so the page cannot drift from pyproject.toml."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    contracts = {c["id"]: c for c in _importlinter_config()["contracts"]}
    top = [" | ".join(_names(row[0].replace("\0", "|"))) for row in _table(page, "## The layers, top to bottom")]
    assert top == [" | ".join(n.strip() for n in layer.split("|")) for layer in contracts["layers"]["layers"]]
    inside = {row[0]: row[1].replace("\0", "|") for row in _table(page, "## Inside each package")}
    expected, found = {}, {}
    for c in contracts.values():
        if c["type"] == "layers" and c["id"] != "layers":
            for container in c["containers"]:
                expected[container] = [" | ".join(n.strip() for n in layer.split("|")) for layer in c["layers"]]
                found[container] = _layer_text(inside.get(f"`{container}`", ""))
        elif c["type"] == "independence":
            rows = [cell for cell in inside.values() if cell.startswith("independent:")
                    and set(_names(cell)) & set(c["modules"])]
            expected[c["id"]] = sorted(c["modules"])
            found[c["id"]] = sorted(_names(rows[0])) if rows else []
    assert found == expected, "docs/architecture.md's package table is out of date: run python -m gan_kit.tools.docgen"


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


# ------------------------------------------------------------ no cycle, no private import --


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> modules it imports): every strongly connected
    component of two or more modules, or of one module importing itself, sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}) == [["a", "b", "c"], ["e"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def package_graph() -> dict[str, set[str]]:
    """gan_kit's imports, module -> the gan_kit modules it imports, every import counted
    (inside functions too), as import-linter (grimp) reads them, ``if TYPE_CHECKING:`` left out."""
    import grimp

    graph = grimp.build_graph("gan_kit", exclude_type_checking_imports=True)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def test_no_import_cycle_anywhere_in_the_package():
    """No module of gan_kit imports itself round a circle of others, at any level of the tree
    (the layers contracts see only imports between their layers)."""
    graph = package_graph()
    assert len(graph) > 80 and "gan_kit.runs.engine" in graph["gan_kit.tools.bench"]
    assert import_cycles(graph) == []


def module_files() -> dict[str, Path]:
    """Dotted name -> file of every module of gan_kit and of the plugins/ distributions."""
    out = {}
    for src in [PACKAGE.parent, *sorted((ROOT / "plugins").glob("*/src"))]:
        for path in sorted(src.glob("*/**/*.py")) if src != PACKAGE.parent else sorted(PACKAGE.rglob("*.py")):
            if "__pycache__" in path.parts or ".egg-info" in str(path):
                continue
            parts = list(path.relative_to(src).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def private_imports(source: str, modules: set[str], first_party: tuple[str, ...]) -> list[str]:
    """Where ``source`` takes a private name (``_x``; dunders aside) from another module:
    ``from m import _x`` or ``alias._x`` on a module it imported."""
    tree = ast.parse(source)
    out, bound = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in first_party:
            for a in node.names:
                if f"{node.module}.{a.name}" in modules:
                    bound[a.asname or a.name] = f"{node.module}.{a.name}"
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"line {node.lineno}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            bound.update({a.asname: a.name for a in node.names
                          if a.asname and a.name.split(".")[0] in first_party})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.append(f"line {node.lineno}: {node.value.id}.{node.attr} (of {bound[node.value.id]})")
    return out


def test_the_private_import_finder_sees_both_forms():
    modules = {"gan_kit.a", "gan_kit.b"}
    source = "from gan_kit.a import _x, y\nfrom gan_kit import b as B\nB._z()\nB.__name__\nfrom os import _exit\n"
    assert private_imports(source, modules, ("gan_kit",)) == ["line 1: from gan_kit.a import _x",
                                                             "line 3: B._z (of gan_kit.b)"]


def test_no_private_name_is_imported_across_modules():
    """A helper two modules share is public in the module both import (or moved down to one);
    a name with a leading underscore is used only where it is defined."""
    files = module_files()
    first_party = tuple(sorted({name.split(".")[0] for name in files}))
    assert {"gan_kit", "gankit_sweep", "gankit_lsgan"} <= set(first_party)
    found = [f"{path.relative_to(ROOT).as_posix()} {problem}" for path in files.values()
             for problem in private_imports(path.read_text(encoding="utf-8"), set(files), first_party)]
    assert found == []
