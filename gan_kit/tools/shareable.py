"""What leaves the machine in an export: the recipe text, the TorchScript module and the ONNX
file without the folders, user and host names of the machine that wrote them.

A resolved recipe holds absolute paths (a data folder, feature-extractor weights, plugin files,
``run.out_dir``); torch's TorchScript writer records each traced line's source file by absolute
path (the ``*.debug_pkl`` entries), and torch.onnx each node's Python stack trace. An export
folder is meant to be uploaded as it is (``gankit export``), so none of those may stay.
"""

from __future__ import annotations

import io
import json
import re
import tomllib
import warnings
import zipfile
from pathlib import Path

import torch

__all__ = ["shareable_recipe", "without_source_paths", "strip_onnx_stack_traces"]

#: A TOML basic string ("...", escapes allowed) or literal string ('...') on one line.
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _local(value: str) -> bool:
    """An absolute path (POSIX, ``~``, a Windows drive or share) or one that climbs out (``..``)."""
    return (value.startswith(("/", "~", "\\\\")) or re.match(r"^[A-Za-z]:[\\/]", value) is not None
            or ".." in re.split(r"[\\/]", value))


def shareable_value(value: str) -> str:
    """``value`` without what names this machine: a local path cut to its last part
    (``/home/ann/photos`` -> ``photos``), a URL to its scheme (``http://host:5000/x`` ->
    ``http://...``); any other string unchanged."""
    url = _URL.match(value)
    if url:
        return f"{url.group(1)}://..."
    if _local(value):
        return re.split(r"[\\/]", value.rstrip("/\\"))[-1] or value[:1]
    return value


def shareable_recipe(text: str) -> str:
    """The TOML ``text`` with every string value passed through ``shareable_value`` (the rest of
    the text as it was)."""
    def replace(match: re.Match) -> str:
        token = match.group(0)
        try:
            value = tomllib.loads(f"v = {token}")["v"]
        except tomllib.TOMLDecodeError:
            return token
        new = shareable_value(value)
        return token if new == value else json.dumps(new)

    return _STRING.sub(replace, text)


def without_source_paths(traced: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    """``traced`` without its debug records (the ``*.debug_pkl`` entries of the saved archive),
    which name every traced line's source file by absolute path - this machine's site-packages,
    with the user's name in it. TorchScript runs the same without them; save the returned module
    with ``save`` as usual (torch's own writer, its aligned layout)."""
    saved, stripped = io.BytesIO(), io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch marks jit.save / load deprecated; the format stays
        torch.jit.save(traced, saved)
        with zipfile.ZipFile(saved) as src, zipfile.ZipFile(stripped, "w", zipfile.ZIP_STORED) as dst:
            for info in src.infolist():
                if not info.filename.endswith(".debug_pkl"):
                    dst.writestr(info, src.read(info.filename))
        stripped.seek(0)
        return torch.jit.load(stripped)


def strip_onnx_stack_traces(path: Path) -> None:
    """Drop every node's metadata (torch.onnx records there the Python stack trace of the line
    that made it, source paths included) and doc string from the ONNX file ``path``, in place.
    Needs the ``onnx`` package."""
    import onnx

    model = onnx.load(str(path))

    def clean(nodes) -> None:
        for node in nodes:
            del node.metadata_props[:]
            node.doc_string = ""
            for attr in node.attribute:
                for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    clean(graph.node)

    clean(model.graph.node)
    for function in model.functions:
        clean(function.node)
    onnx.save(model, str(path))
