"""Feature extractors for the feature-space metrics (fid, kid, precision-recall, is) and the
caches that make them cheap to repeat during training.

Backbones (kind ``backbone``; the ``feature_extractor`` option of each metric names one, its
``resize`` option picks the resize mode of ``gan_kit.builtin.metrics.resize``; built-ins in
``gan_kit.builtin.metrics.backbones`` and ``vit_backbones``, plugins add more), among them:

- ``inception-v3-compat``: torch-fidelity's InceptionV3 (the TF FID network, converted; Heusel et
  al. 2017's features): ``pool`` = the 2048-d pool3 features, ``logits`` = its 1008 unbiased logits
  (what torch-fidelity's Inception Score takes). Weights: ``weights-inception-2015-12-05-6726825d.pth``
  in the torch hub cache (``torch.hub.get_dir()/checkpoints``), where torch-fidelity keeps it.
- ``vgg16``: torch-fidelity's VGG16 (torchvision's ImageNet weights, ``vgg16-397923af.pth`` in the
  same folder): ``pool`` = the 4096-d fc2 features after ReLU, what Kynkaanniemi et al. 2019 and
  torch-fidelity use for precision and recall.
- ``stub``: a small convolutional network with fixed random weights (seed 0). No file, no
  download: for tests and offline smoke runs. Its values are NOT comparable with published ones.
- ``clip-vit-b-32`` (OpenAI's ``ViT-B-32.pt``, open_clip) and ``dinov2-vit-l-14`` (Meta's
  ``dinov2_vitl14_pretrain.pth``, timm): see ``vit_backbones``.

gankit never downloads weights: a missing file is one line saying which file to put where.

Caches, per process (stylegan2-ada-pytorch's ``metric_utils`` keeps the detector and the real
statistics the same way):

- each extractor is built once per (name, weights file, device);
- the features of the real images are kept in memory and, with ``cache = true``, on disk under
  ``feature_cache_dir()``, keyed by everything that changes them: the extractor (its name, its
  resize mode, input side and normalisation, and the version of the code that implements it), a SHA-256 digest of
  its weights file's *content* (two files of one name and size are two extractors), and a SHA-256
  digest of the exact uint8 images fed to it. So they are computed once per data set, resolution
  (and fade-in alpha), image count and seed, and never served stale for a data set or a weights
  file that changed on disk (stylegan2-ada-pytorch keys them by the data set's options and the
  detector's URL instead);
- the features of the last generated sets are kept too, so the metrics of one tick on one
  extractor (fid, kid, is, and precision-recall on ``inception-v3-compat``) with one
  ``num_images`` and ``seed`` share one pass over G_ema's images.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import logging
import os
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from gan_kit import Backbone, ImageBatches
from gan_kit.builtin.metrics import resize as rz
from gan_kit.builtin.metrics.backbones import BUILTIN, INCEPTION_URL
# re-exported for the tests and tools that build the stub or name the VGG16 file
from gan_kit.builtin.metrics.backbones import VGG16_URL as VGG16_URL, StubNet as StubNet
from gan_kit.builtin.metrics.feature_passes import FeatureAccumulator, stream_digest
from gan_kit.base.errors import GankitError, clip

log = logging.getLogger("gankit.metrics")

#: The torch-fidelity weights' addresses and InceptionV3's file name (kept here for the tools).
INCEPTION_FILE = INCEPTION_URL.rsplit("/", 1)[1]

#: The built-in backbones by name.
BACKBONES: dict[str, type[Backbone]] = dict(BUILTIN)
#: The installed plugins' backbones a metric has asked for (looked up again after ``clear_caches``).
_FOUND: dict[str, type[Backbone]] = {}


def backbone(name: str) -> type[Backbone]:
    """The backbone class registered as ``name``: a built-in, else one of the installed plugins'
    (the ``gankit`` entry points, through ``register_backbones``). Raises GankitError listing
    the names available."""
    if name in BACKBONES:
        return BACKBONES[name]
    if name not in _FOUND:
        from gan_kit.plugin_api.manager import build_plugins

        try:
            _FOUND[name] = build_plugins().registry.get("backbone", name).factory
        except KeyError as e:
            raise GankitError(f"feature_extractor: {e.args[0]} (gankit list-plugins --kind backbone)") from None
    return _FOUND[name]


#: How ``to_uint8`` turns images into the backbones' input (keyed with each extractor).
QUANTISE = "round((x + 1) * 127.5) to uint8, grey repeated to RGB"

_WEIGHT_DIGESTS: dict[tuple[str, int, int], str] = {}


def weights_digest(path: Path) -> str:
    """SHA-256 (hex) of the weights file's bytes: what tells two extractors apart, whatever the
    files are called (a fine-tuned or re-downloaded file may keep the name and the size). Read
    once per process and file version (path, size, modification time). Raises ``OSError`` for a
    file that cannot be read."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _WEIGHT_DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _WEIGHT_DIGESTS[key] = h.hexdigest()
    return _WEIGHT_DIGESTS[key]


_STATE_DIGESTS: dict[tuple[str, int, int], str | None] = {}


def weights_state_digest(path: Path) -> str | None:
    """SHA-256 (hex) of the tensors a weights file holds - each name, dtype, shape and bytes, in
    name order - or None for a file that is not a state dict (``vit_backbones.read_state_dict``).
    Two files of the same tensors agree whatever their names or containers: ``torch.save``
    writes the file's own name into it, so the bytes' digest (``weights_digest``, the feature
    cache's key, which may only ever split, never merge) differs. What reference statistics
    files are checked with."""
    from gan_kit.builtin.metrics.vit_backbones import read_state_dict

    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _STATE_DIGESTS:
        try:
            state = read_state_dict(path)
        except (ValueError, RuntimeError, OSError, EOFError, KeyError, AttributeError):
            _STATE_DIGESTS[key] = None
        else:
            h = hashlib.sha256()
            for name in sorted(state):
                t = state[name].detach().cpu().contiguous()
                h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
            _STATE_DIGESTS[key] = h.hexdigest()
    return _STATE_DIGESTS[key]


def resize_mode(name: str, resize: str | None) -> str:
    """The resize mode ``name``'s features are computed with: ``resize``, or the backbone's own
    default when None. Raises GankitError for ``legacy_tensorflow`` on a backbone that does not
    resize inside its network."""
    b = backbone(name)
    mode = resize or b.resize
    if mode not in rz.MODES:
        raise GankitError(f"resize: unknown mode {mode!r}; modes: {', '.join(rz.MODES)}")
    if mode == "legacy_tensorflow" and not b.resizes_inside:
        raise GankitError(f"resize = \"legacy_tensorflow\" leaves the resize to the network, and the {name} backbone "
                          f"takes only {b.input_size}x{b.input_size} images; use clean, legacy_pytorch, pil_uint8 or "
                          f"pil_uint8_crop (its default: {b.resize})")
    return mode


def extractor_ident(name: str, path: Path | None, resize: str | None = None) -> str:
    """What the features of backbone ``name`` with the weights at ``path`` depend on besides the
    images, as one string (the cache key's extractor part): name, quantisation, resize mode and
    input side, normalisation, implementation version, and the weights' content digest."""
    b = backbone(name)
    mode = resize_mode(name, resize)
    weights = "no weights" if path is None else f"weights sha256 {weights_digest(path)}"
    size = f"{b.input_size}x{b.input_size}"
    return f"{name} | {QUANTISE} | {rz.DESCRIPTIONS[mode]} ({size}) | {b.normalisation} | {b().version()} | {weights}"


def weights_path(name: str, weights: str | None = None) -> Path | None:
    """Where backbone ``name``'s weights are looked for: ``weights`` if given, else its
    ``weights_file`` in ``$GANKIT_WEIGHTS_DIR`` when that folder has it, else in the torch hub cache
    (``$TORCH_HOME/hub/checkpoints``, where torch-fidelity and torchvision keep theirs); None for a
    backbone without weights."""
    b = backbone(name)
    if b.weights_file is None:
        return None
    if weights:
        return Path(weights).expanduser()
    folder = os.environ.get("GANKIT_WEIGHTS_DIR")
    if folder and (Path(folder).expanduser() / b.weights_file).is_file():
        return Path(folder).expanduser() / b.weights_file
    return Path(torch.hub.get_dir()) / "checkpoints" / b.weights_file


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def extractor_problem(metric: str, name: str, weights: str | None = None) -> str | None:
    """One line naming what ``metric`` lacks to run backbone ``name`` (the torch-fidelity
    package, the backbone's own packages, the weights file), or None. Never downloads anything."""
    missing = []
    if not _has("torch_fidelity"):
        missing.append("the torch-fidelity package (pip install 'gankit[fid]', or 'gankit[tools]' for every "
                       "after-training command's packages)")
    b = backbone(name)
    for module, package in b.requires.items():
        if not _has(module):
            missing.append(f"the {package} package (pip install {package})")
    path = weights_path(name, weights)
    if path is not None and not path.is_file():
        fix = f"fetch {b.weights_source} to that path"
        if not weights:
            folder = os.environ.get("GANKIT_WEIGHTS_DIR")
            fix += (f" or into $GANKIT_WEIGHTS_DIR ({Path(folder).expanduser()}), which lacks {b.weights_file}, or give "
                    f"--weights FILE (the metric's weights option)" if folder else
                    ", or give --weights FILE (the metric's weights option), or set $GANKIT_WEIGHTS_DIR")
        missing.append(f"the {name} weights file {path} (gankit never downloads it: {fix}; "
                       f"or use swd, which needs no weights)")
    if not missing:
        return None
    return f"{metric} needs " + " and ".join(missing)


class FeatureExtractor:
    """One loaded backbone: ``extract(images uint8 [N,3,H,W])`` -> ``{"pool": [N, D], "logits":
    [N, K]}`` (float32; no ``logits`` for a backbone without them), through its resize mode.
    ``images_seen`` and ``passes`` count the images and the calls that reached the network (what
    the caches save)."""

    def __init__(self, name: str, backbone: type[Backbone], net: nn.Module, ident: str, device: torch.device,
                 resize: str):
        self.name, self.backbone, self.net, self.ident, self.device = name, backbone, net, ident, device
        self.resize = resize
        self.images_seen = 0
        self.passes = 0

    @torch.no_grad()
    def extract(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """One batch ``uint8 [b,3,H,W]`` (any device) -> ``{"pool": [b, D], "logits": [b, K]}`` on
        the extractor's device (float32). Call ``begin_pass`` once per image set first."""
        self.images_seen += images.shape[0]
        x = rz.resize(images.cpu() if self.resize not in ("legacy_tensorflow", "legacy_pytorch") else images,
                      self.resize, self.backbone.input_size)
        out = self.net(x.to(self.device))
        if isinstance(out, torch.Tensor):
            return {"pool": out.float()}
        feats = {"pool": out[0].float()}
        if self.backbone.logits_dim:
            feats["logits"] = out[1].float()
        return feats

    def begin_pass(self) -> None:
        """Count a pass over one image set (``passes``)."""
        self.passes += 1


_EXTRACTORS: dict[tuple[str, str], FeatureExtractor] = {}


def _expected(name: str, b: type[Backbone]) -> str:
    return f"the {name} backbone expects {b.weights_file} from {b.weights_source}"


def get_extractor(name: str, weights: str | None, device: torch.device | str, metric: str,
                  resize: str | None = None) -> FeatureExtractor:
    """The process's extractor of backbone ``name`` with resize mode ``resize`` (None: the
    backbone's default) on ``device`` (built on first use). Raises GankitError naming ``metric``
    when the weights are missing or are not the expected file."""
    device = torch.device(device)
    path = weights_path(name, weights)
    problem = extractor_problem(metric, name, weights)
    if problem:
        raise GankitError(problem)
    b = backbone(name)
    mode = resize_mode(name, resize)
    try:
        ident = extractor_ident(name, path, mode)
    except OSError as e:
        raise GankitError(f"{metric}: cannot read the {name} weights {path} ({e.strerror or e}); check the "
                          f"file's permissions, or fetch {b.weights_source} again") from None
    # A weights file replaced in place is another extractor, also within one process.
    key = (ident, str(device))
    if key not in _EXTRACTORS:
        try:
            net = b().build(path, mode)
        except Exception as e:  # a damaged, cut or foreign weights file
            first = clip(str(e).strip().splitlines()[0] if str(e).strip() else "")
            raise GankitError(f"{metric}: cannot load the {name} weights {path} ({type(e).__name__}: {first}); "
                              f"{_expected(name, b)}") from None
        _EXTRACTORS[key] = FeatureExtractor(name, b, net.to(device).eval(), ident, device, mode)
    return _EXTRACTORS[key]


# ------------------------------------------------------------------------------- caches --


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """``[N,C,H,W]`` in [-1, 1] (C = 1 or 3) -> ``uint8 [N,3,H,W]``, quantised as a saved PNG
    would be (``round((x + 1) * 127.5)``); grey images are repeated to RGB."""
    n, _, h, w = images.shape
    out = torch.empty(n, 3, h, w, dtype=torch.uint8)
    for i in range(0, n, 1024):  # in chunks: a float copy of 10k large images would double the memory
        x = images[i:i + 1024].detach().float().cpu()
        out[i:i + 1024] = ((x.clamp(-1, 1) + 1.0) * 127.5).round_().to(torch.uint8).expand(-1, 3, -1, -1)
    return out


def digest(images: torch.Tensor) -> str:
    """SHA-256 (hex) of a uint8 image tensor's shape and bytes."""
    h = hashlib.sha256(repr(tuple(images.shape)).encode())
    h.update(images.contiguous().numpy().data)
    return h.hexdigest()


def feature_cache_dir() -> Path:
    """Folder of the real images' features on disk: ``$GANKIT_CACHE_DIR/metrics``, else
    ``$XDG_CACHE_HOME/gankit/metrics``, else ``~/.cache/gankit/metrics`` (as stylegan2-ada-pytorch
    keeps its under ``~/.cache/dnnlib/gan-metrics``)."""
    root = os.environ.get("GANKIT_CACHE_DIR")
    if root:
        return Path(root).expanduser() / "metrics"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gankit" / "metrics"


class _LRU(OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


#: Real images' features (a few sets: each phase's resolution, the eval's halves).
_REAL = _LRU(4)
#: Generated images' features: the last sets, shared by the metrics of one tick.
_FAKE = _LRU(2)


def _load(path: Path, ident: str) -> dict[str, Any] | None:
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        if blob.get("extractor") != ident or not isinstance(blob.get("count"), int):
            return None
        blob.pop("extractor")
        blob["keep"] = frozenset(blob["keep"])
        return blob
    except FileNotFoundError:
        return None
    except Exception as e:  # a cut or foreign file: computed again and rewritten
        log.warning("warning: ignoring unreadable feature cache %s (%s: %s)", path, type(e).__name__, e)
        return None


def _save(path: Path, ident: str, feats: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        torch.save({**feats, "extractor": ident, "keep": sorted(feats["keep"])}, tmp)
        os.replace(tmp, path)  # atomic: a concurrent run reads the old file or the new one
    except OSError as e:  # a read-only or full disk costs the next run a pass, never this one
        log.warning("warning: cannot write the feature cache %s (%s); real-image features will be computed "
                    "again next time", path, e.strerror or e)


def stream_features(ex: FeatureExtractor, batches: ImageBatches, keep: frozenset[str], real: bool,
                    disk: Path | None = None, tag: str = "") -> dict[str, Any]:
    """``ex``'s features of this process's share of ``batches`` (images in [-1, 1], quantised as
    ``to_uint8``), accumulated batch by batch into what ``keep`` names (``feature_passes``): no
    image set is held whole. From the caches when the same set went through ``ex`` before with at
    least ``keep``: a set with a ``key`` by that key; otherwise by a digest of its uint8 images
    (one reading pass, no extractor). Real sets' features are also kept in ``disk`` (a folder,
    None = memory only) as ``<tag>-<extractor>-<N>x<H>px-<digest>.pt``, the digest covering the images
    and ``ex.ident`` (see ``extractor_ident``)."""
    table = _REAL if real else _FAKE
    path = None
    if batches.key is not None:
        key: tuple = (ex.ident, batches.key)
    else:
        own = list(batches.indices())
        if not own:
            raise GankitError("a metric got an empty image set")
        u8 = to_uint8(batches.load(own[0]))
        shape = (batches.share(), *u8.shape[1:])
        rest = (to_uint8(batches.load(i)) for i in own[1:])
        key = (ex.ident, stream_digest(itertools.chain([u8], rest), shape))
        del u8
        if real and disk is not None:
            both = hashlib.sha256(f"{ex.ident}\n{key[1]}".encode()).hexdigest()  # two extractors never share a file
            name = f"{tag + '-' if tag else ''}{ex.name}-{shape[0]}x{shape[-1]}px-{both[:24]}.pt"
            path = disk / name
    held = table.get(key)
    if held is not None and keep <= held["keep"]:
        table.move_to_end(key)
        return held
    if path is not None:
        feats = _load(path, ex.ident)
        if feats is not None and keep <= feats["keep"]:
            table.put(key, feats)
            return feats
    ex.begin_pass()
    acc = FeatureAccumulator(keep)
    for i, images in batches:
        acc.add(i, ex.extract(to_uint8(images)))
    feats = acc.result()
    table.put(key, feats)
    if path is not None:
        _save(path, ex.ident, feats)
    return feats


def features(ex: FeatureExtractor, images: torch.Tensor, batch_size: int, real: bool,
             disk: Path | None = None, tag: str = "", keep: frozenset[str] = frozenset({"pool", "logits"})
             ) -> dict[str, Any]:
    """``stream_features`` of an image tensor held whole (``[N,C,H,W]`` in [-1, 1]), in batches
    of ``batch_size``."""
    return stream_features(ex, ImageBatches.of_tensor(images, batch_size), keep, real, disk, tag)


def clear_caches() -> None:
    """Forget the loaded extractors and the features kept in memory (not those on disk)."""
    _EXTRACTORS.clear()
    _WEIGHT_DIGESTS.clear()
    _FOUND.clear()
    _REAL.clear()
    _FAKE.clear()
