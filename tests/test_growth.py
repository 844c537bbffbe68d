"""Growth schedules: alpha, phases, per-resolution batch sizes and learning rates."""

from __future__ import annotations

import math

import pytest

from gan_kit.builtin.architectures.growth import Progressive, Static
from gan_kit.plugin_api.components import BuildContext


def make(final=16, **kw):
    return Progressive(Progressive.Options(**kw), BuildContext(resolution=final))


def test_phases_and_alpha_linear_within_fade():
    g = make(16, start_resolution=4, fade_kimg=1.0, stable_kimg=2.0, batch_size=8)
    # 4px: [0, 2000) stable; 8px: fade [2000, 3000), stable [3000, 5000); 16px: fade [5000, 6000) then stable.
    assert g.phase_at(0).resolution == 4 and g.phase_at(0).alpha == 1.0
    assert g.phase_at(1999).resolution == 4
    p = g.phase_at(2000)
    assert (p.index, p.resolution, p.alpha) == (1, 8, 0.0)
    for n in (2000, 2250, 2500, 2999):
        assert g.phase_at(n).alpha == pytest.approx((n - 2000) / 1000, abs=1e-12)
    assert g.phase_at(3000).alpha == 1.0 and g.phase_at(4999).alpha == 1.0
    assert g.phase_at(5000).resolution == 16 and g.phase_at(5000).alpha == 0.0
    assert g.phase_at(5500).alpha == pytest.approx(0.5)
    last = g.phase_at(10**9)
    assert (last.resolution, last.alpha, last.end_nimg) == (16, 1.0, math.inf)


def test_alpha_is_monotonic_and_pure():
    g = make(32, start_resolution=4, fade_kimg={8: 0.3, 16: 0.5, 32: 0.7}, stable_kimg=0.4, batch_size=4)
    prev = None
    for n in range(0, 5000, 7):
        p = g.phase_at(n)
        assert g.phase_at(n) == p  # a pure function of the image count
        if prev is not None and p.index == prev.index:
            assert p.alpha >= prev.alpha
        prev = p
    # per-resolution fade lengths: the 32px fade is 700 images long
    start32 = next(n for n in range(0, 10000) if g.phase_at(n).resolution == 32)
    assert g.phase_at(start32 + 350).alpha == pytest.approx(0.5)


def test_per_resolution_batch_size_and_lr_rules():
    kw = dict(start_resolution=4, fade_kimg=0.1, stable_kimg=0.1, batch_size={4: 64, 8: 32, 16: 16},
              lr_scale={8: 0.5})
    none = make(16, **kw)
    linear = make(16, lr_rule="linear", **kw)
    sqrt = make(16, lr_rule="sqrt", **kw)
    at = {4: 0, 8: 100, 16: 300}
    for res, n in at.items():
        assert none.phase_at(n).resolution == res
    assert [none.phase_at(n).batch_size for n in at.values()] == [64, 32, 16]
    assert [none.phase_at(n).lr_scale for n in at.values()] == [1.0, 0.5, 1.0]
    assert [linear.phase_at(n).lr_scale for n in at.values()] == pytest.approx([1.0, 0.5 * 0.5, 0.25])
    assert [sqrt.phase_at(n).lr_scale for n in at.values()] == pytest.approx(
        [1.0, 0.5 * math.sqrt(0.5), math.sqrt(0.25)])


def test_static_scheduler_is_one_phase():
    s = Static(Static.Options(batch_size=12), BuildContext(resolution=32))
    for n in (0, 10, 10**7):
        p = s.phase_at(n)
        assert (p.index, p.resolution, p.alpha, p.batch_size) == (0, 32, 1.0, 12)
