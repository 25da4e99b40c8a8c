"""Block ids and admission limits at their edges: the fast paths in BlockManager and
Scheduler (sliced allocation, in-place reversed deallocation, the folded checks of add() and
add_prefilled()) must hand out what the plain one-block-at-a-time stack and the plain
checks would. The reference server reads these ids as KV slots."""
import random

import pytest

from gpuprobe.engine import SamplingParams, Scheduler, SchedulerConfig, Sequence
from gpuprobe.engine.block_manager import BlockManager


class StackReference:
    """The block stack as a pop per block taken and a push per block freed (last first)."""

    def __init__(self, num_blocks: int):
        self.free = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[str, list[int]] = {}

    def allocate(self, seq_id: str, num_positions: int, block_size: int) -> None:
        table = self.tables.setdefault(seq_id, [])
        while len(table) * block_size < num_positions:
            table.append(self.free.pop())

    def deallocate(self, seq_id: str) -> None:
        for block in reversed(self.tables.pop(seq_id, [])):
            self.free.append(block)


def test_block_ids_match_one_pop_per_block_over_random_operations():
    rng = random.Random(7)
    bm, ref = BlockManager(64, 4), StackReference(64)
    live: list[Sequence] = []
    for step in range(3000):
        if live and rng.random() < 0.4:
            seq = live.pop(rng.randrange(len(live)))
            bm.deallocate(seq)
            ref.deallocate(seq.seq_id)
            assert seq.block_table == []
        else:
            seq = live.pop(rng.randrange(len(live))) if live and rng.random() < 0.5 else (
                Sequence(f"s{step}", range(rng.randint(1, 40)), SamplingParams()))
            grow = rng.randint(0, 9)
            if bm.num_new_blocks(seq, grow) > bm.num_free_blocks:
                with pytest.raises(RuntimeError):
                    bm.allocate(seq, grow)
            else:
                bm.allocate(seq, grow)
                seq.num_computed_tokens += grow
                ref.allocate(seq.seq_id, seq.num_computed_tokens, 4)
            live.append(seq)
        assert bm._free == ref.free
        assert all(s.block_table == ref.tables.get(s.seq_id, []) for s in live)


def test_whole_pool_taken_and_returned_in_order():
    bm = BlockManager(5, 2)
    seq = Sequence("a", range(10), SamplingParams())
    bm.allocate(seq, 10)
    assert seq.block_table == [0, 1, 2, 3, 4] and bm.num_free_blocks == 0
    bm.deallocate(seq)
    assert bm._free == [4, 3, 2, 1, 0] and seq.block_table == []


@pytest.mark.parametrize("role", ["mixed", "prefill"])
def test_add_accepts_exactly_what_the_cache_can_hold(role):
    sched = Scheduler(SchedulerConfig(num_blocks=3, block_size=4, role=role))
    # mixed: prompt + max_tokens - 1 positions; prefill: the prompt's.
    prompt, max_tokens = (8, 5) if role == "mixed" else (12, 99)
    sched.add(Sequence("ok", range(prompt), SamplingParams(max_tokens=max_tokens)))  # 12 == 3 * 4
    prompt, max_tokens = (8, 6) if role == "mixed" else (13, 99)
    too_big = Sequence("no", range(prompt), SamplingParams(max_tokens=max_tokens))
    with pytest.raises(ValueError, match="needs up to 4 KV blocks"):
        sched.add(too_big)
    assert sched.num_waiting == 1


def test_add_prefilled_checks_in_their_order():
    decode = Scheduler(SchedulerConfig(num_blocks=3, block_size=4, role="decode"))
    fresh = Sequence("fresh", range(7), SamplingParams(max_tokens=4))
    with pytest.raises(ValueError, match="wants a prefilled sequence"):
        decode.add_prefilled(fresh)
    too_long = Sequence.from_prefilled("long", range(7), 9, SamplingParams(max_tokens=7))
    with pytest.raises(ValueError, match="needs up to 4 KV blocks"):
        decode.add_prefilled(too_long)  # 7 + 7 - 1 = 13 positions
    # Room for one more position (ceil(8 / 4) = 2 blocks) is asked, the 7 computed
    # positions' 2 blocks are taken.
    first = Sequence.from_prefilled("a", range(7), 9, SamplingParams(max_tokens=6))
    assert decode.add_prefilled(first) and first.block_table == [0, 1]
    with pytest.raises(ValueError, match="wants a prefilled sequence"):
        decode.add_prefilled(first)  # holds blocks already
    eight = Sequence.from_prefilled("b", range(8), 9, SamplingParams(max_tokens=4))
    assert not decode.add_prefilled(eight)  # 9 positions want 3 blocks, 1 is free
    assert eight.block_table == [] and decode.num_running == 1
    four = Sequence.from_prefilled("c", range(3), 9, SamplingParams(max_tokens=4))
    assert decode.add_prefilled(four) and four.block_table == [2]
