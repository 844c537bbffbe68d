"""Spectral normalisation selectable for D and G: normalised weights have largest
singular value ~1, eval-mode sampling is finite, exact resume keeps the power-iteration vectors,
and equalized lr is refused."""

from __future__ import annotations

import pytest
import torch

from gan_kit import RecipeError, weight_layers
from gan_kit.runs.session import train
from gan_kit.testing import make_run

SN = ["architecture.spectral_norm=both", "init.name=normal", "init.std=0.2"]


def sigma(layer) -> float:
    w = layer.weight  # the normalised weight (parametrization)
    return torch.linalg.matrix_norm(w.detach().flatten(1), ord=2).item()


def test_normalised_weights_have_unit_spectral_norm_after_training_steps(tmp_path):
    run = make_run(tmp_path, overrides=SN)
    raw = [torch.linalg.matrix_norm(l.parametrizations.weight.original.detach().flatten(1), ord=2).item()
           for l in weight_layers(run.D)]
    assert max(abs(r - 1) for r in raw) > 0.2  # the stored weights themselves are far from 1
    train(run, max_steps=6)
    for net in (run.D, run.G):
        run.D.train()
        for layer in weight_layers(net):
            assert sigma(layer) == pytest.approx(1.0, rel=0.05), layer


def test_eval_mode_samples_of_a_run_one_step_old_are_finite_and_not_saturated(tmp_path):
    run = make_run(tmp_path, overrides=SN)
    train(run, max_steps=1)
    images = run.generate(torch.randn(16, run.latent_dim))
    assert torch.isfinite(images).all()
    assert images.abs().mean() < 0.99 and images.std() > 1e-3


def test_resume_with_spectral_norm_is_bit_identical(tmp_path):
    over = [*SN, "run.total_kimg=0.048"]
    straight = make_run(tmp_path / "a", overrides=over)
    train(straight)
    first = make_run(tmp_path / "b", overrides=[*SN, "run.total_kimg=0.024"])
    train(first)
    resumed = make_run(tmp_path / "b", overrides=over)
    train(resumed, resume=True)
    for name in ("G", "D", "G_ema"):
        a, b = getattr(straight, name).state_dict(), getattr(resumed, name).state_dict()
        assert any(k.endswith("_u") for k in a)  # the power-iteration vectors are in the state
        assert [k for k in a if not torch.equal(a[k], b[k])] == [], name


def test_spectral_norm_with_equalized_lr_is_refused_in_one_line(tmp_path):
    with pytest.raises(RecipeError) as e:
        make_run(tmp_path, overrides=["architecture.spectral_norm=D"])
    (line,) = e.value.problems
    assert "architecture.spectral_norm: 'D' with init 'equalized-lr' is meaningless" in line


def test_sampling_a_checkpoint_of_a_spectrally_normalised_g(tmp_path):
    from gan_kit.runs.checkpoint import load_generator

    run = make_run(tmp_path, overrides=[*SN, "run.total_kimg=0.016"])
    train(run)
    G, phase, recipe, arch = load_generator(tmp_path / "run" / "checkpoints" / "latest.pt")
    z = torch.randn(4, arch.latent_dim)
    with torch.no_grad():
        torch.testing.assert_close(G(z), run.G_ema.eval()(z))
