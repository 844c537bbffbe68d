"""inception-v3-compat under each resize mode (random weights in torch-fidelity's format): the
default is torch-fidelity's own forward (its TF1-style resize inside: clean-fid's
legacy_tensorflow); clean and legacy_pytorch run the same layers on images resized outside, with
the TF network's (x - 128) / 128, or pytorch-fid's x / 255 * 2 - 1 for legacy_pytorch."""

from __future__ import annotations

import pytest
import torch

from gan_kit.builtin.metrics import feature_extractors as fx

import torch_fidelity.feature_extractor_inceptionv3 as fe  # noqa: E402  (the test extra installs it)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A weights file in torch-fidelity's format with random values (the real one is a download)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(fe.FeatureExtractorInceptionV3, "load_state_dict", lambda self, *a, **k: None)
    mp.setattr(fe, "load_state_dict_from_url", lambda *a, **k: {})
    net = fe.FeatureExtractorInceptionV3("inception-v3-compat", ["2048"])
    mp.undo()
    path = tmp_path_factory.mktemp("inception") / "inception.pth"
    torch.save(net.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def fidelity(weights):
    return fe.FeatureExtractorInceptionV3("inception-v3-compat", ["2048", "logits_unbiased"],
                                          feature_extractor_weights_path=str(weights)).eval()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative distance of two feature sets (random weights give features near 1e-7, so an
    absolute tolerance would pass anything)."""
    return float((a - b).norm() / b.norm())


def _u8(h, w, n=2, seed=0):
    return torch.randint(0, 256, (n, 3, h, w), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def test_the_default_is_torch_fidelitys_own_forward(weights, fidelity):
    """No resize option: legacy_tensorflow, the uint8 images go to torch-fidelity's forward as
    before this option existed (bit for bit)."""
    ex = fx.get_extractor("inception-v3-compat", str(weights), "cpu", "fid")
    assert ex.resize == "legacy_tensorflow"
    u8 = _u8(37, 53)
    ours = ex.extract(u8)
    with torch.no_grad():
        pool, logits = fidelity(u8)
    assert torch.equal(ours["pool"], pool) and torch.equal(ours["logits"], logits)


def test_clean_runs_torch_fidelitys_layers_on_images_resized_outside(weights, fidelity):
    """At 299x299 the clean resize is the identity, and torch-fidelity's own resize too: the
    float path gives its features; on 37x53 images clean's features differ from the default's."""
    ex = fx.get_extractor("inception-v3-compat", str(weights), "cpu", "fid", resize="clean")
    u8 = _u8(299, 299, n=1)
    with torch.no_grad():
        pool, logits = fidelity(u8)
    ours = ex.extract(u8)
    assert rel(ours["pool"], pool) < 1e-5 and rel(ours["logits"], logits) < 1e-5
    small = _u8(37, 53, n=1)
    default = fx.get_extractor("inception-v3-compat", str(weights), "cpu", "fid")
    assert rel(ex.extract(small)["pool"], default.extract(small)["pool"]) > 1e-3
    assert ex.ident != default.ident


def test_legacy_pytorch_normalises_as_pytorch_fid(weights, fidelity, monkeypatch):
    """legacy_pytorch feeds the layers x / 255 * 2 - 1 (clean-fid's legacy_pytorch network,
    pytorch-fid's normalize_input), not the TF network's (x - 128) / 128."""
    ex = fx.get_extractor("inception-v3-compat", str(weights), "cpu", "fid", resize="legacy_pytorch")
    u8 = _u8(299, 299, n=1)
    ours = ex.extract(u8)["pool"]
    # torch-fidelity's forward, its resize and uint8 check switched off, on the pixels that its
    # (x - 128) / 128 maps to x / 255 * 2 - 1
    monkeypatch.setattr(fe, "vassert", lambda *a, **k: None)
    monkeypatch.setattr(fe, "interpolate_bilinear_2d_like_tensorflow1x", lambda x, **k: x)
    with torch.no_grad():
        ref = fidelity((u8.float() / 255 * 2 - 1) * 128 + 128)[0]
    assert rel(ours, ref) < 1e-4
    tf_range = fx.get_extractor("inception-v3-compat", str(weights), "cpu", "fid", resize="clean").extract(u8)["pool"]
    assert rel(ours, tf_range) > 1e-3
