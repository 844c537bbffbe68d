"""Reading PyTorch-StudioGAN checkpoints (``model=G-*.pth`` & co., the ``studiogan`` importer).

The files are written here in StudioGAN's layout (``utils/misc.py`` ``save_model``: ``torch.save``
of ``{"state_dict": ..., "optimizer": ...}``, D's with the run's numbers, the best FID a numpy
float) from the weights of ``tests/data/studiogan_reference.pt``; every command that takes a
checkpoint must draw StudioGAN's images from them.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from gan_kit.base.errors import CheckpointError
from gan_kit.runs import checkpoint as ckpt
from gan_kit.tools.importing import import_model

REF = torch.load(Path(__file__).parent / "data" / "studiogan_reference.pt", weights_only=True)


def _after(case: str, net: str) -> dict:
    """A network's state after the recorded training forward (its eval images are of this state)."""
    return {**REF[case][f"{net}_state"], **REF[case][f"{net}_state_after"]}


def _optimizer(state: dict) -> dict:
    params = [torch.zeros_like(v, requires_grad=True) for k, v in state.items() if v.is_floating_point()][:3]
    opt = torch.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))
    sum(p.sum() for p in params).backward()
    opt.step()
    return opt.state_dict()


def write_save(folder: Path, case: str, step: int = 2000, G_ema: bool = True, D: dict | None = None) -> dict[str, Path]:
    """StudioGAN's files of one ``best`` save of ``case`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    G_state, D_state = _after(case, "G"), D if D is not None else _after(case, "D")
    paths = {net: folder / f"model={net}-best-weights-step={step}.pth" for net in ("G", "G_ema", "D")}
    torch.save({"state_dict": G_state, "optimizer": _optimizer(G_state)}, paths["G"])
    torch.save({"state_dict": D_state, "optimizer": _optimizer(D_state), "seed": 0, "run_name": "BigGAN-train",
                "step": step, "epoch": 3, "topk": "initialize", "aa_p": 0.0, "best_step": step,
                "best_fid": np.float64(31.5), "best_fid_ckpt": "/runs/x", "lecam_emas": {"G_loss": 7777}}, paths["D"])
    if G_ema:
        torch.save({"state_dict": G_state}, paths["G_ema"])
    else:
        del paths["G_ema"]
    return paths


@pytest.mark.parametrize("case", ["biggan", "sagan"])
def test_a_studiogan_save_draws_studiogans_images(tmp_path, case):
    paths = write_save(tmp_path, case)
    G, _, recipe, arch = ckpt.load_generator(paths["G_ema"])
    assert recipe.architecture.name == ("biggan" if case == "biggan" else "sngan-resnet")
    G.eval()
    with torch.no_grad():
        torch.testing.assert_close(G(REF[case]["z"], REF[case]["labels"]), REF[case]["G_eval"], atol=1e-5, rtol=1e-6)
    state = ckpt.load(paths["G"])
    assert state["imported"]["format"] == "studiogan" and state["imported"]["seeds"] == "torch"
    assert state["D"] is not None and "embed.parametrizations.weight.original" in state["D"]


def test_naming_the_d_file_reads_the_g_beside_it_and_gankit_import_writes_a_model_folder(tmp_path):
    paths = write_save(tmp_path / "ckpt", "biggan", G_ema=False)
    state, name = import_model(paths["D"], tmp_path / "model")
    assert name == "studiogan"
    torch.testing.assert_close(state["G_ema"]["shared.weight"], REF["biggan"]["G_state"]["shared.weight"])
    recipe = tomllib.loads((tmp_path / "model" / "recipe.toml").read_text())
    assert recipe["architecture"]["name"] == "biggan" and recipe["architecture"]["latent_dim"] == 20
    assert recipe["loss"]["name"] == "hinge" and recipe["init"]["name"] == "orthogonal"


def test_a_d_file_alone_is_refused_in_one_line(tmp_path):
    paths = write_save(tmp_path, "sngan")
    paths["G"].unlink()
    paths["G_ema"].unlink()
    with pytest.raises(CheckpointError) as e:
        ckpt.load(paths["D"])
    assert "StudioGAN's D alone" in str(e.value) and "\n" not in str(e.value)


def test_a_d_with_another_conditioning_head_is_refused_naming_the_tensor(tmp_path):
    D = dict(_after("biggan", "D"), **{"linear2.weight": torch.zeros(10, 16)})
    paths = write_save(tmp_path, "biggan", D=D)
    with pytest.raises(CheckpointError, match=r"model=G_ema-best-weights-step=2000\.pth: D linear2\.weight: .*AC"):
        ckpt.load(paths["G_ema"])


def test_a_torch_file_that_is_no_studiogan_checkpoint_is_one_line_from_the_cli(tmp_path):
    path = tmp_path / "model=G-best-weights-step=1.pth"
    torch.save({"state_dict": {"linear0.weight": torch.zeros(4, 4)}}, path)
    r = subprocess.run([sys.executable, "-m", "gan_kit", "import", str(path), "--out", str(tmp_path / "m")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a gankit checkpoint nor a known model file" in lines[0], r.stderr
