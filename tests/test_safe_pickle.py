"""The restricted reader of network pickles (``gan_kit.read_pickle``) builds data only: a pickle
whose payload would run code (``os.system``, ``eval``, ``open``, an embedded module source, a
storage hiding a pickle) is refused in one line naming what it asked for, and the payload never
runs - the marker file each payload would write never appears. Commands given such a file exit
2 with that line and no traceback."""

from __future__ import annotations

import builtins
import collections
import io
import os
import pickle
import subprocess
import sys
import types

import pytest
import torch
from click.testing import CliRunner

from gan_kit import PickledModule, UnsafePickleError, read_pickle
from gan_kit.cli import cli


class _Call:
    """Pickles as ``func(*args)``: what a malicious payload does."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _marker_payloads(marker):
    """(label, payload object, what the refusal names) for payloads that would create ``marker``."""
    return [
        ("os.system", _Call(os.system, f"touch {marker}"), "posix.system"),
        ("eval", _Call(builtins.eval, f"open({str(marker)!r}, 'w').close()"), "builtins.eval"),
        ("exec", _Call(builtins.exec, f"open({str(marker)!r}, 'w').close()"), "builtins.exec"),
        ("open", _Call(builtins.open, str(marker), "w"), "io.open"),
        ("subprocess", _Call(subprocess.Popen, ["touch", str(marker)]), "subprocess.Popen"),
    ]


@pytest.mark.parametrize("index", range(5))
def test_a_pickle_that_would_run_code_is_refused_and_its_payload_never_runs(tmp_path, index):
    marker = tmp_path / "pwned"
    label, payload, named = _marker_payloads(marker)[index]
    path = tmp_path / f"{label}.pkl"
    path.write_bytes(pickle.dumps({"G": payload, "G_ema": payload}, protocol=4))
    # The payload is real: a plain pickle.load would run it (checked on a copy, then undone).
    if label == "os.system":
        pickle.loads(path.read_bytes())
        assert marker.exists()
        marker.unlink()
    with pytest.raises(UnsafePickleError) as info:
        read_pickle(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and named in message, message
    assert not marker.exists()


def test_an_unknown_class_is_refused_by_name(tmp_path):
    evil = types.ModuleType("evilpkg")

    class Payload:
        pass

    Payload.__module__, Payload.__qualname__ = "evilpkg", "Payload"
    evil.Payload = Payload
    sys.modules["evilpkg"] = evil
    try:
        data = pickle.dumps({"G": Payload()}, protocol=4)
    finally:
        del sys.modules["evilpkg"]
    path = tmp_path / "unknown.pkl"
    path.write_bytes(data)
    with pytest.raises(UnsafePickleError, match=r"asks for evilpkg\.Payload"):
        read_pickle(path)


def _fake_persistence(monkeypatch):
    """A stand-in ``torch_utils.persistence`` module so the test can pickle the official layout
    (the real one is never imported: the reader names the global, it does not look it up)."""
    package = types.ModuleType("torch_utils")
    module = types.ModuleType("torch_utils.persistence")

    def _reconstruct_persistent_obj(meta):  # pragma: no cover - never called by the reader
        raise AssertionError("the reader must not call the file's reconstruct function")

    _reconstruct_persistent_obj.__module__ = "torch_utils.persistence"
    _reconstruct_persistent_obj.__qualname__ = "_reconstruct_persistent_obj"
    module._reconstruct_persistent_obj = _reconstruct_persistent_obj
    package.persistence = module
    monkeypatch.setitem(sys.modules, "torch_utils", package)
    monkeypatch.setitem(sys.modules, "torch_utils.persistence", module)
    return _reconstruct_persistent_obj


def test_the_source_text_a_persistent_module_embeds_is_never_executed(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    reconstruct = _fake_persistence(monkeypatch)
    source = f"open({str(marker)!r}, 'w').close()\nclass Generator: pass\n"
    weight = torch.nn.Parameter(torch.randn(4, 3))
    state = {"training": False, "_parameters": collections.OrderedDict(weight=weight),
             "_buffers": collections.OrderedDict(w_avg=torch.zeros(3)), "_modules": collections.OrderedDict(),
             "_non_persistent_buffers_set": set(), "_init_args": (), "_init_kwargs": {"z_dim": 3, "w_dim": 4},
             "z_dim": 3}
    meta = {"type": "class", "version": 6, "module_src": source, "class_name": "Generator", "state": state}
    path = tmp_path / "snapshot.pkl"
    path.write_bytes(pickle.dumps({"G_ema": _Call(reconstruct, meta)}, protocol=4))
    data = read_pickle(path)
    g = data["G_ema"]
    assert isinstance(g, PickledModule) and g.persistent and g.class_name == "Generator"
    assert g.init_kwargs == {"z_dim": 3, "w_dim": 4} and g.attributes == {"z_dim": 3}
    assert torch.equal(g.state_dict()["weight"], weight.detach()) and set(g.state_dict()) == {"weight", "w_avg"}
    assert g.source_sha256 is not None and len(g.source_sha256) == 64
    assert not marker.exists()


def test_a_tensor_storage_that_hides_a_pickle_payload_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    inner = io.BytesIO()
    torch.save(_Call(os.system, f"touch {marker}"), inner, _use_new_zipfile_serialization=False)

    def load_from_bytes(b):  # pragma: no cover - stands for torch.storage._load_from_bytes
        raise AssertionError

    load_from_bytes.__module__, load_from_bytes.__qualname__, load_from_bytes.__name__ = (
        "torch.storage", "_load_from_bytes", "_load_from_bytes")
    import torch.storage as storage_module

    real = storage_module._load_from_bytes
    storage_module._load_from_bytes = load_from_bytes
    try:
        data = pickle.dumps({"G": _Call(load_from_bytes, inner.getvalue())}, protocol=4)
    finally:
        storage_module._load_from_bytes = real
    path = tmp_path / "storage.pkl"
    path.write_bytes(data)
    with pytest.raises(UnsafePickleError, match=r"storage hides more than tensor data \(it asks for posix.system\)"):
        read_pickle(path)
    assert not marker.exists()


def test_tensors_numpy_arrays_and_containers_are_rebuilt(tmp_path):
    import numpy as np

    values = {"p": torch.nn.Parameter(torch.randn(2, 3)), "view": torch.arange(6.0)[2:], "dtype": torch.bfloat16,
              "od": collections.OrderedDict(a=1), "array": np.arange(4, dtype=np.float32), "set": {1, 2}}
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps(values, protocol=4))
    out = read_pickle(path)
    assert torch.equal(out["p"], values["p"].detach()) and torch.equal(out["view"], torch.arange(2.0, 6.0))
    assert out["dtype"] is torch.bfloat16 and out["od"] == {"a": 1} and out["set"] == {1, 2}
    assert out["array"].dtype == np.float32 and out["array"].tolist() == [0, 1, 2, 3]


def test_a_truncated_pickle_is_one_line(tmp_path):
    path = tmp_path / "cut.pkl"
    path.write_bytes(pickle.dumps({"x": torch.randn(10)}, protocol=4)[:40])
    with pytest.raises(UnsafePickleError) as info:
        read_pickle(path)
    assert "not a readable network pickle" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("command", [["generate", "{path}", "--seeds", "0", "--outdir", "{out}"],
                                     ["import", "{path}", "--out", "{out}"]])
def test_commands_refuse_a_malicious_pickle_in_one_line_and_write_nothing(tmp_path, command):
    marker = tmp_path / "pwned"
    path = tmp_path / "network-snapshot.pkl"
    path.write_bytes(pickle.dumps({"G_ema": _Call(os.system, f"touch {marker}")}, protocol=4))
    out = tmp_path / "out"
    args = [a.format(path=path, out=out) for a in command]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "posix.system" in lines[0] and "Traceback" not in result.output, result.output
    assert not marker.exists()
    assert not out.exists() or not any(out.rglob("*.p*"))
