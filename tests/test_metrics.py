"""Metrics: the PGGAN paper's multi-scale SWD (appendix D) and fid / kid through torch-fidelity."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from gan_kit.builtin import metrics as M
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.inception import FID, KID
from gan_kit.builtin.data.datasets import Digits
from gan_kit.runs.run import build_run
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.base.phase import Phase
from gan_kit.recipe import load_recipe


@pytest.fixture
def no_weights(tmp_path, monkeypatch):
    """An empty torch hub cache: no Inception weights anywhere."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    return tmp_path / "torch-home" / "hub" / "checkpoints" / fx.INCEPTION_FILE


def digits(resolution: int) -> torch.Tensor:
    x = Digits().build(resolution).images
    return x[torch.randperm(len(x), generator=torch.Generator().manual_seed(3))]


# -------------------------------------------------------------------------------------- swd --


def test_swd_is_repeatable_for_fixed_inputs_and_seed():
    x = digits(32)
    a, b = x[:64], x[64:128]
    first, again = M.swd(a, b, seed=5), M.swd(a.clone(), b.clone(), seed=5)
    assert set(first) == {"32", "16", "avg"}
    for k in first:
        assert abs(first[k] - again[k]) <= 1e-6
    other = M.swd(a, b, seed=6)
    assert other["avg"] != first["avg"]
    assert abs(other["avg"] - first["avg"]) < 0.5 * first["avg"]  # another draw of the same estimate


def test_swd_ranks_real_halves_below_untrained_g_and_noise(tiny_recipe_text, write_recipe):
    """SWD(real A, real B) < SWD(real, untrained G) and < SWD(real, uniform noise), at 16px."""
    n = 256
    x = digits(16)
    real_a, real_b = x[:n], x[n:2 * n]
    text = tiny_recipe_text.replace("resolution = 8", "resolution = 16")
    recipe, plugins = load_recipe(write_recipe(text, "r16.toml"))
    run = build_run(recipe, plugins)
    final = Phase(index=2, resolution=16, alpha=1.0, batch_size=8)
    fake = run.generate(torch.randn(n, run.latent_dim, generator=torch.Generator().manual_seed(1)), phase=final)
    noise = torch.rand(n, 1, 16, 16, generator=torch.Generator().manual_seed(2)) * 2 - 1
    real_real = M.swd(real_a, real_b)["avg"]
    untrained = M.swd(fake, real_b)["avg"]
    uniform = M.swd(noise, real_b)["avg"]
    assert real_real < untrained and real_real < uniform
    assert real_real < 0.5 * min(untrained, uniform)


def test_laplacian_pyramid_matches_the_reference_filter_and_reconstructs():
    from scipy import ndimage

    x = torch.rand(3, 2, 32, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # The official code: scipy.ndimage.convolve with the 5x5 binomial kernel, mode="mirror".
    k = np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256.0
    ref = ndimage.convolve(x.numpy(), k[None, None], mode="mirror")[:, :, ::2, ::2]
    assert np.allclose(M.pyr_down(x).numpy(), ref, atol=1e-12)
    levels = M.laplacian_pyramid(x, min_resolution=8)
    assert [lv.shape[-1] for lv in levels] == [32, 16, 8]
    rebuilt = levels[-1]
    for band in reversed(levels[:-1]):
        rebuilt = band + M.pyr_up(rebuilt)
    assert torch.allclose(rebuilt, x, atol=1e-10)


def test_descriptors_are_normalised_per_channel_and_swd_ignores_affine_changes():
    g = torch.Generator().manual_seed(0)
    level = torch.randn(16, 3, 16, 16, generator=g) * torch.tensor([1.0, 5.0, 0.1]).view(1, 3, 1, 1) + 3.0
    desc = M.patches(level, 32, 7, torch.Generator().manual_seed(1))
    assert desc.shape == (16 * 32, 3, 7, 7)
    flat = M.normalize_descriptors(desc).reshape(-1, 3, 49)
    assert torch.allclose(flat.mean(dim=(0, 2)), torch.zeros(3), atol=1e-5)
    assert torch.allclose(flat.std(dim=(0, 2), unbiased=False), torch.ones(3), atol=1e-5)
    x = digits(16)
    a, b = x[:128], x[128:256]
    assert abs(M.swd(a * 3.0 + 0.5, b)["avg"] - M.swd(a, b)["avg"]) < 1e-3
    assert M.swd(a, a)["avg"] < M.swd(a, b)["avg"]
    d = torch.randn(500, 49, generator=g)
    assert M.sliced_wasserstein(d, d.clone(), 128, 4, torch.Generator().manual_seed(0)) == 0.0
    opts = M.SWD.Options()
    assert opts.directions * opts.repeats == 512 and opts.patches_per_image == 128  # the paper's figures


# ---------------------------------------------------------------------------------- fid / kid --
# (the feature-space metrics' values, caches and reports: tests/test_feature_metrics.py)


@pytest.mark.parametrize("cls", [FID, KID])
def test_fid_and_kid_without_weights_fail_with_one_clear_line(no_weights, cls):
    with pytest.raises(GankitError) as e:
        cls()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{cls.metric_name} needs ")
    assert str(no_weights) in msg and "never downloads" in msg and fx.INCEPTION_URL in msg
    assert not no_weights.exists()  # nothing was fetched


def test_fid_without_the_package_names_the_extra(monkeypatch, tmp_path):
    weights = tmp_path / "inception.pth"
    weights.write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)
    with pytest.raises(GankitError) as e:
        FID(FID.Options(weights=str(weights)))
    msg = str(e.value)
    assert "\n" not in msg and "torch-fidelity" in msg and "pip install 'gankit[fid]'" in msg
    assert "weights" not in msg  # the given weights file exists: only the package is missing


def test_fid_in_a_recipe_is_a_recipe_problem_at_load(no_weights, tiny_recipe_text, write_recipe):
    path = write_recipe(tiny_recipe_text + '\n[[metric]]\nname = "fid"\n')
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert len(e.value.problems) == 1
    assert e.value.problems[0].startswith(f"{path}: metric[0].name: fid needs ")


def _random_inception_weights(path, monkeypatch):
    """A weights file in torch-fidelity's format with random values (the real one is a download)."""
    import torch_fidelity.feature_extractor_inceptionv3 as fe

    with monkeypatch.context() as m:
        m.setattr(fe.FeatureExtractorInceptionV3, "load_state_dict", lambda self, *a, **k: None)
        m.setattr(fe, "load_state_dict_from_url", lambda *a, **k: {})
        net = fe.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in net.state_dict().items()}, path)


def test_a_local_inception_weights_file_loads_once_per_process(tmp_path, monkeypatch):

    weights = tmp_path / "inception.pth"
    _random_inception_weights(weights, monkeypatch)
    fid = FID(FID.Options(weights=str(weights), num_images=64))
    ex = fid.extractor("cpu")
    assert ex.net.net.fc.weight.shape == (1008, 2048)  # the file loads, nothing is downloaded
    assert KID(KID.Options(weights=str(weights))).extractor("cpu") is ex  # one per process
    weights.write_bytes(b"not a state dict")
    fx.clear_caches()
    with pytest.raises(GankitError, match=r"fid: cannot load the inception-v3-compat weights .*inception.pth"):
        fid.extractor("cpu")
    fx.clear_caches()
