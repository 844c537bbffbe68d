"""At most one host-device synchronisation per training iteration, at its boundary: counted on
the CPU with ``gan_kit.base.syncs.SyncCounter`` (``aten::_local_scalar_dense`` behind ``.item()`` /
``float()`` / ``bool()``, ``nonzero``, ``equal``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
``torch.tensor(data, device=...)``) over iterations of the real engine (``gan_kit.runs.session.train``)
for every shipped recipe, ADA, DiffAugment and fp16 (a GradScaler on the CPU, as gankit runs fp16
there). The iterations that end a tick or a phase read the stats, check the weights and write
checkpoints: they are left out of the mean, and the non-finite policy still holds
(tests/test_run_safety.py, tests/test_engine.py)."""

from __future__ import annotations

import pytest

from gan_kit import hookimpl
from gan_kit.tools.census import sync_census
from gan_kit.base.syncs import SyncCounter

TINY = ["metric=[]", "run.tick_kimg=0.032", "run.snapshot_ticks=0", "run.max_minutes=none", "run.sample_grid=4",
        "run.num_workers=0"]
PGGAN = ["growth.batch_size={4 = 8, 8 = 8, 16 = 8}", "growth.fade_kimg=0.032", "growth.stable_kimg=0.032",
         "architecture.fmap_base=64", "architecture.fmap_max=16"]
STYLEGAN2 = ["growth.batch_size=8", "data.resolution=8", "architecture.channel_base=64", "architecture.channel_max=16",
             "architecture.mapping_layers=2"]

CASES = {
    "pggan": ("recipes/pggan.toml", [*PGGAN, "run.precision='fp32'"]),
    "pggan-fp16": ("recipes/pggan.toml", [*PGGAN, "run.precision='fp16'"]),
    "pggan-conditional": ("recipes/pggan-conditional.toml",
                          ["growth.batch_size={4 = 8, 8 = 8, 16 = 8}", "growth.fade_kimg=0.032",
                           "growth.stable_kimg=0.032", "run.precision='fp32'"]),
    "dcgan": ("recipes/dcgan.toml", ["growth.batch_size=8", "data.resolution=16", "architecture.ngf=8", "architecture.ndf=8"]),
    "stylegan2": ("recipes/stylegan2.toml", STYLEGAN2),
    "stylegan2-conditional": ("recipes/stylegan2-conditional.toml", STYLEGAN2),
    "stylegan2-diffaugment": ("recipes/stylegan2.toml", [*STYLEGAN2, "augment.name='diffaugment'"]),
    # lazy R1 and path length under the GradScaler: one read after each iteration with a lazy step
    "stylegan2-fp16": ("recipes/stylegan2.toml", [*STYLEGAN2, "run.precision='fp16'"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_iteration_makes_at_most_one_host_sync(name):
    path, overrides = CASES[name]
    census = sync_census(path, [*TINY, *overrides], steps=9)
    assert len(census.steady) >= 4, census
    assert census.mean <= 1.0, (census.per_iteration, census.boundary, census.by_kind)


class CountAugmentCalls:
    """Counts the calls of the run's ADA pipeline (one host read each is the reference's budget)."""

    calls = 0

    @hookimpl
    def run_started(self, run):
        pipeline = run.augment.pipeline

        def counted(images, p):
            CountAugmentCalls.calls += 1
            return pipeline(images, p)

        run.augment.pipeline = counted


def test_ada_makes_at_most_one_host_sync_per_augmented_call():
    """stylegan2-ada-pytorch's AugmentPipe reads its padding on the host once per call (the pad
    widths must be Python ints); gankit's 'bgc' does no more (it used to also call nonzero and
    build constant tensors from Python lists, each a sync)."""
    CountAugmentCalls.calls = 0
    census = sync_census("recipes/stylegan2.toml", [*TINY, *STYLEGAN2, "augment.name='ada'"], steps=9,
                         extra_plugins=[CountAugmentCalls()])
    calls_per_iteration = CountAugmentCalls.calls / len(census.per_iteration)
    assert calls_per_iteration >= 2  # D's reals and fakes, G's fakes (and the lazy R1's reals)
    assert max(census.steady) <= calls_per_iteration, (census.per_iteration, census.by_kind)


def test_the_counter_sees_each_kind_of_sync():
    """What the census counts: a read of a value, a data-dependent shape, a host copy, and a
    tensor made from Python data on a device."""
    import torch

    x = torch.randn(5)
    with SyncCounter() as c:
        x.sum().item()
        bool(x[0] > 0)
        x.nonzero()
        x.tolist()
        x.cpu()
        torch.tensor([1.0, 2.0], device=x.device)
        y = x * 2 + 1  # no sync: stays on the device
    assert c.total == 6 and y.shape == (5,), c.by_kind


def test_a_fused_step_reads_an_assigned_gradient_of_other_strides_in_its_parameters_layout():
    """A strategy may assign ``.grad`` from ``torch.autograd.grad``, whose strides need not be the
    parameter's; the fused optimizer (the non-finite guard's path) must step as with the same
    gradient laid out as its parameter, which a backward's accumulated ``.grad`` always is."""
    import torch

    from gan_kit.training.step.finite import FiniteGuard

    torch.manual_seed(0)
    grad = torch.randn(5, 3).t()  # [3, 5] with transposed strides
    steps = []
    for layout in (grad, grad.contiguous()):
        p = torch.nn.Parameter(torch.randn(3, 5, generator=torch.Generator().manual_seed(1)))
        opt = torch.optim.Adam([p], lr=0.1, fused=True)
        guard = FiniteGuard(torch.device("cpu"), sticky=False)
        guard.begin()
        for _ in range(3):
            p.grad = layout.clone() if layout.is_contiguous() else torch.randn(5, 3).t().copy_(layout)
            guard.step(opt, "G")
        steps.append(p.detach().clone())
    assert torch.equal(steps[0], steps[1])
