"""Write ``tests/data/r3gan_reference.pt``: what the official R3GAN code computes for fixed seeds,
which ``tests/test_r3gan_parity.py`` compares gankit's ``r3gan`` with, point by point.

The official code (Huang et al. 2024, github.com/brownvc/R3GAN; recorded: commit 19a7ddf) is
run, not copied: point ``--official`` at a checkout of it. The suite then needs neither the
network nor that code, only the file this writes (about 1.7 MB).

    git clone https://github.com/brownvc/R3GAN /tmp/R3GAN
    python tests/data/make_r3gan_reference.py --official /tmp/R3GAN

It runs on the CPU, where the official ``bias_act`` and ``upfirdn2d`` ops take their reference
(plain PyTorch) paths. Two modules the official package imports at the top and this path never
uses are stood in for when absent (``pkg_resources.parse_version``, from ``packaging``; ``psutil``,
empty), so a current environment can import it.

What it records, each for the networks below with their official state dicts:

- ``forward``: G(z) and D's logits on reals and on G's fakes, unconditional and class-conditional.
- ``iteration``: one training iteration in the official loop's order (``training_loop.py``) with
  the official loss (``R3GAN/Trainer.py``): the D phase's per-sample RpGAN loss, R1 and R2 and
  D's gradients with gamma, and without it (so the penalties' own gradient is their difference);
  D moved by plain SGD (each weight by ``-lr * grad``, to compare exactly); then the G phase on
  that D, with G's gradients. The G phase pairs G's fakes with the D phase's real batch, as
  gankit's ``d-then-g`` does (the official loop draws a second real batch; docs/architectures.md).
- ``resampling``: the official up- and downsamplers on a fixed input.
- ``init``, ``init_conditional``: per-parameter mean, std and share of exact zeros of freshly
  built official networks at a wider size (fix-up init statistics), unconditional and
  class-conditional.
- ``schedules``: the CIFAR-10 preset's schedules (``train.py``) through the official
  ``cosine_decay_with_warmup`` at several images shown, and the G_ema beta the loop derives.
- ``init_G``, ``init_D`` (in each case): the official networks as built from ``torch.manual_seed``
  (``init_seed``), before ``_perturb``: gankit builds the same weights draw for draw.
- ``training``: several whole iterations of the official loop (``training_loop.py``: the D phase,
  D's Adam step, the G phase, G's Adam step, the G_ema update) with recipes/r3gan.toml's settings
  (``RECIPE``: Adam with beta1 = 0 and eps, the cosine schedules of lr, beta2, gamma and the G_ema
  half-life over the run) on fixed batches and latents: ``every_step`` with R1 + R2 in every D
  step, as the official loop; ``lazy`` with the recipe's interval k, the StyleGAN2 lazy rule
  applied to the official loss terms (each D step on the RpGAN loss alone with Adam's lr x c and
  betas ** c, c = k / (k + 1), and every k-th iteration, after the G phase, a D step of its own on
  ``k * gamma / 2 * (R1 + R2)`` - R2 on fakes of the G just stepped - with the same optimizer).
  The networks' weights, G_ema's and each Adam step's lr, betas and eps after every iteration,
  and (``tiny``) the weights whose gradient was a true zero at some step (below ``TINY_GRAD``:
  a bias that shifts the real and fake logits alike, whose RpGAN gradient cancels), whose Adam
  steps are rounding's.

The networks' fix-up init starts every residual branch's last convolution and every bias at
zero, which would hide every term behind them from the comparison, so the recorded networks'
weights are first moved off their initial values by seeded noise (``_perturb``).
"""

from __future__ import annotations

import argparse
import copy
import sys
import types
from pathlib import Path

import torch

from checkout import checkout_commit, put_on_path  # beside this script: on sys.path when it runs

OUT = Path(__file__).resolve().parent / "r3gan_reference.pt"

#: The recorded networks (G's stages 4, 8, 16 px; D mirrors them): every kind of layer and
#: transition appears - a width change (16 -> 8) and none (8 -> 8), per-stage groups and
#: per-stage block counts - at a size that keeps this file small.
CONFIG = {"latent_dim": 8, "widths": [16, 8, 8], "cardinalities": [4, 2, 2], "blocks": [1, 1, 2],
          "expansion": 2, "kernel": 3, "resolution": 16, "channels": 3}
#: Class-conditional: G's embedding as wide as z, D's projection as the 4 px stage (the official
#: CIFAR-10 / ImageNet presets' choices).
CLASSES = {"num_classes": 5, "g_class_dim": 8, "d_class_dim": 16}
#: The wider networks whose initialisation statistics are recorded.
INIT_CONFIG = {"latent_dim": 64, "widths": [256, 64, 64], "cardinalities": [32, 8, 8], "blocks": [2, 2, 2],
               "expansion": 2, "kernel": 3}
#: ... and of their class-conditional form (the embeddings' init).
INIT_CLASSES = {"num_classes": 64, "g_class_dim": 128, "d_class_dim": 128}
BATCH = 4
GAMMA = 0.5          # large enough that R1 and R2 weigh in D's gradient
SGD_LR = 0.05        # the D step between the D and G phases
#: The official CIFAR-10 preset (train.py): (first value, last value) over decay_nimg = 2e7.
PRESET = {"lr": (2e-4, 5e-5), "beta2": (0.9, 0.99), "gamma": (0.05, 0.005), "ema_nimg": (0.0, 5e6),
          "aug_p": (0.0, 0.55)}
DECAY_NIMG = 2e7
PRESET_BATCH = 512
NIMG = [0, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 15_000_000, 19_999_488, 20_000_000, 30_000_000]
#: recipes/r3gan.toml's optimizer, schedules and lazy interval (the test checks the recipe still
#: says these), over a run of ``total_nimg`` images at BATCH images an iteration: every
#: schedule a half cosine from its first to its last value over the whole run.
RECIPE = {"lr": (5e-4, 1.25e-4), "beta1": 0.0, "beta2": (0.9, 0.99), "eps": 1e-8, "gamma": (0.05, 0.005),
          "ema_nimg": (1.0, 2000.0), "interval": 16, "total_nimg": 16, "iterations": 3}


def import_official(path: Path) -> types.SimpleNamespace:
    """The official modules, imported from ``path``."""
    put_on_path(path)
    import R3GAN.Networks as networks
    import R3GAN.Resamplers as resamplers
    import R3GAN.Trainer as trainer
    import training.training_loop as loop

    return types.SimpleNamespace(networks=networks, resamplers=resamplers, trainer=trainer, loop=loop)


def build(official, config: dict, classes: dict | None):
    """Official G and D for ``config`` (and ``classes``), as train.py builds them."""
    cond = {} if classes is None else {"ConditionDimension": classes["num_classes"]}
    G = official.networks.Generator(config["latent_dim"], config["widths"], config["cardinalities"], config["blocks"],
                                    config["expansion"], KernelSize=config["kernel"],
                                    ConditionEmbeddingDimension=classes["g_class_dim"] if classes else 0, **cond)
    D = official.networks.Discriminator(list(reversed(config["widths"])), list(reversed(config["cardinalities"])),
                                        list(reversed(config["blocks"])), config["expansion"],
                                        KernelSize=config["kernel"],
                                        ConditionEmbeddingDimension=classes["d_class_dim"] if classes else 0, **cond)
    return G.requires_grad_(False), D.requires_grad_(False)


@torch.no_grad()
def _perturb(net: torch.nn.Module, gen: torch.Generator) -> None:
    for p in net.parameters():
        fan_in = p[0].numel() if p.dim() > 1 else 1
        p.add_(torch.randn(p.shape, generator=gen) * 0.3 / fan_in ** 0.5)


def _state(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in net.named_parameters()}


def _grads(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {k: p.grad.detach().clone() for k, p in net.named_parameters() if p.grad is not None}
    for p in net.parameters():
        p.grad = None
    return grads


def record_case(official, classes: dict | None, seed: int) -> dict:
    """Networks, inputs, forwards and one training iteration (see the module docstring)."""
    torch.manual_seed(seed)
    G, D = build(official, CONFIG, classes)
    init_G, init_D = _state(G), _state(D)
    gen = torch.Generator().manual_seed(seed + 1)
    _perturb(G, gen)
    _perturb(D, gen)
    n, c, r = BATCH, CONFIG["channels"], CONFIG["resolution"]
    z_d = torch.randn(n, CONFIG["latent_dim"], generator=gen)
    z_g = torch.randn(n, CONFIG["latent_dim"], generator=gen)
    real = (torch.randn(n, c, r, r, generator=gen) * 0.5).clamp(-1, 1)
    labels = torch.randint(classes["num_classes"], (n,), generator=gen) if classes else None
    onehot = torch.nn.functional.one_hot(labels, classes["num_classes"]).float() if classes else None
    case = {"G": _state(G), "D": _state(D), "z_d": z_d, "z_g": z_g, "real": real, "labels": labels}
    with torch.no_grad():
        fake = G(z_d, onehot)
        case["forward"] = {"fake": fake, "real_logits": D(real, onehot), "fake_logits": D(fake, onehot)}
    trainer = official.trainer.AdversarialTraining(G, D)
    it: dict = {"gamma": GAMMA, "sgd_lr": SGD_LR}
    # The D phase (training_loop.py: the module's requires_grad on, gradients accumulated, off).
    D.requires_grad_(True)
    adv, rel, r1, r2 = trainer.AccumulateDiscriminatorGradients(z_d, real, onehot, GAMMA)
    it.update(d_adversarial=adv, d_relativistic=rel, r1=r1, r2=r2, d_grads=_grads(D))
    trainer.AccumulateDiscriminatorGradients(z_d, real, onehot, 0.0)
    it["d_grads_without_penalties"] = _grads(D)
    D.requires_grad_(False)
    with torch.no_grad():
        for name, p in D.named_parameters():
            p.sub_(SGD_LR * it["d_grads"][name])
    # The G phase, on the D just stepped.
    G.requires_grad_(True)
    g_adv, g_rel = trainer.AccumulateGeneratorGradients(z_g, real, onehot)
    it.update(g_adversarial=g_adv, g_relativistic=g_rel, g_grads=_grads(G))
    G.requires_grad_(False)
    case["iteration"] = it
    case.update(init_seed=seed, init_G=init_G, init_D=init_D)
    return case


def _cosine(official, key: str, nimg: int) -> float:
    first, last = RECIPE[key]
    return official.loop.cosine_decay_with_warmup(nimg, first, RECIPE["total_nimg"], last)


#: A gradient element below this is rounding (a true zero): Adam, which divides by |grad| + eps,
#: turns its rounding into a step of up to lr, so its weight is rounding's, not the code's.
TINY_GRAD = 1e-8


def _adam_step(opt: torch.optim.Optimizer, lr: float, beta2: float, ratio: float, net: torch.nn.Module,
               tiny: dict) -> dict:
    """One Adam step at ``lr`` and betas ``(beta1, beta2)``, both corrected by ``ratio`` (lr x ratio,
    betas ** ratio); marks in ``tiny`` the elements whose gradient is rounding; returns the
    settings used."""
    for name, p in net.named_parameters():
        if p.grad is not None:
            tiny[name] = tiny.get(name, torch.zeros_like(p, dtype=torch.bool)) | (p.grad.abs() < TINY_GRAD)
    for g in opt.param_groups:
        g["lr"] = lr * ratio
        g["betas"] = (RECIPE["beta1"] ** ratio, beta2 ** ratio)
    opt.step()
    g = opt.param_groups[0]
    return {"lr": g["lr"], "beta1": g["betas"][0], "beta2": g["betas"][1], "eps": g["eps"]}


def record_training(official, lazy: bool, seed: int = 5) -> dict:
    """``RECIPE["iterations"]`` iterations of the official loop (see the module docstring)."""
    torch.manual_seed(seed)
    G, D = build(official, CONFIG, None)
    gen = torch.Generator().manual_seed(seed + 1)
    _perturb(G, gen)
    _perturb(D, gen)
    G_ema = copy.deepcopy(G)
    n, c, r, steps = BATCH, CONFIG["channels"], CONFIG["resolution"], RECIPE["iterations"]
    reals = (torch.randn(steps, n, c, r, r, generator=gen) * 0.5).clamp(-1, 1)
    z_d, z_g, z_r = (torch.randn(steps, n, CONFIG["latent_dim"], generator=gen) for _ in range(3))
    rec = {"G": _state(G), "D": _state(D), "reals": reals, "z_d": z_d, "z_g": z_g, "z_r": z_r, "lazy": lazy,
           "recipe": dict(RECIPE), "after": [], "settings": [], "tiny": {"G": {}, "D": {}}}
    k = RECIPE["interval"] if lazy else 1
    ratio = k / (k + 1) if lazy else 1.0
    # The official train.py's optimizers: Adam, betas set per step by the loop, eps 1e-8.
    opt_D = torch.optim.Adam(D.parameters(), betas=(0.0, 0.0), eps=RECIPE["eps"])
    opt_G = torch.optim.Adam(G.parameters(), betas=(0.0, 0.0), eps=RECIPE["eps"])
    trainer = official.trainer.AdversarialTraining(G, D)
    for i in range(steps):
        nimg = i * n
        lr, beta2, gamma = (_cosine(official, key, nimg) for key in ("lr", "beta2", "gamma"))
        ema_nimg = _cosine(official, "ema_nimg", nimg)
        used = {}
        opt_D.zero_grad(set_to_none=True)
        D.requires_grad_(True)
        trainer.AccumulateDiscriminatorGradients(z_d[i], reals[i], None, 0.0 if lazy else gamma)
        D.requires_grad_(False)
        used["D"] = _adam_step(opt_D, lr, beta2, ratio, D, rec["tiny"]["D"])
        opt_G.zero_grad(set_to_none=True)
        G.requires_grad_(True)
        trainer.AccumulateGeneratorGradients(z_g[i], reals[i], None)
        G.requires_grad_(False)
        used["G"] = _adam_step(opt_G, lr, beta2, 1.0, G, rec["tiny"]["G"])
        if lazy and i % k == 0:
            # The lazy R1 + R2 step: the official penalty terms, k times their weight.
            opt_D.zero_grad(set_to_none=True)
            D.requires_grad_(True)
            real = reals[i].detach().requires_grad_(True)
            with torch.no_grad():
                fake = G(z_r[i], None)
            fake.requires_grad_(True)
            penalty = official.trainer.AdversarialTraining.ZeroCenteredGradientPenalty
            r1, r2 = penalty(real, D(real, None)), penalty(fake, D(fake, None))
            (k * gamma / 2 * (r1 + r2)).mean().backward()
            D.requires_grad_(False)
            used["D_reg"] = _adam_step(opt_D, lr, beta2, ratio, D, rec["tiny"]["D"])
        # The loop's G_ema update.
        beta = 0.5 ** (n / max(ema_nimg, 1e-8))
        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters()):
                p_ema.copy_(p.lerp(p_ema, beta))
        used["ema_beta"] = beta
        rec["settings"].append(used)
        rec["after"].append({"G": _state(G), "D": _state(D), "G_ema": _state(G_ema)})
    return rec


def record_resampling(official) -> dict:
    gen = torch.Generator().manual_seed(7)
    low, high = torch.randn(2, 3, 8, 8, generator=gen), torch.randn(2, 3, 16, 16, generator=gen)
    up, down = official.resamplers.InterpolativeUpsampler([1, 2, 1]), official.resamplers.InterpolativeDownsampler([1, 2, 1])
    with torch.no_grad():
        return {"low": low, "high": high, "up": up(low), "down": down(high), "kernel": up.Kernel.clone()}


INIT_SEED = 11


def record_init(official, classes: dict | None) -> dict:
    torch.manual_seed(INIT_SEED)
    G, D = build(official, INIT_CONFIG, classes)
    stats = {}
    for net_name, net in (("G", G), ("D", D)):
        for name, p in net.named_parameters():
            p = p.detach().double()
            stats[f"{net_name}.{name}"] = torch.tensor([p.mean(), p.std() if p.numel() > 1 else 0.0,
                                                        (p == 0).double().mean()])
    return {"config": dict(INIT_CONFIG), "classes": dict(classes) if classes else None, "stats": stats,
            "seed": INIT_SEED}


def record_schedules(official) -> dict:
    f = official.loop.cosine_decay_with_warmup
    values = {key: torch.tensor([f(nimg, first, DECAY_NIMG, last) for nimg in NIMG], dtype=torch.float64)
              for key, (first, last) in PRESET.items()}
    # The loop's G_ema decay per iteration, from the half-life in images the schedule gives.
    values["ema_beta"] = torch.tensor([0.5 ** (PRESET_BATCH / max(h, 1e-8)) for h in values["ema_nimg"].tolist()],
                                      dtype=torch.float64)
    return {"nimg": NIMG, "decay_nimg": DECAY_NIMG, "batch": PRESET_BATCH,
            "preset": {k: list(v) for k, v in PRESET.items()}, "values": values}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", type=Path, required=True, help="a checkout of github.com/brownvc/R3GAN")
    ap.add_argument("--commit", default=None, help="the checkout's commit, when it is no git checkout")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not (args.official / "R3GAN" / "Networks.py").is_file():
        print(f"--official: {args.official} has no R3GAN/Networks.py (clone github.com/brownvc/R3GAN there)",
              file=sys.stderr)
        return 2
    official = import_official(args.official.resolve())
    torch.set_num_threads(1)  # the same reductions whatever the machine
    data = {
        "source": {"repository": "github.com/brownvc/R3GAN", "commit": args.commit or checkout_commit(args.official),
                   "torch": str(torch.__version__)},
        "config": dict(CONFIG), "classes": dict(CLASSES), "batch": BATCH,
        "unconditional": record_case(official, None, seed=0),
        "conditional": record_case(official, CLASSES, seed=3),
        "resampling": record_resampling(official),
        "init": record_init(official, None),
        "init_conditional": record_init(official, INIT_CLASSES),
        "schedules": record_schedules(official),
        "training": {"every_step": record_training(official, lazy=False),
                     "lazy": record_training(official, lazy=True)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB) from {data['source']['commit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
