"""The front freezes its start-up heap, so a full collection does not walk the tokenizer."""
import gc

from gpuprobe.server.front_model import freeze_startup_heap, load_front_model
from gpuprobe.server.options import ServeOptions


def test_start_up_heap_is_frozen_out_of_full_collections():
    o = ServeOptions()
    model = load_front_model("tiny", o.kv_cache_mb, o.block_size, "cpu", o.model_overrides)
    try:
        frozen = freeze_startup_heap()
        # the tokenizer's vocabulary alone is thousands of objects; a frozen object that
        # another thread (an earlier test's) frees meanwhile leaves the count, so allow a few
        assert frozen > 5000 and frozen * 0.99 <= gc.get_freeze_count() <= frozen
        tracked = len(gc.get_objects())  # what a full collection still walks
        assert tracked < frozen / 10
        assert model.tokenizer is not None  # frozen, not freed
    finally:
        gc.unfreeze()
