"""Check that a W file gankit writes draws the same image in the official stylegan2-ada-pytorch code.

Usage (the official checkout is fetched, never vendored; the network is any official snapshot,
e.g. one `make_official_snapshots.py --check-genuine DIR` wrote)::

    python tests/data/check_official_w_file.py --ada /tmp/sg2ada --network /tmp/genuine/ada-skip-resnet.pkl

gankit opens the network (its own safe reader), draws W for seed 7 at psi 0.8 and saves it with
``save_projected_w`` (projector.py's layout: key ``w``, ``[1, num_ws, w_dim]``); ``gankit
generate --w`` draws it; then the official code loads the network with ``legacy.load_network_pkl``
and runs generate.py's ``--projected-w`` loop (``G.synthesis(w, noise_mode='const')`` and its
uint8 conversion) on the CPU - generate.py itself insists on CUDA. Prints the largest pixel
difference; exits 1 when it is above 1 level.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ada", required=True, type=Path, help="stylegan2-ada-pytorch checkout")
    parser.add_argument("--network", required=True, type=Path, help="an official network-snapshot pickle")
    args = parser.parse_args()
    from gan_kit.tools.project import save_projected_w
    from gan_kit.tools.trained import open_generator

    work = Path(tempfile.mkdtemp(prefix="w-check-"))
    trained = open_generator(args.network)
    labels = trained.labels(0, 1) if trained.num_classes else None  # class 0 for a conditional G
    save_projected_w(work / "projected_w.npz", trained.styles(trained.seed_latents([7]), labels, 0.8))
    subprocess.run([sys.executable, "-m", "gan_kit", "generate", str(args.network), "--w", str(work / "projected_w.npz"),
                    "--outdir", str(work / "gankit")], check=True)
    sys.path.insert(0, str(args.ada))
    import dnnlib  # noqa: E402 - the official code, from the checkout
    import legacy  # noqa: E402

    with dnnlib.util.open_url(str(args.network)) as f:
        G = legacy.load_network_pkl(f)["G_ema"]
    ws = torch.tensor(np.load(work / "projected_w.npz")["w"])
    assert ws.shape[1:] == (G.num_ws, G.w_dim)
    img = G.synthesis(ws[0].unsqueeze(0), noise_mode="const")
    official = (img.permute(0, 2, 3, 1) * 127.5 + 128).clamp(0, 255).to(torch.uint8)[0].numpy()
    ours = np.asarray(Image.open(work / "gankit" / "proj00.png"))
    ours = ours[..., None] if ours.ndim == 2 else ours
    diff = int(np.abs(ours.astype(int) - official.astype(int)).max())
    print(f"check {args.network.name}: gankit's W file in the official generate.py path vs gankit generate --w: "
          f"max pixel difference {diff}")
    return 0 if diff <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
