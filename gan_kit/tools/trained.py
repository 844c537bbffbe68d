"""One way to open a trained generator: ``open_generator(path)`` reads a checkpoint file (.pt), a
run directory (its ``checkpoints/latest.pt``) or a folder written by ``gankit export`` (read
without pickle), and returns a ``TrainedGenerator``: G_ema in eval mode on the asked device,
what it was trained as, and ``draw`` (images from latents), ``styles`` / ``synthesize`` (W and
images from W, for a G with per-layer styles: ``gan_kit.StyleGenerator``).

``gankit sample``, ``generate`` and ``style-mix`` open their G here; ``gankit eval`` and
``export``, which need the whole checkpoint (D, the data, the counters), find its file with
``checkpoint_file``, by the same rules.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from gan_kit.base.errors import CheckpointError, GankitError
from gan_kit.plugin_api.components import NOISE_MODES, StyleGenerator
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.exported import CONFIG_FILE, is_export_dir, load_exported_generator, read_config
from gan_kit.runs.hub import HUB_PREFIX, resolve_source
from gan_kit.runs.layout import CheckpointLayout
from gan_kit.runs.rundir import RUN_FILES

__all__ = ["TrainedGenerator", "open_generator", "checkpoint_file", "check_finite_psi", "generator_device", "BATCH"]

#: Images per forward of ``draw`` / ``styles`` / ``synthesize`` by default (memory stays bounded
#: for any count). A convolution's float rounding depends on the batch it runs in (last bits), so
#: an image drawn alone and in a batch may differ by one level of a pixel; ``batch_size=1`` draws
#: each alone, the same whatever else is drawn (``gankit generate`` does).
BATCH = 64

_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


def generator_device(name: str | torch.device) -> torch.device:
    """``"auto"`` -> CUDA when present, else the CPU; ``"cpu"``, ``"cuda"``, ``"cuda:N"``,
    ``"mps"`` as given. Raises ``GankitError`` (one line) for another name, or a device this
    machine does not have."""
    if isinstance(name, torch.device):
        name = str(name)
    if not _DEVICE.fullmatch(name):
        raise GankitError(f"--device: {name!r} is not a device (use auto, cpu, cuda or cuda:N)")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise GankitError(f"--device: {name} asked for, but CUDA is not available on this machine "
                              f"(use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise GankitError(f"--device: {name} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                              f"device(s) (use cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise GankitError("--device: mps asked for, but it is not available on this machine (use --device cpu)")
    return device


def _source(path: Path, exports: bool, command: str) -> tuple[Path, bool]:
    """``(file, exported)``: what ``path`` names - an export folder (itself), a run directory (its
    ``checkpoints/latest.pt``) or a checkpoint file (itself; ``ckpt.load`` says when it is
    missing)."""
    if is_export_dir(path):
        if not exports:
            import json

            origin = json.loads((path / "config.json").read_text(encoding="utf-8")).get("source_checkpoint")
            raise CheckpointError(f"{path}: an export folder holds G_ema alone; {command} needs the checkpoint it was "
                                  f"exported from ({origin or 'config.json names none'})")
        return path, True
    if path.is_dir():
        layout = CheckpointLayout(path)
        if layout.latest.is_file():
            return layout.latest, False
        if (path / CONFIG_FILE).is_file():
            read_config(path)  # a damaged or foreign config.json: says what is wrong with it (one line)
        if any((path / name).exists() for name in RUN_FILES[:4]):
            raise CheckpointError(f"{path}: a run directory with no checkpoint yet (no {layout.latest}); name a "
                                  f"checkpoint file, or let the run write its first one (run.snapshot_ticks)")
        what = ("a checkpoint file, a run directory or an export folder" if exports
                else "a checkpoint file or a run directory")
        raise CheckpointError(f"{path}: a folder that gankit export did not write (no config.json with format = "
                              f"'gankit-export') and no run directory (no checkpoints/latest.pt); name {what}")
    return path, False


def checkpoint_file(path: str | Path, command: str = "this command") -> Path:
    """The checkpoint file ``path`` names: a checkpoint file itself, or a run directory's
    ``checkpoints/latest.pt``. For the commands that read the whole checkpoint (``gankit eval``,
    ``export``; ``command`` names it in errors). Raises ``CheckpointError`` (one line) for a run
    directory without a checkpoint, an export folder (it holds no D, no data, no counters) or
    another folder. Nothing is read but the names (and an export's config.json)."""
    return _source(resolve_source(path), False, command)[0]


def check_finite_psi(truncation_psi: float) -> None:
    """Raise ``GankitError`` (one line naming ``--truncation``) for a NaN or infinite psi, which
    would draw every pixel NaN (black)."""
    if not math.isfinite(truncation_psi):
        raise GankitError(f"--truncation: {truncation_psi} is not a finite number (use a psi such as 0.7, or 1 "
                          f"for none)")


@attrs.frozen(eq=False)
class TrainedGenerator:
    """A trained G_ema ready to draw (``open_generator`` makes it).

    ``G``: G_ema in eval mode, ``requires_grad`` False, on ``device``, set to its saved phase;
    ``recipe`` / ``arch``: the resolved recipe it was trained with and the built architecture
    component; ``resolution``, ``alpha``: the phase it draws at (pixels a side, fade-in of the
    newest block); ``channels``; ``latent_dim`` (z is ``[N, latent_dim]``); ``num_classes`` (> 0
    for a class-conditional G) and ``class_names`` (image-folder's sub-folders, in label order;
    empty when the classes are numbered only); ``kimg`` trained; ``source``: the path the user
    named; ``file``: the checkpoint file or export folder read; ``exported``: True for an
    export folder.
    """

    G: nn.Module
    recipe: Any
    arch: Any
    resolution: int
    alpha: float
    channels: int
    latent_dim: int
    num_classes: int
    class_names: tuple[str, ...]
    kimg: float
    source: Path | str
    file: Path
    exported: bool
    device: torch.device
    seeds: str = "torch"
    imported: dict | None = None
    #: BigGAN's truncation trick: z drawn from the normal truncated to [-t, t] (``with_tricks``);
    #: None: the plain standard normal.
    truncation_normal: float | None = None

    def seed_latents(self, seeds: list[int]) -> torch.Tensor:
        """``z[len(seeds), latent_dim]`` for these seeds by this model's rule (``seeds``:
        "torch", gankit's; "numpy", ``np.random.RandomState(s).randn(1, z_dim)`` for a model
        imported from stylegan2-ada-pytorch, StyleGAN3 or R3GAN, as their scripts draw it)."""
        from gan_kit.tools.seeds import seed_latents

        return seed_latents(seeds, self.latent_dim, self.seeds, self.truncation_normal)

    def latent_rows(self, seed: int, num: int) -> torch.Tensor:
        """``z[num, latent_dim]`` of one generator seeded ``seed`` by this model's rule, row 0
        seed ``seed``'s z (``gankit sample --seed``; ``gan_kit.tools.seeds.latent_rows``)."""
        from gan_kit.tools.seeds import latent_rows

        return latent_rows(seed, num, self.latent_dim, self.seeds, self.truncation_normal)

    def with_tricks(self, truncation_normal: float | None = None, standing_stats: int = 0,
                    standing_batch: int = 64, seed: int = 0) -> "TrainedGenerator":
        """This generator with BigGAN's sampling tricks (Brock et al. 2019): z from the normal
        truncated to ``[-truncation_normal, truncation_normal]`` in ``seed_latents`` /
        ``latent_rows`` (``gan_kit.tools.seeds.resample_beyond``; apart from StyleGAN's psi,
        which ``draw`` applies in W), and, when ``standing_stats`` > 0, G's BatchNorm running
        statistics recomputed in place from that many batches of ``standing_batch`` latents
        drawn from ``seed`` (``gan_kit.tools.standing``). Raises ``GankitError`` (one line) for a
        threshold below ``MIN_TRUNCATION`` or not finite, and standing statistics for a G
        without BatchNorm layers."""
        from gan_kit.tools.seeds import check_truncation
        from gan_kit.tools.standing import check_standing, standing_statistics

        check_truncation(truncation_normal)
        check_standing(standing_stats, standing_batch)
        if standing_stats:
            standing_statistics(self.G, standing_stats, standing_batch, self.latent_dim, self.num_classes, seed=seed,
                                device=self.device, forward=self._forward,
                                who=f"{self.source} (architecture {self.architecture!r})")
        return attrs.evolve(self, truncation_normal=truncation_normal)

    def _forward(self, z: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        """G's forward as ``draw`` runs it, without truncation, constant noise."""
        args = (z,) if labels is None else (z, labels)
        if self.arch.supports_truncation:
            return self.G(*args, truncation_psi=1.0, noise_mode="const")
        return self.G(*args)

    @property
    def architecture(self) -> str:
        """The architecture's name in the recipe (``stylegan2``, ``pggan``, ...)."""
        return self.recipe.architecture.name

    @property
    def has_styles(self) -> bool:
        """True when G has per-layer styles (implements ``gan_kit.StyleGenerator``)."""
        return isinstance(self.G, StyleGenerator)

    @property
    def truncates(self) -> bool:
        """True when ``draw`` can apply a truncation psi: G's forward takes it (the architecture's
        ``supports_truncation``) or G has a mapping network (``has_styles``)."""
        return bool(self.arch.supports_truncation) or self.has_styles

    @property
    def has_noise(self) -> bool:
        """True when ``draw`` passes a noise mode on: StyleGAN2's forward (``supports_truncation``)
        and every ``StyleGenerator``'s synthesis take one."""
        return self.truncates

    def style_generator(self, what: str) -> StyleGenerator:
        """G as a ``StyleGenerator``, or ``GankitError`` saying that ``what`` (e.g. "style
        mixing") needs per-layer styles, which this architecture has not."""
        if not self.has_styles:
            raise GankitError(f"architecture {self.architecture!r} has no per-layer styles (no mapping network); "
                              f"{what} needs one, e.g. stylegan2")
        return self.G  # type: ignore[return-value]

    def set_output_transform(self, translate: tuple[float, float] = (0.0, 0.0), rotate: float = 0.0) -> None:
        """Draw from now on with the output translated by ``translate`` (x, y, image widths) and
        rotated by ``rotate`` degrees, as StyleGAN3's gen_images.py ``--translate`` / ``--rotate``
        (the architecture's ``set_output_transform``: stylegan3). ``GankitError`` (one line) for an
        architecture without an input transform, or an export folder."""
        setter = getattr(self.arch, "set_output_transform", None)
        if setter is None or self.exported:
            what = "an export folder" if self.exported else f"architecture {self.architecture!r}"
            raise GankitError(f"--translate / --rotate: {what} has no input transform to translate or rotate its "
                              f"images (stylegan3's G has one; use its checkpoint, or leave the flags out)")
        setter(self.G, translate, rotate)

    def class_label(self, value: str) -> int:
        """``--class`` as a label: an index in ``[0, num_classes)`` or one of ``class_names``.
        Raises ``GankitError`` (one line) for a G that is not class-conditional, or a class it
        does not have."""
        if not self.num_classes:
            raise GankitError(f"--class: {self.source} is not class-conditional (its recipe has no "
                              f"architecture.conditional = true); leave --class out")
        names = list(self.class_names)
        if value in names:
            return names.index(value)
        try:
            index = int(value)
        except ValueError:
            known = f"its classes: {', '.join(names)}" if names else "its classes are numbered, it has no names"
            raise GankitError(f"--class: {value!r} is not a class of {self.source} ({known})") from None
        if not 0 <= index < self.num_classes:
            raise GankitError(f"--class: {index} is not a class of {self.source} (0 to {self.num_classes - 1})")
        return index

    def labels(self, label: int | None, n: int) -> torch.Tensor | None:
        """``labels[n]`` int64 (all ``label``) for a class-conditional G, None for another one.
        Raises ``GankitError`` when a class-conditional G gets no ``label``."""
        if not self.num_classes:
            return None
        if label is None:
            raise GankitError(f"{self.source} is class-conditional ({self.num_classes} classes): give --class K, "
                              f"an index 0 to {self.num_classes - 1}"
                              + (f" or a class name ({', '.join(self.class_names[:5])}"
                                 f"{', ...' if len(self.class_names) > 5 else ''})" if self.class_names else ""))
        return torch.full((n,), int(label), dtype=torch.int64)

    def check(self, truncation_psi: float = 1.0, noise_mode: str = "const") -> None:
        """Raise ``GankitError`` (one line) when G cannot draw with ``truncation_psi`` (no mapping
        network to truncate) or ``noise_mode`` (not one of ``NOISE_MODES``; anything but "const"
        for a G without noise inputs)."""
        check_finite_psi(truncation_psi)
        if truncation_psi != 1.0 and not self.truncates:
            raise GankitError(f"--truncation: architecture {self.architecture!r} has no mapping network to "
                              f"truncate (use stylegan2, or leave --truncation at 1)")
        if noise_mode not in NOISE_MODES:
            raise GankitError(f"--noise-mode: {noise_mode!r} is not a noise mode (use {', '.join(NOISE_MODES)})")
        if noise_mode != "const" and not self.has_noise:
            raise GankitError(f"--noise-mode: architecture {self.architecture!r} has no noise inputs (its G takes z "
                              f"alone); leave --noise-mode at const")

    def draw(self, z: torch.Tensor, labels: torch.Tensor | None = None, truncation_psi: float = 1.0,
             noise_mode: str = "const", *, batch_size: int = BATCH) -> torch.Tensor:
        """Images ``[N, C, resolution, resolution]`` float32 on the CPU, in about [-1, 1], for
        ``z[N, latent_dim]`` (and ``labels[N]`` int64 for a class-conditional G), ``batch_size``
        at a time, without gradients, on ``device``. StyleGAN2 (``supports_truncation``) runs its
        forward ``G(z, labels, truncation_psi=, noise_mode=)`` - what ``gankit sample`` and the
        exported files run; another ``StyleGenerator`` runs ``synthesis(mapping(z, labels,
        psi), noise_mode)``; any other G runs ``G(z)`` / ``G(z, labels)``. "random" noise draws
        from the global torch RNG of ``device``. Raises ``GankitError`` as ``check`` does, and
        for labels a G does not take or misses."""
        self.check(truncation_psi, noise_mode)
        self._check_labels(labels, z.shape[0])
        chunks = []
        with torch.no_grad():
            for i in range(0, z.shape[0], batch_size):
                zi = z[i:i + batch_size].to(self.device, torch.float32)
                li = labels[i:i + batch_size].to(self.device) if labels is not None else None
                args = (zi,) if li is None else (zi, li)
                if self.arch.supports_truncation:
                    out = self.G(*args, truncation_psi=truncation_psi, noise_mode=noise_mode)
                elif self.has_styles:
                    out = self.G.synthesis(self.G.mapping(zi, li, truncation_psi=truncation_psi), noise_mode=noise_mode)
                else:
                    out = self.G(*args)
                chunks.append(out.float().cpu())
        return torch.cat(chunks) if chunks else torch.empty(0, self.channels, self.resolution, self.resolution)

    def styles(self, z: torch.Tensor, labels: torch.Tensor | None = None, truncation_psi: float = 1.0, *,
               batch_size: int = BATCH) -> torch.Tensor:
        """``ws[N, num_ws, w_dim]`` float32 on the CPU (a tensor of its own, free to edit):
        ``G.mapping(z, labels, truncation_psi)`` ``batch_size`` at a time, without gradients. Raises
        ``GankitError`` for a G without per-layer styles, or labels it does not take or misses."""
        G = self.style_generator("drawing W")
        self._check_labels(labels, z.shape[0])
        chunks = []
        with torch.no_grad():
            for i in range(0, z.shape[0], batch_size):
                li = labels[i:i + batch_size].to(self.device) if labels is not None else None
                ws = G.mapping(z[i:i + batch_size].to(self.device, torch.float32), li, truncation_psi=truncation_psi)
                chunks.append(ws.float().cpu().contiguous())
        return torch.cat(chunks) if chunks else torch.empty(0, G.num_ws, G.w_dim)

    def synthesize(self, ws: torch.Tensor, noise_mode: str = "const", *, batch_size: int = BATCH) -> torch.Tensor:
        """Images ``[N, C, resolution, resolution]`` float32 on the CPU from ``ws[N, num_ws,
        w_dim]``: ``G.synthesis(ws, noise_mode)`` ``batch_size`` at a time, without gradients. Raises
        ``GankitError`` for a G without per-layer styles, ws of another shape, or a noise mode
        ``check`` refuses."""
        G = self.style_generator("drawing from W")
        self.check(1.0, noise_mode)
        if ws.dim() != 3 or tuple(ws.shape[1:]) != (G.num_ws, G.w_dim):
            raise GankitError(f"ws of shape {list(ws.shape)}: this G takes [N, num_ws, w_dim] = "
                              f"[N, {G.num_ws}, {G.w_dim}]")
        chunks = []
        with torch.no_grad():
            for i in range(0, ws.shape[0], batch_size):
                wi = ws[i:i + batch_size].to(self.device, torch.float32)
                chunks.append(G.synthesis(wi, noise_mode=noise_mode).float().cpu())
        return torch.cat(chunks) if chunks else torch.empty(0, self.channels, self.resolution, self.resolution)

    def _check_labels(self, labels: torch.Tensor | None, n: int) -> None:
        if self.num_classes and labels is None:
            self.labels(None, n)  # raises: says to give --class
        if not self.num_classes and labels is not None:
            raise GankitError(f"{self.source} is not class-conditional: draw without labels (leave --class out)")
        if labels is not None and tuple(labels.shape) != (n,):
            raise GankitError(f"labels of shape {list(labels.shape)}: give one int64 class per latent, [{n}]")


def open_generator(path: str | Path, device: str | torch.device = "cpu") -> TrainedGenerator:
    """Open the trained G that ``path`` names: a checkpoint file (.pt, read safely, once, on
    the CPU), a run directory (its ``checkpoints/latest.pt``) or a folder written by ``gankit
    export`` (``config.json`` + ``model.safetensors``, no pickle), with G_ema moved to
    ``device`` (``generator_device``: "cpu", "cuda", "cuda:1", "auto").

    G is rebuilt from the recipe saved with it (``gan_kit.runs.checkpoint.load_generator`` /
    ``gan_kit.runs.exported.load_exported_generator``). Raises ``CheckpointError`` (a missing,
    damaged or foreign file; a run directory without a checkpoint; another folder),
    ``RecipeError`` (the recipe names a component no installed plugin registers) or
    ``GankitError`` (a device this machine has not), each one line.
    """
    source = Path(path) if not str(path).startswith(HUB_PREFIX) else path
    dev = generator_device(device)
    file, exported = _source(resolve_source(path), True, "it")
    if exported:
        G, _, recipe, arch, config = load_exported_generator(file, device=dev)
        resolution, alpha = int(config["resolution"]), float(config["alpha"])
        channels, names, kimg = int(config["channels"]), config.get("class_names") or [], float(config.get("kimg", 0))
        imported = config.get("imported")
    else:
        state = ckpt.load(file)  # once, on the CPU: the generator and the class names come from it
        G, phase, recipe, arch = ckpt.load_generator(file, device=dev, state=state)
        resolution, alpha = int(phase.resolution), float(phase.alpha)
        channels, names = int(state["channels"]), state.get("class_names") or []
        kimg = int(state.get("cur_nimg", 0)) / 1000
        imported = state.get("imported")
    return TrainedGenerator(G=G, recipe=recipe, arch=arch, resolution=resolution, alpha=alpha, channels=channels,
                            latent_dim=int(arch.latent_dim), num_classes=int(arch.context.num_classes),
                            class_names=tuple(str(n) for n in names), kimg=kimg, source=source, file=file,
                            exported=exported, device=dev, seeds=(imported or {}).get("seeds", "torch"),
                            imported=imported)
