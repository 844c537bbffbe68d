"""State a component keeps across iterations, changed only by optimizer steps that are applied
(``Staging``, which ``gan_kit.training.step.StepContext`` holds): a component stages its update
(``ctx.stage`` / ``ctx.on_step``) and the network's ``ctx.opt_step`` commits it when the step
changed the weights - under fp16 with the GradScaler's verdict as a device tensor
(``finite_on_device``), so a skipped step leaves no trace and no host sync is added."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Staging", "finite_on_device"]


class Staging:
    """The updates staged for each network's next optimizer step (``"G"`` / ``"D"``), kept
    until ``settle`` commits or drops them."""

    def __init__(self) -> None:
        self._staged: dict[str, list[Callable[[Any], None]]] = {}

    def has(self, name: str) -> bool:
        """Whether anything is staged for ``name``'s next step."""
        return bool(self._staged.get(name))

    def on_step(self, name: str, update: Callable[[Any], None]) -> None:
        """Call ``update(applied)`` at ``name``'s next applied optimizer step (see
        ``StepContext.on_step``)."""
        self._staged.setdefault(name, []).append(update)

    def stage(self, name: str, owner: Any, attr: str, value: torch.Tensor) -> None:
        """Set ``owner.<attr>`` (a tensor) to ``value`` when ``name``'s next optimizer step is
        applied; where the GradScaler skips it, the old value stays (``torch.where`` on the
        device, no host sync)."""
        value = value.detach()

        def commit(applied: Any) -> None:
            if applied is True:
                setattr(owner, attr, value)
            else:
                old = getattr(owner, attr)
                setattr(owner, attr, torch.where(applied.to(value.device), value, old.to(value.device, value.dtype)))

        self.on_step(name, commit)

    def settle(self, name: str, applied: Any) -> None:
        """Commit (``applied`` True or a device bool tensor) or drop (False) what ``name`` staged."""
        for update in self._staged.pop(name, []):
            if applied is not False:
                update(applied)


def finite_on_device(opt: torch.optim.Optimizer) -> torch.Tensor | bool:
    """0-dim bool tensor on the gradients' device: every gradient of ``opt`` is finite (the
    max-abs norm of a tensor holding NaN/inf is NaN/inf); True when there is none."""
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    if not grads:
        return True
    norms = torch._foreach_norm(grads, float("inf"))
    return torch.isfinite(torch.stack([n.to(norms[0].device) for n in norms])).all()
