"""KV-cache block accounting: which fixed-size blocks each sequence owns. No prefix caching."""

from __future__ import annotations

from gpuprobe.engine.sequence import Sequence


class BlockManager:
    """Hands out KV blocks of `block_size` token slots from a pool of `num_blocks`.

    A sequence's block_table lists its block ids in position order: token position p lives
    in block block_table[p // block_size], slot p % block_size.
    """

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, "
                             f"got {num_blocks} and {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # A stack: freed blocks are reused first, which keeps the touched KV memory small.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1."""
        return self.num_used_blocks / self.num_blocks

    def num_blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold KV for `num_tokens` positions."""
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, seq: Sequence, num_tokens: int) -> int:
        """Blocks `seq` still lacks to hold KV for positions [0, num_computed + num_tokens)."""
        need = -(-(seq.num_computed_tokens + num_tokens) // self.block_size)
        return max(0, need - len(seq.block_table))

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        """Whether allocate(seq, num_tokens) would find its blocks free."""
        # num_new_blocks() inlined (once per admission); a need < 0 fits like 0 does.
        need = -(-(seq.num_computed_tokens + num_tokens) // self.block_size) - len(seq.block_table)
        return need <= len(self._free)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        """Grow seq.block_table to cover num_computed_tokens + num_tokens positions."""
        table = seq.block_table
        n = -(-(seq.num_computed_tokens + num_tokens) // self.block_size) - len(table)
        if n <= 0:
            return
        free = self._free
        if n > len(free):
            raise RuntimeError(f"{seq.seq_id}: needs {n} KV blocks, {len(free)} free")
        # The ids, in the order, that n pops off the top of the stack would give: one copy
        # (a reversed slice), and none more when the table is empty (a whole prompt's ~70
        # ids, once per request).
        taken = free[:-n - 1:-1]
        del free[-n:]
        if table:
            table += taken
        else:
            seq.block_table = taken

    def can_append(self, seq: Sequence) -> bool:
        """Whether a decode step (one more KV position) fits."""
        if seq.num_computed_tokens < len(seq.block_table) * self.block_size:
            return True  # the last block has room: the common case, no division
        return self.can_allocate(seq, 1)

    def may_append(self, seq: Sequence) -> None:
        """Before a decode step: take a new block when the next position starts one."""
        if seq.num_computed_tokens >= len(seq.block_table) * self.block_size:
            self.allocate(seq, 1)

    def deallocate(self, seq: Sequence) -> None:
        """Return seq's blocks to the stack, last block first. The old block_table list is
        consumed (reversed in place: a copy less per request); seq gets a new empty one."""
        table = seq.block_table
        seq.block_table = []
        table.reverse()
        self._free += table
