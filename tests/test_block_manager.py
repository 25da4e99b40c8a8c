from gpuprobe.engine.block_manager import BlockManager
from gpuprobe.engine.sequence import SamplingParams, Sequence

import pytest


def make_seq(n: int) -> Sequence:
    return Sequence("s", list(range(n)), SamplingParams())


def test_allocate_covers_computed_plus_new_tokens():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = make_seq(10)
    assert bm.can_allocate(seq, 10)
    bm.allocate(seq, 10)
    assert len(seq.block_table) == 3
    assert bm.num_used_blocks == 3 and bm.num_free_blocks == 5
    assert bm.usage == pytest.approx(3 / 8)


def test_append_takes_a_block_only_at_a_block_boundary():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = make_seq(4)
    bm.allocate(seq, 4)
    seq.num_computed_tokens = 3  # position 3 still fits block 0
    bm.may_append(seq)
    assert len(seq.block_table) == 1
    seq.num_computed_tokens = 4  # position 4 starts block 1
    bm.may_append(seq)
    assert len(seq.block_table) == 2


def test_can_append_is_false_when_full_and_deallocate_frees():
    bm = BlockManager(num_blocks=1, block_size=2)
    seq = make_seq(2)
    bm.allocate(seq, 2)
    seq.num_computed_tokens = 2
    assert not bm.can_append(seq)
    with pytest.raises(RuntimeError):
        bm.may_append(seq)
    bm.deallocate(seq)
    assert seq.block_table == [] and bm.num_free_blocks == 1


def test_block_ids_are_unique_across_sequences():
    bm = BlockManager(num_blocks=6, block_size=2)
    a, b = make_seq(5), make_seq(5)
    bm.allocate(a, 5)
    bm.allocate(b, 5)
    assert not set(a.block_table) & set(b.block_table)
    assert not bm.can_allocate(make_seq(1), 1)


def test_rejects_bad_sizes():
    with pytest.raises(ValueError):
        BlockManager(num_blocks=0, block_size=16)
