"""An error raised in a data-loader worker reaches the user as the same one line as without workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from gan_kit.data import PhaseBatchSampler, iter_batches, make_loader
from gan_kit.engine import Run, train
from gan_kit.errors import GankitError, RecipeError
from gan_kit.recipe import load_recipe

MESSAGE = "data.path: cannot read image /x/img07.png (truncated); remove the file or set on_corrupt = \"skip\""


class FailsAt(Dataset):
    """Images ``[1, 4, 4]``; item ``bad`` raises ``error_type(MESSAGE)`` (module level: workers may
    receive the dataset by pickling)."""

    def __init__(self, bad: int, error_type=GankitError, n: int = 8):
        self.bad, self.error_type, self.n = bad, error_type, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.bad:
            raise self.error_type(MESSAGE)
        return torch.full((1, 4, 4), float(i))


def _first_batches(dataset: Dataset, num_workers: int, count: int = 3) -> list:
    sampler = PhaseBatchSampler(len(dataset), seed=0, start=0, batch_for=lambda position: (4, 1))
    loader = make_loader(dataset, sampler, num_workers=num_workers, pin_memory=False)
    batches = iter(loader)
    return [next(batches) for _ in range(count)]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_worker_error_is_the_same_one_line_as_without_workers(num_workers):
    with pytest.raises(GankitError) as e:
        _first_batches(FailsAt(bad=5), num_workers)
    assert type(e.value) is GankitError and str(e.value) == MESSAGE  # not "Caught GankitError in ..."
    good = _first_batches(FailsAt(bad=-1), num_workers, count=2)
    assert all(b.shape == (4, 1, 4, 4) for b in good)


def recipe_error(message: str) -> RecipeError:
    return RecipeError([message])


def test_a_worker_error_of_a_subclass_with_another_constructor_keeps_its_message():
    # RecipeError takes a list of problems, so RecipeError(message) would not rebuild it: the
    # main process raises a GankitError with the same message instead.
    with pytest.raises(GankitError) as e:
        _first_batches(FailsAt(bad=2, error_type=recipe_error), 1)
    assert str(e.value) == MESSAGE


def test_other_worker_errors_keep_torchs_report():
    # A bug (not a user error) keeps the worker's traceback: torch re-raises it with the origin.
    with pytest.raises(ValueError, match="Caught ValueError in DataLoader worker process 0"):
        _first_batches(FailsAt(bad=5, error_type=ValueError), 1)


def test_iter_batches_passes_plain_batches_through():
    batches = [torch.zeros(2, 1, 4, 4), torch.ones(2, 1, 4, 4)]
    assert list(iter_batches(batches)) == batches


def test_training_with_a_worker_stops_on_a_truncated_file_in_one_line(tmp_path, tiny_recipe_text, write_recipe):
    folder = tmp_path / "imgs"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(folder / f"img{i:02d}.png")
    data = (folder / "img07.png").read_bytes()
    (folder / "img07.png").write_bytes(data[: len(data) // 2])  # the header survives, the pixels do not
    text = tiny_recipe_text.replace(
        '[data]\nname = "digits"\nresolution = 8',
        '[data]\nname = "image-folder"\nresolution = 8\npath = "imgs"\ncache = "none"\non_corrupt = "error"')
    recipe, plugins = load_recipe(write_recipe(text, "folder.toml"), overrides=["run.num_workers=1"])
    run = Run(recipe, plugins)
    with pytest.raises(GankitError) as e:
        train(run)
    msg = str(e.value)
    assert "\n" not in msg and "img07.png" in msg and msg.startswith("data.path: cannot read image")
