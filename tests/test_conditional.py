"""Class-conditional GANs (``architecture.conditional``): a class embedding in G, a projection D
(Miyato & Koyama 2018), labels through every strategy, penalty, metric, grid and ``gankit sample``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from gan_kit.runs import checkpoint as ckpt
from gan_kit.builtin.architectures.dcgan import DCGANDiscriminator, DCGANGenerator
from gan_kit.builtin.architectures.pggan import Discriminator, Generator
from gan_kit.plugin_api.components import LabelBound
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError
from gan_kit.training.step import StepContext
from gan_kit.testing import make_run, train_steps

ROOT = Path(__file__).resolve().parent.parent
#: An architecture without a class-conditional form: the docs' example plugin (every built-in has one).
UNCONDITIONAL_ARCH = [f"plugins=['{(ROOT / 'docs' / 'examples' / 'architecture_plugin.py').as_posix()}']",
                      "architecture={name='mlp', latent_dim=8, hidden=16}", "growth={name='static', batch_size=8}",
                      "init.name='normal'"]
STRATEGIES = ["d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous"]


def _nf(res):
    return 8


def _pggan_pair(num_classes=10):
    torch.manual_seed(0)
    G = Generator(8, 1, 8, _nf, num_classes=num_classes)
    D = Discriminator(8, 1, _nf, mbstd_group_size=4, num_classes=num_classes)
    for net in (G, D):
        net.set_phase(8, 1.0)
    return G, D


@pytest.mark.parametrize("family", ["pggan", "dcgan"])
def test_projection_D_and_G_depend_on_the_label(family):
    if family == "pggan":
        G, D = _pggan_pair()
    else:
        torch.manual_seed(0)
        G, D = DCGANGenerator(8, 1, 8, 4, num_classes=10), DCGANDiscriminator(8, 1, 4, num_classes=10)
        G.eval(), D.eval()
    x = torch.randn(4, 1, 8, 8)
    z = torch.randn(4, 8)
    zeros, threes = torch.zeros(4, dtype=torch.long), torch.full((4,), 3, dtype=torch.long)
    with torch.no_grad():
        d0, d3 = D(x, zeros), D(x, threes)
        g0, g3 = G(z, zeros), G(z, threes)
    assert d0.shape == (4,) and (d0 - d3).abs().min() > 1e-4  # every sample's logit moves with its label
    assert (g0 - g3).flatten(1).abs().amax(dim=1).min() > 1e-4
    # the class term is exactly the projection embed(y) . phi: equal labels, equal logits
    with torch.no_grad():
        assert torch.equal(D(x, threes), d3)


def test_conditional_networks_name_the_missing_labels_and_unconditional_ones_refuse_labels():
    G, D = _pggan_pair()
    with pytest.raises(ValueError, match=r"class-conditional .* ctx.generate\(z, labels\)"):
        G(torch.randn(2, 8))
    with pytest.raises(ValueError, match="labels have shape"):
        D(torch.randn(4, 1, 8, 8), torch.zeros(3, dtype=torch.long))
    G0, _ = _pggan_pair(num_classes=0)
    with pytest.raises(ValueError, match="not class-conditional"):
        G0(torch.randn(2, 8), torch.zeros(2, dtype=torch.long))


def test_joint_D_forward_with_labels_equals_two_forwards():
    _, D = _pggan_pair()
    real, fake = torch.randn(8, 1, 8, 8), torch.randn(8, 1, 8, 8)
    y = torch.arange(8) % 10
    with torch.no_grad():
        joint = D(torch.cat([real, fake]), torch.cat([y, y]), splits=2)
        apart = torch.cat([D(real, y), D(fake, y)])
    torch.testing.assert_close(joint, apart, rtol=0, atol=1e-6)


def test_label_bound_repeats_the_labels_for_concatenated_batches():
    seen = []
    bound = LabelBound(lambda x, labels, **kw: seen.append(labels) or x.sum(), torch.tensor([1, 2]))
    bound(torch.zeros(2, 3))
    bound(torch.zeros(4, 3))
    assert seen[0].tolist() == [1, 2] and seen[1].tolist() == [1, 2, 1, 2]


class _Recorder:
    """Wraps pggan's G and D forwards: records (batch, labels) of every call."""

    def __init__(self, monkeypatch):
        self.g, self.d = [], []
        g_forward, d_forward = Generator.forward, Discriminator.forward

        def g(net, z, labels=None):
            self.g.append(labels)
            return g_forward(net, z, labels)

        def d(net, img, labels=None, splits=1):
            self.d.append((img.shape[0], labels))
            return d_forward(net, img, labels, splits)

        monkeypatch.setattr(Generator, "forward", g)
        monkeypatch.setattr(Discriminator, "forward", d)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_and_penalty_passes_labels(strategy, tmp_path, monkeypatch):
    rec = _Recorder(monkeypatch)
    # a lazy R1 as well as the per-step gradient penalty: every D forward a penalty makes too
    run = make_run(tmp_path, overrides=["architecture.conditional=true", f"update.name='{strategy}'",
                                        "update.d_steps=2", "run.total_kimg=0.048",
                                        "penalty=[{name='gradient-penalty', weight=10.0}, "
                                        "{name='r1', weight=1.0, interval=2}]"])
    rec.g.clear(), rec.d.clear()
    train_steps(run, 3)
    training_d = [(n, y) for n, y in rec.d]
    assert rec.g and all(y is not None for y in rec.g), "a G forward without labels"
    assert training_d and all(y is not None and y.shape == (n,) for n, y in training_d), "a D forward without labels"
    # sample_grid 4 < 10 classes: still a row (of one image) per class
    assert run.num_classes == 10 and run.fixed_labels.tolist() == list(range(10)) and run.grid_nrow == 1


def test_fakes_of_each_D_step_follow_its_real_labels(tmp_path, monkeypatch):
    from gan_kit.builtin.objectives import strategies

    calls = []
    critic = strategies.critic_step

    current: list[int] = []
    generate = StepContext.generate

    def spy(ctx, j, fakes=None):
        current.append(j)
        try:
            return critic(ctx, j, fakes=fakes)
        finally:
            current.pop()

    def generate_spy(ctx, z, labels=None):  # the fakes of D step j are made for the labels of its reals
        if current:
            calls.append(torch.equal(labels, ctx.labels[current[-1]]))
        return generate(ctx, z, labels)

    monkeypatch.setattr(StepContext, "generate", generate_spy)
    monkeypatch.setattr(strategies, "critic_step", spy)
    run = make_run(tmp_path, overrides=["architecture.conditional=true", "update.d_steps=2"])
    seen = []
    real_step = run.step_context

    def ctx_spy(phase, reals, labels=None):
        ctx = real_step(phase, reals, labels)
        seen.append([y.clone() for y in ctx.labels])
        return ctx

    monkeypatch.setattr(run, "step_context", ctx_spy)
    train_steps(run, 2)
    assert calls == [True] * 4
    # the labels are the data set's labels of the batch (digits: 10 classes), two batches a step
    assert all(len(s) == 2 and all(y.dtype == torch.int64 and int(y.max()) < 10 for y in s) for s in seen)


def test_conditional_run_checkpoint_sample_and_exact_resume(tmp_path):
    overrides = ["architecture.conditional=true", "run.total_kimg=0.096", "run.snapshot_ticks=1",
                 "run.sample_grid=20"]
    run = make_run(tmp_path, overrides=overrides)
    assert run.grid_nrow == 2 and run.fixed_labels.tolist() == [c for c in range(10) for _ in range(2)]
    train(run)
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    state = ckpt.load(latest)
    assert state["num_classes"] == 10
    # one process trained straight through vs. stopped at 48 images and resumed: same weights
    half = make_run(tmp_path / "b", overrides=overrides[:1] + ["run.total_kimg=0.048", "run.snapshot_ticks=1",
                                                               "run.sample_grid=20"])
    train(half)
    resumed = make_run(tmp_path / "b", overrides=overrides, recipe=tmp_path / "b" / "tiny.toml")
    train(resumed, resume=True)
    other = ckpt.load(tmp_path / "b" / "run" / "checkpoints" / "latest.pt")
    for key, value in state["G_ema"].items():
        torch.testing.assert_close(other["G_ema"][key], value, rtol=0, atol=0, msg=key)
    out = tmp_path / "three.png"
    r = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(latest), "--class", "3", "-n", "4",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "of class 3" in r.stdout, r.stderr
    assert Image.open(out).size[0] > 32
    bad = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(latest), "--class", "10"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--class: 10 is not a class" in bad.stderr and "(0 to 9)" in bad.stderr


def test_sample_class_refuses_an_unconditional_checkpoint(tmp_path):
    run = make_run(tmp_path, overrides=["run.total_kimg=0.008"])
    train(run)
    r = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(tmp_path / "run" / "checkpoints" /
                        "latest.pt"), "--class", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "is not class-conditional" in r.stderr and "Traceback" not in r.stderr


def test_conditional_needs_labels_and_a_conditional_architecture(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(8):
        Image.new("L", (8, 8), color=i * 30).save(folder / f"{i}.png")
    with pytest.raises(GankitError, match=r"architecture.conditional = true, but the 'image-folder' data set has no "
                                          r"labels .* set conditional = false"):
        make_run(tmp_path, overrides=["architecture.conditional=true", "data.name='image-folder'",
                                      f"data.path='{folder.as_posix()}'"])
    with pytest.raises(GankitError, match="architecture 'mlp' has no class-conditional form"):
        make_run(tmp_path, overrides=[*UNCONDITIONAL_ARCH, "architecture.conditional=true"])


def _record_generate_labels(run, monkeypatch) -> list:
    """The labels of every ``run.generate`` call from now on (the calls still generate)."""
    seen = []
    generate = run.generate

    def spy(z, labels=None, **kw):
        seen.append(labels)
        return generate(z, labels=labels, **kw)

    monkeypatch.setattr(run, "generate", spy)
    return seen


def test_metric_generates_with_the_data_class_frequencies(tmp_path, monkeypatch):
    from gan_kit.tools.evaluate import evaluate

    run = make_run(tmp_path, overrides=["architecture.conditional=true"])
    run.set_phase(run.growth.phase_at(0))
    seen = _record_generate_labels(run, monkeypatch)

    class Count:
        num_images, seed = 300, 0

        def compute(self, gen, reals, device):
            return {"n": float(gen(300).shape[0])}

    assert evaluate(run, Count()) == {"n": 300.0}
    labels = torch.cat(seen)
    assert labels.shape == (300,) and set(labels.tolist()) == set(range(10))


def test_recipe_check_refuses_what_a_conditional_run_would_refuse(tmp_path):
    # `gankit recipe check` says "ok" only for what `gankit run` accepts.
    from click.testing import CliRunner

    from gan_kit.cli import cli

    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(8):
        Image.new("L", (8, 8), color=i * 30).save(folder / f"{i}.png")
    runner = CliRunner()
    mlp = runner.invoke(cli, ["recipe", "check", str(ROOT / "recipes" / "dcgan.toml"),
                              *(a for o in [*UNCONDITIONAL_ARCH, "architecture.conditional=true"] for a in ("--set", o))])
    assert mlp.exit_code == 2 and "architecture.conditional: true, but architecture 'mlp'" in mlp.output
    folder_run = runner.invoke(cli, ["recipe", "check", str(ROOT / "recipes" / "pggan-conditional.toml"), "--set",
                                     "data.name='image-folder'", "--set", f"data.path='{folder.as_posix()}'",
                                     "--set", "metric=[]"])
    assert folder_run.exit_code == 2 and "has no labels" in folder_run.output
    ok = runner.invoke(cli, ["recipe", "check", str(ROOT / "recipes" / "pggan-conditional.toml")])
    assert ok.exit_code == 0 and ok.output.strip().endswith(": ok")


def _class_folders(root, names, per=8):
    for c, name in enumerate(names):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per):
            Image.new("L", (8, 8), color=20 * c + i).save(root / name / f"{i}.png")


def test_resume_and_eval_refuse_a_changed_set_of_classes_in_one_line(tmp_path):
    from gan_kit.tools.evaluate import evaluate_checkpoint
    from gan_kit.runs.resume import resume_run

    data = tmp_path / "imgs"
    _class_folders(data, ["cats", "dogs"])
    folder = ["architecture.conditional=true", "data.name='image-folder'", f"data.path='{data.as_posix()}'",
              "data.labels='folders'", "metric=[]", "run.total_kimg=0.016"]
    train(make_run(tmp_path, overrides=folder))
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    assert ckpt.load(latest)["class_names"] == ["cats", "dogs"]
    for asked, said in (("dogs", "of class 1"), ("1", "of class 1")):
        r = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(latest), "--class", asked, "-n", "2",
                            "--out", str(tmp_path / "s.png")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and said in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(latest), "--class", "ants"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "'ants' is not a class" in r.stderr and "cats, dogs" in r.stderr
    (data / "dogs").rename(data / "ants")  # now label 0 would be ants: the meaning of every label moves
    with pytest.raises(GankitError, match=r"classes changed \(label 0: 'cats' then, 'ants' now\)"):
        resume_run(make_run(tmp_path, overrides=folder))
    with pytest.raises(GankitError, match=r"classes changed"):
        evaluate_checkpoint(latest)
    _class_folders(data, ["zebras"])
    with pytest.raises(GankitError, match=r"trained on 2 classes, the data set now has 3"):
        resume_run(make_run(tmp_path, overrides=folder))


def test_gankit_bench_times_a_conditional_recipe(tmp_path):
    from gan_kit.tools.bench import run_bench
    from gan_kit.testing import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    result = run_bench(recipe, "d-then-g,shared-fake", steps=2, warmup=1, overrides=("architecture.conditional=true",))
    assert all(row.times and all(t > 0 for t in row.times) for row in result.rows)
    assert "class-conditional" in result.reference_note


def test_label_bound_names_a_sub_batch():
    bound = LabelBound(lambda x, labels: x, torch.arange(8))
    with pytest.raises(ValueError, match=r"takes k x 8 images .* got 4; .* inputs.D.net\(x, inputs.labels\[:4\]\)"):
        bound(torch.zeros(4, 3))


def test_labels_outside_num_classes_are_refused_in_one_line(tmp_path):
    import gan_kit
    from gan_kit.training.data import TensorImages

    class BadLabels(gan_kit.DatasetFactory):
        def build(self, resolution):
            ds = TensorImages(torch.zeros(8, 1, resolution, resolution), torch.arange(8) % 2, num_classes=2)
            ds.labels = torch.arange(8) % 3  # a plugin that got its labels wrong
            return ds

    class Plugin:
        @gan_kit.hookimpl
        def register_datasets(self, register):
            register("bad-labels", BadLabels)

    with pytest.raises(GankitError, match=r"labels lie in \[0, 2\], outside \[0, num_classes = 2\)"):
        make_run(tmp_path, plugins=[Plugin()], overrides=["architecture.conditional=true", "data.name='bad-labels'",
                                                          "metric=[]"])


def test_per_class_swd_compares_each_class_with_its_own_fakes(tmp_path, monkeypatch):
    from gan_kit.tools.evaluate import evaluate

    run = make_run(tmp_path, overrides=["architecture.conditional=true", "run.total_kimg=0.016",
                                        "metric=[{name='swd', num_images=300, per_class=true, patches_per_image=8, "
                                        "directions=8, repeats=1}]"])
    train(run)
    asked = _record_generate_labels(run, monkeypatch)
    _, metric = run.metrics[0]
    out = evaluate(run, metric)
    per = {k: v for k, v in out.items() if "/class-" in k and not k.endswith("mean")}
    assert sorted(per) == sorted(f"Metrics/swd/class-{c}" for c in range(10))
    assert out["Metrics/swd/class-mean"] == pytest.approx(sum(per.values()) / 10)
    # after the overall set (the data's class frequencies), one call per class, all of that class
    assert [set(y.tolist()) for y in asked[-10:]] == [{c} for c in range(10)]
    assert len(set(asked[0].tolist())) > 1
    # unconditional runs and per_class = false add nothing
    plain = make_run(tmp_path / "plain", overrides=["run.total_kimg=0.016", "metric=[{name='swd', num_images=300, "
                                                   "per_class=true, patches_per_image=8, directions=8, repeats=1}]"])
    plain.set_phase(plain.growth.phase_at(0))
    assert not any("/class-" in k for k in evaluate(plain, plain.metrics[0][1]))
