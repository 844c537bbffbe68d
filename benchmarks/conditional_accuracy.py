"""How often a class-conditional G draws the class it is asked for.

A small CNN classifier is trained on the run's own data set (the digits, at the run's final
resolution; 80% of them, the other 20% give its held-out accuracy), then the checkpoint's G_ema
draws ``--per-class`` images of every class and the classifier labels them. "Agreement" is the
share of generated images whose predicted class is the class asked for (the "classification
accuracy score" idea of Ravuri & Vinyals 2019 turned around: a classifier trained on real data
judging generated data, as in the conditional-GAN evaluations of Odena et al. 2017, sec. 4.1).

    gankit run recipes/pggan-conditional.toml
    python benchmarks/conditional_accuracy.py runs/pggan-conditional/checkpoints/latest.pt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class Classifier(nn.Module):
    """Two conv blocks and a linear layer: ``[N, C, R, R] -> logits[N, num_classes]``."""

    def __init__(self, channels: int, resolution: int, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(64 * (resolution // 4) ** 2, num_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def train_classifier(images: torch.Tensor, labels: torch.Tensor, num_classes: int, *, epochs: int = 30,
                     seed: int = 0) -> tuple[Classifier, float]:
    """A classifier trained on 80% of ``images[N, C, R, R]`` (in [-1, 1]) and its accuracy on
    the other 20%."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(images), generator=g)
    cut = int(0.8 * len(images))
    train_idx, test_idx = perm[:cut], perm[cut:]
    torch.manual_seed(seed)
    net = Classifier(images.shape[1], images.shape[-1], num_classes)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(epochs):
        for batch in train_idx[torch.randperm(cut, generator=g)].split(64):
            x = images[batch]
            x = torch.roll(x, shifts=tuple(torch.randint(-1, 2, (2,), generator=g).tolist()), dims=(2, 3))
            loss = F.cross_entropy(net(x), labels[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        accuracy = (net(images[test_idx]).argmax(1) == labels[test_idx]).float().mean().item()
    return net, accuracy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--per-class", type=int, default=200, help="images generated per class")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import attrs

    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.runs.checkpoint import load_generator
    from gan_kit.recipe import load_recipe
    from gan_kit.runs.run import build_run

    G, phase, recipe, arch = load_generator(args.checkpoint)
    classes = arch.context.num_classes
    if not classes:
        sys.exit(f"error: {args.checkpoint} is not class-conditional (architecture.conditional = true)")
    state = ckpt.load(args.checkpoint)
    recipe, plugins = load_recipe(Path(f"{args.checkpoint}[recipe]"), ["run.device='cpu'", "run.progress=false"],
                                  text=state["recipe"])
    run = build_run(attrs.evolve(recipe), plugins, out_dir=Path("/tmp") / "gankit-conditional-accuracy")
    dataset = run.dataset
    images = run.real_images(len(dataset), seed=0)
    perm = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))
    labels = dataset.labels[perm]
    torch.set_num_threads(max(1, torch.get_num_threads()))
    clf, held_out = train_classifier(images, labels, classes, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    rows = []
    with torch.no_grad():
        for k in range(classes):
            z = torch.randn(args.per_class, arch.latent_dim, generator=gen)
            fake = G(z, torch.full((args.per_class,), k, dtype=torch.int64)).float().clamp(-1, 1)
            if fake.shape[-1] != images.shape[-1]:
                fake = F.interpolate(fake, size=images.shape[-1], mode="nearest")
            rows.append((k, (clf(fake).argmax(1) == k).float().mean().item()))
    overall = sum(a for _, a in rows) / len(rows)
    print(f"checkpoint {args.checkpoint}: kimg {state['cur_nimg'] / 1000:.1f}, {phase.resolution}px, "
          f"{classes} classes, {args.per_class} images per class")
    print(f"classifier held-out accuracy on the data set's real images ({recipe.data.name}): {held_out:.3f}")
    print("| class | " + " | ".join(str(k) for k, _ in rows) + " | all |")
    print("|---|" + "---|" * (len(rows) + 1))
    print("| agreement | " + " | ".join(f"{a:.2f}" for _, a in rows) + f" | {overall:.3f} |")


if __name__ == "__main__":
    main()
