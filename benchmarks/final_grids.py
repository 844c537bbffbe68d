"""The final sample grids of several runs side by side, each under its label, in one PNG (for the
docs: what a comparison's configurations drew at the end of their budget).

    python benchmarks/final_grids.py --run "pggan" runs/arch/pggan/c000-s0 \
        --run "stylegan2" runs/arch/stylegan2/c000-s0 --run "r3gan" runs/arch/r3gan/c000-s0 \
        --crop 4 -o docs/arch-final-grids.png

Each run's ``samples/final.png`` (the grid the run wrote last: G_ema on the run's fixed latents);
``--crop N`` keeps its top-left N x N images (of ``--ncol`` per row) and ``--scale`` enlarges
them with nearest-neighbour pixels.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", nargs=2, action="append", required=True, metavar=("LABEL", "RUN_DIR"))
    p.add_argument("--crop", type=int, default=None, help="keep the top-left N x N images of each grid")
    p.add_argument("--ncol", type=int, default=8, help="images per row of the grids (for --crop; 8 for 64)")
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("-o", "--out", type=Path, required=True)
    args = p.parse_args(argv)

    from PIL import Image, ImageDraw

    grids = []
    for label, run in args.run:
        path = Path(run) / "samples" / "final.png"
        if not path.is_file():
            raise SystemExit(f"error: {path}: no final grid (did the run finish?)")
        img = Image.open(path).convert("RGB")
        if args.crop:
            side = round(img.width * args.crop / args.ncol)
            img = img.crop((0, 0, side, side))
        img = img.resize((img.width * args.scale, img.height * args.scale), Image.NEAREST)
        grids.append((label, img))
    pad, head = 8, 18
    width = sum(g.width for _, g in grids) + pad * (len(grids) + 1)
    height = max(g.height for _, g in grids) + head + 2 * pad
    sheet = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(sheet)
    x = pad
    for label, g in grids:
        draw.text((x, pad // 2), label, fill="black")
        sheet.paste(g, (x, head + pad))
        x += g.width + pad
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out)
    print(f"wrote {args.out} ({width}x{height})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
