"""``gankit export`` of a stylegan3 G: the output transform is an input of the exported model
(``transform[3, 3]``, last), so the TorchScript file animates as gankit's G under
``set_output_transform``; the ONNX file runs in onnxruntime to the same images."""

from __future__ import annotations

import json

import pytest
import torch

from gan_kit.builtin.architectures.stylegan3 import user_transform
from gan_kit.recipe import load_recipe
from gan_kit.runs.checkpoint import load_generator
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.tools.export import export_model
from test_stylegan3 import sg3_recipe


def trained(tmp_path, text, config="t", overrides=()):
    recipe, plugins = load_recipe(sg3_recipe(tmp_path, text, config), list(overrides))
    run = build_run(recipe, plugins)
    train(run, max_steps=2)
    return run.save_checkpoint("latest")


@pytest.mark.parametrize("config", ["t", "r-conditional"])
def test_torchscript_takes_the_transform_as_gankits_g_under_set_output_transform(tmp_path, tiny_recipe_text, config):
    """The exported TorchScript model's ``model(z, transform)`` (``model(z, labels, transform)``
    for a conditional G) equals G_ema after ``set_output_transform(translate, rotate)`` with
    ``transform = user_transform(translate, rotate)`` (to 1e-4, on a batch size the trace never
    saw); the identity gives the untransformed images, and a transform changes them.
    config.json lists the input, last."""
    conditional = config.endswith("conditional")
    checkpoint = trained(tmp_path, tiny_recipe_text, config[0], ["architecture.conditional=true"] if conditional else [])
    config = export_model(checkpoint, tmp_path / "export", formats=("torchscript",))
    names = [i["name"] for i in config["inputs"]]
    assert names == (["z", "labels", "transform"] if conditional else ["z", "transform"])
    assert json.loads((tmp_path / "export" / "config.json").read_text())["inputs"][-1]["shape"] == [3, 3]
    card = (tmp_path / "export" / "README.md").read_text()
    assert "`transform` float32 `[3, 3]`" in card and "transform = torch.eye(3)" in card
    model = torch.jit.load(str(tmp_path / "export" / "model.ts"))
    G, _, _, arch = load_generator(checkpoint)
    z = torch.randn(3, config["latent_dim"], generator=torch.Generator().manual_seed(1))
    args = (z, torch.tensor([0, 7, 3])) if conditional else (z,)
    with torch.no_grad():
        plain = G(*args)
        assert (model(*args, torch.eye(3)) - plain).abs().max() <= 1e-4
        for translate, rotate in [((0.3, -0.2), 0.0), ((0.0, 0.0), 25.0), ((-0.1, 0.15), -40.0)]:
            arch.set_output_transform(G, translate, rotate)
            expected = G(*args)
            got = model(*args, user_transform(translate, rotate))
            assert (got - expected).abs().max() <= 1e-4, (translate, rotate)
            assert (expected - plain).abs().max() > 1e-2


def test_onnx_model_takes_the_transform_in_onnxruntime_as_gankits_g(tmp_path, tiny_recipe_text):
    """model.onnx's inputs are ``z`` (batch free) and ``transform`` [3, 3]; run in onnxruntime on
    a batch size the export never saw, it equals G_ema under ``set_output_transform`` (to 1e-4)
    for the identity and for a translate + rotate."""
    import numpy as np
    import onnx  # the test extra installs onnx and onnxruntime: missing is a failure
    import onnxruntime

    checkpoint = trained(tmp_path, tiny_recipe_text)
    config = export_model(checkpoint, tmp_path / "export", formats=("onnx",))
    graph = onnx.load(str(tmp_path / "export" / "model.onnx")).graph
    dims = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert list(dims) == ["z", "transform"]
    assert dims["transform"] == [3, 3] and isinstance(dims["z"][0], str)
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"))
    G, _, _, arch = load_generator(checkpoint)
    z = torch.randn(5, config["latent_dim"], generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        for translate, rotate in [((0.0, 0.0), 0.0), ((0.25, -0.1), 30.0)]:
            arch.set_output_transform(G, translate, rotate)
            expected = G(z).numpy()
            (got,) = session.run(None, {"z": z.numpy(), "transform": user_transform(translate, rotate).numpy()})
            assert np.abs(got - expected).max() <= 1e-4, (translate, rotate)
