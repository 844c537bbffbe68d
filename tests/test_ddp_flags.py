"""How gankit sets up DistributedDataParallel: ``find_unused_parameters`` only for growing
networks (a graph traversal after every backward otherwise), no buffer broadcast before every
forward (buffers follow rank 0 at ticks, phase changes and checkpoints; per-process BatchNorm
statistics after every iteration), BatchNorm as SyncBatchNorm on CUDA. Two processes through
torchrun on the CPU (gloo), as tests/test_distributed.py."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from torch import nn

from gan_kit.training.distributed import has_batchnorm, sync_batchnorm

WORKER = r'''
import json, sys
import torch
from gan_kit.training import distributed
from gan_kit.training.networks import find_ddp
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run

torch.set_num_threads(1)
distributed.init()
out = {}
for name, path, overrides in json.loads(sys.argv[1]):
    recipe, plugins = load_recipe(path, overrides)
    run = build_run(recipe, plugins)
    G, D = find_ddp(run.G_train), find_ddp(run.D_train)
    out[name] = {"find_unused": [G.find_unused_parameters, D.find_unused_parameters],
                 "broadcast_buffers": [G.broadcast_buffers, D.broadcast_buffers],
                 "each_step": [n for n, net in (("G", run.G), ("D", run.D)) if net in run.buffers_each_step]}
    run = G = D = None
if distributed.dist.get_rank() == 0:
    print("RESULT " + json.dumps(out))
distributed.shutdown()
'''


def test_ddp_looks_for_unused_parameters_only_in_growing_networks(tiny_recipe, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    configs = [["pggan", str(tiny_recipe), [f"run.out_dir='{tmp_path / 'a'}'"]],
               ["dcgan", "recipes/dcgan.toml", [f"run.out_dir='{tmp_path / 'b'}'", "run.device='cpu'",
                                                "growth.batch_size=8", "architecture.ngf=4", "architecture.ndf=4",
                                                "data.resolution=16"]]]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        str(worker), json.dumps(configs)], check=False, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["pggan"]["find_unused"] == [True, True]  # a phase leaves the other resolutions' blocks unused
    assert result["dcgan"]["find_unused"] == [False, False]
    assert result["pggan"]["broadcast_buffers"] == result["dcgan"]["broadcast_buffers"] == [False, False]
    # BatchNorm statistics are per process on the CPU (no SyncBatchNorm there): synced every step
    assert result["dcgan"]["each_step"] == ["G", "D"] and result["pggan"]["each_step"] == []


def test_batchnorm_becomes_syncbatchnorm_under_several_cuda_processes():
    """In place, keeping the parameters (the optimizer's), buffers and state-dict keys; only for
    several processes on CUDA (SyncBatchNorm does not run on the CPU)."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4), nn.ReLU()))
    weight, keys = net[1].weight, list(net.state_dict())
    assert not sync_batchnorm(net, torch.device("cpu"), 2) and not sync_batchnorm(net, torch.device("cuda", 0), 1)
    assert has_batchnorm(net)
    assert sync_batchnorm(net, torch.device("cuda", 0), 2)
    assert isinstance(net[1], nn.SyncBatchNorm) and isinstance(net[2][0], nn.SyncBatchNorm)
    assert net[1].weight is weight and list(net.state_dict()) == keys
    assert not has_batchnorm(net)
