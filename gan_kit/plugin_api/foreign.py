"""Model files of other codebases: what an importer is given (``ForeignFile``), what it returns
(``ImportedModel``), and ``import_file``, which asks the registered importers in turn.

An imported model becomes an ordinary gankit checkpoint dict (``ImportedModel.checkpoint``):
the recipe that builds its networks, G / D / G_ema state dicts in gankit's names, the stateful
components' state (ADA's p), and an ``imported`` record (format, file name, SHA-256, licence,
how seeds map to z). Every command that reads a checkpoint reads that dict, so ``generate``,
``style-mix``, ``project``, ``sample``, ``eval``, ``export`` and ``run --init-from`` work on the
foreign file as on a gankit one.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Literal

import attrs

from gan_kit.base.errors import CheckpointError, GankitError
from gan_kit.base.version import __version__
from gan_kit.plugin_api.pickles import OFFICIAL_MODULES, UnsafePickleError, is_pickle, read_pickle

__all__ = ["ForeignFile", "ImportedModel", "import_file", "SeedRule", "HEAD_BYTES"]

#: How many bytes of a file ``ForeignFile.head`` holds.
HEAD_BYTES = 64

#: How ``gankit generate --seeds S`` turns seed S into z for a model: ``"numpy"`` is
#: ``np.random.RandomState(S).randn(1, z_dim)`` (stylegan2-ada-pytorch's generate.py, StyleGAN3's
#: and R3GAN's gen_images.py), ``"torch"`` gankit's own ``torch.Generator().manual_seed(S)``.
SeedRule = Literal["numpy", "torch"]


class ForeignFile:
    """A file offered to the importers: ``path``, ``head`` (its first ``HEAD_BYTES`` bytes),
    ``sha256`` (hex digest of the whole file, computed on first use) and ``pickle()``: the file
    read by the restricted unpickler (``gan_kit.read_pickle``, default modules), read once and
    shared by every importer asked. ``pickle()`` raises ``UnsafePickleError`` (one line) for a
    file that is no safe pickle."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self.head = f.read(HEAD_BYTES)
        self._sha256: str | None = None
        self._pickle: Any = None
        self._read = False

    @property
    def is_pickle(self) -> bool:
        """True when the file starts like a pickle (protocol 2 or above)."""
        return is_pickle(self.head)

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            digest = hashlib.sha256()
            with open(self.path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            self._sha256 = digest.hexdigest()
        return self._sha256

    def pickle(self) -> Any:
        if not self._read:
            self._pickle = read_pickle(self.path, modules=OFFICIAL_MODULES)
            self._read = True
        return self._pickle


@attrs.frozen(kw_only=True)
class ImportedModel:
    """What an importer makes of a foreign file.

    ``format``: the source codebase and layout (``"stylegan2-ada-pytorch"``); ``recipe``: the
    TOML text of a gankit recipe whose architecture builds exactly these networks (its other
    tables are what a fine-tune would start from); ``resolution``, ``channels``,
    ``num_classes``, ``class_names``; ``G_ema`` (required), ``G``, ``D`` (None when the file has
    none): state dicts in gankit's names for the networks the recipe builds; ``components``:
    stateful components' states by the key a checkpoint stores them under (``{"augment": ...}``,
    ADA's p); ``cur_nimg``: images the file was trained on (0 when it does not say);
    ``seeds``: the ``SeedRule`` of the codebase's own generate script; ``license``: the licence
    the file was published under, as the codebase states it; ``notes``: lines for the model
    card (what was converted and how).
    """

    format: str
    recipe: str
    resolution: int
    channels: int
    num_classes: int = 0
    class_names: tuple[str, ...] = ()
    G_ema: dict
    G: dict | None = None
    D: dict | None = None
    components: dict = attrs.Factory(dict)
    cur_nimg: int = 0
    seeds: SeedRule = "numpy"
    license: str = ""
    notes: tuple[str, ...] = ()

    def checkpoint(self, source: ForeignFile) -> dict:
        """A gankit checkpoint dict (``gan_kit.runs.checkpoint.load``'s layout, without optimizer
        states, RNG streams or counters beyond ``cur_nimg``) plus ``imported``: the format, the
        file's name (not its folder: nothing of the local machine leaves in an export), its
        SHA-256, the licence, the seed rule and the notes."""
        return {
            "magic": "gankit-checkpoint",
            "format_version": 1,
            "gankit_version": __version__,
            "channels": int(self.channels),
            "num_classes": int(self.num_classes),
            "class_names": list(self.class_names),
            "recipe": self.recipe,
            "G": self.G if self.G is not None else self.G_ema,
            "D": self.D,
            "G_ema": self.G_ema,
            "frozen_files": {},
            "components": dict(self.components),
            "cur_nimg": max(0, int(self.cur_nimg)),
            "phase": {"index": 0, "resolution": int(self.resolution), "alpha": 1.0, "batch_size": 1,
                      "lr_scale": 1.0, "start_nimg": 0, "end_nimg": math.inf, "fade_nimg": 0, "batch_gpu": None},
            "imported": {"format": self.format, "file": source.path.name, "sha256": source.sha256,
                         "license": self.license, "seeds": self.seeds, "notes": list(self.notes)},
        }


def import_file(path: str | Path, registry: Any) -> tuple[dict, str]:
    """``(checkpoint dict, importer name)`` for a model file of another codebase: the registered
    importers (kind ``importer`` in ``registry``, a ``gan_kit.plugin_api.registry.Registry``) are asked in turn and
    the first that recognises the file converts it. Tensors are on the CPU.

    Raises ``CheckpointError`` (one line) when no importer recognises the file, naming what it
    is; an importer's own ``GankitError`` (an unknown configuration) and ``UnsafePickleError``
    (a pickle that asks for anything but data) pass through.
    """
    from gan_kit.plugin_api.components import BuildContext

    source = ForeignFile(path)
    if source.is_pickle:
        source.pickle()  # read (safely) before any importer: a refused pickle says what it asked for
    names = [c.name for c in registry.registered("importer")]
    for component in registry.registered("importer"):
        name = component.name
        importer = component.factory(component.Options(), BuildContext(resolution=0, channels=0))
        try:
            model = importer.read(source)
        except UnsafePickleError:
            raise
        except GankitError as e:  # an importer's refusal names the setting; the file is named here
            text = str(e)
            raise CheckpointError(text if text.startswith(str(path)) else f"{path}: {text}") from None
        if model is None:
            continue
        if not isinstance(model, ImportedModel):
            raise GankitError(f"importer {name!r} ({component.plugin}) returned {type(model).__name__}, not a "
                              f"gan_kit.ImportedModel")
        _check_finite(path, model)
        return model.checkpoint(source), name
    what = "a pickle no importer recognises" if source.is_pickle else "not a gankit checkpoint nor a known model file"
    raise CheckpointError(f"{path}: {what} (importers: {', '.join(names) or 'none installed'}; "
                          f"gankit list-plugins --kind importer)")


def _check_finite(path: str | Path, model: ImportedModel) -> None:
    """Refuse (``CheckpointError``, one line) networks holding a NaN or infinite value: gankit never
    loads a non-finite weight (G would draw black images, a fine-tune would stop at once)."""
    import torch

    for net in ("G_ema", "G", "D"):
        for key, tensor in (getattr(model, net) or {}).items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(f"{path}: {net}.{key} holds NaN or infinite values; gankit never loads a "
                                      f"non-finite weight (the file is damaged, or was saved after training diverged: "
                                      f"use an earlier snapshot)")
