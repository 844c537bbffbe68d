"""Test helper: network-snapshot pickles of the official layout, rebuilt from the plain tensors of
``tests/data/official_snapshots.pt`` (written by ``tests/data/make_official_snapshots.py``), and
hostile pickles for the reader's security tests.

``write_official_pickle(case, path)`` writes the bytes a ``pickle.dump`` (protocol 4) of the
official training loop's snapshot dict gives, without the official code: every class and function
is named by its official module and name (``STACK_GLOBAL``) through stand-in objects, tensors go
through torch's own reduction (``torch._utils._rebuild_tensor_v2`` over
``torch.storage._load_from_bytes``), exactly as in the files the official code writes:

- StyleGAN2-ADA / StyleGAN3: ``dict(training_set_kwargs, G, D, G_ema, augment_pipe)`` (the loop's
  order); each network module is ``torch_utils.persistence._reconstruct_persistent_obj(meta)``,
  ``meta = dict(type='class', version=6, module_src=..., class_name=..., state=<module __dict__>)``;
  ``_init_kwargs`` hold ``dnnlib.util.EasyDict``; numpy float64 gains pickle as
  ``numpy.core.multiarray.scalar`` of a ``numpy.dtype``, StyleGAN3's numpy arrays (layer sizes,
  sampling rates) as ``numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b')`` + BUILD.
- R3GAN: ``dict(G, D, G_ema, training_set_kwargs, cur_nimg, D_opt_state, G_opt_state)`` (Adam's
  state dicts: plain dicts of tensors); every module a plain global class
  (``training.networks.Generator``, ``R3GAN.Networks.ResidualBlock``, ``torch.nn.modules.conv.Conv2d``
  ...) rebuilt by ``NEWOBJ`` + ``BUILD``.

The module ``__dict__`` holds torch's module internals of the torch the official files were written
with (``layout``: ``"torch-1.7"`` for ADA, ``"torch-1.9"`` for StyleGAN3, ``"current"`` for R3GAN);
``module_src`` is a placeholder (no NVIDIA source is distributed), so a real
``persistence`` cannot exec it - a reader must not exec it anyway. Strings are interned as in the
running official code, so repeated names are memo references; the bytes match a genuine dump up to
the memo choices and the storages' inner ids.
"""

from __future__ import annotations

import collections
import copyreg
import io
import pickle
import sys
from pathlib import Path

import torch

#: ``torch_utils/persistence.py``'s ``_version`` in all three official repositories.
PERSISTENCE_VERSION = 6
PLACEHOLDER_SRC = "# placeholder: source not distributed"
#: The official training loops' snapshot keys, in their order.
LAYOUT_BY_FORMAT = {"stylegan2-ada-pytorch": "torch-1.7", "stylegan3-stylegan2": "torch-1.9", "stylegan3": "torch-1.9",
                    "r3gan": "current"}
#: torch.nn.Module.__init__'s own attributes, in order, per torch release (all empty containers).
_MODULE_INTERNALS = {
    "torch-1.7": ["training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_hooks",
                  "_forward_hooks", "_forward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
                  "_modules"],
    "torch-1.9": ["training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_hooks",
                  "_is_full_backward_hook", "_forward_hooks", "_forward_pre_hooks", "_state_dict_hooks",
                  "_load_state_dict_pre_hooks", "_modules"],
}


FIXTURE = Path(__file__).resolve().parent / "data" / "official_snapshots.pt"


def official_cases() -> list[dict]:
    """The recorded cases of ``tests/data/official_snapshots.pt`` (see its maker's docstring)."""
    return torch.load(FIXTURE, weights_only=True)["cases"]


def official_case(name: str) -> dict:
    """The recorded case called ``name`` (e.g. ``"ada-skip-resnet"``, ``"r3gan-unconditional"``)."""
    for case in official_cases():
        if case["case"] == name:
            return case
    raise KeyError(name)


# --------------------------------------------------------------------------------------------
# Stand-ins: objects that pickle as the official ones do


class _StandIn:
    """An object whose pickled form is given by ``_reduce`` (set per instance)."""

    def __reduce_ex__(self, protocol):
        return self._reduce


_GLOBALS: dict[tuple[str, str], type] = {}


def official_global(module: str, qualname: str) -> type:
    """A stand-in class that pickles as the global ``module.qualname`` (one object per name, so
    repeats become memo references as in a real dump)."""
    key = (sys.intern(module), sys.intern(qualname))
    if key not in _GLOBALS:
        cls = type(qualname.rsplit(".", 1)[-1], (_StandIn,), {"__module__": key[0], "__qualname__": key[1]})
        cls.__official_global__ = key
        _GLOBALS[key] = cls
    return _GLOBALS[key]


def _instance(module: str, qualname: str, reduce_tail) -> _StandIn:
    cls = official_global(module, qualname)
    obj = object.__new__(cls)
    obj._reduce = reduce_tail(cls)
    return obj


class _EasyDictBase(dict):
    """``dnnlib.util.EasyDict``'s pickling: a dict subclass without instance state."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _easydict(items: dict) -> dict:
    key = ("dnnlib.util", "EasyDict")
    if key not in _GLOBALS:
        cls = type("EasyDict", (_EasyDictBase,), {"__module__": key[0], "__qualname__": key[1]})
        cls.__official_global__ = key
        _GLOBALS[key] = cls
    return _GLOBALS[key](items)


_DTYPES: dict[str, object] = {}
#: numpy.dtype(name).__reduce__() (numpy 1.x and 2.x): args and state.
_NUMPY_DTYPES = {"float64": ("f8", "<"), "float32": ("f4", "<"), "int64": ("i8", "<"), "int32": ("i4", "<"),
                 "bool": ("b1", "|")}


def _numpy_scalar(dtype: str, value, numpy_core: str):
    import struct

    if dtype not in _DTYPES:
        code, order = _NUMPY_DTYPES[dtype]
        _DTYPES[dtype] = _instance("numpy", "dtype", lambda cls: (
            cls, (code, False, True), (3, order, None, None, None, -1, -1, 0)))
    fmt = {"float64": "<d", "float32": "<f", "int64": "<q", "int32": "<i", "bool": "?"}[dtype]
    data = struct.pack(fmt, value)
    return _instance(numpy_core, "scalar", lambda cls: (cls, (_DTYPES[dtype], data)))


def _numpy_array(dtype: str, shape, values, fortran: bool, numpy_core: str):
    """An object that pickles as a numpy array does (``ndarray.__reduce__``, protocol 4):
    ``_reconstruct(ndarray, (0,), b'b')`` then BUILD ``(1, shape, dtype, is_fortran, raw bytes)``."""
    import struct

    if dtype not in _DTYPES:
        code, order = _NUMPY_DTYPES[dtype]
        _DTYPES[dtype] = _instance("numpy", "dtype", lambda cls: (
            cls, (code, False, True), (3, order, None, None, None, -1, -1, 0)))
    fmt = {"float64": "d", "float32": "f", "int64": "q", "int32": "i", "bool": "?"}[dtype]
    data = struct.pack(f"<{len(values)}{fmt}", *values)
    ndarray = official_global("numpy", "ndarray")
    return _instance(numpy_core, "_reconstruct", lambda cls: (
        cls, (ndarray, (0,), b"b"), (1, tuple(shape), _DTYPES[dtype], bool(fortran), data)))


#: Objects shared within the snapshot being built (cleared per snapshot).
_shared: dict = {}


def _decode(value, numpy_core: str):
    """Inverse of the maker's tagging: plain Python, numpy scalars, torch dtypes, (Easy)dicts."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, tuple):
        return tuple(_decode(v, numpy_core) for v in value)
    if isinstance(value, list):
        return [_decode(v, numpy_core) for v in value]
    if isinstance(value, dict):
        tag = value.get("__type__")
        if tag == "numpy.scalar":
            # One object per recorded "ref", as in the snapshot the official code pickled.
            key = ("numpy.scalar", value.get("ref", id(value)), numpy_core)
            if key not in _shared:
                _shared[key] = _numpy_scalar(value["dtype"], value["value"], numpy_core)
            return _shared[key]
        if tag == "numpy.ndarray":
            key = ("numpy.ndarray", value.get("ref", id(value)), numpy_core)
            if key not in _shared:
                _shared[key] = _numpy_array(value["dtype"], value["shape"], value["values"], value["fortran"],
                                            numpy_core)
            return _shared[key]
        if tag == "torch.dtype":
            return official_global("torch", value["value"].split(".", 1)[1])
        if tag in ("dict", "easydict"):
            items = {sys.intern(k): _decode(v, numpy_core) for k, v in value["items"].items()}
            return _easydict(items) if tag == "easydict" else items
        raise ValueError(f"unknown recorded value {value!r}")
    return value


def _kwargs(value, path: str, easydicts: set[str], numpy_core: str):
    if isinstance(value, dict) and "__type__" not in value:
        items = {sys.intern(k): _kwargs(v, f"{path}.{k}" if path else k, easydicts, numpy_core)
                 for k, v in value.items()}
        return _easydict(items) if path in easydicts else items
    return _decode(value, numpy_core)


def _internals(layout: str) -> list[tuple[str, object]]:
    if layout == "current":
        return [(k, type(v)() if v is not None and not isinstance(v, bool) else v)
                for k, v in torch.nn.Module().__dict__.items()]
    return [(k, None if k == "_is_full_backward_hook" else True if k == "training" else
             set() if k == "_non_persistent_buffers_set" else collections.OrderedDict())
            for k in _MODULE_INTERNALS[layout]]


def _shared_tuple(ref, value):
    """The snapshot's one tuple object for ``ref`` (first decoded value wins)."""
    if ref is None:
        return value
    return _shared.setdefault(("tuple", ref), value)


def _build_net(tree: dict, layout: str, module_sources: dict | None, numpy_core: str, lineage: str):
    modules, tensors = tree["modules"], tree["tensors"]

    def build(path: str):
        rec = modules[path]
        prefix = f"{path}." if path else ""
        state = {}
        for k, v in _internals(layout):
            state[sys.intern(k)] = v
        state["training"] = rec["training"]
        params = state["_parameters"]
        for name in rec["parameters"]:
            t = None if name in rec["null_parameters"] else torch.nn.Parameter(
                tensors[prefix + name].clone(), requires_grad=name in rec["requires_grad"])
            params[sys.intern(name)] = t
        for name in rec["buffers"]:
            state["_buffers"][sys.intern(name)] = None if name in rec["null_buffers"] else tensors[prefix + name].clone()
        state["_non_persistent_buffers_set"].update(sys.intern(n) for n in rec["non_persistent_buffers"])
        indexed = rec["module"] == "torch.nn.modules.container" and rec["qualname"] in ("ModuleList", "Sequential")
        for name in rec["children"]:
            # ModuleList / Sequential name children str(index): a new string each, not interned
            # (setattr interns the other names), the same object in G_ema as in G (deepcopy).
            key = _shared.setdefault(("str", lineage, prefix + name), str(int(name))) if indexed else sys.intern(name)
            state["_modules"][key] = None if name in rec["null_children"] else build(prefix + name)
        refs = rec.get("tuple_refs", {})
        for k, v in rec["attributes"].items():
            state[sys.intern(k)] = _shared_tuple(refs.get(f"attributes.{k}"), _decode(v, numpy_core))
        if rec["kind"] == "persistent":
            state["_init_args"] = _shared_tuple(refs.get("init_args"), _decode(rec["init_args"], numpy_core))
            kwargs = _kwargs(rec["init_kwargs"], "", set(rec["init_kwargs_easydicts"]), numpy_core)
            for field, ref in refs.items():
                if field.startswith("init_kwargs."):
                    *parents, last = field.split(".")[1:]
                    d = kwargs
                    for p in parents:
                        d = d[p]
                    d[last] = _shared_tuple(ref, d[last])
            state["_init_kwargs"] = kwargs
            src = (module_sources or {}).get(rec["module"], PLACEHOLDER_SRC)
            meta = dict(type="class", version=PERSISTENCE_VERSION, module_src=sys.intern(src),
                        class_name=sys.intern(rec["qualname"]), state=state)
            return _instance("torch_utils.persistence", "_reconstruct_persistent_obj",
                             lambda cls: (cls, (meta,), None))
        return _instance(rec["module"], rec["qualname"], lambda cls: (copyreg.__newobj__, (cls,), state))

    return build("")


class _OfficialPickler(pickle._Pickler):
    """The pure-Python pickler, writing stand-in classes as their official global names."""

    def save_global(self, obj, name=None):
        key = getattr(obj, "__official_global__", None)
        if key is None or getattr(obj, "__dict__", {}).get("__official_global__") is None:
            return super().save_global(obj, name)
        if self.proto >= 4:
            self.save(key[0])
            self.save(key[1])
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + f"{key[0]}\n{key[1]}\n".encode())
        self.memoize(obj)


def dump_official(obj, path) -> None:
    """``pickle.dump(obj, f, protocol=4)`` with the stand-ins written as their official names."""
    with open(path, "wb") as f:
        _OfficialPickler(f, protocol=4).dump(obj)


def official_snapshot(case: dict, *, layout: str | None = None, module_sources: dict | None = None,
                      numpy_core: str = "numpy.core.multiarray") -> dict:
    """The snapshot dict of ``case`` (one entry of the fixture's ``cases``) built from stand-ins."""
    layout = layout or LAYOUT_BY_FORMAT[case["format"]]
    if layout != "current" and layout not in _MODULE_INTERNALS:
        raise ValueError(f"layout {layout!r}: expected 'current' or one of {', '.join(_MODULE_INTERNALS)}")
    _shared.clear()
    data = {}
    for key in case["snapshot_keys"]:
        if key in case["null_keys"]:
            data[key] = None
        elif key == "training_set_kwargs":
            data[key] = {sys.intern(k): _decode(v, numpy_core) for k, v in case["training_set_kwargs"].items()}
        elif key == "cur_nimg":
            data[key] = case["cur_nimg"]
        elif key.endswith("_opt_state"):
            data[key] = case["opt_states"][key]
        else:
            # G_ema is a deep copy of G in the official loops: they share immutable objects.
            lineage = "G" if key == "G_ema" else key
            data[key] = _build_net(case["nets"][key], layout, module_sources, numpy_core, lineage)
    return data


def write_official_pickle(case: dict, path, *, extra: dict | None = None, layout: str | None = None,
                          module_sources: dict | None = None, numpy_core: str = "numpy.core.multiarray") -> Path:
    """Write ``case``'s network snapshot as the official training loop pickles it.

    ``extra``: more top-level entries (after the official ones; a value may be a stand-in from
    ``official_global``). ``layout``: torch's module internals to write (``"torch-1.7"``,
    ``"torch-1.9"``, ``"current"``; default: the format's). ``module_sources``: module name ->
    source text for ``module_src`` (the maker's check only; the default placeholder is what tests
    use). ``numpy_core``: where numpy's ``scalar`` lives (``numpy._core.multiarray`` under numpy 2).
    """
    data = official_snapshot(case, layout=layout, module_sources=module_sources, numpy_core=numpy_core)
    data.update(extra or {})
    dump_official(data, path)
    return Path(path)


# --------------------------------------------------------------------------------------------
# Hostile pickles for the security tests


def _call(module: str, name: str, *args):
    return _instance(module, name, lambda cls: (cls, tuple(args)))


def _legacy_torch_stream(payload) -> bytes:
    """Bytes that ``torch.load(..., weights_only=False)`` (what ``_load_from_bytes`` calls) reads as a
    legacy (pre-zip) torch file: magic number, protocol version, system info, then ``payload``."""
    from torch.serialization import MAGIC_NUMBER, PROTOCOL_VERSION

    buf = io.BytesIO()
    for head in (MAGIC_NUMBER, PROTOCOL_VERSION, dict(protocol_version=PROTOCOL_VERSION, little_endian=True,
                                                       type_sizes=dict(short=2, int=4, long=4))):
        pickle.dump(head, buf, protocol=2)
    _OfficialPickler(buf, protocol=2).dump(payload)
    pickle.dump([], buf, protocol=2)
    return buf.getvalue()


MALICIOUS_KINDS = ("os.system", "builtins.eval", "posix.system", "subprocess.Popen", "unknown-class",
                   "load_from_bytes", "builtins.open")


def write_malicious_pickle(path, kind: str, marker=None) -> Path:
    """Write a snapshot-shaped pickle whose ``G_ema`` entry, loaded by plain ``pickle.load``, creates
    the file ``marker`` (default: ``path`` + ``.pwned``); return ``marker``.

    Kinds (``MALICIOUS_KINDS``): ``os.system`` / ``posix.system`` (``touch``), ``builtins.eval``,
    ``subprocess.Popen`` (``touch``; it runs in the background, so wait for it), ``unknown-class``
    (``gankit_test_payload.Touch``, whose module this also writes next to ``path``: it creates
    the marker when imported, so it fires where that folder is on sys.path), ``load_from_bytes``
    (``torch.storage._load_from_bytes`` over bytes holding an ``os.system`` call: plain
    ``torch.load`` of them with ``weights_only=False`` runs it), ``builtins.open`` (``open(marker,
    'w')``).
    """
    path = Path(path)
    marker = Path(marker) if marker is not None else path.with_name(path.name + ".pwned")
    touch = f"touch '{marker}'"
    if kind in ("os.system", "posix.system"):
        payload = _call(kind.split(".")[0], "system", touch)
    elif kind == "builtins.eval":
        payload = _call("builtins", "eval", f"open({str(marker)!r}, 'w').close()")
    elif kind == "subprocess.Popen":
        payload = _call("subprocess", "Popen", ["touch", str(marker)])
    elif kind == "unknown-class":
        (path.parent / "gankit_test_payload.py").write_text(
            f"open({str(marker)!r}, 'w').close()\n\n\nclass Touch:\n    pass\n", encoding="utf-8")
        payload = _instance("gankit_test_payload", "Touch", lambda cls: (copyreg.__newobj__, (cls,), {"x": 1}))
    elif kind == "load_from_bytes":
        payload = _call("torch.storage", "_load_from_bytes", _legacy_torch_stream(_call("os", "system", touch)))
    elif kind == "builtins.open":
        payload = _call("builtins", "open", str(marker), "w")
    else:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(MALICIOUS_KINDS)}")
    dump_official({"G": None, "D": None, "G_ema": payload, "training_set_kwargs": {}}, path)
    return marker


# --------------------------------------------------------------------------------------------
# Reading a pickle without running it (for comparing layouts)


class Symbolic:
    """What a global call or instance of a pickle stands for: ``name`` (``module.qualname``),
    ``args``, ``state`` (BUILD), ``items`` (SETITEMS on a dict subclass), ``list_items``."""

    _name = "?"

    def __new__(cls, *args):
        obj = object.__new__(cls)
        obj.name, obj.args, obj.state, obj.items, obj.list_items = cls._name, args, None, {}, []
        return obj

    def __init__(self, *args):
        pass

    def __setstate__(self, state):
        self.state = state

    def __setitem__(self, key, value):
        self.items[key] = value

    def append(self, value):
        self.list_items.append(value)

    def extend(self, values):
        self.list_items.extend(values)

    def __repr__(self):
        return f"<{self.name}>"


class SymbolicUnpickler(pickle._Unpickler):
    """Unpickles without importing or calling anything: every global becomes a ``Symbolic`` class
    and its calls ``Symbolic`` instances; ``globals`` collects the ``(module, name)`` asked for."""

    def __init__(self, file):
        super().__init__(file)
        self.globals: list[tuple[str, str]] = []

    def find_class(self, module, name):
        self.globals.append((module, name))
        return type(name, (Symbolic,), {"_name": f"{module}.{name}"})

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"persistent id {pid!r}")


def symbolic_load(path):
    """``(object, globals)`` of the pickle at ``path``, nothing imported or run."""
    with open(path, "rb") as f:
        up = SymbolicUnpickler(f)
        return up.load(), up.globals


def normalized(obj):
    """A comparable plain form of a ``symbolic_load`` result; storages (``_load_from_bytes``) become
    ``("storage", dtype, raw bytes)``, read by ``torch.load(weights_only=True)``."""
    if isinstance(obj, type) and issubclass(obj, Symbolic):
        return ("global", obj._name)
    if isinstance(obj, Symbolic):
        if obj.name == "torch.storage._load_from_bytes":
            s = torch.load(io.BytesIO(obj.args[0]), weights_only=True)
            t = torch.empty(0, dtype=s.dtype).set_(s)
            return ("storage", str(s.dtype), bytes(t.view(torch.uint8).numpy()))
        return ("call", obj.name, normalized(obj.args), normalized(obj.state), normalized(obj.items),
                normalized(obj.list_items))
    if isinstance(obj, dict):
        return ("dict", [(k, normalized(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [normalized(v) for v in obj])
    if isinstance(obj, set):
        return ("set", sorted(obj))
    return obj
