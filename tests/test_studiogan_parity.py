"""gankit's ``sngan-resnet``, ``sagan`` and ``biggan`` against PyTorch-StudioGAN's code.

``tests/data/studiogan_reference.pt`` holds what StudioGAN's ``resnet.py`` / ``big_resnet.py``
computed for seeded weights (written by ``tests/data/make_studiogan_reference.py``, which runs
StudioGAN; see it for what is recorded). Here gankit's networks take those weights through the
checkpoint reader's renaming (``gan_kit.builtin.importers.studiogan_official``; nothing else) and
must give the same images and logits in training mode (batch statistics, one power iteration of
each spectral norm - and the same ``u``, ``v`` and BN statistics after it) and then in eval mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gan_kit.builtin.importers.studiogan_official import build_architecture, gankit_key, studiogan_options, studiogan_state_dict

REF = torch.load(Path(__file__).parent / "data" / "studiogan_reference.pt", weights_only=True)
CASES = ["sngan", "sagan", "biggan", "resnet_uncond_bn"]
ATOL, RTOL = 1e-5, 1e-6


def networks(case: str):
    """gankit's G and D for a recorded case, holding StudioGAN's weights."""
    ref = REF[case]
    options = studiogan_options(ref["G_state"], ref["D_state"])
    G, D = build_architecture(options).build(options["resolution"], options["channels"])
    G.load_state_dict(studiogan_state_dict(ref["G_state"], "G", options))
    D.load_state_dict(studiogan_state_dict(ref["D_state"], "D", options))
    return G, D, options


def _labels(ref):
    return ref["labels"] if ref["config"]["g_cond_mtd"] != "W/O" else None


def _check_buffers(net, after: dict) -> None:
    state = net.state_dict()
    for name, value in after.items():
        torch.testing.assert_close(state[gankit_key(name)], value, atol=ATOL, rtol=RTOL, msg=name)


@pytest.mark.parametrize("case", CASES)
def test_g_draws_studiogans_images_in_train_then_eval_mode(case):
    ref = REF[case]
    G, _, _ = networks(case)
    with torch.no_grad():
        G.train()
        torch.testing.assert_close(G(ref["z"], _labels(ref)), ref["G_train"], atol=ATOL, rtol=RTOL)
        _check_buffers(G, ref["G_state_after"])
        G.eval()
        torch.testing.assert_close(G(ref["z"], _labels(ref)), ref["G_eval"], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("case", CASES)
def test_d_gives_studiogans_logits_in_train_then_eval_mode(case):
    ref = REF[case]
    _, D, _ = networks(case)
    labels = ref["labels"] if ref["config"]["d_cond_mtd"] == "PD" else None
    with torch.no_grad():
        D.train()
        torch.testing.assert_close(D(ref["x"], labels), ref["D_train"], atol=ATOL, rtol=RTOL)
        _check_buffers(D, ref["D_state_after"])
        D.eval()
        torch.testing.assert_close(D(ref["x"], labels), ref["D_eval"], atol=ATOL, rtol=RTOL)


def test_d_logits_are_the_head_of_the_features():
    """``D.features`` and ``D.head`` split the forward where an auxiliary head would read."""
    ref = REF["biggan"]
    _, D, _ = networks("biggan")
    D.eval()
    with torch.no_grad():
        h = D.features(ref["x"])
        assert h.shape == (4, D.linear.in_features)
        torch.testing.assert_close(D.head(h, ref["labels"]), D(ref["x"], ref["labels"]))


def test_the_recorded_cases_are_the_architectures_studiogan_configs_name():
    """The reader infers each case's architecture and options from the tensors alone."""
    names = {c: studiogan_options(REF[c]["G_state"], REF[c]["D_state"]) for c in CASES}
    assert names["biggan"]["name"] == "biggan" and names["biggan"]["architecture"]["latent_dim"] == 20
    assert names["sagan"]["architecture"]["g_attention"] == [2] and names["sagan"]["architecture"]["d_attention"] == [1]
    assert names["sngan"]["architecture"]["g_spectral_norm"] is False
    assert names["resnet_uncond_bn"]["num_classes"] == 0
    assert names["resnet_uncond_bn"]["architecture"]["d_spectral_norm"] is False
