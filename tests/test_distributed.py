"""Two processes through torchrun on the CPU (gloo): ranks stay identical and match one process
with the same global batch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.training.data import PhaseBatchSampler

CHECKER = textwrap.dedent('''
    """Test plugin: after every step, all ranks must hold bit-identical G and D."""
    import torch
    import torch.distributed as dist
    from gan_kit import hookimpl

    checked = []

    @hookimpl
    def step_finished(run, stats):
        if run.world_size < 2:
            return
        flat = torch.cat([p.detach().reshape(-1) for p in list(run.G.parameters()) + list(run.D.parameters())])
        gathered = [torch.empty_like(flat) for _ in range(run.world_size)]
        dist.all_gather(gathered, flat)
        assert all(torch.equal(g, gathered[0]) for g in gathered), f"ranks differ after step {run.step}"
        checked.append(run.step)

    @hookimpl
    def run_finished(run, stats):
        if run.is_main:
            (run.out_dir / "rank_checks.txt").write_text(str(len(checked)))
''')


def test_sampler_splits_every_global_batch_strided_across_ranks():
    def batch_for(pos):
        return 6, 2

    full = next(iter(PhaseBatchSampler(50, 3, 7, batch_for)))
    parts = [next(iter(PhaseBatchSampler(50, 3, 7, batch_for, rank=r, world_size=2))) for r in range(2)]
    # two D steps of 6: each process holds its strided half of each
    assert parts[0] == full[0:6][0::2] + full[6:12][0::2]
    assert parts[1] == full[0:6][1::2] + full[6:12][1::2]


def test_two_process_run_matches_one_process(tiny_recipe, tmp_path):
    plugin = tmp_path / "rank_checker.py"
    plugin.write_text(CHECKER)
    common = ["--set", f"plugins=['{plugin.as_posix()}']", "--set", "run.total_kimg=0.08"]
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "gan_kit",
         "run", str(tiny_recipe), "--out", str(tmp_path / "two"), *common],
        capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    one = subprocess.run([sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--out", str(tmp_path / "one"),
                          *common], capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert int((tmp_path / "two" / "rank_checks.txt").read_text()) == 10  # 80 images / batch 8: every step
    a = ckpt.load(tmp_path / "two" / "checkpoints" / "latest.pt")
    b = ckpt.load(tmp_path / "one" / "checkpoints" / "latest.pt")
    assert a["cur_nimg"] == b["cur_nimg"] == 80 and a["phase"]["resolution"] == 8  # went through a growth
    for net in ("G", "D", "G_ema"):
        for k in b[net]:
            torch.testing.assert_close(a[net][k], b[net][k], rtol=0, atol=1e-5, msg=f"{net}.{k}")
    # the logged losses are those of the global batch (averaged over processes), as with one process
    lines_two = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    lines_one = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines_two) == len(lines_one) >= 1
    for t, o in zip(lines_two, lines_one):
        keys = [k for k in o if k.startswith(("Loss/", "Logits/"))]
        assert {"Loss/D", "Loss/G", "Loss/D/gradient-penalty"} <= set(keys)
        for k in keys:
            assert abs(t[k] - o[k]) <= 1e-4 * max(1.0, abs(o[k])), (k, t[k], o[k])


BN_CHECKER = CHECKER.replace("list(run.G.parameters()) + list(run.D.parameters())",
                             "list(run.G.state_dict().values()) + list(run.D.state_dict().values())")

DCGAN_TINY = """
[run]
device = "cpu"
precision = "fp32"
total_kimg = 0.064
tick_kimg = 1
progress = false
[data]
name = "digits"
resolution = 16
[architecture]
name = "dcgan"
latent_dim = 8
ngf = 4
ndf = 4
[init]
name = "normal"
[loss]
name = "bce"
[growth]
name = "static"
batch_size = 8
"""


def test_batchnorm_discriminator_under_two_processes_started_with_nproc(write_recipe, tmp_path):
    """`gankit run --nproc 2` goes through torchrun; D's BatchNorm running statistics (buffers)
    stay identical across processes, checked after every step with the weights."""
    plugin = tmp_path / "bn_checker.py"
    plugin.write_text(BN_CHECKER)
    recipe = write_recipe(DCGAN_TINY, "dcgan_tiny.toml")
    out = tmp_path / "bn"
    r = subprocess.run([sys.executable, "-m", "gan_kit", "run", str(recipe), "--nproc", "2", "--out", str(out),
                        "--set", f"plugins=['{plugin.as_posix()}']"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert int((out / "rank_checks.txt").read_text()) == 8
    state = ckpt.load(out / "checkpoints" / "latest.pt")
    bn = [k for k in state["D"] if k.endswith("running_var")]
    assert bn and not torch.equal(state["D"][bn[0]], torch.ones_like(state["D"][bn[0]]))  # stats were updated


def test_resume_with_a_different_number_of_processes(tiny_recipe, tmp_path):
    straight = tmp_path / "straight"
    split = tmp_path / "split"
    base = [sys.executable, "-m", "gan_kit", "run", str(tiny_recipe)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                "gan_kit", "run", str(tiny_recipe)]
    for cmd in (base + ["--out", str(straight), "--set", "run.total_kimg=0.08"],
                base + ["--out", str(split), "--set", "run.total_kimg=0.048"],
                torchrun + ["--out", str(split), "--set", "run.total_kimg=0.08", "--resume"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    a = ckpt.load(straight / "checkpoints" / "latest.pt")
    b = ckpt.load(split / "checkpoints" / "latest.pt")
    assert a["cur_nimg"] == b["cur_nimg"] == 80
    for net in ("G", "D", "G_ema"):
        for k in a[net]:
            torch.testing.assert_close(b[net][k], a[net][k], rtol=0, atol=1e-5, msg=f"{net}.{k}")


def test_global_batch_must_divide_across_processes(tiny_recipe, tmp_path):
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m",
                        "gan_kit", "run", str(tiny_recipe), "--set", "growth.batch_size=9",
                        "--set", "architecture.mbstd_group_size=0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "growth.batch_size: 9 at 4px does not divide across 2 processes (use a multiple of 2)" in r.stderr
    # each process prints one line and exits 2; no frame of gankit's code (torchrun adds its own report)
    assert "exitcode  : 2" in r.stderr and re.search(r'gan_kit/[\w/]+\.py", line', r.stderr) is None


ASSIGN_GRADS = textwrap.dedent('''
    """Test plugin: a D-then-G strategy that takes weight gradients with torch.autograd.grad and
    assigns them to .grad - correct on one process, invisible to DDP's backward hooks."""
    import torch
    from gan_kit import UpdateStrategy, hookimpl


    def assign(loss, params):
        for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True)):
            p.grad = g


    class AssignGrads(UpdateStrategy):
        def step(self, ctx):
            n = ctx.reals[0].shape[0]
            with torch.no_grad():
                fake = ctx.G(ctx.latent(n))
            total, stats = ctx.d_objective(ctx.reals[0], fake)
            assign(total, [p for p in ctx.D.parameters() if p.requires_grad])
            ctx.opt_step("D")
            G_params = [p for p in ctx.G.parameters() if p.requires_grad]
            loss, g_stats = ctx.g_objective(ctx.D(ctx.G(ctx.latent(n))))
            assign(loss, G_params)
            ctx.opt_step("G")
            return {**stats, **g_stats}


    @hookimpl
    def register_update_strategies(register):
        register("assign-grads", AssignGrads)
''')


NAN_ON_RANK_1 = textwrap.dedent('''
    """Test plugin: the hinge loss, but D's loss is NaN on process 1 from its third call on."""
    import torch.distributed as dist
    from gan_kit import hookimpl
    from gan_kit.builtin.objectives.losses import Hinge


    class NanOnRank1(Hinge):
        calls = 0

        def d_loss(self, real_logits, fake_logits):
            NanOnRank1.calls += 1
            out = super().d_loss(real_logits, fake_logits)
            return out * float("nan") if dist.get_rank() == 1 and NanOnRank1.calls >= 3 else out


    @hookimpl
    def register_losses(register):
        register("nan-on-rank-1", NanOnRank1)
''')


#: A tiny StyleGAN2 on the tiny recipe's 8x8 digits (resolutions 4 and 8, batch 8).
SG2_TINY = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, "
            "channel_max=8, d_mapping_layers=2}", "growth={name='static', batch_size=8}", "loss.name='bce'",
            "run.grad_sync='all-reduce'"]


#: A tiny StyleGAN3-R on the same digits (4 synthesis layers), D's blur fading over the run; "all-reduce"
#: as recipes/stylegan3.toml.
SG3_TINY = ["architecture={name='stylegan3', config='r', latent_dim=8, w_dim=8, channel_base=64, channel_max=8, "
            "num_layers=4, d_blur_sigma={schedule='linear', start=1.0, end=0.0, kimg=0.06}}",
            "growth={name='static', batch_size=8}", "loss.name='bce'", "run.grad_sync='all-reduce'"]


def test_every_strategy_and_both_sync_modes_match_one_process(tiny_recipe, tmp_path):
    """Under two processes every built-in strategy (separate DDP wrappers for G and D; compiled
    through DDP for one), the flattened all-reduce, and a third-party strategy that assigns .grad
    under "all-reduce" all end where one process with the same global batch ends (1e-5), after a
    growth with a gradient penalty, and so does every strategy of a class-conditional run (labels sharded with their images). The same third-party strategy under DDP - whose weight
    gradients DDP never averages - is stopped with a one-line message, not left to train on, and a
    NaN loss on one process stops both processes on the same step.
    StyleGAN2 (FIR resampling, noise, style mixing, w_avg; lazy R1 and lazy path length; and a
    class-conditional one with both penalties in the step's objectives) ends within the same 1e-5
    of one process, with the same path-length running mean; stopped at 0.048 kimg and resumed
    under two processes it ends bit-identical to the uninterrupted two-process run. StyleGAN3-R
    (magnitude EMAs and w_avg over the global batch, D's fading blur) ends within 1e-5 too, and
    so does a lazy R1 under DDP (a step of its own, whose input gradient leaves D's last bias
    out)."""
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train
    from gan_kit.recipe import load_recipe

    plugin = tmp_path / "assign_grads.py"
    plugin.write_text(ASSIGN_GRADS)
    nan_plugin = tmp_path / "nan_on_rank_1.py"
    nan_plugin.write_text(NAN_ON_RANK_1)
    base = ["run.total_kimg=0.08"]
    configs = {
        "shared-fake": ["update.name='shared-fake'"],
        "g-then-d": ["update.name='g-then-d'"],
        "single-loss": ["update.name='single-loss'"],
        "simultaneous": ["update.name='simultaneous'", "update.d_steps=2", "growth.batch_size=4",
                         "architecture.mbstd_group_size=2"],
        "all-reduce": ["run.grad_sync='all-reduce'"],
        "compiled": ["run.compile=true", "run.compile_backend='aot_eager'"],
        "assign-all-reduce": [f"plugins=['{plugin.as_posix()}']", "update.name='assign-grads'",
                              "run.grad_sync='all-reduce'"],
        "assign-ddp": [f"plugins=['{plugin.as_posix()}']", "update.name='assign-grads'"],
        "nan-on-rank-1": [f"plugins=['{nan_plugin.as_posix()}']", "loss.name='nan-on-rank-1'"],
        # augmentation: every per-sample draw made for the global batch and sliced (gan_kit.base.randomness)
        "diffaugment": ["augment={name='diffaugment'}"],
        "ada": ["augment={name='ada', p_init=0.5, interval=1, kimg=0.5}", "update.d_steps=2"],
        # class-conditional: every strategy with labels (d_steps 2: each D step's own labels)
        **{f"conditional-{u}": ["architecture.conditional=true", f"update.name='{u}'", "update.d_steps=2",
                                "growth.batch_size=4", "architecture.mbstd_group_size=2"]
           for u in ("d-then-g", "shared-fake", "g-then-d", "single-loss", "simultaneous")},
        # StyleGAN2: noise maps, style-mixing latents and path length's y drawn for the global batch,
        # w_avg and path length's running mean taken over it (path length needs "all-reduce")
        "stylegan2": [*SG2_TINY, "penalty=[{name='r1', weight=1.0, interval=2}, "
                                 "{name='path-length', weight=2.0, interval=2}]"],
        "stylegan2-conditional": [*SG2_TINY, "architecture.conditional=true",
                                  "penalty=[{name='r1', weight=1.0}, {name='path-length', weight=2.0, interval=1}]"],
        # StyleGAN3-R: magnitude EMAs and w_avg over the global batch, D's blur fading, lazy R1
        "stylegan3": [*SG3_TINY, "penalty=[{name='r1', weight=1.0, interval=2}]"],
        # lazy R1 under DDP: its step of its own reaches D's last bias only through the logits
        "lazy-r1-ddp": [*SG2_TINY[:-1], "penalty=[{name='r1', weight=1.0, interval=2}]"],
    }
    # stopped at 0.048 kimg (6 of 10 iterations, between two lazy path-length steps) and resumed
    sg2_split = [f"stylegan2-split={';'.join(configs['stylegan2'] + ['run.total_kimg=0.048'])}",
                 f"stylegan2-split@resume={';'.join(configs['stylegan2'] + base)}"]
    worker = Path(__file__).with_name("ddp_worker.py")
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(worker),
         str(tiny_recipe), str(tmp_path / "two"), *(f"{k}={';'.join(base + v)}" for k, v in configs.items()),
         *sg2_split], capture_output=True, text=True, timeout=900)
    assert two.returncode == 0, two.stderr[-3000:]
    straight = ckpt.load(tmp_path / "two" / "stylegan2" / "checkpoints" / "latest.pt")
    resumed = ckpt.load(tmp_path / "two" / "stylegan2-split" / "checkpoints" / "latest.pt")
    assert resumed["step"] == straight["step"] == 10
    for net in ("G", "D", "G_ema"):
        assert [k for k in straight[net] if not torch.equal(straight[net][k], resumed[net][k])] == [], net
    assert straight["components"] == resumed["components"]  # path length's running mean

    error = (tmp_path / "two" / "assign-ddp" / "error.txt").read_text()
    assert error.startswith("step 5: the weights of G and D differ across the 2 processes, so gradients "
                            "were not averaged (update strategy 'assign-grads')"), error
    assert 'run.grad_sync = "all-reduce"' in error and "\n" not in error
    assert not (tmp_path / "two" / "assign-ddp" / "checkpoints" / "latest.pt").exists()
    # a NaN on one process stops every process on the same step (no process left waiting in an all-reduce)
    error = (tmp_path / "two" / "nan-on-rank-1" / "error.txt").read_text()
    assert error.startswith("step 3 (kimg 0.024, 4px): Loss/D is nan; stopped"), error

    for name, overrides in configs.items():
        if name in ("assign-ddp", "nan-on-rank-1"):
            continue
        assert not (tmp_path / "two" / name / "error.txt").exists(), name
        r, plugins = load_recipe(tiny_recipe, base + [o for o in overrides if "compile" not in o])
        one_dir = tmp_path / "one" / name
        train(build_run(r, plugins, out_dir=one_dir))
        a = ckpt.load(tmp_path / "two" / name / "checkpoints" / "latest.pt")
        b = ckpt.load(one_dir / "checkpoints" / "latest.pt")
        assert a["cur_nimg"] == b["cur_nimg"] == 80 and a["phase"]["resolution"] == 8, name
        for net in ("G", "D", "G_ema"):
            for k in b[net]:
                torch.testing.assert_close(a[net][k], b[net][k], rtol=0, atol=1e-5, msg=f"{name}: {net}.{k}")
        for k in [k for k in b["components"] if k.endswith("path-length")]:  # one running mean for all processes
            torch.testing.assert_close(a["components"][k]["pl_mean"], b["components"][k]["pl_mean"], rtol=0,
                                       atol=1e-6, msg=f"{name}: {k}")


def test_nproc_reports_problems_once_with_exit_code_2(tiny_recipe, tmp_path):
    """`gankit run --nproc 2` checks the batches for 2 processes and the run directory before
    starting torchrun (one line, exit 2, no processes started); a failure inside training exits
    with the failing process's code (2 for a user-facing error), without torchrun's own traceback."""
    base = [sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--nproc", "2"]
    r = subprocess.run(base + ["--set", "growth.batch_size=12", "--out", str(tmp_path / "a")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {tiny_recipe}: architecture: mbstd_group_size 4 does not divide the batch 6 (the per-process "
        f"batch at 4px: 12 over 2 processes)"], r.stderr
    used = tmp_path / "used"
    (used / "checkpoints").mkdir(parents=True)
    r = subprocess.run(base + ["--out", str(used)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.strip().startswith(f"error: {used}: already holds a run"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = subprocess.run(base + ["--out", str(tmp_path / "empty"), "--resume"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"error: --resume: no checkpoint at {tmp_path / 'empty' / 'checkpoints' / 'latest.pt'} "
        f"(no run there); start one with `gankit run RECIPE --out {tmp_path / 'empty'}`"], r.stderr

    plugin = tmp_path / "nan_on_rank_1.py"
    plugin.write_text(NAN_ON_RANK_1)
    r = subprocess.run(base + ["--out", str(tmp_path / "nan"), "--set", f"plugins=['{plugin.as_posix()}']",
                               "--set", "loss.name='nan-on-rank-1'"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "error: step 3 (kimg 0.024, 4px): Loss/D is nan; stopped" in r.stderr
    assert "Traceback" not in r.stderr and "ChildFailedError" not in r.stderr, r.stderr[-3000:]


def test_sigterm_to_a_two_process_run_writes_the_checkpoint_and_exits_143(tiny_recipe, tmp_path):
    # What `timeout` or a scheduler does to `gankit run --nproc 2`: SIGTERM reaches the launcher
    # (torchrun in the gankit process), which passes it on; the processes finish their iteration
    # and write the checkpoint, and the command exits 143 (it said "error: SignalException", 1).
    plugin = tmp_path / "term_launcher.py"
    plugin.write_text("import os, signal\nfrom gan_kit import hookimpl\n"
                      "@hookimpl\ndef step_finished(run, stats):\n"
                      "    if run.step == 3 and run.rank == 0:\n        os.kill(os.getppid(), signal.SIGTERM)\n")
    out = tmp_path / "two"
    done = subprocess.run([sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--nproc", "2", "--out", str(out),
                           "--set", f"plugins=['{plugin.as_posix()}']", "--set", "run.total_kimg=5"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr[-2000:]
    assert "SignalException" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("stopped: interrupted by SIGTERM") == 1  # said once, not once per process
    assert f"continue with `gankit run --resume {out} --nproc 2`" in done.stderr  # the command that works
    state = ckpt.load(out / "checkpoints" / "latest.pt")
    assert 0 < state["cur_nimg"] < 5000


def test_the_process_group_takes_the_recipes_timeout(tmp_path):
    """A torchrun process joins the process group with the recipe's run.dist_timeout_minutes (what
    `gankit run` passes; not torch's default, whose 10-minute NCCL watchdog aborts a job that waits
    on rank 0 longer)."""
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent('''
        import sys
        import torch
        import torch.distributed as dist
        from gan_kit.training import distributed
        from gan_kit.recipe import load_recipe

        r, _ = load_recipe(sys.argv[1], ["run.dist_timeout_minutes=2.5"])
        distributed.init(timeout_s=r.run.dist_timeout_minutes * 60)
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        print("timeout", backend.options._timeout.total_seconds())
        distributed.shutdown()
    '''))
    from gan_kit.testing import write_tiny_recipe

    recipe = write_tiny_recipe(tmp_path)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                          str(probe), str(recipe)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "timeout 150.0" in out.stdout
