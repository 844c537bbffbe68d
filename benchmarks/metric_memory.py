"""Peak host-memory growth (resident set) of one fid evaluation against the number of images, on
the CPU with the stub extractor (no weights needed).

    python benchmarks/metric_memory.py 256 1000,10000          # the metric's pipeline: N + N images
                                                               # fed batch by batch (no G)
    python benchmarks/metric_memory.py 32 300,1200 --run       # a whole gankit.evaluate: tiny PGGAN's
                                                               # G_ema and a data set of noise images

Prints, per count, how far the resident set grew above where it stood (sampled every 2 ms) while
the evaluation ran. Streamed, it stays near one batch's worth whatever the count; a metric that
held both sets as float32 would grow by 2 * N * 3 * R * R * 4 bytes (15.7 GB for 10k + 10k at
256 px).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

os.environ.setdefault("GANKIT_CACHE_DIR", tempfile.mkdtemp())

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

from gan_kit import DatasetFactory, ImageBatches, hookimpl  # noqa: E402
from gan_kit.base.allocator import ordinary_allocation  # noqa: E402
from gan_kit.builtin.metrics import feature_extractors as fx  # noqa: E402
from gan_kit.builtin.metrics.inception import FID  # noqa: E402


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_growth(fn):
    start, peak, done = rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.002)

    t = threading.Thread(target=sample)
    t.start()
    t0 = time.time()
    try:
        out = fn()
    finally:
        done.set()
        t.join()
    return max(peak[0], rss()) - start, time.time() - t0, out


_POOL: dict[int, torch.Tensor] = {}


def noise_batches(n: int, res: int, offset: int) -> ImageBatches:
    """Batches of noise images: views into 4 batches drawn once (held before the measurement
    starts), so the time goes to the metric's pipeline rather than to drawing random numbers."""
    if res not in _POOL:
        _POOL[res] = torch.rand(4 * 64, 3, res, res, generator=torch.Generator().manual_seed(0)) * 2 - 1

    def load(i: int) -> torch.Tensor:
        k = min(64, n - i * 64)
        j = (offset + i) % 4
        return _POOL[res][j * 64:j * 64 + k]

    return ImageBatches(n, 64, load, key=("noise", offset, n, res) if offset else None)


def pipeline(res: int, counts: list[int]) -> None:
    fid = FID(FID.Options(feature_extractor="stub", cache=False))
    fid.compute_streamed(noise_batches(64, res, 1), noise_batches(64, res, 0), "cpu")  # warm-up
    fx.clear_caches()
    for n in counts:
        with ordinary_allocation():  # as gan_kit.tools.evaluate.evaluate runs every metric
            grow, secs, out = peak_growth(
                lambda: fid.compute_streamed(noise_batches(n, res, 10**6), noise_batches(n, res, 0), "cpu"))
        fx.clear_caches()
        print(f"{res}px streamed fid, {n} + {n} images: peak RSS growth {grow / 1e6:.1f} MB ({secs:.1f} s)",
              flush=True)


class _Noise(Dataset):
    def __init__(self, size: int, res: int):
        self.size, self.res = size, res

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.rand(3, self.res, self.res, generator=torch.Generator().manual_seed(i)) * 2 - 1


def whole_run(res: int, counts: list[int]) -> None:
    from gan_kit.tools.evaluate import evaluate
    from gan_kit.testing import make_run

    class Factory(DatasetFactory):
        def build(self, resolution):
            return _Noise(max(counts), resolution)

    class Plugin:
        @hookimpl
        def register_datasets(self, register):
            register("noise-images", Factory)

    run = make_run(tempfile.mkdtemp(), plugins=[Plugin()], overrides=[
        "data.name=noise-images", f"data.resolution={res}", "growth={name='static', batch_size=8}",
        "architecture.fmap_max=4", "architecture.fmap_base=16",
        f"metric=[{{name='fid', feature_extractor='stub', num_images={max(counts)}, cache=false}}]"])
    run.set_phase(run.growth.phase_at(0))
    _, metric = run.metrics[0]
    evaluate(run, metric, 64)
    fx.clear_caches()
    for n in counts:
        grow, secs, _ = peak_growth(lambda: evaluate(run, metric, n))
        fx.clear_caches()
        print(f"{res}px gankit.evaluate fid, {n} + {n} images: peak RSS growth {grow / 1e6:.1f} MB ({secs:.1f} s)",
              flush=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    resolution, numbers = int(sys.argv[1]), [int(c) for c in sys.argv[2].split(",")]
    (whole_run if "--run" in sys.argv else pipeline)(resolution, numbers)
