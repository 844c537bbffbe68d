"""Reading network pickles made by other codebases without running their code.

The field's trained models are Python pickles: stylegan2-ada-pytorch's and the StyleGAN3
repository's ``network-snapshot-*.pkl`` (NVIDIA's ``torch_utils.persistence``: each network is
``_reconstruct_persistent_obj(meta)`` whose ``meta`` holds the module's source text, its class
name and its state), brownvc/R3GAN's (plain ``nn.Module`` classes named by their import path) and
the TF-era StyleGAN2 pickles (``dnnlib.tflib.network.Network`` objects holding numpy
variables). An ordinary ``pickle.load`` of such a file imports those modules and runs whatever
the file asks for: the embedded source, or any callable it names (``os.system``).

``read_pickle(path)`` is a restricted unpickler. It builds only what it allows and never imports
or runs anything the file names:

* a network's module, of either kind, becomes a ``PickledModule`` (its class name, init
  arguments, plain attributes, parameters, buffers and children: data only, the source text is
  kept as a SHA-256, never executed);
* a TF network becomes a ``PickledTFNetwork`` (static kwargs, variables as numpy arrays,
  components);
* tensors are rebuilt by torch's tensor constructors from storages read with
  ``torch.load(..., weights_only=True)``; numpy arrays of numeric dtypes; ``OrderedDict``, sets,
  dtypes, ``EasyDict`` (as a dict).

Anything else the file asks for (``os.system``, ``builtins.eval``, an unknown class or function)
stops the read with ``UnsafePickleError``, one line naming what was asked for; nothing it names
has run by then. Which modules' classes may appear as network modules is the caller's choice
(``modules``); the default covers the official StyleGAN2-ADA, StyleGAN3 and R3GAN code.
"""

from __future__ import annotations

import collections
import hashlib
import io
import pickle
import re
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np
import torch

from gan_kit.base.errors import CheckpointError

__all__ = ["UnsafePickleError", "PickledModule", "PickledTFNetwork", "read_pickle", "OFFICIAL_MODULES",
           "is_pickle"]

#: Modules whose classes a network pickle may name as network modules (read as
#: ``PickledModule``, never imported): the official StyleGAN2-ADA / StyleGAN3 / R3GAN code and
#: torch's own layers. A module name matches itself and its sub-modules.
OFFICIAL_MODULES = ("training", "R3GAN", "torch.nn.modules")

# torch.nn.Module's own bookkeeping in a module's __dict__: not the network's attributes.
_MODULE_INTERNALS = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training", "_init_args", "_init_kwargs",
    "_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_is_full_backward_hook",
    "_compiled_call_impl", "_orig_mod",
})


class UnsafePickleError(CheckpointError):
    """A pickle asked for something the restricted reader does not build (a callable such as
    ``os.system``, an unknown class), or is not a readable pickle. Nothing it named was run."""


class PickledModule:
    """One ``torch.nn.Module`` of a network pickle, as data.

    ``class_name``: the class as the file names it: ``"training.networks.Generator"`` for a
    plain class (module path and name), the bare name (``"Generator"``) for a
    ``torch_utils.persistence`` class, whose module is recreated from source text at load time
    (``persistent`` is then True and ``source_sha256`` the SHA-256 of that text, UTF-8).
    ``init_args`` / ``init_kwargs``: what persistence recorded of the constructor call (empty
    for plain classes). ``attributes``: the module's plain ``__dict__`` entries (ints, floats,
    strings, dtypes, lists ...; torch's bookkeeping left out). ``parameters`` / ``buffers``:
    name -> tensor of this module alone; ``children``: name -> ``PickledModule``;
    ``non_persistent``: names of buffers that ``state_dict`` leaves out (as torch does).
    """

    def __init__(self, class_name: str = "?", *, persistent: bool = False, source_sha256: str | None = None):
        self.class_name = class_name
        self.persistent = persistent
        self.source_sha256 = source_sha256
        self.init_args: tuple = ()
        self.init_kwargs: dict = {}
        self.attributes: dict[str, Any] = {}
        self.parameters: dict[str, torch.Tensor] = {}
        self.buffers: dict[str, torch.Tensor] = {}
        self.children: dict[str, PickledModule] = {}
        self.non_persistent: frozenset[str] = frozenset()
        self.training = False

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise UnsafePickleError(f"a module of class {self.class_name} has a state of type {type(state).__name__}, "
                                    f"not a module's attribute dict")
        self._fill(state)

    def _fill(self, state: dict) -> None:
        def tensors(key: str) -> dict[str, torch.Tensor]:
            out = {}
            for name, value in dict(state.get(key) or {}).items():
                if value is None:
                    continue
                if not isinstance(value, torch.Tensor):
                    raise UnsafePickleError(f"{self.class_name}.{name}: expected a tensor in {key}, got "
                                            f"{type(value).__name__}")
                out[str(name)] = value.detach()
            return out

        self.parameters = tensors("_parameters")
        self.buffers = tensors("_buffers")
        children = {}
        for name, child in dict(state.get("_modules") or {}).items():
            if child is None:
                continue
            if not isinstance(child, PickledModule):
                raise UnsafePickleError(f"{self.class_name}.{name}: a child module of type {type(child).__name__}")
            children[str(name)] = child
        self.children = children
        self.non_persistent = frozenset(str(n) for n in (state.get("_non_persistent_buffers_set") or ()))
        self.training = bool(state.get("training", False))
        self.init_args = tuple(state.get("_init_args") or ())
        self.init_kwargs = _plain(state.get("_init_kwargs") or {})
        self.attributes = {k: v for k, v in state.items() if k not in _MODULE_INTERNALS}

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, PickledModule]]:
        """``(dotted path, module)`` for this module (path ``prefix``) and every descendant, in
        the order torch's ``named_modules`` gives."""
        yield prefix, self
        for name, child in self.children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def state_dict(self, *, persistent_only: bool = True) -> dict[str, torch.Tensor]:
        """Dotted name -> tensor, as ``torch.nn.Module.state_dict`` names them (parameters, then
        buffers, then children's; non-persistent buffers left out unless ``persistent_only`` is
        False)."""
        out: dict[str, torch.Tensor] = {}
        for path, module in self.named_modules():
            head = f"{path}." if path else ""
            for name, t in module.parameters.items():
                out[head + name] = t
            for name, t in module.buffers.items():
                if not persistent_only or name not in module.non_persistent:
                    out[head + name] = t
        return out

    def attributes_by_path(self) -> dict[str, dict[str, Any]]:
        """Dotted module path ("" for this one) -> that module's ``attributes``."""
        return {path: dict(m.attributes) for path, m in self.named_modules()}

    def __repr__(self) -> str:
        return f"PickledModule({self.class_name!r}, {len(self.state_dict())} tensors)"


class _PlainModule(PickledModule):
    """A plain (non-persistent) module class named by the file: ``class_name`` is set per
    class by ``_module_class``."""

    _class_name = "?"

    def __new__(cls, *args: Any, **kwargs: Any):
        # NEWOBJ calls __new__ alone (then BUILD fills the state): the stub is complete here.
        obj = object.__new__(cls)
        PickledModule.__init__(obj, cls._class_name)
        return obj

    def __init__(self, *args: Any, **kwargs: Any):  # a REDUCE call with arguments: nothing more to do
        pass


class PickledTFNetwork:
    """A TF-era ``dnnlib.tflib.network.Network`` as data (what stylegan2-ada-pytorch's
    ``legacy.py`` reads): ``name``, ``version``, ``static_kwargs`` (dict), ``build_func_name``,
    ``variables`` (name -> numpy array, in the stored order), ``components`` (name ->
    ``PickledTFNetwork``: G's ``mapping`` and ``synthesis``), ``source_sha256`` of the build
    module's source text (never executed)."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.name = "?"
        self.version = 0
        self.static_kwargs: dict = {}
        self.build_func_name = ""
        self.variables: dict[str, np.ndarray] = {}
        self.components: dict[str, PickledTFNetwork] = {}
        self.source_sha256: str | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise UnsafePickleError(f"a TF network has a state of type {type(state).__name__}, not a dict")
        self.name = str(state.get("name", "?"))
        self.version = int(state.get("version", 0))
        self.static_kwargs = _plain(state.get("static_kwargs") or {})
        self.build_func_name = str(state.get("build_func_name", ""))
        src = state.get("build_module_src")
        self.source_sha256 = hashlib.sha256(src.encode("utf-8")).hexdigest() if isinstance(src, str) else None
        variables = {}
        for item in state.get("variables") or ():
            name, value = item
            if isinstance(value, np.generic):
                # A 0-d variable: tf.Session.run returned it as a numpy scalar (noise_strength).
                value = np.asarray(value)
            if not isinstance(value, np.ndarray) or value.dtype == object:
                raise UnsafePickleError(f"TF network {self.name!r}: variable {name!r} is not a numeric array")
            variables[str(name)] = value
        self.variables = variables
        comps = dict(state.get("components") or {})
        for key, comp in comps.items():
            if not isinstance(comp, PickledTFNetwork):
                raise UnsafePickleError(f"TF network {self.name!r}: component {key!r} is not a network")
        self.components = {str(k): v for k, v in comps.items()}

    def all_variables(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Every variable of this network and its components, named ``component/variable`` as
        legacy.py's ``_collect_tf_params`` names them."""
        out = {prefix + k: v for k, v in self.variables.items()}
        for name, comp in self.components.items():
            out.update(comp.all_variables(f"{prefix}{name}/"))
        return out

    def __repr__(self) -> str:
        return f"PickledTFNetwork({self.name!r}, {len(self.all_variables())} variables)"


class _EasyDict(dict):
    """dnnlib's EasyDict read as a plain dict (attribute access is not needed to read it)."""


def _plain(value: Any) -> Any:
    """Nested EasyDicts / OrderedDicts as plain dicts, tuples and lists kept."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


# ------------------------------------------------------------------------------ what is built --


def _reconstruct_persistent_obj(meta: Any) -> PickledModule:
    """``torch_utils.persistence._reconstruct_persistent_obj``, read as data: the module's class
    name, source digest and state; the source text is not run."""
    if not isinstance(meta, dict) or meta.get("type") != "class":
        kind = meta.get("type") if isinstance(meta, dict) else type(meta).__name__
        raise UnsafePickleError(f"a persistent object of type {kind!r}: only persistent classes are read")
    src = meta.get("module_src")
    digest = hashlib.sha256(src.encode("utf-8")).hexdigest() if isinstance(src, str) else None
    module = PickledModule(str(meta.get("class_name", "?")), persistent=True, source_sha256=digest)
    state = meta.get("state")
    if state is not None:
        module.__setstate__(state)
    return module


def _load_storage(data: Any) -> Any:
    """``torch.storage._load_from_bytes``, with ``weights_only=True``: a storage's bytes may only
    hold a storage."""
    if not isinstance(data, (bytes, bytearray)):
        raise UnsafePickleError(f"a tensor storage given as {type(data).__name__}, not bytes")
    try:
        return torch.load(io.BytesIO(bytes(data)), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any refusal of the safe loader is a refusal here
        # torch's own text goes on to advise weights_only=False, the one thing not to do with a
        # file that hides objects in its storages: only what it asked for is quoted
        asked = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"it asks for {asked.group(1)}" if asked else f"{type(e).__name__}"
        raise UnsafePickleError(f"a tensor storage hides more than tensor data ({what}), which the safe reader does "
                                f"not build (nothing in the file was run)") from None


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, metadata: Any = None) -> torch.Tensor:
    # torch's constructor, without the hooks and metadata a file could attach (nothing of the
    # file's is ever called).
    if not isinstance(storage, (torch.UntypedStorage, torch.TypedStorage)):
        raise UnsafePickleError(f"a tensor built from {type(storage).__name__}, not a storage")
    return torch._utils._rebuild_tensor_v2(storage, offset, size, stride, bool(requires_grad), collections.OrderedDict())


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> torch.Tensor:
    return _rebuild_tensor_v2(storage, offset, size, stride)


def _rebuild_parameter(data: Any, requires_grad: Any = False, backward_hooks: Any = None, *state: Any):
    if not isinstance(data, torch.Tensor):
        raise UnsafePickleError(f"a parameter built from {type(data).__name__}, not a tensor")
    return torch.nn.Parameter(data, requires_grad=bool(requires_grad))


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any):
    if func not in _TENSOR_BUILDERS or new_type not in (torch.Tensor, torch.nn.Parameter):
        raise UnsafePickleError(f"a tensor of type {getattr(new_type, '__name__', new_type)!r} built by "
                                f"{getattr(func, '__name__', func)!r}")
    out = func(*args)
    return torch.nn.Parameter(out, requires_grad=out.requires_grad) if new_type is torch.nn.Parameter else out


def _ndarray_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not np.ndarray:
        raise UnsafePickleError(f"a numpy array of type {getattr(subtype, '__name__', subtype)!r}")
    return np.ndarray.__new__(np.ndarray, shape, dtype)


def _numpy_dtype(*args: Any) -> np.dtype:
    dtype = np.dtype(*args[:1])
    if dtype.hasobject:
        raise UnsafePickleError("a numpy array of Python objects (dtype 'O')")
    return dtype


def _numpy_scalar(dtype: Any, data: Any = b"") -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise UnsafePickleError("a numpy scalar of Python objects")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _copyreg_reconstructor(cls: Any, base: Any, state: Any = None):
    if not (isinstance(cls, type) and issubclass(cls, (PickledModule, PickledTFNetwork))) or base is not object:
        raise UnsafePickleError(f"copyreg._reconstructor of {getattr(cls, '__name__', cls)!r}")
    return cls.__new__(cls)


def _device(*args: Any) -> str:
    return ":".join(str(a) for a in args)


_TENSOR_BUILDERS = {_rebuild_tensor_v2, _rebuild_tensor}

_DTYPES = {name: getattr(torch, name) for name in ("float64", "float32", "float16", "bfloat16", "int64", "int32",
                                                    "int16", "int8", "uint8", "bool", "complex64", "double", "float",
                                                    "half", "long", "int")}

_ALLOWED: dict[tuple[str, str], Any] = {
    ("torch_utils.persistence", "_reconstruct_persistent_obj"): _reconstruct_persistent_obj,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch.storage", "_load_from_bytes"): _load_storage,
    ("torch", "Tensor"): torch.Tensor,
    ("torch._tensor", "Tensor"): torch.Tensor,
    ("torch.nn.parameter", "Parameter"): torch.nn.Parameter,
    ("torch", "Size"): tuple,
    ("torch", "device"): _device,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("copyreg", "_reconstructor"): _copyreg_reconstructor,
    ("builtins", "object"): object,
    ("dnnlib.util", "EasyDict"): _EasyDict,
    ("dnnlib", "EasyDict"): _EasyDict,
    ("dnnlib.tflib.network", "Network"): PickledTFNetwork,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _numpy_dtype,
    **{(m, "_reconstruct"): _ndarray_reconstruct for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{(m, "scalar"): _numpy_scalar for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
    **{("torch", name): dtype for name, dtype in _DTYPES.items()},
}

_MODULE_CLASSES: dict[str, type] = {}


def _module_class(module: str, name: str) -> type:
    """One stub class per class name the file uses (so ``isinstance`` and NEWOBJ work), holding
    nothing but its name."""
    full = f"{module}.{name}"
    if full not in _MODULE_CLASSES:
        _MODULE_CLASSES[full] = type(name, (_PlainModule,), {"_class_name": full, "__qualname__": name})
    return _MODULE_CLASSES[full]


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, modules: tuple[str, ...]):
        super().__init__(file)
        self.modules = modules

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is not None:
            return found
        if name.isidentifier() and not name.startswith("_") and name[:1].isupper() and any(
                module == m or module.startswith(m + ".") for m in self.modules):
            return _module_class(module, name)
        raise UnsafePickleError(f"it asks for {module}.{name}, which the safe reader does not build (nothing in the "
                                f"file was run)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("it uses persistent ids (a torch.save file, not a network pickle)")


def is_pickle(head: bytes) -> bool:
    """True when ``head`` (a file's first bytes) starts a pickle of protocol 2 or above (the
    PROTO opcode), as network pickles do; a torch.save zip archive starts with ``PK``."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def read_pickle(source: str | Path | BinaryIO, *, modules: Iterable[str] = OFFICIAL_MODULES) -> Any:
    """The object a network pickle holds, with networks as ``PickledModule`` /
    ``PickledTFNetwork`` and tensors loaded safely; nothing the file names is imported or run.

    ``source``: a path or a binary file. ``modules``: module names (and their sub-modules) whose
    capitalised names may appear as plain network classes. Raises ``UnsafePickleError`` (one
    line naming the path and what the pickle asked for) for anything else, and for a damaged
    or truncated pickle.
    """
    modules = tuple(modules)
    label = str(source) if isinstance(source, (str, Path)) else getattr(source, "name", "the pickle")
    try:
        if isinstance(source, (str, Path)):
            with open(source, "rb") as f:
                return _RestrictedUnpickler(f, modules).load()
        return _RestrictedUnpickler(source, modules).load()
    except UnsafePickleError as e:
        raise UnsafePickleError(f"{label}: refused: {e}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UnsafePickleError(f"{label}: not a readable network pickle ({type(e).__name__}: {first})") from None
