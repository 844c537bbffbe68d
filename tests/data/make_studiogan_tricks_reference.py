"""Write ``tests/data/studiogan_reference_tricks.pt``: what StudioGAN's own functions compute for
fixed tensors, which ``tests/test_studiogan_tricks.py`` compares gankit's ``orthogonal``, ``ac``
and ``d2d-ce`` penalties with. The suite needs neither StudioGAN nor this script, only the file
(plain tensors, a few kB).

StudioGAN (Kang et al., github.com/POSTECH-CVLab/PyTorch-StudioGAN, MIT licence; recorded: the
commit its checkout names, or ``--commit``) is run, not copied: point ``--official`` at its
``src`` folder.

    git -C PyTorch-StudioGAN archive HEAD src | tar -x -C /tmp/studiogan
    python tests/data/make_studiogan_tricks_reference.py --official /tmp/studiogan/src

``seaborn``, which ``utils/misc.py`` imports at the top for its plots, is stood in for when absent.

What it records:

- ``ortho``: a tiny G (a linear layer, a conv, a class embedding, a BatchNorm) with seeded
  weights, and the gradient ``utils.misc.orthogonalize_model(G, 1e-4, blacklist=G.shared)`` adds
  to zero gradients (BigGAN's ``ortho``, as StudioGAN's first trainer called it), per parameter;
  and the value ``0.5 * sum ||W W^T * (1 - I)||_F^2`` in float64 (the function whose gradient
  that is; StudioGAN returns no value).
- ``ac``: class logits and labels, and ``utils.losses.CrossEntropyLoss`` on them.
- ``d2dce``: embeddings, proxies and labels (classes repeated, so the false-negative removal
  acts; two embeddings on their proxy's direction, so the positive term's relu acts), and ``utils.losses.Data2DataCrossEntropyLoss`` (two temperature / margin pairs) with its
  gradients with respect to the embeddings and the proxies.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkout import checkout_commit, put_on_path  # noqa: E402

OUT = Path(__file__).resolve().parent / "studiogan_reference_tricks.pt"


class TinyG(nn.Module):
    """Layers of every kind the regulariser meets: 2-D and 4-D weights, 1-D biases and gains, and
    a shared class embedding (BigGAN's ``G.shared``, which the code blacklists)."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(5, 6)
        self.linear = nn.Linear(6, 12)
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)


def ortho_case(misc) -> dict:
    torch.manual_seed(0)
    G = TinyG()
    with torch.no_grad():
        for p in G.parameters():
            p.normal_()
    for p in G.parameters():
        p.grad = torch.zeros_like(p)
    misc.orthogonalize_model(G, strength=1e-4, blacklist=list(G.shared.parameters()))
    value = torch.zeros((), dtype=torch.float64)
    for name, p in G.named_parameters():
        if p.dim() < 2 or name.startswith("shared"):
            continue
        w = p.detach().double().reshape(p.shape[0], -1)
        gram = w @ w.t()
        value += 0.5 * (gram * (1 - torch.eye(gram.shape[0], dtype=torch.float64))).square().sum()
    return {"state": {k: v.clone() for k, v in G.state_dict().items()},
            "grads": {k: p.grad.clone() for k, p in G.named_parameters()}, "strength": 1e-4, "value": value}


def ac_case(losses) -> dict:
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 5, generator=g) * 2
    labels = torch.randint(0, 5, (8,), generator=g)
    return {"logits": logits, "labels": labels, "loss": losses.CrossEntropyLoss()(logits, labels)}


def d2dce_case(losses) -> dict:
    g = torch.Generator().manual_seed(2)
    embed = torch.randn(10, 7, generator=g)
    proxy = torch.randn(10, 7, generator=g)
    labels = torch.tensor([0, 1, 2, 0, 1, 3, 3, 0, 2, 1])
    # Two samples on their proxy's direction (cosine 1 > m_p): the positive term's relu clips them.
    embed[0], embed[3] = 2 * proxy[0], proxy[3]
    out = {"embed": embed, "proxy": proxy, "labels": labels, "num_classes": 4, "cases": []}
    for temperature, m_p in ((0.5, 0.98), (0.25, 0.9)):
        e, p = embed.clone().requires_grad_(True), proxy.clone().requires_grad_(True)
        crit = losses.Data2DataCrossEntropyLoss(num_classes=4, temperature=temperature, m_p=m_p, master_rank="cpu",
                                                DDP=False)
        loss = crit(e, p, labels)
        ge, gp = torch.autograd.grad(loss, [e, p])
        out["cases"].append({"temperature": temperature, "m_p": m_p, "loss": loss.detach(), "grad_embed": ge,
                             "grad_proxy": gp})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", required=True, type=Path, help="StudioGAN's src folder")
    ap.add_argument("--commit", default=None, help="the commit the folder was extracted from")
    args = ap.parse_args()
    put_on_path(args.official)
    for name in ("seaborn",):  # imported at the top of utils/misc.py for its plots, never called here
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
    import utils.losses as losses
    import utils.misc as misc

    torch.save({"commit": args.commit or checkout_commit(args.official), "ortho": ortho_case(misc),
                "ac": ac_case(losses), "d2dce": d2dce_case(losses)}, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
