"""State a component keeps across iterations, changed only by optimizer steps that are applied
(``StagedUpdates``, a part of ``gan_kit.training.step.StepContext``): a component stages its update
(``ctx.stage`` / ``ctx.on_step``) and the network's ``ctx.opt_step`` commits it when the step
changed the weights - under fp16 with the GradScaler's verdict as a device tensor
(``finite_on_device``), so a skipped step leaves no trace and no host sync is added."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["StagedUpdates", "finite_on_device"]


class StagedUpdates:
    """``on_step`` / ``stage`` (for components) and ``_settle`` (for ``opt_step``). Needs the
    host class's ``_name(net)`` and a ``_staged`` dict."""

    _staged: dict

    def on_step(self, net: Any, update: Callable[[Any], None]) -> None:
        """Call ``update(applied)`` at ``net``'s next optimizer step (``opt_step``), and only if
        that step is applied: ``applied`` is ``True`` or a 0-dim bool tensor on the device (fp16:
        False where the GradScaler skips the step) - build new state with
        ``torch.where(applied, new, old)`` rather than reading it on the host. Never called for a
        step that is not taken."""
        self._staged.setdefault(self._name(net), []).append(update)

    def stage(self, net: Any, owner: Any, name: str, value: torch.Tensor) -> None:
        """Set ``owner.<name>`` (a tensor) to ``value`` when ``net``'s next optimizer step is
        applied; where the GradScaler skips it, the old value stays (``torch.where`` on the device,
        no host sync). For state a penalty or augmentation keeps across iterations."""
        value = value.detach()

        def commit(applied: Any) -> None:
            if applied is True:
                setattr(owner, name, value)
            else:
                old = getattr(owner, name)
                setattr(owner, name, torch.where(applied.to(value.device), value, old.to(value.device, value.dtype)))

        self.on_step(net, commit)

    def _settle(self, name: str, applied: Any) -> None:
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
