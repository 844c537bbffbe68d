"""Which runs are one configuration: runs whose resolved recipes differ only in what does not
change what a run learns, nor what its metrics measure (``gankit compare`` groups by it; see
docs/sweeps.md, Reading compare)."""

from __future__ import annotations

import json

__all__ = ["IGNORED", "METRIC_IGNORED", "identity"]

#: Recipe keys that do not change what a run learns: runs differing only in them are one configuration.
IGNORED = {"run.seed", "run.out_dir", "run.threads", "run.progress", "run.num_workers", "run.tick_kimg",
           "run.snapshot_ticks", "run.keep_snapshots", "run.keep_every_ticks", "run.sample_ticks", "run.sample_G",
           "run.sample_grid", "run.retain_cpu_memory"}
#: Keys of each ``[[metric]]`` that say when it is measured, not what: they change no number of it.
METRIC_IGNORED = {"every_kimg"}

def identity(recipe: dict) -> dict:
    """What of a flattened recipe changes what a run learns or what its metrics measure: without
    the ``IGNORED`` keys (seed, run directory, threads, reporting, sampling and checkpoint
    intervals) and each metric's ``every_kimg`` (metrics draw from their own seeded generators, so
    when they are computed changes no training step). Metrics are compared by name and options,
    in any order."""
    out = {k: v for k, v in recipe.items() if k not in IGNORED}
    if isinstance(out.get("metric"), list):
        metrics = [{k: v for k, v in m.items() if k not in METRIC_IGNORED} if isinstance(m, dict) else m
                   for m in out["metric"]]
        out["metric"] = sorted(metrics, key=lambda m: json.dumps(m, sort_keys=True, default=str))
    return out
