"""A backbone registered by an installed plugin (the docs/hooks.md example, as a distribution
with a ``gankit`` entry point) is listed by ``gankit list-plugins --kind backbone`` and found by
name by the feature metrics, its file looked for as the built-ins' are."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from click.testing import CliRunner

from gan_kit.base.errors import GankitError
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.inception import FID, KID

PLUGIN = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from gan_kit import Backbone, hookimpl

    class MeanColour(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            return torch.cat([(x / 255 * self.scale).mean(dim=(2, 3)), x.std(dim=(2, 3))], dim=1)

    class MeanColourBackbone(Backbone):
        """Mean colour and contrast of the image (a toy backbone)."""

        weights_file = "mean-colour.pt"
        weights_source = "https://example.org/mean-colour.pt"
        input_size = 16
        resize = "clean"
        normalisation = "x / 255 times the file's scale"
        feature_dim = 6

        def build(self, path, resize):
            return MeanColour(torch.load(path, weights_only=True)["scale"])

    @hookimpl
    def register_backbones(register):
        register("mean-colour", MeanColourBackbone)
''')


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """The plugin installed as pip would: a module and a dist-info with its entry point on sys.path."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "tp_backbone.py").write_text(PLUGIN, encoding="utf-8")
    info = site / "gankit_tp_backbone-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gankit-tp-backbone\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[gankit]\ntp-backbone = tp_backbone\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("GANKIT_DISABLE_PLUGINS", raising=False)
    fx.clear_caches()
    yield tmp_path
    fx.clear_caches()
    sys.modules.pop("tp_backbone", None)


def test_listed_by_list_plugins_kind_backbone(installed):
    from gan_kit.cli import cli

    result = CliRunner().invoke(cli, ["list-plugins", "--kind", "backbone", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {"inception-v3-compat", "vgg16", "stub", "clip-vit-b-32", "dinov2-vit-l-14", "mean-colour"} <= set(rows)
    assert rows["mean-colour"]["plugin"] == "gankit-tp-backbone 0.1.0"
    assert rows["mean-colour"]["summary"] == "Mean colour and contrast of the image (a toy backbone)."
    assert {row["kind"] for row in rows.values()} == {"backbone"}


def test_a_metric_finds_it_by_name_and_computes_from_its_file(installed, monkeypatch):
    weights = installed / "w"
    weights.mkdir()
    monkeypatch.setenv("GANKIT_WEIGHTS_DIR", str(weights))
    with pytest.raises(GankitError) as e:  # its file is missing: one line naming it and its source
        FID(FID.Options(feature_extractor="mean-colour"))
    assert "mean-colour.pt" in str(e.value) and "https://example.org/mean-colour.pt" in str(e.value)
    torch.save({"scale": 2.0}, weights / "mean-colour.pt")  # found in $GANKIT_WEIGHTS_DIR
    fid = FID(FID.Options(feature_extractor="mean-colour", num_images=4, cache=False))
    ex = fid.extractor("cpu")
    assert ex.resize == "clean" and ex.backbone.__name__ == "MeanColourBackbone"
    assert "mean-colour | " in ex.ident and "clean: PIL bicubic" in ex.ident
    g = torch.Generator().manual_seed(0)
    fake, real = torch.rand(4, 3, 8, 8, generator=g) * 2 - 1, torch.rand(4, 3, 8, 8, generator=g) * 2 - 1
    value = fid.compute(lambda k: fake[:k], real, "cpu")["Metrics/fid"]
    assert value > 0
    assert KID.problems(KID.Options(feature_extractor="mean-colour"), None) == []


def test_an_unknown_backbone_is_one_line_with_the_names(installed):
    [(key, msg)] = FID.problems(FID.Options(feature_extractor="mean-color"), None)
    assert key == "feature_extractor" and "\n" not in msg
    assert "unknown backbone 'mean-color' (did you mean 'mean-colour'?)" in msg and "dinov2-vit-l-14" in msg
