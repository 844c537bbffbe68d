"""Who owns which weights: the layers the recipe's initializer and spectral norm may touch, and
frozen sub-networks loaded from a local weights file.

* ``own_init(module)`` marks a sub-module whose weights the architecture set itself (a fix-up
  initialisation, a pretrained part): the recipe's ``[init]`` skips every layer inside it, and
  with ``spectral_norm=False`` so does ``architecture.spectral_norm``. An ``Architecture`` with
  ``owns_init = True`` owns the initialisation of all of G and D.
* A frozen parameter (``requires_grad`` False when the architecture's ``build`` returns) is never
  re-initialised, spectrally normalised, given to an optimizer, averaged into G_ema or all-reduced
  (DistributedDataParallel leaves parameters that need no gradient alone).
* ``load_frozen(module, path)`` fills ``module`` from a local weights file (a torch state dict,
  ``.pt`` / ``.pth``, read with ``weights_only=True``, or ``.safetensors``) and freezes it. The run
  records the file by path and SHA-256 digest in each checkpoint instead of copying its tensors
  there, and a resume whose file changed stops with one line.
* ``frozen_loads_deferred()`` / ``load_deferred(net)``: building G where D is not needed (to draw
  from G: ``gankit sample``, ``eval``, ``export``), the architecture's ``build`` still makes D, so
  its ``load_frozen`` calls only note their files; the ones inside G are read afterwards, and a
  frozen part of D needs no file there.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import types
from pathlib import Path
from typing import Iterable, Iterator, Literal

import attrs
import torch
from torch import nn

from gan_kit.base.errors import CheckpointError, GankitError, clip
from gan_kit.base.layers import weight_layers, weight_of

__all__ = ["FrozenFile", "own_init", "load_frozen", "frozen_loads_deferred", "load_deferred", "recipe_layers",
           "frozen_files", "without_frozen", "load_without_frozen", "check_frozen_files", "sha256_of"]

_OWN = "_gankit_own_init"  # attribute set on a marked module: True = spectral norm too, False = init only
_FROZEN = "_gankit_frozen_file"
_PENDING = "_gankit_frozen_pending"  # a deferred load_frozen's path, until load_deferred reads it
_DEFERRED = contextvars.ContextVar("gankit_frozen_loads_deferred", default=False)


@attrs.frozen
class FrozenFile:
    """A local weights file a frozen sub-network was loaded from: its absolute ``path`` and the
    hex SHA-256 ``sha256`` of its bytes when it was loaded."""

    path: str
    sha256: str


def sha256_of(path: str | Path) -> str:
    """The hex SHA-256 digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def own_init(module: nn.Module, *, spectral_norm: bool = True) -> nn.Module:
    """Mark ``module`` (returned, for chaining) as initialised by the architecture: the recipe's
    ``[init]`` leaves every layer inside it as it is. ``spectral_norm=False``: so does
    ``architecture.spectral_norm``. Call it in ``Architecture.build``."""
    setattr(module, _OWN, bool(spectral_norm))
    return module


def load_frozen(module: nn.Module, path: str | Path) -> nn.Module:
    """Load ``module``'s weights from the local file ``path`` and freeze it (``requires_grad``
    False on every parameter); returns ``module``.

    ``path``: a torch state dict saved with ``torch.save(module.state_dict(), path)`` (read with
    ``weights_only=True``) or a ``.safetensors`` file; every key must match (``strict``). A
    relative path is taken from the working directory: give an architecture an option declared
    ``option(path=True)`` so the recipe resolves it against its own folder. The module is put in
    eval mode and kept there (its ``train()`` leaves it in eval, whatever its owner asks): a
    pretrained feature network's BatchNorm normalises with its loaded statistics and never
    updates them, and dropout is off, as Projected GAN runs its feature network. Raises
    ``GankitError`` in one line for a missing path, a directory, a file that is neither a torch
    state dict nor safetensors, or keys that do not fit.

    Inside ``frozen_loads_deferred()`` (``gankit sample``, ``eval`` and ``export`` build G that
    way) the module is frozen at once but the file is read only by ``load_deferred`` after
    ``build`` returns, for G's parts alone: a ``build`` must not read the loaded weights itself.
    """
    path = Path(path).expanduser().absolute()
    if _DEFERRED.get():
        setattr(module, _PENDING, path)
        return _freeze(module)
    _read_into(module, path)
    _freeze(module)
    setattr(module, _FROZEN, FrozenFile(str(path), sha256_of(path)))
    return module


def _read_into(module: nn.Module, path: Path) -> None:
    """``module.load_state_dict`` of the weights file ``path`` (``load_frozen``'s errors)."""
    saved_with = "a local file saved with torch.save(module.state_dict(), path) or a .safetensors file"
    if path.is_dir():
        raise GankitError(f"{path}: frozen weights: a directory, not a file; give {saved_with}")
    if not path.is_file():
        raise GankitError(f"{path}: frozen weights file not found (give the path of {saved_with})")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # one line whatever the reader raised; torch's own advice (weights_only=False) is no fix here
        kind = type(e).__name__
        raise GankitError(f"{path}: frozen weights: not a torch state dict nor a safetensors file ({kind}); give "
                          f"{saved_with}") from None
    if not isinstance(state, dict):
        raise GankitError(f"{path}: frozen weights: holds a {type(state).__name__}, not a state dict; give {saved_with}")
    try:
        module.load_state_dict(state)
    except Exception as e:
        first = clip(str(e)) or type(e).__name__
        raise GankitError(f"{path}: cannot load frozen weights into {type(module).__name__}: {first}") from None


def _freeze(module: nn.Module) -> nn.Module:
    module.requires_grad_(False)
    module.eval()
    # A parent's .train() (the engine's, a sampler's net.train(was_training)) reaches every child:
    # this one stays in eval, so its BatchNorm statistics are the loaded ones throughout.
    module.train = types.MethodType(_stay_in_eval, module)
    return module


@contextlib.contextmanager
def frozen_loads_deferred() -> Iterator[None]:
    """Inside the block ``load_frozen(module, path)`` freezes ``module`` and notes ``path``
    without reading it; ``load_deferred(net)`` reads the noted files of ``net``'s sub-networks
    afterwards. Wrap an ``Architecture.build`` whose D is not needed (G alone draws images), so
    D's frozen files need not exist."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def load_deferred(net: nn.Module) -> nn.Module:
    """Read the weights files ``load_frozen`` only noted inside ``frozen_loads_deferred()`` for
    ``net``'s sub-networks (a copy of ``net``, G_ema, noted them too), as ``load_frozen`` reads
    them: frozen, recorded by path and digest. Returns ``net``. Raises ``GankitError`` as
    ``load_frozen`` does (a missing file, keys that do not fit)."""
    for m in net.modules():
        path = m.__dict__.pop(_PENDING, None)
        if path is not None:
            _read_into(m, path)
            setattr(m, _FROZEN, FrozenFile(str(path), sha256_of(path)))
    return net


def _stay_in_eval(self: nn.Module, mode: bool = True) -> nn.Module:
    return nn.Module.train(self, False)


def _marks(net: nn.Module) -> Iterable[tuple[nn.Module, bool | None, bool]]:
    """Every module of ``net`` with the innermost ``own_init`` mark above it (None: none) and
    whether a frozen file holds it."""
    def walk(m: nn.Module, own: bool | None, frozen: bool):
        own = getattr(m, _OWN, own)
        frozen = frozen or hasattr(m, _FROZEN)
        yield m, own, frozen
        for child in m.children():
            yield from walk(child, own, frozen)

    return walk(net, None, False)


def recipe_layers(net: nn.Module, purpose: Literal["init", "spectral_norm"], owns_init: bool = False) -> list[nn.Module]:
    """The conv / linear layers of ``net`` the recipe may ``purpose``: not frozen (their weight
    needs a gradient, and no frozen file holds them), and - for ``"init"`` - not marked
    ``own_init`` (nor any, when the architecture ``owns_init``), for ``"spectral_norm"`` not
    marked ``own_init(spectral_norm=False)``."""
    allowed = set(map(id, weight_layers(net)))
    out = []
    for m, own, frozen in _marks(net):
        if id(m) not in allowed or frozen or not weight_of(m).requires_grad:
            continue
        if purpose == "init" and (owns_init or own is not None):
            continue
        if purpose == "spectral_norm" and own is False:
            continue
        out.append(m)
    return out


def frozen_files(net: nn.Module) -> dict[str, FrozenFile]:
    """``{module name: FrozenFile}`` of every sub-module of ``net`` loaded with ``load_frozen``
    (outermost only); ``""`` names ``net`` itself."""
    out: dict[str, FrozenFile] = {}
    for name, m in net.named_modules():
        record = getattr(m, _FROZEN, None)
        if record is not None and not _under(name, out):  # parents come first: keep the outermost
            out[name] = record
    return out


def _under(key: str, prefixes: Iterable[str]) -> bool:
    return any(p == "" or key.startswith(p + ".") for p in prefixes)


def without_frozen(state: dict, net: nn.Module) -> dict:
    """``state`` (``net.state_dict()``) without the tensors of its frozen-file sub-networks."""
    prefixes = list(frozen_files(net))
    return state if not prefixes else {k: v for k, v in state.items() if not _under(k, prefixes)}


def load_without_frozen(net: nn.Module, state: dict) -> None:
    """``net.load_state_dict(state)``, strict but for the frozen-file sub-networks' keys, which
    ``state`` need not hold (``net`` already has them from their files). Raises ``RuntimeError``
    naming the keys that do not fit, as a strict load would."""
    prefixes = list(frozen_files(net))
    if not prefixes:
        net.load_state_dict(state)
        return
    missing, unexpected = net.load_state_dict(state, strict=False)
    missing = [k for k in missing if not _under(k, prefixes)]
    if missing or unexpected:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(net).__name__}: missing keys {missing[:5]}, "
                           f"unexpected keys {list(unexpected)[:5]}")


def check_frozen_files(saved: dict[str, dict], now: dict[str, FrozenFile], checkpoint: Path,
                       action: str = "--resume") -> None:
    """Refuse (``CheckpointError``, one line) to continue from ``checkpoint`` when a frozen
    sub-network's file changed since it was trained with it (another digest, or another file),
    or the checkpoint recorded files this run does not load, or the reverse. ``action`` starts
    the message (``--resume``; ``""`` for a checkpoint read to sample or evaluate)."""
    lead = f"{action}: " if action else ""
    for name in sorted(set(saved) | set(now)):
        old, new = saved.get(name), now.get(name)
        if old is None or new is None:
            which = f"loads {new.path} into {name}" if old is None else f"was trained with {name} from {old['path']}"
            raise CheckpointError(f"{lead}{checkpoint}: the run {which}, and the checkpoint "
                                  f"{'does not record it' if old is None else 'this run does not load it'}; resume with "
                                  f"the architecture the run was trained with")
        if old["sha256"] != new.sha256:
            raise CheckpointError(f"{lead}{checkpoint}: the frozen weights of {name} changed: {new.path} has SHA-256 "
                                  f"{new.sha256[:12]}..., the run was trained with {old['path']} at {old['sha256'][:12]}... "
                                  f"(restore that file, or start a new run with --out)")
