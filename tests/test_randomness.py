"""gankit's rule for randomness under N processes (gan_kit.base.randomness): every per-sample draw is
made for the global batch and sliced ``[rank::world_size]``, so the processes' slices put together
are exactly the draw of one process, and every process consumes the same random numbers."""

from __future__ import annotations

import pytest
import torch

from gan_kit import batch_rand, batch_randint, batch_randn
from gan_kit.base.randomness import current_shard, sharded

DRAWS = {
    "rand": lambda n: batch_rand(n, 3, 2),
    "randn": lambda n: batch_randn(n, 5),
    "randint": lambda n: batch_randint(-3, 4, n, 1, 1),
}


@pytest.mark.parametrize("kind", sorted(DRAWS))
@pytest.mark.parametrize("world", [2, 3])
def test_slices_of_all_processes_make_the_one_process_draw(kind, world):
    draw, global_n = DRAWS[kind], 6 * world
    torch.manual_seed(7)
    one = draw(global_n)
    after_one = torch.rand(4)
    parts = []
    for rank in range(world):
        torch.manual_seed(7)
        with sharded(rank, world):
            parts.append(draw(global_n // world))
        # every process is left at the same RNG position as one process
        assert torch.equal(torch.rand(4), after_one)
    joined = torch.empty_like(one)
    for rank, part in enumerate(parts):
        assert part.shape[0] == global_n // world
        joined[rank::world] = part
    assert torch.equal(joined, one)


def test_outside_a_sharded_block_draws_are_plain_and_shards_nest():
    torch.manual_seed(1)
    a = batch_rand(4)
    torch.manual_seed(1)
    assert torch.equal(a, torch.rand(4))
    assert current_shard() == (0, 1)
    with sharded(1, 2):
        with sharded(0, 4):
            assert current_shard() == (0, 4)
        assert current_shard() == (1, 2)
    assert current_shard() == (0, 1)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        with sharded(2, 2):
            pass


def test_explicit_rank_and_world_size_win_over_the_block():
    torch.manual_seed(3)
    full = torch.rand(8)
    torch.manual_seed(3)
    with sharded(0, 1):
        assert torch.equal(batch_rand(4, rank=1, world_size=2), full[1::2])
