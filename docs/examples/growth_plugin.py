"""Example gankit plugin: a growth scheduler (kind ``growth``, recipe ``[growth]``).

``two-stage``: train at half the final resolution for ``low_kimg``, then grow once to the final
resolution, fading the new block in over ``fade_kimg`` as progressive growing does (Karras et al.
2018, "Progressive Growing of GANs", sec. 2 and fig. 2). Needs a growable architecture (one that
mixes in ``gan_kit.Growable``, such as ``pggan``).

``phase_at`` is a pure function of the number of real images shown, so a resumed run needs
nothing but that number.

Use it::

    plugins = ["growth_plugin.py"]
    [growth]
    name = "two-stage"
    low_kimg = 100
    fade_kimg = 100
    batch_size = 32
"""

from __future__ import annotations

import math

import attrs

from gan_kit import GrowthScheduler, Phase, hookimpl, option


def _positive(v):
    return None if v > 0 else f"must be > 0, got {v}"


class TwoStage(GrowthScheduler):
    """Phase 0 at ``resolution / 2`` until ``low_kimg``; phase 1 at ``resolution``, alpha rising
    linearly from 0 to 1 over ``fade_kimg`` (then 1 forever). Batch size and learning rate fixed."""

    @attrs.frozen
    class Options:
        low_kimg: float = option(100.0, help="Thousands of real images shown at half resolution.", validator=_positive)
        fade_kimg: float = option(100.0, help="Thousands of real images over which the full-resolution block fades in.",
                                  validator=_positive)
        batch_size: int = option(32, help="Global batch size (all processes together).", validator=_positive)

    def resolutions(self) -> list[int]:
        r = self.context.resolution
        return [r // 2, r]

    def phase_at(self, cur_nimg: int) -> Phase:
        low, r = self.resolutions()
        low_nimg = int(self.options.low_kimg * 1000)
        fade_nimg = int(self.options.fade_kimg * 1000)
        if cur_nimg < low_nimg:
            return Phase(index=0, resolution=low, alpha=1.0, batch_size=self.options.batch_size,
                         start_nimg=0, end_nimg=low_nimg)
        # alpha = images shown in the fade / fade length, clamped to [0, 1] (PGGAN sec. 2).
        alpha = min(1.0, (cur_nimg - low_nimg) / fade_nimg)
        return Phase(index=1, resolution=r, alpha=alpha, batch_size=self.options.batch_size,
                     start_nimg=low_nimg, end_nimg=math.inf, fade_nimg=fade_nimg)


@hookimpl
def register_growth_schedulers(register):
    register("two-stage", TwoStage)
