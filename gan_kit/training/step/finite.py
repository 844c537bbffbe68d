"""The non-finite policy on the device: optimizer steps that a NaN/inf gradient skips without the
host waiting for the answer.

Checking ``isfinite`` on the host before every step costs a host-device synchronisation per
optimizer step. Here the check stays a device tensor: ``FiniteGuard.step`` computes whether the
network's gradients hold a NaN/inf (one fused ``_foreach_norm``), ORs it into the iteration's
flag, and hands the flag to the optimizer as ``found_inf``, the tensor through which
``torch.amp.GradScaler`` makes a fused optimizer skip a step on the device (PyTorch's fused
Adam/AdamW/SGD: ``_step_supports_amp_scaling``; the skipped step leaves weights, moments and step
count exactly as they were). An optimizer that cannot skip on the device (not fused, or a
plugin's) is stepped only after one host read of the flag - the old behaviour, one sync.

The engine reads the flags with the iteration's stats at the tick (``gan_kit.runs.engine.ticks``) and
applies ``run.on_nonfinite`` there. Under ``"stop"`` the flag is sticky (``halted``): after the
first bad iteration no step is taken until the host stops the run, so the weights it stops with
are the ones from before that iteration and no checkpoint ever holds a non-finite weight.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["FiniteGuard", "match_grad_layout", "scale_of"]


class FiniteGuard:
    """Device-side flags of one run: ``halted`` (sticky under ``"stop"``), and per iteration
    ``bad`` (a step of this iteration found a non-finite gradient: every later step of the
    iteration is skipped too) and ``grad_bad`` (which network's gradients, ``{"G"|"D": bool
    tensor}``). ``begin()`` starts an iteration."""

    def __init__(self, device: torch.device, sticky: bool):
        self.device = torch.device(device)
        self.sticky = sticky
        self.halted = torch.zeros((), dtype=torch.bool, device=self.device)
        self.bad = self.halted
        self.grad_bad: dict[str, torch.Tensor] = {}

    def begin(self) -> None:
        self.bad = self.halted if self.sticky else torch.zeros((), dtype=torch.bool, device=self.device)
        self.grad_bad = {}

    def end(self, iteration_bad: torch.Tensor) -> None:
        """After the iteration: under ``"stop"`` a bad iteration halts every later step."""
        if self.sticky:
            self.halted = self.halted | iteration_bad

    def step(self, opt: torch.optim.Optimizer, name: str) -> torch.Tensor:
        """``opt.step()``, skipped on the device when this iteration's gradients so far (this
        one's included) hold a NaN/inf, or the run is halted. Returns whether it was applied (a
        0-dim bool tensor on the device: what staged component state commits by)."""
        match_grad_layout(opt)
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            # One fused reduction: the norm of a tensor holding NaN/inf is NaN/inf.
            found = ~torch.isfinite(torch.stack(torch._foreach_norm(grads))).all()
            found = found.to(self.device)
            self.grad_bad[name] = self.grad_bad[name] | found if name in self.grad_bad else found
            self.bad = self.bad | found
        if getattr(opt, "_step_supports_amp_scaling", False):
            opt.found_inf = self.bad.float()  # read by the fused kernel (GradScaler sets it the same way)
            opt.grad_scale = None
            try:
                opt.step()
            finally:
                del opt.found_inf, opt.grad_scale
        elif not bool(self.bad):  # one host sync: this optimizer cannot skip a step on the device
            opt.step()
        return ~self.bad


def match_grad_layout(opt: torch.optim.Optimizer) -> None:
    """Give every gradient of ``opt`` its parameter's memory layout. A fused optimizer walks a
    parameter and its gradient as flat memory, so a gradient with other strides - one a strategy
    assigned itself from ``torch.autograd.grad`` - would be read in the wrong element order (a
    backward's accumulated ``.grad`` always has the parameter's layout). No host sync."""
    for group in opt.param_groups:
        for p in group["params"]:
            g = p.grad
            if g is not None and g.stride() != p.stride():
                p.grad = torch.empty_like(p).copy_(g)


def scale_of(scaler: Any, device: torch.device) -> torch.Tensor:
    """``torch.amp.GradScaler``'s current scale as a float32 scalar tensor on ``device``, read
    without a host sync (``get_scale()`` returns a Python float: a sync)."""
    scale = getattr(scaler, "_scale", None)  # GradScaler keeps it on the device once used
    if scale is None:  # not yet used: the initial scale, a Python number (no sync)
        return torch.full((), float(scaler.get_scale()), device=device)
    return scale.to(device).reshape(())
