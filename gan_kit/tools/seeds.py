"""Seeds: lists of numbers as users write them (``0-7,42``), and the latent z of each seed.

A seed names one latent on every machine: ``seed_latents([s], D)`` is ``torch.randn(1, D,
generator=torch.Generator().manual_seed(s))``, drawn on the CPU (a CUDA generator draws other
numbers), so ``gankit generate --seeds s`` gives the same image everywhere, as
stylegan2-ada-pytorch's generate.py names images by seed. A model imported from another
codebase keeps that codebase's rule (``rule="numpy"``: ``np.random.RandomState(s)``), so seed s
draws the image its own generate script draws.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np
import torch

from gan_kit.base.errors import GankitError

__all__ = ["MAX_COUNT", "SEED_LIMIT", "MIN_TRUNCATION", "parse_numbers", "seed_latents", "latent_rows",
           "check_truncation", "resample_beyond", "truncated_randn"]

#: The smallest ``--truncation-normal`` threshold: below it the resampling of ``resample_beyond``
#: (a share of about 0.8 * threshold of the draws kept per round) takes too many rounds.
MIN_TRUNCATION = 0.01

#: The most numbers one list may name (a range such as ``0-999999999`` is refused in one line
#: instead of filling the memory).
MAX_COUNT = 1_000_000

#: Seeds are below this: the range of ``torch.Generator.manual_seed`` (64 bits).
SEED_LIMIT = 2 ** 64

_ITEM = re.compile(r"(\d+)(?:-(\d+))?")


def parse_numbers(text: str, option: str = "--seeds", *, limit: int | None = None, example: str = "0-7,42") -> list[int]:
    """``"0-7,42"`` -> ``[0, 1, ..., 7, 42]``: comma-separated non-negative integers and
    inclusive ranges ``a-b`` (a <= b), in the order written, repeats kept. ``limit``: every
    number must be below it; ``example``: the list the fixes suggest. Raises ``GankitError``
    (one line naming ``option``, the text and a fix) for an empty list or item, a reversed range, a negative number, anything not a number,
    a number >= ``limit``, or more than ``MAX_COUNT`` numbers."""
    example = f"e.g. {option} {example}"
    items = [item.strip() for item in text.split(",")]
    if not text.strip():
        raise GankitError(f"{option}: {text!r} names nothing; give numbers and ranges, {example}")
    out: list[int] = []
    for item in items:
        m = _ITEM.fullmatch(item)
        if m is None:
            if not item:
                why = "has an empty item"
            elif item.startswith("-") and item[1:].isdigit():
                why = f"has a negative number {item}"
            else:
                why = f"has {item!r}, which is neither a number nor a range such as 3-5"
            raise GankitError(f"{option}: {text!r} {why}; give non-negative numbers and ranges, {example}")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first:
            raise GankitError(f"{option}: {text!r} has the reversed range {item}; write it from low to high, "
                              f"{last}-{first}")
        if limit is not None and last >= limit:
            raise GankitError(f"{option}: {text!r} has {last}, which is not below {limit}; give numbers from 0 to "
                              f"{limit - 1}")
        if len(out) + last - first + 1 > MAX_COUNT:
            raise GankitError(f"{option}: {text!r} names more than {MAX_COUNT} numbers; give fewer at once")
        out.extend(range(first, last + 1))
    return out


def check_truncation(threshold: float | None, option: str = "--truncation-normal") -> None:
    """``GankitError`` (one line naming ``option``) for a threshold that is not a finite number
    of at least ``MIN_TRUNCATION``; None (no truncation) passes."""
    if threshold is None:
        return
    if not (math.isfinite(threshold) and threshold >= MIN_TRUNCATION):
        raise GankitError(f"{option}: {threshold} is not a truncation threshold; give a number >= {MIN_TRUNCATION} "
                          f"such as 0.5 (z is drawn from the normal truncated to [-t, t]), or leave it out for none")


def resample_beyond(z: torch.Tensor, threshold: float | None, draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """BigGAN's truncation trick (Brock et al. 2019, sec. 3.1): ``z`` with every entry whose
    magnitude is above ``threshold`` replaced by a fresh draw, again and again until none is,
    so the entries follow the standard normal truncated to ``[-threshold, threshold]`` (what
    StudioGAN's ``truncnorm.rvs(-t, t)`` draws). ``draw(k) -> [k]`` gives k new standard normals
    from the caller's generator, so a seed names one truncated z. Entries within the threshold
    keep their values (a large threshold changes nothing). None: ``z`` as it is. Returns a new
    tensor of ``z``'s shape."""
    if threshold is None:
        return z
    z = z.clone()
    flat = z.view(-1)
    while True:
        out = (flat.abs() > threshold).nonzero().flatten()
        if out.numel() == 0:
            return z
        flat[out] = draw(out.numel()).to(flat.dtype)


def truncated_randn(n: int, latent_dim: int, generator: torch.Generator, threshold: float | None) -> torch.Tensor:
    """``torch.randn(n, latent_dim, generator=generator)`` with ``resample_beyond(threshold)``
    from the same generator: the latents of the metrics under ``gankit eval --truncation-normal``."""
    z = torch.randn(n, latent_dim, generator=generator)
    return resample_beyond(z, threshold, lambda k: torch.randn(k, generator=generator))


def seed_latents(seeds: list[int], latent_dim: int, rule: str = "torch",
                 truncation: float | None = None) -> torch.Tensor:
    """``z[len(seeds), latent_dim]`` float32 on the CPU, row i seed ``seeds[i]``'s z whatever
    the other seeds are. ``rule="torch"`` (gankit's own models): ``torch.randn(1, latent_dim,
    generator=torch.Generator().manual_seed(s))``. ``rule="numpy"`` (models imported from
    stylegan2-ada-pytorch, StyleGAN3 or R3GAN): ``np.random.RandomState(s).randn(1,
    latent_dim)``, as their generate.py / gen_images.py draw it, so a seed names the same image
    in gankit as there (RandomState takes seeds below 2**32; ValueError otherwise).
    ``truncation``: each z's entries beyond it redrawn from the seed's own generator after its z
    (``resample_beyond``: BigGAN's truncation trick; ``gankit generate --truncation-normal``)."""
    if not seeds:
        return torch.empty(0, latent_dim)
    if rule == "numpy":
        if any(not 0 <= int(s) < 2 ** 32 for s in seeds):
            raise GankitError(f"seed {max(seeds)}: this model draws z as its own codebase does, with numpy's "
                              f"RandomState, which takes seeds from 0 to {2 ** 32 - 1}; give a smaller seed")
        return torch.cat([_numpy_rows(np.random.RandomState(int(s)), 1, latent_dim, truncation) for s in seeds])
    if rule != "torch":
        raise ValueError(f"seed_latents: rule must be 'torch' or 'numpy', got {rule!r}")
    return torch.cat([truncated_randn(1, latent_dim, torch.Generator().manual_seed(int(s)), truncation) for s in seeds])


def _numpy_rows(rs: np.random.RandomState, num: int, latent_dim: int, truncation: float | None) -> torch.Tensor:
    """``num`` z from ``rs`` (``rs.randn(num, latent_dim)``), truncated from ``rs`` too."""
    z = torch.from_numpy(rs.randn(num, latent_dim)).float()
    return resample_beyond(z, truncation, lambda k: torch.from_numpy(rs.randn(k)).float())


def latent_rows(seed: int, num: int, latent_dim: int, rule: str = "torch",
                truncation: float | None = None) -> torch.Tensor:
    """``z[num, latent_dim]`` float32 on the CPU from one generator seeded ``seed``, drawn a row
    at a time, so row 0 is seed ``seed``'s latent (``seed_latents([seed], latent_dim)``) for
    every ``latent_dim``. (One ``torch.randn(num, latent_dim)`` fills a large tensor 16 numbers
    at a time, so its first row differs from a one-row draw when ``latent_dim`` is not a
    multiple of 16; for multiples of 16 the two are the same numbers.) What ``gankit sample
    --seed`` draws. ``rule="numpy"`` (an imported model's): ``np.random.RandomState(seed).randn(num,
    latent_dim)``, whose row 0 is that seed's z by the same rule (RandomState draws row after
    row). ``truncation``: each row truncated right after it is drawn (torch rule; row 0 is then
    still seed ``seed``'s truncated z), or the whole draw at once (numpy rule)."""
    if rule == "numpy":
        if num <= 0:
            return torch.empty(0, latent_dim)
        seed_latents([seed], latent_dim, "numpy")  # the range check of the rule
        return _numpy_rows(np.random.RandomState(int(seed)), num, latent_dim, truncation)
    gen = torch.Generator().manual_seed(int(seed))
    if num <= 0:
        return torch.empty(0, latent_dim)
    return torch.cat([truncated_randn(1, latent_dim, gen, truncation) for _ in range(num)])
