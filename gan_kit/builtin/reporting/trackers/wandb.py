"""The ``wandb`` tracker: a run logged to Weights & Biases (``wandb.init`` with ``resume="allow"``
and the run's id, so a resumed gankit run continues the same W&B run). ``pip install
'gankit[wandb]'``; ``mode = "offline"`` (or ``WANDB_MODE=offline``) writes the run to disk only,
for ``wandb sync`` later.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Literal

import attrs

from gan_kit import GankitError, Tracker, option
from gan_kit.base.errors import clip

__all__ = ["WandbTracker"]

#: wandb's exit codes for ``finish``: 0 = finished, 1 = failed; a killed run is marked failed
#: with its own summary key ``gankit/status`` so it can be told apart.
_EXIT = {"FINISHED": 0, "KILLED": 1, "FAILED": 1}


class WandbTracker(Tracker):
    """Weights & Biases (wandb.ai): config = the resolved recipe's dotted keys, history = every
    metrics.jsonl value with ``cur_nimg`` as its step (``Progress/nimg``, W&B's x axis), sample
    grids as ``wandb.Image`` under ``samples/`` and as files, the run's end in the summary key
    ``gankit/status``. A sweep trial's run is put in the W&B group of its study."""

    @attrs.frozen
    class Options:
        project: str | None = option(None, help='W&B project; None = WANDB_PROJECT, else "gankit".')
        entity: str | None = option(None, help="W&B entity (user or team); None = WANDB_ENTITY / your default.")
        mode: Literal["online", "offline", "disabled"] | None = option(
            None, help='"online", "offline" (write to disk, `wandb sync` later) or "disabled"; None = WANDB_MODE, '
                       'else online. The API key comes from WANDB_API_KEY or `wandb login`, never from the recipe.')
        group: str | None = option(None, help="W&B group; None = the sweep's study for a gankit sweep trial.")
        run_name: str | None = option(None, help="Name of the W&B run; None = the run directory's name.")
        log_checkpoints: bool = option(False, help="Also save every checkpoint written into the W&B run's files.")

    def __init__(self, options: Any = None, context: Any = None):
        super().__init__(options, context)
        self.run: Any = None
        self.wandb: Any = None

    def start(self, params: dict[str, Any], run_dir: Path, resume_id: str | None) -> str:
        try:
            import wandb
        except ImportError:
            raise GankitError("tracker wandb: the wandb package is not installed "
                              "(pip install 'gankit[wandb]', or remove the [[tracker]] table)") from None
        o = self.options
        self.wandb = wandb
        run_id = resume_id or secrets.token_hex(4)  # W&B ids: short, [a-z0-9]
        try:
            self.run = wandb.init(project=o.project or None, entity=o.entity, mode=o.mode, id=run_id, resume="allow",
                                  name=o.run_name or run_dir.name, group=o.group or params.get("gankit.study"),
                                  dir=str(run_dir), config=params, allow_val_change=True, reinit="create_new",
                                  settings=wandb.Settings(console="off", silent=True))
        except Exception as e:  # wandb raises its own CommError / UsageError kinds
            first = clip(str(e))
            raise GankitError(f"tracker wandb: could not start the run ({type(e).__name__}: {first}); try "
                              f'mode = "offline"') from None
        self.run.define_metric("*", step_metric="Progress/nimg")
        return run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({**metrics, "Progress/nimg": step})

    def log_artifact(self, path: Path, folder: str) -> None:
        if path.suffix == ".png":  # a grid: an image in the run's media, named by its kind (tick, phase, final)
            self.run.log({f"{folder}/{path.stem.split('-')[0]}": self.wandb.Image(str(path), caption=path.name)})
        else:  # a checkpoint: a file of the run
            self.run.save(str(path), base_path=str(path.parent.parent), policy="now")

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.summary["gankit/status"] = status
            self.run.finish(exit_code=_EXIT[status])
            self.run = None
