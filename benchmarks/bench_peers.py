"""gankit against a PGGAN loop written by hand, side by side, one worker process per system.

    python benchmarks/bench_peers.py [--recipe recipes/bench-pggan32.toml] [--rounds 5]
        [--warmup 3] [--timed 10] [--phases s32,f32,s16] [--peers DIR] [--json OUT] [--quick]

What one timed iteration is (d_steps = 1), for every system:

* ``gankit``: ``gan_kit.runs.session.train`` on the recipe, exactly as ``gankit run`` trains - the
  phase lookup, the DataLoader batch, the fade of the reals, the update strategy (D step, G step),
  the stats to floats, the finiteness check, the G_ema update and every plugin's
  ``step_finished`` hook. A timing plugin stamps the clock in ``step_finished``; one iteration is
  the interval between two stamps (per-tick work - metrics line, sample grid - never falls inside:
  ``run.tick_kimg`` is set beyond the run).
* ``hand-detach`` / ``hand-freeze``: a plain-PyTorch PGGAN loop written as a practitioner would
  (``HandLoop`` below; no gankit object involved), with the recipe's sizes and hyper-parameters:
  a random real batch from an in-memory tensor (box-filtered to the resolution and, when fading,
  blended with its 2x-upsampled half-resolution copy), the D step on fakes made with autograd on
  and ``.detach()``-ed (WGAN loss + gradient penalty on real/fake interpolates + drift on the
  real logits already computed), the G step, then G_ema by ``lerp_``. ``hand-freeze`` also sets
  ``D.requires_grad_(False)`` around the G step, so its backward computes no D weight gradients.
  With ``--set run.precision=bf16`` the hand loops run their forwards under CPU bf16 autocast
  as well (a practitioner's ``torch.autocast("cpu", dtype=torch.bfloat16)``; losses and the
  gradient-penalty norm in float32), so gankit's bf16 is timed against bf16 hand loops; the
  peers have no mixed-precision mode on the CPU and stay fp32.
* ``--peers DIR``: also ``pro_gan`` and ``gan_zoo``, the worker scripts of a prepared copy of the
  shared peer harness (``DIR/progan_worker.py``, ``DIR/ganzoo_worker.py``; the peers' code never
  enters this repository). Their configuration is fixed by that harness (batch 32, latent 128,
  128 maps) and matches recipes/bench-pggan32.toml.

Phases: ``s16`` 16px stable, ``s32`` 32px stable, ``f32`` 32px mid-fade (alpha 0.5). Each system
runs in its own process with 2 torch threads (its peak RSS is that process's ``ru_maxrss``).
Rounds are interleaved: per round and phase every system runs ``warmup`` + ``timed`` iterations
in turn, the starting system rotated by one each round. A system's figure for a phase is the
median over rounds of its per-round median s/iter; a ratio "gankit / X" is gankit's throughput
over X's, the median over rounds of (X's round median / gankit's round median), so > 1 means
gankit is faster. ``--quick`` shrinks the networks (8 maps, latent 16, batch 8) and the rounds
to a smoke run of a few seconds (what tests/test_bench_peers.py runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECIPE = ROOT / "recipes" / "bench-pggan32.toml"
THREADS = 2  # torch threads per worker (the harness's setting); --threads changes it
PHASES = {"s16": (16, 1.0), "s32": (32, 1.0), "f32": (32, 0.5)}
QUICK_SETS = ["architecture.latent_dim=16", "architecture.fmap_base=256", "architecture.fmap_max=8",
              "growth.batch_size=8"]
OWN_SYSTEMS = ("gankit", "hand-detach", "hand-freeze")
PEER_SCRIPTS = {"pro_gan": "progan_worker.py", "gan_zoo": "ganzoo_worker.py"}
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's gan_kit, before any installed one


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ------------------------------------------------------------------------ configuration ----


def config_from_recipe(recipe_path: Path, sets: list[str]) -> dict:
    """The sizes and hyper-parameters the hand-written loop needs, read from the recipe (through
    gankit's loader, so overrides and defaults resolve as for ``gankit run``). Raises GankitError
    for a recipe this benchmark cannot mirror by hand."""
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.base.errors import GankitError
    from gan_kit.recipe import load_recipe

    recipe, plugins = load_recipe(recipe_path, list(sets))
    where = f"{recipe_path}"

    def need(ok, key, value, fix):
        if not ok:
            raise GankitError(f"{where}: {key}: {value!r} is not mirrored by the hand-written loop ({fix})")

    need(recipe.architecture.name == "pggan", "architecture.name", recipe.architecture.name, 'use "pggan"')
    need(recipe.data.name == "digits", "data.name", recipe.data.name, 'use "digits"')
    need(recipe.init.name == "equalized-lr", "init.name", recipe.init.name, 'use "equalized-lr"')
    need(recipe.optim.name == "adam", "optim.name", recipe.optim.name, 'use "adam"')
    loss = recipe.loss.name
    need(loss in ("wgan", "wgan-gp"), "loss.name", loss, 'use "wgan" with gradient-penalty and drift penalties')
    need(recipe.update.options.d_steps == 1, "update.d_steps", recipe.update.options.d_steps, "use 1")
    need(recipe.ema.decay is not None, "ema.decay", recipe.ema.decay, "set a fixed decay, e.g. 0.999")
    need(recipe.run.precision in ("fp32", "bf16", "auto"), "run.precision", recipe.run.precision, 'use "fp32" or "bf16"')
    gp, drift = 0.0, 0.0
    gp_target = 1.0
    specs = [(s.name, s.slot.weight, s.options) for s in recipe.penalties]
    if loss == "wgan-gp":  # the preset: gradient penalty 10 + drift 0.001 (PGGAN appendix A.1)
        specs += [("gradient-penalty", 10.0, None), ("drift", 0.001, None)]
    for name, weight, opts in specs:
        need(name in ("gradient-penalty", "drift"), "penalty", name, "use gradient-penalty and drift only")
        if name == "gradient-penalty":
            gp += weight
            gp_target = float(getattr(opts, "target", 1.0)) if opts is not None else 1.0
        else:
            drift += weight
    arch_comp = plugins.registry.get("architecture", "pggan")
    arch = arch_comp.factory(recipe.architecture.options, BuildContext(recipe.resolution, 1, recipe))
    a = recipe.architecture.options
    growth = recipe.growth.options
    batch = growth.batch_size
    batches = {int(k): int(v) for k, v in batch.items()} if isinstance(batch, dict) else None
    o = recipe.optim
    from gan_kit.base.cpufeatures import auto_precision

    return {
        "resolution": recipe.resolution,
        "latent_dim": a.latent_dim,
        "nf": {str(r): arch.nf(r) for r in (4 * 2**i for i in range(int(math.log2(recipe.resolution)) - 1))},
        "mbstd_group": a.mbstd_group_size,
        "pixelnorm": a.pixelnorm,
        "batch": {str(r): (batches[r] if batches else int(batch)) for r in (16, 32)},
        "lr": o.g_lr if o.g_lr is not None else o.lr,
        "d_lr": o.d_lr if o.d_lr is not None else o.lr,
        "betas": list(o.betas),
        "eps": o.eps,
        "gp": gp,
        "gp_target": gp_target,
        "drift": drift,
        "ema_decay": recipe.ema.decay,
        "seed": recipe.run.seed,
        # bf16: the hand loops run their forwards under CPU bf16 autocast too, as a practitioner
        # would; "auto" as gankit resolves it on the CPU
        "bf16": recipe.run.precision == "bf16" or (recipe.run.precision == "auto" and auto_precision("cpu", recipe.run.cpu_bf16) == "bf16"),
    }


# -------------------------------------------------------------------- the hand-written loop ----


def _hand_modules():
    """The hand-written PGGAN G and D classes (imported lazily: torch only in workers/tests)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    sqrt2 = math.sqrt(2.0)

    class EqConv(nn.Module):
        # Equalized learning rate (Karras et al. 2018, sec. 4.1): N(0,1) weights, scaled at run time.
        def __init__(self, cin, cout, k, gain=sqrt2):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
            self.bias = nn.Parameter(torch.zeros(cout))
            self.scale = gain / math.sqrt(cin * k * k)
            self.pad = k // 2

        def forward(self, x):
            return F.conv2d(x, self.weight * self.scale, self.bias, padding=self.pad)

    class EqLinear(nn.Module):
        def __init__(self, cin, cout, gain=sqrt2):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(cout, cin))
            self.bias = nn.Parameter(torch.zeros(cout))
            self.scale = gain / math.sqrt(cin)

        def forward(self, x):
            return F.linear(x, self.weight * self.scale, self.bias)

    def pn(x):
        return x * torch.rsqrt(x.square().mean(dim=1, keepdim=True) + 1e-8)

    def lrelu(x):
        return F.leaky_relu(x, 0.2)

    def mbstd(x, group):
        n, c, h, w = x.shape
        g = min(group, n)
        y = x.reshape(g, n // g, c, h, w)
        y = (y - y.mean(0, keepdim=True)).square().mean(0).add(1e-8).sqrt()
        s = y.mean(dim=(1, 2, 3)).repeat(g).reshape(n, 1, 1, 1).expand(n, 1, h, w)
        return torch.cat([x, s], 1)

    class G(nn.Module):
        # Same layer names as gankit's pggan Generator, so weights can be copied across by name.
        def __init__(self, cfg, channels=1):
            super().__init__()
            nf = {int(k): v for k, v in cfg["nf"].items()}
            self.res_list = sorted(nf)
            self.pixelnorm = cfg["pixelnorm"]
            self.dense = EqLinear(cfg["latent_dim"], nf[4] * 16, gain=sqrt2 / 4)
            self.conv4 = EqConv(nf[4], nf[4], 3)
            self.blocks = nn.ModuleDict({str(r): nn.ModuleList([EqConv(nf[r // 2], nf[r], 3), EqConv(nf[r], nf[r], 3)])
                                         for r in self.res_list[1:]})
            self.to_rgb = nn.ModuleDict({str(r): EqConv(nf[r], channels, 1, gain=1.0) for r in self.res_list})

        def forward(self, z, res, alpha):
            norm = pn if self.pixelnorm else (lambda t: t)
            x = norm(lrelu(self.dense(norm(z)).reshape(z.shape[0], -1, 4, 4)))
            x = norm(lrelu(self.conv4(x)))
            prev = x
            for r in self.res_list[1:]:
                if r > res:
                    break
                prev = x
                x = F.interpolate(x, scale_factor=2, mode="nearest")
                c1, c2 = self.blocks[str(r)]
                x = norm(lrelu(c2(norm(lrelu(c1(x))))))
            rgb = self.to_rgb[str(res)](x)
            if alpha < 1.0:
                low = F.interpolate(self.to_rgb[str(res // 2)](prev), scale_factor=2, mode="nearest")
                rgb = torch.lerp(low, rgb, alpha)
            return rgb

    class D(nn.Module):
        def __init__(self, cfg, channels=1):
            super().__init__()
            nf = {int(k): v for k, v in cfg["nf"].items()}
            self.res_list = sorted(nf)
            self.group = cfg["mbstd_group"]
            self.from_rgb = nn.ModuleDict({str(r): EqConv(channels, nf[r], 1) for r in self.res_list})
            self.blocks = nn.ModuleDict({str(r): nn.ModuleList([EqConv(nf[r], nf[r], 3), EqConv(nf[r], nf[r // 2], 3)])
                                         for r in self.res_list[1:]})
            self.conv4 = EqConv(nf[4] + (1 if self.group else 0), nf[4], 3)
            self.dense = EqLinear(nf[4] * 16, nf[4])
            self.out = EqLinear(nf[4], 1, gain=1.0)

        def forward(self, img, res, alpha):
            x = lrelu(self.from_rgb[str(res)](img))
            for r in [r for r in reversed(self.res_list[1:]) if r <= res]:
                c1, c2 = self.blocks[str(r)]
                x = F.avg_pool2d(lrelu(c2(lrelu(c1(x)))), 2)
                if r == res and alpha < 1.0:
                    low = lrelu(self.from_rgb[str(res // 2)](F.avg_pool2d(img, 2)))
                    x = torch.lerp(low, x, alpha)
            if self.group:
                x = mbstd(x, self.group)
            x = lrelu(self.conv4(x))
            x = lrelu(self.dense(x.flatten(1)))
            return self.out(x).squeeze(1)

    return G, D


def digits_tensor(resolution: int):
    """The UCI digits as gankit's ``digits`` dataset makes them: ``[1797, 1, r, r]`` in [-1, 1]
    (bicubic upsampling of the 8x8 images, clamped)."""
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    x = torch.tensor(load_digits().images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = F.interpolate(x, size=(resolution, resolution), mode="bicubic", align_corners=False)
    return (x.clamp(0.0, 1.0) * 2.0 - 1.0).contiguous()


class HandLoop:
    """One PGGAN training iteration in plain PyTorch, as a practitioner writes it.

    ``cfg``: the dict of ``config_from_recipe``. ``freeze``: D's parameters stop requiring grad
    during the G step. ``images``: real images ``[N, C, R, R]`` at the final resolution R.
    ``step(res, alpha) -> (d_loss, g_loss)`` runs one iteration (floats).
    """

    def __init__(self, cfg: dict, freeze: bool, images=None):
        import torch

        torch.manual_seed(cfg["seed"])
        G, D = _hand_modules()
        self.cfg, self.freeze = cfg, freeze
        self.images = images if images is not None else digits_tensor(cfg["resolution"])
        self.G, self.D = G(cfg, self.images.shape[1]), D(cfg, self.images.shape[1])
        self.G_ema = G(cfg, self.images.shape[1])
        self.G_ema.load_state_dict(self.G.state_dict())
        self.G_ema.requires_grad_(False)
        betas = tuple(cfg["betas"])
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=cfg["lr"], betas=betas, eps=cfg["eps"])
        self.opt_D = torch.optim.Adam(self.D.parameters(), lr=cfg["d_lr"], betas=betas, eps=cfg["eps"])
        self.gen = torch.Generator().manual_seed(cfg["seed"])
        self.g_params, self.ema_params = list(self.G.parameters()), list(self.G_ema.parameters())

    def reals(self, res: int, alpha: float, n: int):
        import torch
        import torch.nn.functional as F

        x = self.images[torch.randint(0, self.images.shape[0], (n,), generator=self.gen)]
        if x.shape[-1] != res:
            x = F.avg_pool2d(x, x.shape[-1] // res)
        if alpha < 1.0:
            low = F.interpolate(F.avg_pool2d(x, 2), scale_factor=2, mode="nearest")
            x = torch.lerp(low, x, alpha)
        return x

    def step(self, res: int, alpha: float) -> tuple[float, float]:
        import torch

        cfg = self.cfg
        n = cfg["batch"][str(res)]
        real = self.reals(res, alpha, n)
        amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.get("bf16", False))
        # D step
        with amp:
            fake = self.G(torch.randn(n, cfg["latent_dim"]), res, alpha).detach().float()
            real_logits = self.D(real, res, alpha).float()
            fake_logits = self.D(fake, res, alpha).float()
        self.opt_D.zero_grad()
        d_loss = fake_logits.mean() - real_logits.mean()
        if cfg["gp"]:
            eps = torch.rand(n, 1, 1, 1)
            x_hat = torch.lerp(fake, real, eps).requires_grad_(True)
            with amp:
                out = self.D(x_hat, res, alpha).float().sum()
            (grad,) = torch.autograd.grad(out, x_hat, create_graph=True)
            norm = (grad.float().flatten(1).square().sum(1) + 1e-12).sqrt()
            d_loss = d_loss + cfg["gp"] * (norm - cfg["gp_target"]).square().mean()
        if cfg["drift"]:
            d_loss = d_loss + cfg["drift"] * real_logits.square().mean()
        d_loss.backward()
        self.opt_D.step()
        # G step
        self.opt_G.zero_grad()
        if self.freeze:
            self.D.requires_grad_(False)
        with amp:
            g_loss = -self.D(self.G(torch.randn(n, cfg["latent_dim"]), res, alpha), res, alpha).float().mean()
        g_loss.backward()
        if self.freeze:
            self.D.requires_grad_(True)
        self.opt_G.step()
        # G_ema
        with torch.no_grad():
            for pe, p in zip(self.ema_params, self.g_params):
                pe.lerp_(p, 1.0 - cfg["ema_decay"])
        return d_loss.item(), g_loss.item()


class HandSystem:
    def __init__(self, cfg: dict, variant: str):
        self.loop = HandLoop(cfg, freeze=variant == "hand-freeze")

    def prepare(self, phase: str) -> None:
        for _ in range(2):
            self.loop.step(*PHASES[phase])

    def round(self, phase: str, warmup: int, timed: int) -> list[float]:
        out = []
        for i in range(warmup + timed):
            t0 = time.perf_counter()
            self.loop.step(*PHASES[phase])
            if i >= warmup:
                out.append(time.perf_counter() - t0)
        return out


# ------------------------------------------------------------------------- gankit itself ----


def phase_position(run, resolution: int, alpha: float) -> int:
    """``cur_nimg`` at which ``run``'s schedule is at ``resolution`` with fade weight ``alpha``
    (1.0 = the first image of its stabilisation). Raises GankitError if the schedule never is."""
    from gan_kit.base.errors import GankitError

    for ph in run.phases():
        if ph.resolution == resolution:
            if alpha < 1.0 and ph.fade_nimg == 0:
                break
            return int(ph.start_nimg + round(ph.fade_nimg * min(alpha, 1.0)))
    raise GankitError(f"{run.recipe.path}: growth: the schedule never reaches {resolution}px at alpha {alpha:g} "
                      f"(phases: {', '.join(f'{p.resolution}px' for p in run.phases())})")


class GankitSystem:
    """gankit as ``gankit run`` trains: ``session.train`` from the phase's position, timed by a
    ``step_finished`` hook."""

    def __init__(self, recipe_path: Path, sets: list[str]):
        from gan_kit import hookimpl
        from gan_kit.runs.run import build_run
        from gan_kit.recipe import load_recipe

        stamps: list[float] = []

        class Timer:
            @hookimpl
            def step_finished(self, run, stats):
                stamps.append(time.perf_counter())

        self.stamps = stamps
        self.tmp = tempfile.TemporaryDirectory(prefix="gankit-bench-")
        # no tick inside the timed steps; no device choice left to "auto" on a CUDA machine
        sets = list(sets) + ["run.tick_kimg=1000000", "run.total_kimg=1000000", "run.progress=false",
                             "run.snapshot_ticks=0", "metric=[]", "run.device=cpu"]
        recipe, plugins = load_recipe(recipe_path, sets, extra_plugins=[Timer()])
        self.run = build_run(recipe, plugins, out_dir=Path(self.tmp.name) / "run")

    def _train(self, phase: str, steps: int) -> None:
        from gan_kit.runs.session import train

        res, alpha = PHASES[phase]
        self.run.cur_nimg = phase_position(self.run, res, alpha)
        train(self.run, max_steps=steps, overwrite=True)
        ph = self.run.phase
        if ph.resolution != res or abs(ph.alpha - alpha) > 0.01:
            raise RuntimeError(f"gankit ran at {ph.resolution}px alpha {ph.alpha:.3f}, wanted {res}px alpha {alpha}")

    def prepare(self, phase: str) -> None:
        self._train(phase, 2)

    def round(self, phase: str, warmup: int, timed: int) -> list[float]:
        self.stamps.clear()
        self._train(phase, warmup + timed + 1)  # the first stamp opens the first interval
        s = self.stamps
        return [b - a for a, b in zip(s, s[1:])][-timed:]


# ------------------------------------------------------------------------------- workers ----


def serve(system_factory) -> None:
    """Worker loop (the shared harness's protocol): one JSON command per stdin line (``prepare``
    with ``phases``, ``round`` with ``phase``/``warmup``/``timed``, ``quit``), one JSON answer per
    line on the original stdout; anything the system prints goes to stderr."""
    import torch

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    torch.set_num_threads(int(os.environ.get("GANKIT_BENCH_THREADS", THREADS)))
    system = system_factory()

    def answer(obj):
        proto.write(json.dumps(obj) + "\n")

    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "prepare":
                t0 = time.perf_counter()
                for ph in cmd["phases"]:
                    system.prepare(ph)
                answer({"ok": True, "s": time.perf_counter() - t0, "rss_mib": peak_rss_mib(),
                        "threads": torch.get_num_threads()})
            elif cmd["cmd"] == "round":
                answer({"ok": True, "times": system.round(cmd["phase"], cmd["warmup"], cmd["timed"]),
                        "rss_mib": peak_rss_mib()})
            elif cmd["cmd"] == "quit":
                answer({"ok": True, "rss_mib": peak_rss_mib()})
                return
        except Exception as e:  # report to the coordinator, keep serving
            traceback.print_exc()
            answer({"ok": False, "error": f"{type(e).__name__}: {e}"})


class Worker:
    def __init__(self, name: str, argv: list[str], cwd: Path, log, threads: int = THREADS):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   GANKIT_BENCH_THREADS=str(threads), PYTHONWARNINGS="ignore")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        self.name = name
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                  bufsize=1, env=env, cwd=str(cwd))

    def send(self, **cmd) -> None:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def receive(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: worker exited (rc {self.p.poll()}); see its log")
        ans = json.loads(line)
        if not ans.get("ok"):
            raise RuntimeError(f"{self.name}: {ans.get('error')}")
        return ans

    def call(self, **cmd) -> dict:
        self.send(**cmd)
        return self.receive()


# -------------------------------------------------------------------------- coordinator ----


def summarise(records: list[dict], ref: str = "gankit") -> dict:
    """Per (phase, system): ``s_iter`` (median over rounds of the round medians), ``rounds``, and
    ``speedup[X]`` = ref's throughput / X's (median over rounds of X's round median over ref's)."""
    rounds: dict = {}
    for r in records:
        rounds.setdefault(r["phase"], {}).setdefault(r["round"], {})[r["system"]] = statistics.median(r["times"])
    out: dict = {}
    for ph, by_round in rounds.items():
        systems = {s for per in by_round.values() for s in per}
        out[ph] = {}
        for s in systems:
            meds = [per[s] for per in by_round.values() if s in per]
            ratios = [per[s] / per[ref] for per in by_round.values() if s in per and ref in per]
            out[ph][s] = {"s_iter": statistics.median(meds), "rounds": len(meds),
                          "ref_speedup": statistics.median(ratios) if ratios else None}
    return out


def table(summary: dict, systems: list[str], rss: dict, phases: list[str], ref: str = "gankit") -> str:
    head = "| phase | " + " | ".join(systems) + " |"
    lines = [head, "|---|" + "---|" * len(systems)]
    for ph in phases:
        cells = []
        for s in systems:
            e = summary.get(ph, {}).get(s)
            if e is None:
                cells.append("-")
            elif s == ref:
                cells.append(f"{e['s_iter']:.3f}")
            else:
                cells.append(f"{e['s_iter']:.3f} ({ref} {e['ref_speedup']:.2f}x)")
        res, alpha = PHASES[ph]
        lines.append(f"| {res}x{res} {'stable' if alpha >= 1 else f'fade {alpha:g}'}, s/iter | " + " | ".join(cells) + " |")
    lines.append("| peak RSS, MiB | " + " | ".join(f"{rss.get(s, 0):.0f}" for s in systems) + " |")
    return "\n".join(lines)


def worker_argv(name: str, args) -> tuple[list[str], Path]:
    if name in PEER_SCRIPTS:
        return [sys.executable, str(Path(args.peers) / PEER_SCRIPTS[name])], Path(args.peers)
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--recipe", str(args.recipe)]
    for s in args.sets:
        argv += ["--set", s]
    return argv, ROOT


def coordinate(args) -> dict:
    systems = list(OWN_SYSTEMS) + (list(PEER_SCRIPTS) if args.peers else [])
    if args.systems:
        systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in OWN_SYSTEMS and s not in PEER_SCRIPTS]
    if unknown or (any(s in PEER_SCRIPTS for s in systems) and not args.peers):
        raise SystemExit(f"error: --systems: {', '.join(unknown) or 'pro_gan/gan_zoo'}: unknown system or no --peers "
                         f"DIR given (systems: {', '.join(OWN_SYSTEMS + tuple(PEER_SCRIPTS))})")
    phases = [p.strip() for p in args.phases.split(",")]
    bad = [p for p in phases if p not in PHASES]
    if bad:
        raise SystemExit(f"error: --phases: unknown phase {bad[0]!r} (choose from {', '.join(PHASES)})")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-peers-logs-"))
    workers = []
    # Start every worker at once (imports overlap), then prepare them one after the other.
    for s in systems:
        argv, cwd = worker_argv(s, args)
        workers.append(Worker(s, argv, cwd, open(log_dir / f"{s}.log", "w"), args.threads))
    records, rss = [], {}
    try:
        for w in workers:
            ans = w.call(cmd="prepare", phases=phases)
            rss[w.name] = ans["rss_mib"]
        load_start = os.getloadavg()[0]
        for r in range(args.rounds):
            for ph in phases:
                k = r % len(workers)
                for w in workers[k:] + workers[:k]:
                    ans = w.call(cmd="round", phase=ph, warmup=args.warmup, timed=args.timed)
                    rss[w.name] = max(rss[w.name], ans["rss_mib"])
                    records.append({"round": r, "phase": ph, "system": w.name, "times": ans["times"],
                                    "loadavg": os.getloadavg()[0]})
                    if not args.quiet:
                        print(f"round {r} {ph} {w.name}: {statistics.median(ans['times']):.3f} s/iter "
                              f"(load {records[-1]['loadavg']:.2f})", file=sys.stderr, flush=True)
        for w in workers:
            rss[w.name] = max(rss[w.name], w.call(cmd="quit")["rss_mib"])
    except RuntimeError as e:
        raise SystemExit(f"error: {e} (logs in {log_dir})") from None
    finally:
        for w in workers:
            try:
                w.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.p.kill()
    return {"systems": systems, "phases": phases, "records": records, "rss_mib": rss,
            "summary": summarise(records), "load_start": load_start, "logs": str(log_dir),
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a recipe value (gankit and the hand-written loops alike)")
    ap.add_argument("--systems", default=None, help=f"comma-separated subset of {', '.join(OWN_SYSTEMS)}, pro_gan, gan_zoo")
    ap.add_argument("--phases", default="s32,f32,s16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timed", type=int, default=10)
    ap.add_argument("--peers", default=None, help="a prepared copy of the shared peer harness (adds pro_gan, gan_zoo)")
    ap.add_argument("--json", type=Path, default=None, help="write every round and the summary here")
    ap.add_argument("--quick", action="store_true", help="tiny networks, 1 round: a smoke run of a few seconds")
    ap.add_argument("--threads", type=int, default=THREADS,
                    help="torch threads per gankit/hand worker (the peer workers set their own 2)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.sets = QUICK_SETS + args.sets
        args.rounds, args.warmup, args.timed, args.threads = 1, 1, 2, 1
    if args.worker:
        if args.worker == "gankit":  # (the worker's torch threads come from GANKIT_BENCH_THREADS)
            serve(lambda: GankitSystem(args.recipe, args.sets))
        else:
            cfg = config_from_recipe(args.recipe, args.sets)
            serve(lambda: HandSystem(cfg, args.worker))
        return 0
    from gan_kit.base.errors import GankitError

    try:
        config_from_recipe(args.recipe, args.sets)  # one clear line for a recipe the loop cannot mirror
    except GankitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"uptime before: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    result = coordinate(args)
    print(f"uptime after:  {result['uptime']}")
    print(f"recipe {args.recipe} {' '.join('--set ' + s for s in args.sets)}; {args.rounds} rounds x "
          f"({args.warmup} warm-up + {args.timed} timed) iterations per phase, {args.threads} threads per worker; "
          f"median over rounds of per-round medians; 'gankit N.NNx' = gankit's throughput / that system's")
    print(table(result["summary"], result["systems"], result["rss_mib"], result["phases"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
