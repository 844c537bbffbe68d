"""Images/s of a short main-recipe run under candidate CPU-thread defaults, alone and beside a
CPU hog (another training run), side by side (docs/performance.md, "CPU threads").

    python benchmarks/bench_threads.py [--kimg 1] [--rounds 3]

Each measurement is one ``gankit run recipes/pggan.toml`` of ``--kimg`` thousand images (ticks of
a quarter of that; the first tick is warm-up), its figure the median img/s of the other ticks;
the machine's load (``/proc/loadavg``) is printed next to it. Configurations are interleaved
within each round, so drift in the machine's load hits them alike; ratios within a round count
more than absolute numbers on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {
    "1 thread": (["--set", "run.threads=1"], {}),
    "2 threads": (["--set", "run.threads=2"], {}),
    "2 passive": (["--set", "run.threads=2"], {"OMP_WAIT_POLICY": "PASSIVE"}),
    "auto": ([], {}),
}


def measure(kimg: float, args: list[str], env: dict, out: Path) -> tuple[float, str, str]:
    cmd = [sys.executable, "-m", "gan_kit", "run", str(ROOT / "recipes" / "pggan.toml"), "--out", str(out),
           "--overwrite", "--set", f"run.total_kimg={kimg}", "--set", f"run.tick_kimg={kimg / 4}",
           "--set", "metric=[]", "--set", "run.progress=false", "--set", "run.snapshot_ticks=0", *args]
    load = Path("/proc/loadavg").read_text().split()[0]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if r.returncode:
        raise SystemExit(r.stderr[-2000:])
    threads = next((w for line in r.stderr.splitlines() if "training" in line
                    for w in [line.split(", ")[1].split(" ")[0]] if " thread" in line), "?")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(r["Timing/img_per_s"] for r in rows[1:]), load, threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kimg", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gankit-threads-"))
    results: dict[tuple[str, str], list[str]] = {}
    for rnd in range(a.rounds):
        for condition in ("alone", "beside a hog"):
            hog = None
            if condition != "alone":  # another training run, one thread, for as long as we measure
                hog = subprocess.Popen([sys.executable, "-m", "gan_kit", "run", str(ROOT / "recipes" / "pggan.toml"),
                                        "--out", str(tmp / "hog"), "--overwrite", "--set", "run.threads=1",
                                        "--set", "run.progress=false", "--set", "metric=[]"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(5)
            try:
                for name, (args, env) in CONFIGS.items():
                    ips, load, threads = measure(a.kimg, args, env, tmp / "m")
                    results.setdefault((condition, name), []).append(f"{ips:.0f} (load {load}, {threads} thr)")
                    print(f"round {rnd} {condition:13s} {name:10s} {ips:7.0f} img/s  load {load}  threads {threads}",
                          flush=True)
            finally:
                if hog is not None:
                    hog.terminate()
                    hog.wait()
    print("\n| condition | configuration | img/s per round (1-min load, threads) |\n| --- | --- | --- |")
    for (condition, name), cells in results.items():
        print(f"| {condition} | {name} | {'; '.join(cells)} |")


if __name__ == "__main__":
    main()
