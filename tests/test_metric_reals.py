"""``data.metric_reals``: a limited-data run's metrics measured against the whole data set."""

from __future__ import annotations

import pytest
import torch

from gan_kit.base.errors import GankitError
from gan_kit.tools.evaluate import evaluate
from gan_kit.testing import make_run


def _swd(run):
    run.phase = run.growth.phase_at(0)
    run.set_phase(run.phase)
    metric = next(m for s, m in run.metrics)
    return evaluate(run, metric)["Metrics/swd"]


def test_full_draws_the_metric_reals_from_the_whole_set_and_trains_on_the_subset(tmp_path):
    common = ["data.max_images=36", "metric=[{name='swd', num_images=64}]"]
    sub = make_run(tmp_path / "a", overrides=common)
    full = make_run(tmp_path / "b", overrides=[*common, "data.metric_reals=full"])
    assert len(sub.dataset) == len(sub.metric_dataset) == 36
    assert len(full.dataset) == 36 and len(full.metric_dataset) == 1797
    # Training data identical; the metric's reals: 36 capped images vs 64 of all 1797 digits.
    assert all(torch.equal(sub.dataset[i][0], full.dataset[i][0]) for i in range(36))
    assert sub.real_images(64).shape[0] == 36 and full.real_images(64).shape[0] == 64
    subset = {tuple(full.dataset[i][0].flatten().tolist()) for i in range(36)}
    drawn = [tuple(x.flatten().tolist()) for x in full.real_images(64)]
    # The subset is a choice of its own, not the metrics' first draw: ~62 of 64 lie outside it.
    assert sum(d not in subset for d in drawn) >= 58
    # Same G_ema (same seed, untrained): the figures differ because the reals do.
    a, b = _swd(sub), _swd(full)
    assert a != pytest.approx(b, rel=1e-3)


def test_full_without_a_subset_option_is_one_line(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    from PIL import Image

    for i in range(4):
        Image.new("L", (8, 8), color=i * 40).save(folder / f"{i}.png")
    with pytest.raises(GankitError, match=r"data\.metric_reals: \"full\" needs a data set with a max_images option"):
        make_run(tmp_path / "r", overrides=["data.name=image-folder", f"data.path={folder}", "data.channels=1",
                                            "data.metric_reals=full"])
