"""SWD of the main recipe with no augmentation, DiffAugment and ADA, on all digits and on a 10%
subset (180 images), at the same kimg, next to real-vs-real.

Each run trains ``recipes/pggan.toml`` (shortened with ``--kimg``) into ``runs/augment-swd/<name>``;
each trained G_ema is then evaluated against ALL the digits (the subset runs too: the question is
how well a G trained on 180 images covers the distribution they came from), with
``gankit eval --baselines``: multi-scale SWD x1e3 (PGGAN appendix D), real vs real at the same
image count as the floor. Two runs go at a time, one torch thread each.

    python benchmarks/augment_swd.py --kimg 80          # prints a Markdown table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AUGMENTS = {"none": [], "diffaugment": ["augment.name=diffaugment"],
            "ada": ["augment.name=ada", "augment.kimg=20", "augment.p_max=0.8"]}


def train_and_eval(name: str, sets: list[str], kimg: float, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_dir = out / name
    cmd = [sys.executable, "-m", "gan_kit", "run", str(ROOT / "recipes" / "pggan.toml"), "--out", str(run_dir),
           "--overwrite", "--set", f"run.total_kimg={kimg}", "--set", "run.max_minutes=none",  # kimg is the budget
           "--set", "metric=[]", "--set", "run.progress=false"]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.time()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    train_s = time.time() - t0
    ev = subprocess.run([sys.executable, "-m", "gan_kit", "eval", str(run_dir / "checkpoints" / "latest.pt"),
                         "--baselines", "--json", "--n", "898", "--set", "data.max_images=none",
                         "--set", "augment={name='none'}"],
                        check=True, env=env, capture_output=True, text=True)
    res = json.loads(ev.stdout)["results"]["swd"]
    return {"name": name, "train_s": train_s, "trained": res["trained"]["Metrics/swd"],
            "real": res["real"]["Metrics/swd"], "untrained": res["untrained"]["Metrics/swd"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kimg", type=float, default=80.0, help="training length of every run")
    ap.add_argument("--out", type=Path, default=Path("runs/augment-swd"))
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ada-pipeline", default="bgc",
                    help="augment.pipeline of the ada runs (docs/augmentation.md's tables: gankit-subset)")
    ap.add_argument("--runs", default=None,
                    help="comma-separated subset of the runs, e.g. none-subset,ada-subset (default: all six)")
    args = ap.parse_args(argv)
    jobs = []
    for data, extra in (("all", []), ("10%", ["data.max_images=180"])):
        for aug, sets in AUGMENTS.items():
            if aug == "ada":
                sets = [*sets, f"augment.pipeline={args.ada_pipeline}"]
            jobs.append((f"{aug}-{'all' if data == 'all' else 'subset'}", [*sets, *extra]))
    if args.runs:
        wanted = args.runs.split(",")
        unknown = sorted(set(wanted) - {name for name, _ in jobs})
        if unknown:
            ap.error(f"--runs: unknown {', '.join(unknown)} (runs: {', '.join(name for name, _ in jobs)})")
        jobs = [j for j in jobs if j[0] in wanted]
    with ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda j: train_and_eval(j[0], j[1], args.kimg, args.out), jobs))
    real = rows[0]["real"]
    print(f"SWD x1e3 vs all 1797 digits (898 images a set), {args.kimg:g} kimg each; real vs real {real:.2f}\n")
    print("| data | augmentation | SWD | distance to real-vs-real | train s |")
    print("|---|---|---|---|---|")
    for r in rows:
        data, aug = ("all", r["name"][:-4]) if r["name"].endswith("-all") else ("10% (180)", r["name"][:-7])
        print(f"| {data} | {aug} | {r['trained']:.2f} | {r['trained'] - real:.2f} | {r['train_s']:.0f} |")
    by_name = {r["name"]: r["trained"] - real for r in rows}
    for aug in ("diffaugment", "ada"):
        if "none-subset" in by_name and f"{aug}-subset" in by_name:
            closer = 1 - by_name[f"{aug}-subset"] / by_name["none-subset"]
            print(f"\n10% subset, {aug}: {100 * closer:.0f}% closer to real-vs-real than without augmentation")
    if "none-all" in by_name and "none-subset" in by_name:
        # what augmentation could gain if it made the subset as good as all the data
        print(f"\nall the data instead of the subset, no augmentation: "
              f"{100 * (1 - by_name['none-all'] / by_name['none-subset']):.0f}% closer to real-vs-real")
    return 0


if __name__ == "__main__":
    sys.exit(main())
