"""Growth schedulers: which resolution, fade-in weight alpha, batch size and learning-rate scale
apply after a given number of real images (Karras et al. 2018, sec. 2 and appendix A.1)."""

from __future__ import annotations

import math
from typing import Literal

import attrs

from gan_kit import GrowthScheduler, Phase, hookimpl, option


def _per_res(value, res: int, default=None):
    if isinstance(value, dict):
        return value.get(res, default)
    return value if value is not None else default


class Progressive(GrowthScheduler):
    """PGGAN progressive growing: stabilise at start_resolution, then per doubling fade the new block in (alpha linear in images shown) and stabilise."""

    @attrs.frozen
    class Options:
        start_resolution: int = option(4, help="First resolution trained, in pixels (a power of two >= 4).",
                                       min=4, max=2**16)
        fade_kimg: float | dict[int, float] = option(
            600.0, help="Length of each fade-in in kimg; a table keyed by resolution sets each one.", min=0, max=1e9)
        stable_kimg: float | dict[int, float] = option(
            600.0, help="Length of each stabilisation in kimg (the last resolution stabilises until the end); "
                        "a table keyed by resolution sets each one.", min=0, max=1e9)
        batch_size: int | dict[int, int] = option(
            16, help="Global batch size; a table keyed by resolution gives one per resolution (every one needed).",
            min=1, max=2**16)
        batch_gpu: int | dict[int, int] | None = option(
            None, help="Images per process per round (stylegan2-ada-pytorch's --batch-gpu): each D step's batch "
                       "(batch_size / processes) runs through the networks in rounds of this many images whose "
                       "gradients add up before one optimizer step (gradient accumulation), so a batch too big "
                       "for the accelerator trains as the same batch: the optimizer, EMA and kimg still see "
                       "batch_size. It must divide the per-process batch; minibatch-stddev groups form within a "
                       "round (at most batch_gpu images). None = the whole per-process batch at once; a table keyed by "
                       "resolution gives one per resolution (a missing one = None).", min=1, max=2**16)
        lr_scale: dict[int, float] | None = option(
            None, help="Multiplier of optim.lr per resolution (table keyed by resolution; missing = 1.0).",
            min=0, min_exclusive=True, max=1e6)
        lr_rule: Literal["none", "linear", "sqrt"] = option(
            "none", help='How lr follows the batch size: "none", "linear" (lr * b/b0) or "sqrt" (lr * sqrt(b/b0)); '
                         "b0 = base_batch_size.")
        base_batch_size: int | None = option(
            None, help="Reference batch b0 of lr_rule; None = the batch size at start_resolution.",
            min=1, max=2**16)

    @classmethod
    def problems(cls, o, recipe):
        final = recipe.resolution
        s = o.start_resolution
        if s < 4 or s & (s - 1):
            yield "start_resolution", f"must be a power of two >= 4, got {s}"
            return
        if s > final:
            yield "start_resolution", f"{s} is above the final resolution data.resolution = {final} (lower it)"
            return
        resolutions = _resolutions(s, final)
        # Each number's range is declared on the option and checked at load; what is left here
        # needs the schedule: every resolution it visits has an entry, and no entry is unvisited.
        for key, table in (("fade_kimg", o.fade_kimg), ("stable_kimg", o.stable_kimg),
                           ("batch_size", o.batch_size), ("lr_scale", o.lr_scale),
                           ("batch_gpu", o.batch_gpu)):
            if isinstance(table, dict):
                needed = resolutions[1:] if key == "fade_kimg" else resolutions
                if key not in ("lr_scale", "batch_gpu"):
                    missing = [r for r in needed if r not in table]
                    if missing:
                        yield key, (f"no entry for resolution {', '.join(map(str, missing))} "
                                    f"(the schedule visits {', '.join(map(str, resolutions))})")
                extra = [r for r in table if r not in resolutions]
                if extra:
                    yield key, (f"resolution {', '.join(map(str, extra))} is not in the schedule "
                                f"({', '.join(map(str, resolutions))})")

    @classmethod
    def resolved_options(cls, o, recipe):
        # lr_rule's reference batch b0 as the schedule uses it
        if o.base_batch_size is None:
            return attrs.evolve(o, base_batch_size=int(_per_res(o.batch_size, o.start_resolution)))
        return o

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        o = self.options
        self._resolutions = _resolutions(o.start_resolution, self.context.resolution)
        base = o.base_batch_size or _per_res(o.batch_size, o.start_resolution)
        power = {"none": 0.0, "linear": 1.0, "sqrt": 0.5}[o.lr_rule]
        # Precompute [start, fade_end, end) of every level, in images.
        self._levels = []
        start = 0
        for k, res in enumerate(self._resolutions):
            fade = 0 if k == 0 else int(round(_per_res(o.fade_kimg, res, 0.0) * 1000))
            stable = int(round(_per_res(o.stable_kimg, res, 0.0) * 1000))
            end = math.inf if k == len(self._resolutions) - 1 else start + fade + stable
            batch = int(_per_res(o.batch_size, res))
            lr_scale = float(_per_res(o.lr_scale, res, 1.0)) * (batch / base) ** power
            batch_gpu = _per_res(o.batch_gpu, res)
            self._levels.append((k, res, start, fade, end, batch, lr_scale, batch_gpu))
            if end is not math.inf:
                start = end

    def resolutions(self):
        return list(self._resolutions)

    def phase_at(self, cur_nimg: int) -> Phase:
        for k, res, start, fade, end, batch, lr_scale, batch_gpu in self._levels:
            if cur_nimg < end:
                alpha = 1.0 if fade == 0 else min(max((cur_nimg - start) / fade, 0.0), 1.0)
                return Phase(index=k, resolution=res, alpha=float(alpha), batch_size=batch,
                             lr_scale=lr_scale, start_nimg=start, end_nimg=end, fade_nimg=fade,
                             batch_gpu=batch_gpu)
        raise AssertionError("unreachable: the last level never ends")


def _resolutions(start: int, final: int) -> list[int]:
    out = []
    r = start
    while r <= final:
        out.append(r)
        r *= 2
    return out


class Static(GrowthScheduler):
    """No growth: one phase at the final resolution with alpha 1 (DCGAN-style networks)."""

    @attrs.frozen
    class Options:
        batch_size: int = option(64, help="Global batch size.", min=1, max=2**16)
        batch_gpu: int | None = option(
            None, help="Images per process per round (stylegan2-ada-pytorch's --batch-gpu): each D step's batch "
                       "(batch_size / processes) runs through the networks in rounds of this many images whose "
                       "gradients add up before one optimizer step (gradient accumulation), so a batch too big "
                       "for the accelerator trains as the same batch: the optimizer, EMA and kimg still see "
                       "batch_size. It must divide the per-process batch; minibatch-stddev groups form within a "
                       "round (at most batch_gpu images). None = the whole per-process batch at once.", min=1, max=2**16)

    def phase_at(self, cur_nimg: int) -> Phase:
        return Phase(index=0, resolution=self.context.resolution, alpha=1.0,
                     batch_size=self.options.batch_size, lr_scale=1.0, start_nimg=0, end_nimg=math.inf,
                     batch_gpu=self.options.batch_gpu)


@hookimpl
def register_growth_schedulers(register):
    register("progressive", Progressive)
    register("static", Static)
