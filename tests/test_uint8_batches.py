"""Real batches leave the loader as uint8 and become float in [-1, 1] on the training device: the
same values as the datasets' float items, so runs are unchanged; worker counts by device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from gan_kit.training.data import (PhaseBatchSampler, UInt8Images, XFlip, auto_num_workers, has_uint8_batches, make_loader,
                          to_float_images)
from gan_kit.training.data.datasets import TensorImages
from gan_kit.runs.engine import real_loader, split_reals  # real_loader: what train() iterates
from gan_kit.runs.run import build_run
from gan_kit.recipe import load_recipe


def _folder(path, n: int = 12, size: int = 8):
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path / f"{i:02d}.png")
    return path


def _folder_recipe(tiny_recipe_text: str, folder, extra: str = "") -> str:
    return tiny_recipe_text.replace('[data]\nname = "digits"\nresolution = 8',
                                    f'[data]\nname = "image-folder"\nresolution = 8\npath = "{folder.as_posix()}"\n'
                                    f"{extra}")


@pytest.mark.parametrize("cache", ["memory", "none"])
@pytest.mark.parametrize("xflip", [False, True])
def test_uint8_items_are_the_float_items_before_conversion(tmp_path, tiny_recipe_text, write_recipe, cache, xflip):
    _folder(tmp_path / "imgs")
    text = _folder_recipe(tiny_recipe_text, tmp_path / "imgs", f'cache = "{cache}"\nxflip = {str(xflip).lower()}')
    recipe, plugins = load_recipe(write_recipe(text))
    ds = build_run(recipe, plugins).dataset
    assert has_uint8_batches(ds)
    idx = [3, 0, 11, 5] + ([20, 13] if xflip else [])
    raw = ds.uint8_items(idx)
    assert raw.dtype == torch.uint8 and raw.shape == (len(idx), 3, 8, 8)
    floats = ds.__getitems__(idx) if hasattr(ds, "__getitems__") else torch.stack([ds[i] for i in idx])
    assert torch.equal(to_float_images(raw), floats)  # bit for bit: training sees the same numbers


def test_float_sets_keep_their_float_batches():
    floats = TensorImages(torch.rand(6, 1, 4, 4) * 2 - 1)
    assert not has_uint8_batches(floats) and not has_uint8_batches(XFlip(floats))
    assert has_uint8_batches(XFlip(UInt8Images(torch.zeros(6, 1, 4, 4, dtype=torch.uint8))))
    sampler = PhaseBatchSampler(6, seed=0, start=0, batch_for=lambda position: (3, 1))
    batch = next(iter(make_loader(floats, sampler, num_workers=0, pin_memory=False, uint8=True)))
    assert batch.dtype == torch.float32 and to_float_images(batch) is batch


@pytest.mark.parametrize("num_workers", [0, 1])
def test_the_loader_sends_uint8_batches_in_the_same_order(num_workers):
    images = torch.randint(0, 256, (10, 3, 4, 4), dtype=torch.uint8)
    ds = UInt8Images(images, torch.arange(10) % 3, num_classes=3)

    def batches(uint8: bool):
        sampler = PhaseBatchSampler(10, seed=7, start=3, batch_for=lambda position: (4, 1))
        loader = make_loader(ds, sampler, num_workers=num_workers, pin_memory=False, with_labels=True, uint8=uint8)
        it = iter(loader)
        out = [next(it) for _ in range(4)]
        loader.close()
        return out

    for (raw, raw_labels), (floats, labels) in zip(batches(True), batches(False)):
        assert raw.dtype == torch.uint8 and torch.equal(raw_labels, labels)
        assert torch.equal(to_float_images(raw), floats)


def test_the_training_loader_gives_uint8_and_split_reals_converts_on_the_device(tmp_path, tiny_recipe_text,
                                                                                 write_recipe):
    _folder(tmp_path / "imgs")
    recipe, plugins = load_recipe(write_recipe(_folder_recipe(tiny_recipe_text, tmp_path / "imgs")))
    run = build_run(recipe, plugins)
    loader = real_loader(run)
    batch = next(iter(loader))
    loader.close()
    assert batch.dtype == torch.uint8  # a quarter of float32's bytes through the queues and the copy
    phase = run.growth.phase_at(0)
    (reals,) = split_reals(run, phase, batch)
    expected = torch.nn.functional.avg_pool2d(batch.float() / 127.5 - 1, 8 // phase.resolution)
    assert reals.dtype == torch.float32 and torch.allclose(reals, expected, atol=1e-6)
    # The conversion runs where the batch is: on the meta device no data exists, only the graph.
    on_meta = to_float_images(batch.to("meta"))
    assert on_meta.device.type == "meta" and on_meta.dtype == torch.float32


def test_num_workers_auto_is_none_on_the_cpu_or_in_memory_and_the_free_cores_on_cuda(tiny_recipe):
    recipe, _ = load_recipe(tiny_recipe)
    assert recipe.run.num_workers == "auto"
    assert auto_num_workers("cpu", cpus=64) == 0
    assert auto_num_workers("cuda", cpus=16) == 8
    assert auto_num_workers("cuda", cpus=16, local_world_size=8) == 1
    assert auto_num_workers("cuda", cpus=6, local_world_size=2) == 2
    assert auto_num_workers("cuda", cpus=1) == 1
    # Data held in memory needs no worker; data decoded per item (and a plugin's, which does not
    # say) gets them.
    in_memory = UInt8Images(torch.zeros(4, 1, 4, 4, dtype=torch.uint8))
    assert auto_num_workers("cuda", cpus=16, dataset=in_memory) == 0
    assert auto_num_workers("cuda", cpus=16, dataset=XFlip(in_memory)) == 0
    assert auto_num_workers("cuda", cpus=16, dataset=TensorImages(torch.zeros(4, 1, 4, 4))) == 0
    from gan_kit.training.data import FileImages

    assert auto_num_workers("cuda", cpus=16, dataset=XFlip(FileImages([], 8, 3))) == 8
    assert auto_num_workers("cuda", cpus=16, dataset=torch.utils.data.TensorDataset(torch.zeros(4))) == 8
    assert auto_num_workers("cpu", cpus=16, dataset=FileImages([], 8, 3)) == 0


def test_a_set_over_the_memory_budget_streams_from_the_zip_in_workers(tmp_path, tiny_recipe_text, write_recipe,
                                                                      monkeypatch):
    import zipfile

    from gan_kit.builtin.data import file_sets
    from gan_kit.builtin.data.archive import ZipImages

    folder = _folder(tmp_path / "imgs", n=10)
    with zipfile.ZipFile(tmp_path / "set.zip", "w") as zf:
        for p in sorted(folder.iterdir()):
            zf.write(p, f"00000/{p.name}")
    recipe, plugins = load_recipe(write_recipe(_folder_recipe(tiny_recipe_text, tmp_path / "set.zip")))
    in_memory = build_run(recipe, plugins).dataset
    assert isinstance(in_memory, UInt8Images)  # 10 x 3 x 8 x 8 bytes fit cache = "auto"'s budget
    monkeypatch.setattr(file_sets, "AUTO_CACHE_BYTES", 10 * 3 * 8 * 8 - 1)  # one byte short
    streamed = build_run(recipe, plugins).dataset
    assert isinstance(streamed, ZipImages) and not hasattr(streamed, "images")  # nothing decoded up front

    def first_batches(ds, workers: int):
        sampler = PhaseBatchSampler(len(ds), seed=3, start=0, batch_for=lambda position: (4, 1))
        loader = make_loader(ds, sampler, num_workers=workers, pin_memory=False, uint8=True)
        it = iter(loader)
        out = [next(it) for _ in range(3)]
        loader.close()
        return out

    for a, b in zip(first_batches(in_memory, 0), first_batches(streamed, 2)):
        assert a.dtype == b.dtype == torch.uint8 and torch.equal(a, b)
