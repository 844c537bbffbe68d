"""What the sweep tests share: one intra-op thread (tiny tensors on a shared CPU)."""

from __future__ import annotations

import os

import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
