"""Malformed recipes: each gives its exact one-line messages (file, dotted key, value, fix),
exit code 2 and no traceback, through the CLI (`gankit recipe check`, `gankit run --dry-run`,
`gankit recipe show`).

Lists of available components are written ``<loss>``, ``<penalty>``, ... and filled in from the
registry, so adding a built-in component does not break these tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.plugin_api.manager import build_plugins

COMMANDS = {"check": ["recipe", "check"], "dry-run": ["run", "--dry-run"], "show": ["recipe", "show"]}


def case(cid, files, command, sets, expected):
    return pytest.param(files, command, sets, expected, id=cid)


CASES = [
    case('syntax-invalid-value', {'r.toml': '[run]\nseed = 0\ntotal_kimg = = 3\n'}, 'check', [], [
        "r.toml: line 3, column 14: invalid TOML: Invalid value: 'total_kimg = = 3' (fix the syntax on line 3; strings need quotes, tables [name], arrays [a, b])",
    ]),
    case('syntax-unquoted-string', {'r.toml': '[run]\nout_dir = runs/x\n'}, 'check', [], [
        "r.toml: line 2, column 11: invalid TOML: Invalid value: 'out_dir = runs/x' (fix the syntax on line 2; strings need quotes, tables [name], arrays [a, b])",
    ]),
    case('syntax-duplicate-key', {'r.toml': '[run]\nseed = 1\nseed = 2\n'}, 'check', [], [
        "r.toml: line 3, column 9: invalid TOML: Cannot overwrite a value: 'seed = 2' (fix the syntax on line 3; strings need quotes, tables [name], arrays [a, b])",
    ]),
    case('syntax-unclosed-table', {'r.toml': '[loss]\nname = "hinge"\n[run\nseed = 1\n'}, 'check', [], [
        "r.toml: line 3, column 5: invalid TOML: Expected ']' at the end of a table declaration: '[run' (fix the syntax on line 3; strings need quotes, tables [name], arrays [a, b])",
    ]),
    case('file-not-found', {}, 'check', [], [
        'r.toml: file not found (check the path)',
    ]),
    case('type-int-got-string', {'r.toml': '[run]\nseed = "abc"\n'}, 'check', [], [
        'r.toml: run.seed: expected integer, got string "abc" (e.g. seed = 0)',
    ]),
    case('type-float-got-string', {'r.toml': '[run]\ntotal_kimg = "ten"\n'}, 'check', [], [
        'r.toml: run.total_kimg: expected float, got string "ten" (e.g. total_kimg = 100.0)',
    ]),
    case('type-bool-got-int', {'r.toml': '[run]\nprogress = 1\n'}, 'check', [], [
        'r.toml: run.progress: expected boolean, got integer 1 (e.g. progress = true)',
    ]),
    case('type-int-got-fraction', {'r.toml': '[run]\nseed = 1.5\n'}, 'check', [], [
        'r.toml: run.seed: expected integer, got float 1.5 (e.g. seed = 0)',
    ]),
    case('type-choice', {'r.toml': '[run]\nprecision = "fp64"\n'}, 'check', [], [
        'r.toml: run.precision: expected one of "auto", "fp32", "bf16", "fp16", got string "fp64" (e.g. precision = "auto")',
    ]),
    case('type-array-length', {'r.toml': '[optim]\nbetas = [0.1]\n'}, 'check', [], [
        'r.toml: optim.betas: expected an array of 2 items, got 1: [0.1] (e.g. betas = [0.0, 0.99])',
    ]),
    case('type-array-item', {'r.toml': '[optim]\nbetas = [0.0, "x"]\n'}, 'check', [], [
        'r.toml: optim.betas[1]: expected float, got string "x" (betas is array of float)',
    ]),
    case('type-table-for-int', {'r.toml': '[run]\nseed = { a = 1 }\n'}, 'check', [], [
        'r.toml: run.seed: expected integer, got table { a = 1 } (e.g. seed = 0)',
    ]),
    case('type-batch-size-table-value', {'r.toml': '[growth]\nbatch_size = { 4 = "a", 8 = 8, 16 = 8, 32 = 8 }\n'}, 'check', [], [
        'r.toml: growth.batch_size.4: expected integer, got string "a" (batch_size is integer | table integer -> integer)',
    ]),
    case('type-batch-size-table-key', {'r.toml': '[growth]\nbatch_size = { four = 8 }\n'}, 'check', [], [
        'r.toml: growth.batch_size: table key "four" is not an integer (e.g. batch_size = 16)',
    ]),
    case('unknown-table-suggested', {'r.toml': '[lossx]\nname = "hinge"\n'}, 'check', [], [
        "r.toml: lossx: unknown top-level table (did you mean 'loss'?)",
    ]),
    case('unknown-table', {'r.toml': '[banana]\nx = 1\n'}, 'check', [], [
        'r.toml: banana: unknown top-level table (tables: run, optim, ema, data, architecture, init, loss, penalty, update, growth, metric, augment, tracker; keys: extends, plugins, disable_plugins)',
    ]),
    case('unknown-top-level-key', {'r.toml': 'seed = 3\n'}, 'check', [], [
        'r.toml: seed: unknown top-level key (tables: run, optim, ema, data, architecture, init, loss, penalty, update, growth, metric, augment, tracker; keys: extends, plugins, disable_plugins)',
    ]),
    case('unknown-option-suggested', {'r.toml': '[run]\nseedd = 1\n'}, 'check', [], [
        "r.toml: run.seedd: unknown option (did you mean 'seed'?)",
    ]),
    case('unknown-option', {'r.toml': '[optim]\nmomentum = 0.9\n'}, 'check', [], [
        'r.toml: optim.momentum: unknown option (optim takes: betas, d_lr, eps, g_lr, lr, name)',
    ]),
    case('unknown-option-no-options', {'r.toml': '[loss]\nname = "hinge"\nmargin = 1.0\n'}, 'check', [], [
        "r.toml: loss.margin: unknown option (loss 'hinge' takes no options besides name)",
    ]),
    case('unknown-option-component', {'r.toml': '[loss]\nname = "wgan-gp"\ngp = 1.0\n'}, 'check', [], [
        "r.toml: loss.gp: unknown option (loss 'wgan-gp' takes: name, drift_weight, gp_weight)",
    ]),
    case('unknown-component', {'r.toml': '[loss]\nname = "foo"\n'}, 'check', [], [
        "r.toml: loss.name: unknown loss 'foo'; available: <loss>",
    ]),
    case('misspelled-component', {'r.toml': '[loss]\nname = "hing"\n'}, 'check', [], [
        "r.toml: loss.name: unknown loss 'hing' (did you mean 'hinge'?); available: <loss>",
    ]),
    case('misspelled-penalty', {'r.toml': '[[penalty]]\nname = "gradient-penalti"\nweight = 10.0\n'}, 'check', [], [
        "r.toml: penalty[0].name: unknown penalty 'gradient-penalti' (did you mean 'gradient-penalty'?); available: <penalty>",
    ]),
    case('penalty-without-name', {'r.toml': '[[penalty]]\nweight = 10.0\n'}, 'check', [], [
        'r.toml: penalty[0].name: missing (choose one of: <penalty>)',
    ]),
    case('component-name-not-string', {'r.toml': '[update]\nname = 3\n'}, 'check', [], [
        'r.toml: update.name: expected string, got integer 3 (choose one of: <update>)',
    ]),
    case('penalty-single-brackets', {'r.toml': '[penalty]\nname = "r1"\n'}, 'check', [], [
        'r.toml: penalty: expected an array of tables, got table { name = "r1" } (write [[penalty]], with two brackets, once per penalty)',
    ]),
    case('loss-double-brackets', {'r.toml': '[[loss]]\nname = "hinge"\n'}, 'check', [], [
        'r.toml: loss: expected one table, got an array of 1 (write [loss] with one bracket: a recipe has one loss)',
    ]),
    case('core-table-not-table', {'r.toml': 'run = 3\n'}, 'check', [], [
        'r.toml: run: expected a table, got integer 3 (write [run] and its keys below it)',
    ]),
    case('resolution-not-power-of-two', {'r.toml': '[data]\nresolution = 12\n'}, 'check', [], [
        'r.toml: data.resolution: must be a power of two >= 4, got 12 (try 8 or 16)',
    ]),
    case('resolution-too-small', {'r.toml': '[data]\nresolution = 2\n'}, 'check', [], [
        'r.toml: data.resolution: must be a power of two >= 4, got 2 (try 4 or 8)',
    ]),
    case('start-resolution-above-final', {'r.toml': '[data]\nresolution = 8\n[growth]\nstart_resolution = 16\n'}, 'check', [], [
        'r.toml: growth.start_resolution: 16 is above the final resolution data.resolution = 8 (lower it)',
    ]),
    case('batch-size-missing-resolution', {'r.toml': '[data]\nresolution = 16\n[growth]\nbatch_size = { 4 = 8, 8 = 8 }\n'}, 'check', [], [
        'r.toml: growth.batch_size: no entry for resolution 16 (the schedule visits 4, 8, 16)',
    ]),
    case('batch-size-extra-resolution', {'r.toml': '[data]\nresolution = 8\n[growth]\nbatch_size = { 4 = 8, 8 = 8, 64 = 8 }\n'}, 'check', [], [
        'r.toml: growth.batch_size: resolution 64 is not in the schedule (4, 8)',
    ]),
    case('negative-total-kimg', {'r.toml': '[run]\ntotal_kimg = -1\n'}, 'check', [], [
        'r.toml: run.total_kimg: must be > 0, got -1.0 (use a positive number)',
    ]),
    case('zero-tick-kimg', {'r.toml': '[run]\ntick_kimg = 0\n'}, 'check', [], [
        'r.toml: run.tick_kimg: must be > 0, got 0.0 (use a positive number)',
    ]),
    case('negative-fade-kimg', {'r.toml': '[growth]\nfade_kimg = -5\n'}, 'check', [], [
        'r.toml: growth.fade_kimg: must be >= 0, got -5.0 (see gankit list-plugins --kind growth -v)',
    ]),
    case('ema-decay-out-of-range', {'r.toml': '[ema]\ndecay = 1.5\n'}, 'check', [], [
        'r.toml: ema.decay: must be in [0, 1], got 1.5 (0.999 is PGGAN\'s; 0 copies G every step; "none" = the half-life rule)',
    ]),
    case('image-folder-missing-path', {'r.toml': '[data]\nname = "image-folder"\nresolution = 8\n'}, 'check', [], [
        'r.toml: data.path: missing: dataset \'image-folder\' needs it (add path = "..."; Folder of images or .zip archive of them (absolute, or relative to the folder of the recipe file that sets it; saved absolute); a zip, e.g. from stylegan2-ada-pytorch\'s dataset_tool.py, is read lazily)',
    ]),
    case('image-folder-path-not-found', {'r.toml': '[data]\nname = "image-folder"\npath = "no-such-folder"\nresolution = 8\n'}, 'check', [], [
        "r.toml: data.path: folder 'no-such-folder' (resolved to <cwd>/no-such-folder) not found; set data.path to a folder of images or a zip archive of them (absolute, or relative to the folder of the recipe file that sets it)",
    ]),
    case('plugins-not-array', {'r.toml': 'plugins = "my_plugin"\n'}, 'check', [], [
        'r.toml: plugins: expected an array of module names or .py paths, got string "my_plugin" (e.g. plugins = ["my_package.gankit_plugin", "local_plugin.py"])',
    ]),
    case('plugins-module-missing', {'r.toml': 'plugins = ["no_such_gankit_plugin_module"]\n'}, 'check', [], [
        "r.toml: plugins[0]: cannot load plugin 'no_such_gankit_plugin_module': ModuleNotFoundError: No module named 'no_such_gankit_plugin_module' (install it, or give a module name or a .py path relative to the recipe)",
    ]),
    case('plugins-file-missing', {'r.toml': 'plugins = ["nope.py"]\n'}, 'check', [], [
        "r.toml: plugins[0]: cannot load plugin 'nope.py': FileNotFoundError: no such plugin file 'nope.py' (install it, or give a module name or a .py path relative to the recipe)",
    ]),
    case('extends-missing-file', {'r.toml': 'extends = "base.toml"\n'}, 'check', [], [
        "r.toml: extends: file 'base.toml' not found: no base.toml (the path is relative to the folder of r.toml)",
    ]),
    case('extends-cycle', {'r.toml': 'extends = "a.toml"\n', 'a.toml': 'extends = "b.toml"\n', 'b.toml': 'extends = "a.toml"\n'}, 'check', [], [
        "b.toml: extends: 'a.toml' makes a cycle: a.toml -> b.toml -> a.toml (remove the extends from one of these files)",
    ]),
    case('extends-itself', {'r.toml': 'extends = "r.toml"\n'}, 'check', [], [
        "r.toml: extends: 'r.toml' makes a cycle: r.toml -> r.toml (remove the extends from one of these files)",
    ]),
    case('extends-not-string', {'r.toml': 'extends = ["a.toml"]\n'}, 'check', [], [
        'r.toml: extends: expected a path string, got array ["a.toml"] (write extends = "base.toml", relative to this file)',
    ]),
    case('extends-syntax-error-in-base', {'r.toml': 'extends = "base/b.toml"\n', 'base/b.toml': '[run]\nseed = \n'}, 'check', [], [
        "base/b.toml: line 2, column 8: invalid TOML: Invalid value: 'seed =' (fix the syntax on line 2; strings need quotes, tables [name], arrays [a, b])",
    ]),
    case('extends-problem-in-base', {'r.toml': 'extends = "base/b.toml"\n[run]\nseed = 1\n', 'base/b.toml': '[run]\ntotal_kimg = "x"\n[loss]\nname = "hing"\n'}, 'check', [], [
        'base/b.toml: run.total_kimg: expected float, got string "x" (e.g. total_kimg = 100.0)',
        "base/b.toml: loss.name: unknown loss 'hing' (did you mean 'hinge'?); available: <loss>",
    ]),
    case('set-no-equals', {'r.toml': ''}, 'check', ['run.seed'], [
        "r.toml: --set 'run.seed': no '=' (write --set KEY=VALUE with a dotted KEY, e.g. --set run.total_kimg=2 or --set loss.name=bce)",
    ]),
    case('set-empty-key', {'r.toml': ''}, 'check', ['=3'], [
        "r.toml: --set '=3': empty key before '=' (write --set KEY=VALUE with a dotted KEY, e.g. --set run.total_kimg=2 or --set loss.name=bce)",
    ]),
    case('set-bad-key', {'r.toml': ''}, 'check', ['run..seed=3'], [
        "r.toml: --set 'run..seed=3': bad key 'run..seed': use names joined by dots, array items by number (e.g. --set penalty.0.weight=5)",
    ]),
    case('set-missing-value', {'r.toml': ''}, 'check', ['run.seed='], [
        'r.toml: --set \'run.seed=\': missing value after \'=\' (e.g. --set run.seed=1; an empty string is --set run.seed=\'""\')',
    ]),
    case('set-bad-value', {'r.toml': ''}, 'check', ['optim.betas=[0.0,'], [
        'r.toml: --set \'optim.betas=[0.0,\': \'[0.0,\' is not a TOML value (numbers 2 or 0.5, true/false, arrays [0.0, 0.99], tables { 4 = 64 }; quote other strings: --set optim.betas=\'"[0.0,"\')',
    ]),
    case('set-index-out-of-range', {'r.toml': '[[penalty]]\nname = "r1"\n'}, 'check', ['penalty.3.weight=1'], [
        "r.toml: --set 'penalty.3.weight=1': index 3 is out of range: penalty is an array of 1 (use an index 0..0)",
    ]),
    case('set-into-non-table', {'r.toml': '[run]\nseed = 0\n'}, 'check', ['run.seed.x=1'], [
        "r.toml: --set 'run.seed.x=1': run.seed is integer 0, not a table or array (set run.seed itself)",
    ]),
    case('set-wrong-type', {'r.toml': ''}, 'check', ['run.seed=abc'], [
        'r.toml (--set): run.seed: expected integer, got string "abc" (e.g. seed = 0)',
    ]),
    case('set-misspelled-component', {'r.toml': ''}, 'check', ['loss.name=hing'], [
        "r.toml (--set): loss.name: unknown loss 'hing' (did you mean 'hinge'?); available: <loss>",
    ]),
    case('several-problems', {'r.toml': '[run]\nseed = "a"\ntotal_kimg = -2\n[loss]\nname = "hing"\n[banana]\n'}, 'check', ['optim.lr=-1'], [
        'r.toml: banana: unknown top-level table (tables: run, optim, ema, data, architecture, init, loss, penalty, update, growth, metric, augment, tracker; keys: extends, plugins, disable_plugins)',
        'r.toml: run.seed: expected integer, got string "a" (e.g. seed = 0)',
        'r.toml: run.total_kimg: must be > 0, got -2.0 (use a positive number)',
        'r.toml (--set): optim.lr: must be > 0, got -1.0 (use a positive number)',
        "r.toml: loss.name: unknown loss 'hing' (did you mean 'hinge'?); available: <loss>",
    ]),
    case('several-problems-with-cross-check', {'r.toml': '[run]\nseed = "a"\n[data]\nresolution = 8\n[growth]\nstart_resolution = 16\n'}, 'check', [], [
        'r.toml: run.seed: expected integer, got string "a" (e.g. seed = 0)',
        'r.toml: growth.start_resolution: 16 is above the final resolution data.resolution = 8 (lower it)',
    ]),
    case('dry-run-type-error', {'r.toml': '[run]\nseed = "abc"\n'}, 'dry-run', [], [
        'r.toml: run.seed: expected integer, got string "abc" (e.g. seed = 0)',
    ]),
    case('dry-run-set-error', {'r.toml': ''}, 'dry-run', ['run.total_kimg'], [
        "r.toml: --set 'run.total_kimg': no '=' (write --set KEY=VALUE with a dotted KEY, e.g. --set run.total_kimg=2 or --set loss.name=bce)",
    ]),
    case('show-unknown-option', {'r.toml': '[run]\nseedd = 1\n'}, 'show', [], [
        "r.toml: run.seedd: unknown option (did you mean 'seed'?)",
    ]),

]


@pytest.fixture(scope="module")
def available() -> dict[str, str]:
    registry = build_plugins(load_entry_points=False).registry
    return {f"<{kind}>": ", ".join(registry.names(kind)) for kind in
            ("loss", "penalty", "update", "growth", "init", "architecture", "dataset", "metric")}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    return tmp_path


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_at_least_30_cases():
    assert len(CASES) >= 30
    assert len({p.id for p in CASES}) == len(CASES)


@pytest.mark.parametrize("files, command, sets, expected", CASES)
def test_malformed_recipe(in_tmp, available, files, command, sets, expected):
    write_files(in_tmp, files)
    args = [*COMMANDS[command], "r.toml"]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(cli, args)
    want = []
    for line in expected:
        line = line.replace("<cwd>", str(in_tmp))  # a relative path is shown resolved too
        for placeholder, names in available.items():
            line = line.replace(placeholder, names)
        want.append(f"error: {line}")
    assert result.stderr.splitlines() == want
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "Traceback" not in result.output
    assert not result.exception or isinstance(result.exception, SystemExit)
    # Every message starts with the file it is about and ends with the fix or the choices.
    for line in expected:
        label = line.split(": ", 1)[0]
        assert label.removesuffix(" (--set)") in {*files, "r.toml"}, line
        assert line.endswith(")") or "available: " in line, line


def test_messages_name_the_base_file_of_extends_and_merge_tables(in_tmp):
    """A value from an extended file is reported against that file; the recipe's own tables merge
    over the base key by key (seed is fine in r.toml, the base's total_kimg is not)."""
    write_files(in_tmp, {"r.toml": 'extends = "base.toml"\n[run]\nseed = 1\n',
                         "base.toml": '[run]\nseed = "x"\ntotal_kimg = -1\n'})
    result = CliRunner().invoke(cli, ["recipe", "check", "r.toml"])
    assert result.stderr.splitlines() == [
        "error: base.toml: run.total_kimg: must be > 0, got -1.0 (use a positive number)"]
    assert result.exit_code == 2


def _subprocess(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GANKIT_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("GANKIT_DEBUG", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_real_process_exit_2_without_traceback(in_tmp):
    """A real `python -m gan_kit run --dry-run` on a recipe with several problems (the console
    script itself runs in tests/test_plugins.py)."""
    write_files(in_tmp, {"r.toml": '[run]\nseed = "a"\n[loss]\nname = "hing"\n'})
    proc = _subprocess([sys.executable, "-m", "gan_kit", "run", "--dry-run", "r.toml", "--set", "optim.lr=-1"],
                       in_tmp)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == 'error: r.toml: run.seed: expected integer, got string "a" (e.g. seed = 0)'
    assert lines[1] == "error: r.toml (--set): optim.lr: must be > 0, got -1.0 (use a positive number)"
    assert lines[2].startswith("error: r.toml: loss.name: unknown loss 'hing' (did you mean 'hinge'?); available: ")
    assert len(lines) == 3
