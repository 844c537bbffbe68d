"""The adaptive probability p of ADA and APA, driven by the overfitting heuristic
``r_t = E[sign(D(x_real))]`` (Karras et al. 2020, "Training Generative Adversarial Networks with
Limited Data", sec. 3; reused by Jiang et al. 2021, "Deceive D: Adaptive Pseudo Augmentation",
sec. 3).

``AdaptiveP`` holds p and the running sums of the signs on the logits' device and never reads
them back (no host sync): ``feedback`` adds one D objective's real logits, ``adjust`` moves p
every ``interval`` iterations by ``sign(r_t - target) * nimg * interval / (kimg * 1000)`` and
clamps it to ``[0, p_max]`` (no upper bound when ``p_max`` is None). Under N processes the two sums are all-reduced at each adjustment
only, so the processes keep one p. The augmentation that owns it decides what p does (ADA:
the probability of each transform; APA: of a pseudo-real).
"""

from __future__ import annotations

import torch

from gan_kit import GankitError

__all__ = ["AdaptiveP"]


class AdaptiveP:
    """p in ``[0, 1]`` (a 0-d float32 tensor) and the sign accumulators it adapts from.

    ``p_init``: p at the start (and, when the owner has no target, p throughout via ``fix``).
    State in checkpoints: ``{"p", "sign_sum", "sign_count"}`` (CPU tensors).
    """

    KEYS = ("p", "sign_sum", "sign_count")

    def __init__(self, p_init: float):
        self.p = torch.tensor(float(p_init))
        self.sign_sum = torch.tensor(0.0)
        self.sign_count = torch.tensor(0.0)

    def on(self, device: torch.device) -> torch.Tensor:
        """p on ``device``, moved there once (the first call, or after ``load_state_dict``): a
        host-to-device copy on every call would wait for the device."""
        if self.p.device != device:
            self.p = self.p.to(device)
        return self.p

    def feedback(self, real_logits: torch.Tensor) -> None:
        """Add ``sign(D(real))`` of one D objective's ``[N]`` logits (detached; on their device).
        NaN logits are not counted: the engine hands them over as NaN when the D step they
        belong to was not applied (an fp16 step the GradScaler skipped), so such a step leaves
        no trace in r_t or p."""
        logits = real_logits.detach().float()
        counted = ~logits.isnan()
        signs = torch.where(counted, logits.sign(), torch.zeros_like(logits))
        if self.sign_sum.device != signs.device:  # once: the sums then live beside the logits
            self.sign_sum, self.sign_count = self.sign_sum.to(signs.device), self.sign_count.to(signs.device)
        self.sign_sum = self.sign_sum + signs.sum()
        self.sign_count = self.sign_count + counted.sum()

    def fix(self, p: float) -> dict[str, torch.Tensor]:
        """Hold p at ``p`` (an augmentation without a target: fixed-p) and drop the sums.
        Returns ``{"Augment/p"}``."""
        self.p = torch.full((), float(p), device=self.p.device)
        self.sign_sum, self.sign_count = self.sign_sum * 0, self.sign_count * 0
        return {"Augment/p": self.p}

    def adjust(self, step: int, nimg: int, *, target: float, interval: int, kimg: float,
               p_max: float | None = 1.0) -> dict[str, torch.Tensor]:
        """After iteration ``step`` (iterations done), which showed D ``nimg`` real images (all
        processes, every critic step counted): every ``interval`` iterations move p and return
        ``{"Augment/p", "Augment/rt"}``; otherwise ``{"Augment/p"}``. An interval without
        feedback leaves p unchanged. ``p_max = None``: no upper bound (stylegan2-ada-pytorch
        lets p pass 1, which some transforms then apply more than once)."""
        if step % interval:
            return {"Augment/p": self.p}
        dev = self.sign_sum.device
        totals = torch.stack([self.sign_sum, self.sign_count])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(totals)
        r_t = totals[0] / totals[1].clamp(min=1.0)
        step_size = nimg * interval / (kimg * 1000.0)
        moved = torch.sign(r_t - target) * step_size * (totals[1] > 0).float()
        self.p = (self.p.to(dev) + moved).clamp(min=0.0, max=p_max)
        self.sign_sum = torch.zeros((), device=dev)
        self.sign_count = torch.zeros((), device=dev)
        return {"Augment/p": self.p, "Augment/rt": r_t}

    def state_dict(self) -> dict:
        return {k: getattr(self, k).detach().cpu().clone() for k in self.KEYS}

    def load_state_dict(self, state: dict, owner: str) -> None:
        """Restore from a checkpoint's state. Raises ``GankitError`` naming ``owner`` (the
        augmentation's name) when a key is missing (another augmentation wrote it)."""
        missing = [k for k in self.KEYS if k not in state]
        if missing:
            raise GankitError(f"augment: the checkpoint's augmentation state lacks {', '.join(missing)} "
                              f"(it was not written by '{owner}'; resume with the augmentation that wrote it)")
        for k in self.KEYS:
            setattr(self, k, torch.as_tensor(state[k], dtype=torch.float32).clone())
