"""The ``r3gan`` architecture (Huang et al. 2024, sec. 3; the official R3GAN/Networks.py):
shapes, the fix-up initialisation it owns, bilinear resampling, no normalisation, the recipe's
refusals, and recipes/r3gan.toml (dry run, and a few training steps at tiny sizes)."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from torch import nn

from gan_kit.builtin.architectures.r3gan import ACT_GAIN, R3GAN, Downsample, ResidualBlock, Stage, Upsample
from gan_kit.cli import cli
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import RecipeError
from gan_kit.recipe import load_recipe

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "r3gan.toml"
TINY = ["architecture.width=8", "architecture.cardinality=2", "architecture.blocks_per_stage=1",
        "growth.batch_size=4", "metric=[]", "run.tick_kimg=0.008", "run.total_kimg=0.012"]


def build(**options):
    return R3GAN(R3GAN.Options(**options)).build(16, 1)


def test_shapes_stages_and_no_normalisation_layer():
    G, D = build(width=16, width_by_resolution={4: 24}, cardinality=4)
    z = torch.randn(3, 64)
    x = G(z)
    assert x.shape == (3, 1, 16, 16) and D(x).shape == (3,)
    assert len(G.stages) == 3 and len(D.blocks) == 3  # 4, 8, 16 px
    assert G.stages[0][0].basis.shape == (24, 4, 4)  # width_by_resolution names the 4 px stage
    norms = (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm, nn.InstanceNorm2d)
    assert not any(isinstance(m, norms) for net in (G, D) for m in net.modules())
    grouped = [m for m in G.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert grouped and all(m.groups == 4 and m.kernel_size == (3, 3) for m in grouped)


def test_fixup_init_zero_residual_ends_and_depth_scaled_gains():
    torch.manual_seed(0)
    G, D = build(width=64, cardinality=8, blocks_per_stage=2)
    blocks = [m for m in list(G.modules()) + list(D.modules()) if isinstance(m, ResidualBlock)]
    assert len(blocks) == 12  # 2 per stage, 3 stages, each network
    L = 6  # residual blocks per network
    for b in blocks:
        assert torch.count_nonzero(b.conv3.weight) == 0  # each branch starts as the identity
        x = torch.randn(2, 64, 4, 4)
        assert torch.equal(b(x), x)
    # conv1 (1x1, fan_in 64) has std ACT_GAIN * L^-1/4 / sqrt(64); over 64 * 128 weights.
    w = torch.cat([b.conv1.weight.flatten() for b in blocks])
    assert w.std().item() == pytest.approx(ACT_GAIN * L ** -0.25 / 8, rel=0.03)
    w2 = torch.cat([b.conv2.weight.flatten() for b in blocks])  # grouped 3x3: fan_in 16 * 9
    assert w2.std().item() == pytest.approx(ACT_GAIN * L ** -0.25 / 12, rel=0.03)


def test_resampling_is_bilinear():
    x = torch.randn(2, 3, 8, 8)
    up = Upsample(3, 3)(x)
    ref = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    assert up.shape == (2, 3, 16, 16)
    assert torch.allclose(up[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1], atol=1e-5)  # zero padding at the border
    down = Downsample(3, 3)(torch.ones(1, 3, 8, 8))
    assert down.shape == (1, 3, 4, 4) and torch.allclose(down[..., 1:-1, 1:-1], torch.ones(1, 3, 2, 2))
    assert Upsample(3, 5)(x).shape == (2, 5, 16, 16) and Downsample(3, 5)(x).shape == (2, 5, 4, 4)


def test_joint_d_forward_equals_two_forwards():
    _, D = build(width=8, cardinality=2)
    a, b = torch.randn(4, 1, 16, 16), torch.randn(4, 1, 16, 16)
    assert torch.allclose(D(torch.cat([a, b]), splits=2), torch.cat([D(a), D(b)]), atol=1e-6)


def test_recipe_refuses_an_initializer_spectral_norm_and_bad_groups():
    with pytest.raises(RecipeError, match=r"init\.name: r3gan initialises its own layers .* set \[init\] name = "
                                          r"\"none\""):
        load_recipe(RECIPE, ["init.name=kaiming"])
    with pytest.raises(RecipeError, match=r"architecture\.spectral_norm: 'D', but architecture 'r3gan' has no "
                                          r"spectral-norm form: its fix-up initialisation"):
        load_recipe(RECIPE, ["architecture.spectral_norm=D"])
    with pytest.raises(RecipeError, match=r"architecture\.cardinality: 5 groups do not divide the 64 middle"):
        load_recipe(RECIPE, ["architecture.cardinality=5", "architecture.width_by_resolution={}",
                             "architecture.cardinality_by_resolution={}"])
    with pytest.raises(RecipeError, match=r"architecture\.cardinality_by_resolution: 5 groups do not divide the "
                                          r"112 middle channels of the 4 px stage"):
        load_recipe(RECIPE, ["architecture.cardinality_by_resolution.4=5"])
    with pytest.raises(RecipeError, match=r"architecture\.width_by_resolution: names resolutions \[32\]"):
        load_recipe(RECIPE, ["architecture.width_by_resolution={32 = 8}"])


def test_the_networks_keep_their_own_init_through_the_build(tmp_path):
    recipe, plugins = load_recipe(RECIPE, [*TINY, f"run.out_dir={tmp_path / 'run'}"])
    run = build_run(recipe, plugins)
    for net in (run.G, run.D):
        ends = [m.conv3.weight for m in net.modules() if isinstance(m, ResidualBlock)]
        assert ends and all(torch.count_nonzero(w) == 0 for w in ends)


def test_the_recipe_dry_runs_and_trains_a_few_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = CliRunner().invoke(cli, ["run", str(RECIPE), "--dry-run", "--out", str(tmp_path / "dry")])
    assert result.exit_code == 0, result.output
    assert "loss rpgan; penalties r1 x0.05, r2 x0.05" in result.stdout and "init none" in result.stdout
    recipe, plugins = load_recipe(RECIPE, [*TINY, "run.tick_kimg=1", f"run.out_dir={tmp_path / 'run'}"])  # one tick: the lazy R1 + R2 step of iteration 0 in it
    run = build_run(recipe, plugins)
    g0 = [p.detach().clone() for p in run.G.parameters()]
    stats = train(run, max_steps=3)
    for key in ("Loss/D", "Loss/G", "Loss/D/r1", "Loss/D/r2"):
        assert math.isfinite(stats[key]), key
    assert any(not torch.equal(a, b) for a, b in zip(g0, run.G.parameters()))
    # The zero residual ends leave zero once trained: the branch learns.
    assert any(torch.count_nonzero(m.conv3.weight) for m in run.G.modules() if isinstance(m, ResidualBlock))



# ---- bfloat16 stages (the official FP16Stages)

def test_bf16_resolutions_compute_those_stages_in_bfloat16_with_float32_weights():
    """``bf16_resolutions = [8, 16]``: G's 8 and 16 px stages and D's 16 and 8 px stages compute in
    bfloat16 (D's cast comes before its convolution from the image), the 4 px stages in float32;
    G's image comes back float32 holding bfloat16 values; the weights stay float32 and get float32
    gradients; and the bf16 networks stay near the float32 ones with the same weights."""
    torch.manual_seed(0)
    G, D = build(width=16, cardinality=4, bf16_resolutions=(8, 16))
    torch.manual_seed(0)
    G32, D32 = build(width=16, cardinality=4)
    for net in (G, D, G32, D32):  # move the zero residual ends, so the blocks take part
        with torch.no_grad():
            for m in net.modules():
                if isinstance(m, ResidualBlock):
                    m.conv3.weight.normal_(0, 0.1)
    G32.load_state_dict(G.state_dict())
    D32.load_state_dict(D.state_dict())
    seen = {}
    for name, stage in [*((("G", i), s) for i, s in enumerate(G.stages)), *((("D", i), s) for i, s in enumerate(D.blocks))]:
        stage.register_forward_hook(lambda m, args, out, name=name: seen.__setitem__(name, (args[0].dtype, out.dtype)))
    z = torch.randn(3, 64)
    img = G(z)
    logits = D(img)
    assert seen[("G", 0)] == (torch.float32, torch.float32)
    assert seen[("G", 1)][1] == seen[("G", 2)][1] == torch.bfloat16
    assert seen[("D", 0)][1] == seen[("D", 1)][1] == torch.bfloat16 and seen[("D", 2)][1] == torch.float32
    assert img.dtype == torch.float32 and torch.equal(img, img.bfloat16().float())
    assert logits.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in [*G.parameters(), *D.parameters()])
    (logits.sum() + img.square().mean()).backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in G.parameters())
    with torch.no_grad():
        assert 0 < (img - G32(z)).abs().max() < 0.05 * G32(z).abs().max()
        assert 0 < (logits - D32(img)).abs().max() < 0.05 * D32(img).abs().max()


def test_a_bf16_stage_rounds_each_convolution_then_each_bias_as_the_official_code():
    """In a bfloat16 stage a block adds each bias after rounding its convolution's output to
    bfloat16 (the official ``Convolution`` then ``BiasedActivation``), not inside the convolution."""
    torch.manual_seed(1)
    block = ResidualBlock(8, 2, 2, 3, 4)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.5)
    x = torch.randn(2, 8, 6, 6).bfloat16()
    stage = Stage(block, dtype=torch.bfloat16)
    assert not block.fused
    w = [c.weight.bfloat16() for c in (block.conv1, block.conv2, block.conv3)]
    y = F.leaky_relu(F.conv2d(x, w[0]) + block.act1.bias.bfloat16().view(1, -1, 1, 1), 0.2)
    y = F.leaky_relu(F.conv2d(y, w[1], padding=1, groups=2) + block.act2.bias.bfloat16().view(1, -1, 1, 1), 0.2)
    assert torch.equal(stage(x), x + F.conv2d(y, w[2]))


def test_recipe_refuses_bf16_at_4_px_and_at_no_stage():
    with pytest.raises(RecipeError, match=r"architecture\.bf16_resolutions\[0\]: must be >= 8, got 4"):
        load_recipe(RECIPE, ["architecture.bf16_resolutions=[4, 8]"])
    with pytest.raises(RecipeError, match=r"architecture\.bf16_resolutions: names \[32\], which are no stage above "
                                          r"4 px at data\.resolution = 16 \(choose from \[8, 16\]"):
        load_recipe(RECIPE, ["architecture.bf16_resolutions=[32]"])


def test_a_recipe_with_bf16_stages_trains_a_few_steps(tmp_path):
    recipe, plugins = load_recipe(RECIPE, [*TINY, "architecture.bf16_resolutions=[8, 16]", "run.tick_kimg=1",
                                           f"run.out_dir={tmp_path / 'run'}"])
    run = build_run(recipe, plugins)
    g0 = [p.detach().clone() for p in run.G.parameters()]
    stats = train(run, max_steps=2)
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])
    assert any(not torch.equal(a, b) for a, b in zip(g0, run.G.parameters()))


# ---- the recipe's schedules (the official code's CIFAR-10 preset, scaled to the run)

SCHEDULED = {  # metrics.jsonl key -> (first, last) value of the half cosine over run.total_kimg
    "Schedule/optim.lr": (5e-4, 1.25e-4),
    "Schedule/optim.betas.1": (0.9, 0.99),
    "Schedule/penalty.0.weight": (0.05, 0.005),
    "Schedule/penalty.1.weight": (0.05, 0.005),
    "Schedule/ema.half_life_kimg": (0.001, 2.0),
    "Schedule/augment.p_init": (0.0, 0.1),
}


def half_cosine(first, last, nimg, total_nimg):
    """R3GAN's ``cosine_decay_with_warmup`` without warm-up, written out here on purpose (not
    gankit's shape): ``last + (first - last) * (1 + cos(pi * nimg / total)) / 2``."""
    return last + (first - last) * (1 + math.cos(math.pi * min(nimg / total_nimg, 1.0))) / 2


def test_the_recipe_follows_r3gans_cosine_schedules_in_metrics_jsonl(tmp_path):
    """lr, beta2, both gammas, the EMA half-life and the fixed augmentation p follow half cosines
    over the run (batch 4, 2 iterations a tick, 24 images): each tick's row holds the value set
    for its last iteration (images shown before it: 4, 12, 20), and the augmentation each
    iteration runs with is the schedule's p at the images shown before it."""
    # R1 and R2 every step here: the recipe's lazy step would add augmented batches to the count below.
    recipe, plugins = load_recipe(RECIPE, [*TINY, "run.total_kimg=0.024", "penalty.0.interval=1",
                                           "penalty.1.interval=1", f"run.out_dir={tmp_path / 'run'}"])
    run = build_run(recipe, plugins)
    assert recipe.augment.name == "ada" and recipe.augment.options.target is None
    assert recipe.augment.options.pipeline == "r3gan"  # R3GAN's AugmentPipe: colour at p / 2, cutout
    assert recipe.ema.rampup is None  # the half-life schedule is the ramp
    used = []
    pipeline = run.augment.pipeline

    def watch(images, p):  # the p handed to ADA's pipeline for each augmented batch
        used.append(p.item())
        return pipeline(images, p)

    run.augment.pipeline = watch
    train(run)
    rows = [json.loads(line) for line in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["Progress/step"] for r in rows] == [2, 4, 6]
    for key, (first, last) in SCHEDULED.items():
        assert [r[key] for r in rows] == pytest.approx([half_cosine(first, last, n, 24) for n in (4, 12, 20)],
                                                       rel=1e-12, abs=1e-15), key
    # D augments reals and fakes (d-then-g) and G's fakes: every batch of iteration i with p(4 i).
    assert used and len(used) % 6 == 0
    per_step = len(used) // 6
    for i in range(6):
        expected = half_cosine(0.0, 0.1, 4 * i, 24)
        assert used[i * per_step:(i + 1) * per_step] == pytest.approx([expected] * per_step, abs=1e-7), i


def test_the_recipe_resumes_bit_identical_with_its_schedules(tmp_path):
    """A run of the recipe stopped after 3 of 6 iterations and resumed ends with the weights,
    optimizer states (scheduled lr and beta2 in the param groups), augmentation p and schedule
    values of the uninterrupted run."""
    from test_checkpoint import assert_same_state

    def load(out):
        return load_recipe(RECIPE, [*TINY, "run.total_kimg=0.024", f"run.out_dir={out}"])

    straight = build_run(*load(tmp_path / "straight"))
    train(straight)
    first = build_run(*load(tmp_path / "split"))
    train(first, max_steps=3)
    first.save_checkpoint()
    resumed = build_run(*load(tmp_path / "split"))
    train(resumed, resume=True)
    assert_same_state(straight, resumed)
    assert resumed.schedule_values == straight.schedule_values
    assert torch.equal(resumed.augment.p, straight.augment.p)


# ---- recipes/r3gan-cifar10.toml: the official CIFAR-10 run (class-conditional, x-flips)

CIFAR_RECIPE = RECIPE.parent / "r3gan-cifar10.toml"


def fake_cifar10(root: Path) -> Path:
    """CIFAR-10's python pickle batches with 4 random images each (labels 0-9) under ``root``."""
    import pickle

    import numpy as np

    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        entry = {"labels": [int(v) for v in rng.integers(0, 10, 4)], "data": rng.integers(0, 256, (4, 3072), dtype=np.uint8)}
        (base / name).write_bytes(pickle.dumps(entry))
    return root


def test_the_cifar10_preset_is_the_official_conditional_mirrored_run():
    """The official train.py --preset=CIFAR10 with the README's --cond=1 --mirror=1 --aug=1
    --batch=512: 768 channels and 96 groups at every stage of 4-32 px, 2 blocks, z of 64;
    class-conditional, x-flips; R1 + R2 every step; TF32 off; the preset's schedules over 20M
    images (the same numbers tests/data/r3gan_reference.pt holds from the official code)."""
    recipe, _ = load_recipe(CIFAR_RECIPE)
    a = recipe.architecture.options
    assert recipe.architecture.name == "r3gan" and recipe.architecture.slot.conditional
    assert (a.latent_dim, a.width, a.cardinality, a.blocks_per_stage, a.expansion, a.kernel_size) == (64, 768, 96, 2, 2, 3)
    assert not (a.width_by_resolution or a.cardinality_by_resolution or a.blocks_by_resolution)
    assert a.g_class_dim is None and a.d_class_dim is None  # the official: z's width and the 4 px stage's
    assert recipe.data.name == "cifar10" and recipe.resolution == 32 and recipe.data.options.xflip
    assert recipe.growth.options.batch_size == 512 and recipe.run.tf32 is False
    assert [(p.name, p.options.interval) for p in recipe.penalties] == [("r1", 1), ("r2", 1)]
    ref = torch.load(Path(__file__).parent / "data" / "r3gan_reference.pt", weights_only=True)["schedules"]
    raw = tomllib.loads(CIFAR_RECIPE.read_text())
    kimg = ref["decay_nimg"] / 1000
    scheduled = {"lr": raw["optim"]["lr"], "beta2": raw["optim"]["betas"][1], "gamma": raw["penalty"][0]["weight"],
                 "aug_p": raw["augment"]["p_init"]}
    assert raw["penalty"][1]["weight"] == raw["penalty"][0]["weight"] and raw["optim"]["betas"][0] == 0.0
    for key, s in scheduled.items():
        assert (s["schedule"], s["start"], s["end"], s["kimg"]) == ("cosine", *ref["preset"][key], kimg), key
    ema = raw["ema"]["half_life_kimg"]
    assert (ema["end"] * 1000, ema["kimg"]) == (ref["preset"]["ema_nimg"][1], kimg) and raw["ema"]["rampup"] == "none"
    assert recipe.optim.eps == 1e-8 and recipe.augment.options.pipeline == "r3gan"


def test_the_cifar10_preset_dry_runs_and_trains_tiny_with_labels_and_flips(tmp_path, monkeypatch):
    """On a 20-image stand-in for CIFAR-10: --dry-run shows the set doubled by the x-flips (40)
    and the networks; a tiny form of the recipe trains 2 class-conditional steps."""
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    root = fake_cifar10(tmp_path / "data")
    result = CliRunner().invoke(cli, ["run", str(CIFAR_RECIPE), "--dry-run", "--out", str(tmp_path / "dry"),
                                      "--set", f"data.root={root.as_posix()}"])
    assert result.exit_code == 0, result.output
    assert "data cifar10: 40 images 3x32x32" in result.stdout
    assert "G r3gan: 20,781,952 parameters; D: 21,280,512 parameters" in result.stdout
    recipe, plugins = load_recipe(CIFAR_RECIPE, [f"data.root={root.as_posix()}", "data.resolution=8",
                                                 "architecture.width=8", "architecture.cardinality=2",
                                                 "architecture.blocks_per_stage=1", "growth.batch_size=4",
                                                 "metric=[]", "run.total_kimg=0.008", "run.tick_kimg=0.008",
                                                 f"run.out_dir={tmp_path / 'run'}"])
    run = build_run(recipe, plugins)
    assert run.num_classes == 10 and len(run.dataset) == 40
    stats = train(run)
    assert run.step == 2 and math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])


def test_recipe_parameter_counts_per_network_against_stylegan2(tmp_path):
    """recipes/r3gan.toml and recipes/stylegan2.toml, compared at equal parameters: equal in total
    (within 3%), not per network - R3GAN's D mirrors its G (one set of widths, as the official
    WidthPerStage), while StyleGAN2's G carries a 33k mapping network that no R3GAN network has;
    StyleGAN2's synthesis network is 3/4 of R3GAN's G, its D 4/5 of R3GAN's D. The counts
    docs/architectures.md quotes."""
    counts = {}
    for name in ("r3gan", "stylegan2"):
        recipe, plugins = load_recipe(RECIPE.parent / f"{name}.toml", [f"run.out_dir={tmp_path / name}"])
        run = build_run(recipe, plugins)
        n = {"G": sum(p.numel() for p in run.G.parameters()), "D": sum(p.numel() for p in run.D.parameters())}
        if name == "stylegan2":
            n["mapping"] = sum(p.numel() for p in run.G.mapping_network.parameters())
        counts[name] = n
    r3, sg2 = counts["r3gan"], counts["stylegan2"]
    assert (r3["G"], r3["D"]) == (85_032, 81_504)
    assert (sg2["G"], sg2["D"], sg2["mapping"]) == (96_776, 65_089, 33_280)
    assert abs((r3["G"] + r3["D"]) / (sg2["G"] + sg2["D"]) - 1) < 0.03
    assert (sg2["G"] - sg2["mapping"]) / r3["G"] == pytest.approx(0.75, abs=0.01)
    assert sg2["D"] / r3["D"] == pytest.approx(0.80, abs=0.01)
