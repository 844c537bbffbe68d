"""TF-era StyleGAN2 network pickles written without TensorFlow, for the tests.

A TF StyleGAN2 / StyleGAN2-ADA snapshot is ``pickle.dump((G, D, Gs), f)`` (protocol 3) of
``dnnlib.tflib.network.Network`` objects. Pickle writes each as the class's global name, NEWOBJ,
then the state ``Network.__getstate__`` returns (BUILD): ``version``, ``name``,
``static_kwargs`` (a plain dict), ``components`` (a plain dict of Networks),
``build_module_src`` (the build module's source text), ``build_func_name``, ``variables`` (a
list of ``(scope name, value)`` pairs: numpy float32 arrays, numpy scalars for 0-d variables, as
``tf.Session.run`` returns them) and, from version 5 (StyleGAN2-ADA), the input and output
shapes and names. numpy is named as numpy 1 named it (``numpy.core.multiarray``).

``write_tf_pickle(record, path)`` writes such a file from a record of
tests/data/tf_reference.pt (``record["networks"]``, the TF networks in the pickle's order, each
``{"state": {...}, "variables": {name: tensor}, "components": {key: <same>}}``). The build
module's source text is not NVIDIA's: a one-line stand-in (no reader runs it).
"""

from __future__ import annotations

import copyreg
import io
import pickle
from pathlib import Path

import numpy as np
import torch

#: What stands in the pickle for the TF build module's source text.
BUILD_MODULE_SRC = "# the TF network's build module: not recorded (a stand-in written by tests/tf_pickles.py)\n"


class TFNetwork:
    """Pickles as ``dnnlib.tflib.network.Network`` with ``state`` as its ``__getstate__``."""

    def __init__(self, state: dict):
        self.state = state

    def __reduce_ex__(self, protocol):
        # object.__reduce_ex__ (protocol >= 2) of a class with __getstate__: NEWOBJ, then BUILD.
        return copyreg.__newobj__, (type(self),), self.state


class _TFPickler(pickle._Pickler):
    """The pure-Python pickler with two global names rewritten: ``TFNetwork`` as
    ``dnnlib.tflib.network.Network`` and numpy 2's ``numpy._core`` as numpy 1's ``numpy.core``."""

    def save_global(self, obj, name=None):
        if obj is TFNetwork:
            module, name = "dnnlib.tflib.network", "Network"
        else:
            module, name = obj.__module__, name or obj.__qualname__
            if module == "numpy._core" or module.startswith("numpy._core."):
                module = "numpy.core" + module[len("numpy._core"):]
        if self.proto < 3:
            raise ValueError("TF pickles are protocol 3")
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())
        self.memoize(obj)


def tf_value(t: torch.Tensor):
    """A recorded variable as TF stored it: a float32 array, a numpy float32 for a 0-d one."""
    a = t.detach().cpu().numpy().astype(np.float32)
    return np.float32(a[()]) if a.ndim == 0 else a


def tf_network(net: dict) -> TFNetwork:
    """A recorded TF network (and its components) as ``TFNetwork`` objects."""
    state = dict(net["state"])
    state["components"] = {key: tf_network(comp) for key, comp in net["components"].items()}
    state["build_module_src"] = BUILD_MODULE_SRC
    state["variables"] = [(name, tf_value(t)) for name, t in net["variables"].items()]
    order = ["version", "name", "static_kwargs", "components", "build_module_src", "build_func_name", "variables"]
    return TFNetwork({k: state[k] for k in order + [k for k in state if k not in order]})


def tf_pickle_bytes(record: dict) -> bytes:
    """The bytes of the TF pickle of ``record`` (see the module docstring)."""
    nets = tuple(tf_network(record["networks"][key]) for key in record["network_order"])
    buf = io.BytesIO()
    _TFPickler(buf, protocol=3).dump(nets)
    return buf.getvalue()


def write_tf_pickle(record: dict, path: str | Path) -> Path:
    """Write the TF pickle of ``record`` (a case of tests/data/tf_reference.pt) to ``path``."""
    path = Path(path)
    path.write_bytes(tf_pickle_bytes(record))
    return path
