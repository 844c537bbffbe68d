"""Write ``tests/data/ada_official_reference.pt``: what stylegan2-ada-pytorch's own ``AugmentPipe``
outputs for fixed images and seeds, which ``tests/test_ada_official.py`` compares gankit's 'ada'
with (built from the same keyword arguments by ``ada_options_from_official``).

The official code (Karras et al. 2020, github.com/NVlabs/stylegan2-ada-pytorch) is run, not
copied, and the file holds plain tensors and numbers only: point ``--official`` at a checkout.

    git clone https://github.com/NVlabs/stylegan2-ada-pytorch /tmp/sg2ada
    python tests/data/make_ada_official_reference.py --official /tmp/sg2ada

It runs on the CPU in float32, where ``upfirdn2d``, ``grid_sample_gradfix`` and
``conv2d_gradfix`` take their plain-PyTorch paths. Per case it records the pipe's keyword
arguments, p, the input images, the seed of torch's global RNG before the call, the output, and
one ``torch.rand(1)`` drawn after the call (equal on both sides only when both drew the same
number of numbers). It also records the pipe's image-space filter bank (``Hz_fbank``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from checkout import checkout_commit  # beside this script: on sys.path when it runs

OUT = Path(__file__).resolve().parent / "ada_official_reference.pt"

_BG = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1)
_C = dict(brightness=1, contrast=1, lumaflip=1, hue=1, saturation=1)
#: ``train.py``'s ``augpipe_specs`` that hold the filter and noise groups.
SPECS = {
    "filter": dict(imgfilter=1),
    "noise": dict(noise=1),
    "bgc": {**_BG, **_C},
    "bgcf": {**_BG, **_C, "imgfilter": 1},
    "bgcfn": {**_BG, **_C, "imgfilter": 1, "noise": 1},
    "bgcfnc": {**_BG, **_C, "imgfilter": 1, "noise": 1, "cutout": 1},
}
#: A pipe no preset is: multipliers below and above 1, ops off, every range of the new groups.
CUSTOM = dict(xflip=1, scale=0.5, hue=2, saturation=0.5, imgfilter=0.7, imgfilter_bands=[1, 0, 2, 0.5],
              imgfilter_std=0.5, noise=1.5, noise_std=0.3, cutout=0.5, cutout_size=0.3, xint_max=0.3)
#: (name, keyword arguments, p, images [n, c, h, w], seed). The filter needs 22 pixels a side.
CASES = [
    ("filter-rgb", SPECS["filter"], 0.5, (6, 3, 24, 26), 1),
    ("filter-grey", SPECS["filter"], 1.0, (6, 1, 22, 22), 2),
    ("noise-rgb", SPECS["noise"], 0.5, (8, 3, 8, 8), 3),
    ("noise-grey", SPECS["noise"], 1.0, (6, 1, 6, 10), 4),
    ("bgc-rgb", SPECS["bgc"], 0.6, (4, 3, 24, 24), 5),
    ("bgcf-rgb", SPECS["bgcf"], 0.7, (4, 3, 24, 24), 6),
    ("bgcfn-rgb", SPECS["bgcfn"], 1.3, (4, 3, 24, 24), 7),
    ("bgcfnc-rgb", SPECS["bgcfnc"], 0.4, (6, 3, 28, 28), 8),
    ("bgcfnc-grey", SPECS["bgcfnc"], 1.0, (4, 1, 24, 24), 9),
    ("custom-rgb", CUSTOM, 0.6, (6, 3, 24, 24), 10),
]


def record(AugmentPipe, name: str, kwargs: dict, p: float, shape: tuple, seed: int) -> dict:
    gen = torch.Generator().manual_seed(100 + seed)
    x = torch.rand(*shape, generator=gen) * 2 - 1
    pipe = AugmentPipe(**kwargs)
    pipe.p.fill_(p)
    torch.manual_seed(seed)
    with torch.no_grad():
        y = pipe(x)
    after = torch.rand(1)
    return {"name": name, "kwargs": kwargs, "p": p, "seed": seed, "x": x, "y": y, "after": after}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--official", type=Path, required=True, help="a checkout of github.com/NVlabs/stylegan2-ada-pytorch")
    ap.add_argument("--commit", default=None, help="the checkout's commit, when it is no git checkout")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not (args.official / "training" / "augment.py").is_file():
        print(f"--official: {args.official} has no training/augment.py (clone stylegan2-ada-pytorch there)",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(args.official.resolve()))
    from training.augment import AugmentPipe

    torch.set_num_threads(1)  # the same reductions whatever the machine
    data = {
        "source": {"repository": "github.com/NVlabs/stylegan2-ada-pytorch",
                   "commit": args.commit or checkout_commit(args.official), "torch": str(torch.__version__)},
        "filter_bank": AugmentPipe().Hz_fbank.clone(),
        "cases": [record(AugmentPipe, *case) for case in CASES],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(data, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB) from {data['source']['commit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
