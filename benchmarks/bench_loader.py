"""Real images/s of gankit's training loader against stylegan2-ada-pytorch's, on one zip at 256 px
(docs/performance.md, "Data loader").

    python benchmarks/bench_loader.py --sg2ada PATH [--zip FILE] [--images 300] [--workers 0 1 2 3 4]
                                      [--seconds 2] [--batch 32]

``PATH`` is a checkout of github.com/NVlabs/stylegan2-ada-pytorch (its ``training/``,
``torch_utils/`` and ``dnnlib/``; imported from there, not shipped with gankit). ``--zip`` is
made when missing: ``--images`` synthetic 256x256 RGB PNGs (smooth colour fields with noise, so
they compress and decode like photos more than pure noise does) in dataset_tool.py's layout
(``00000/img00000000.png``, stored members, ``dataset.json`` with ``{"labels": null}``).

Both loaders stream the zip (decode per item in the loader's workers, nothing cached):
stylegan2-ada-pytorch as its training loop has it (``ImageFolderDataset`` + ``InfiniteSampler`` +
``torch.utils.data.DataLoader``, pinned memory on CUDA, prefetch 2, uint8 batches), gankit as
``gankit run`` has it (``image-folder`` with ``cache = "none"``, ``PhaseBatchSampler``,
``make_loader(uint8=True)``). Each batch is also made float in [-1, 1] the way each training loop
does (both after the copy to the device; here the CPU). For each worker count the two loaders
are timed back to back in this one process (warm-up batches first, then ``--seconds`` each), so
a change in the machine's load hits both (which one goes first alternates); the ratio is gankit / stylegan2-ada-pytorch. The load
average (``/proc/loadavg``) is printed with each row.
"""

from __future__ import annotations

import argparse
import io
import warnings
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import torch


def make_zip(path: Path, n: int, side: int = 256, seed: int = 0) -> None:
    """``n`` synthetic ``side`` px RGB PNGs in dataset_tool.py's zip layout."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for i in range(n):
            a, b, c = rng.uniform(0, 6.3, 3)
            field = np.stack([np.sin(a * 3 * xx + b * 2 * yy + c + k) for k in range(3)], -1) * 90 + 128
            img = np.clip(field + rng.normal(0, 12, field.shape), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="png", compress_level=0, optimize=False)  # as dataset_tool
            zf.writestr(f"{i // 1000:05d}/img{i:08d}.png", buf.getvalue())
        zf.writestr("dataset.json", json.dumps({"labels": None}))


def sg2ada_batches(sg2ada: Path, zip_path: Path, workers: int, batch: int):
    """stylegan2-ada-pytorch's loader as training_loop.py builds it (train.py's data_loader_kwargs)."""
    sys.path.insert(0, str(sg2ada))
    from torch_utils.misc import InfiniteSampler
    from training.dataset import ImageFolderDataset

    ds = ImageFolderDataset(path=str(zip_path), use_labels=False, max_size=None, xflip=False)
    # InfiniteSampler.__init__ calls Sampler.__init__(dataset), which torch 2.6 no longer takes:
    # set its attributes as its __init__ does (defaults), its __iter__ is used as it is.
    sampler = InfiniteSampler.__new__(InfiniteSampler)
    sampler.dataset, sampler.rank, sampler.num_replicas, sampler.shuffle, sampler.seed, sampler.window_size = (
        ds, 0, 1, True, 0, 0.5)
    # Its constructor opened the archive (to read image 0's shape); forked workers would share that
    # handle's file offset and garble each other's reads (Bad CRC-32 with 2 or more workers, seen
    # here). Its own close() makes each worker open the archive for itself.
    ds.close()
    kwargs = dict(prefetch_factor=2) if workers else {}
    loader = torch.utils.data.DataLoader(dataset=ds, sampler=sampler, batch_size=batch,
                                         num_workers=workers, pin_memory=torch.cuda.is_available(), **kwargs)
    for images, _labels in loader:
        yield images.to(torch.float32) / 127.5 - 1  # training_loop.py, after .to(device)


def gankit_batches(zip_path: Path, workers: int, batch: int):
    """gankit's training loader on the same zip, streamed (cache = "none")."""
    from gan_kit.builtin.data.datasets import ImageFolder
    from gan_kit.training.data import PhaseBatchSampler, make_loader, to_float_images

    ds = ImageFolder(ImageFolder.Options(path=str(zip_path), cache="none", labels="none")).build(256)
    sampler = PhaseBatchSampler(len(ds), seed=0, start=0, batch_for=lambda position: (batch, 1))
    loader = make_loader(ds, sampler, num_workers=workers, pin_memory=torch.cuda.is_available(), uint8=True)
    try:
        for images in loader:
            yield to_float_images(images)  # split_reals, after .to(device)
    finally:
        loader.close()


def rate(batches, seconds: float, warmup: int) -> float:
    """Images/s over ``seconds`` after ``warmup`` batches (worker start-up and first fills)."""
    for _ in range(warmup):
        next(batches)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        n += next(batches).shape[0]
    elapsed = time.perf_counter() - start
    batches.close()
    return n / elapsed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sg2ada", type=Path, required=True, help="checkout of NVlabs/stylegan2-ada-pytorch")
    p.add_argument("--zip", type=Path, default=Path("/tmp/gankit-bench-loader/synthetic256.zip"))
    p.add_argument("--images", type=int, default=300)
    p.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores, on purpose
    if not args.zip.is_file():
        make_zip(args.zip, args.images)
    print(f"zip {args.zip} ({args.zip.stat().st_size / 1e6:.0f} MB, 256 px RGB PNG), batch {args.batch}, "
          f"{args.seconds:g} s per cell, torch {torch.__version__}")
    print("| workers | gankit img/s | stylegan2-ada-pytorch img/s | ratio | load avg |")
    print("|---|---|---|---|---|")
    for w in args.workers:
        warm = 2 * max(1, w)
        if w % 2:  # alternate which goes first, so a trend in the load favours neither
            theirs = rate(sg2ada_batches(args.sg2ada, args.zip, w, args.batch), args.seconds, warm)
            ours = rate(gankit_batches(args.zip, w, args.batch), args.seconds, warm)
        else:
            ours = rate(gankit_batches(args.zip, w, args.batch), args.seconds, warm)
            theirs = rate(sg2ada_batches(args.sg2ada, args.zip, w, args.batch), args.seconds, warm)
        load = Path("/proc/loadavg").read_text().split()[0]
        print(f"| {w} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f} | {load} |", flush=True)


if __name__ == "__main__":
    main()
