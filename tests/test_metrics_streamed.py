"""The feature metrics read their image sets batch by batch: host memory does not grow with
``num_images``; a figure depends only on G_ema's weights and the metric's seed, for every
architecture, so `gankit eval` gives back what the run logged; and two processes, each with its
share of the images, give the figure one process gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from torch.utils.data import Dataset

from gan_kit import DatasetFactory, hookimpl
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.tools.evaluate import evaluate, evaluate_checkpoint
from gan_kit.testing import make_run, train_steps


#: Every test starts with an empty feature cache of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("metric_cache_dir")


class _Noise(Dataset):
    """``size`` RGB images of noise, each made from its index when read (none kept)."""

    def __init__(self, size: int, resolution: int):
        self.size, self.resolution = size, resolution

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, self.resolution, self.resolution, generator=g) * 2 - 1


class NoiseImages(DatasetFactory):
    def build(self, resolution):
        return _Noise(1200, resolution)


class _Plugin:
    @hookimpl
    def register_datasets(self, register):
        register("noise-images", NoiseImages)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_growth(fn) -> int:
    """Bytes the resident set grew to at most while ``fn()`` ran (sampled every millisecond)."""
    start, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    t = threading.Thread(target=sample)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(peak[0], _rss()) - start


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc (Linux)")
def test_fid_host_memory_does_not_grow_with_the_number_of_images(tmp_path):
    """FID of 300 and of 1200 generated and real 32-px images: 900 more of each set held as
    float32 tensors (and their uint8 copies) would add ~30-50 MB (52 MB measured on the code that
    held them); read batch by batch, the peak does not move."""
    run = make_run(tmp_path, plugins=[_Plugin()], overrides=[
        "data.name=noise-images", "data.resolution=32", "growth={name='static', batch_size=8}",
        "architecture.fmap_max=4", "architecture.fmap_base=16",
        "metric=[{name='fid', feature_extractor='stub', num_images=1200, cache=false}]"])
    run.set_phase(run.growth.phase_at(0))
    _, metric = run.metrics[0]
    evaluate(run, metric, 64)  # warm up: the extractor built, allocator pools settled
    fx.clear_caches()
    small = _peak_rss_growth(lambda: evaluate(run, metric, 300))
    fx.clear_caches()
    large = _peak_rss_growth(lambda: evaluate(run, metric, 1200))
    assert large - small < 15e6, (small, large)


SG2_TINY = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, "
            "channel_max=8, d_mapping_layers=2}", "growth={name='static', batch_size=8}", "loss.name='bce'"]
METRICS = ("metric=[{name='fid', feature_extractor='stub', num_images=48, cache=false}, "
           "{name='kid', feature_extractor='stub', num_images=48, subsets=4, subset_size=16, cache=false}]")


@pytest.mark.parametrize("arch", ["pggan", "stylegan2", "dcgan"])
def test_eval_of_the_final_checkpoint_gives_the_logged_figures(tmp_path, arch):
    """StyleGAN2 draws noise inside G: its images (and figures) once depended on where the
    training RNG stood; now on the weights and the metric's seed only."""
    extra = {"pggan": [], "stylegan2": SG2_TINY,
             "dcgan": ["architecture={name='dcgan', latent_dim=8, ngf=8, ndf=8}", "init.name='normal'",
                       "growth={name='static', batch_size=8}"]}[arch]
    run = make_run(tmp_path, overrides=["run.total_kimg=0.032", METRICS, *extra])
    train_steps(run, 100)
    logged = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()][-1]
    fx.clear_caches()
    torch.manual_seed(1234)  # wherever the RNG stands
    got = evaluate_checkpoint(run.out_dir / "checkpoints" / "latest.pt", metrics=("fid", "kid"))["results"]
    for name, key in (("fid", "Metrics/fid"), ("kid", "Metrics/kid")):
        assert got[name]["trained"][key] == pytest.approx(logged[key], rel=1e-6, abs=1e-9), key


PROBE = textwrap.dedent('''
    """Evaluate a checkpoint's G_ema with fid and kid under torchrun; rank 0 prints the figures."""
    import json
    import sys

    import torch
    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.training import distributed
    from gan_kit.builtin.metrics import feature_extractors as fx
    from gan_kit.tools.evaluate import evaluate
    from gan_kit.base.phase import Phase
    from gan_kit.recipe import load_recipe
    from gan_kit.runs.run import build_run

    torch.set_num_threads(1)
    distributed.init()
    state = ckpt.load(sys.argv[1], map_location="cpu")
    recipe, plugins = load_recipe(sys.argv[1] + "[recipe]", [], text=state["recipe"])
    run = build_run(recipe, plugins)
    run.G_ema.load_state_dict(state["G_ema"])
    run.set_phase(Phase(**state["phase"]))
    out = {}
    for _, metric in run.metrics:
        out.update(evaluate(run, metric))
    seen = fx.get_extractor("stub", None, "cpu", "fid").images_seen
    print("seen", run.rank, seen, flush=True)
    if run.is_main:
        print("figures", json.dumps(out), flush=True)
    run = None
    distributed.shutdown()
''')


def test_two_processes_share_the_images_and_give_one_process_figures(tmp_path):
    """Each of two processes generates and reads half of the 48 + 48 images (batches of 8,
    alternating); rank 0 combines the float64 sums and the gathered features: the same fid and
    kid as one process."""
    run = make_run(tmp_path, overrides=["run.total_kimg=0.016", METRICS.replace("cache=false}", "cache=false, "
                                                                               "batch_size=8}"), *SG2_TINY])
    train_steps(run, 100)
    latest = run.out_dir / "checkpoints" / "latest.pt"
    fx.clear_caches()
    one = evaluate_checkpoint(latest, metrics=("fid", "kid"))["results"]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                          str(probe), str(latest)], capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    figures = json.loads(next(line for line in two.stdout.splitlines() if line.startswith("figures"))[8:])
    seen = sorted(line.split()[1:] for line in two.stdout.splitlines() if line.startswith("seen"))
    assert seen == [["0", "48"], ["1", "48"]]  # 24 generated + 24 real each (fid and kid share the passes)
    assert figures["Metrics/fid"] == pytest.approx(one["fid"]["trained"]["Metrics/fid"], rel=1e-6)
    assert figures["Metrics/kid"] == pytest.approx(one["kid"]["trained"]["Metrics/kid"], rel=1e-6, abs=1e-9)
