"""DeepSpeed ZeRO-3's reduce-scatter copy in its side stream's pool (model/terms/peak.py
stream_pool_term): ``overlap_comm`` is on at stage 3 (DeepSpeed edaa72212 ``zero/config.py``
``overlap_comm_valid``), ``stage3.py`` ``__reduce_and_partition_ipg_grads`` reduce-scatters each
gradient bucket on ``reduce_and_partition_stream``, and ``comm/coalesced_collectives.py``
``reduce_scatter_coalesced`` concatenates the bucket's interleaved partitions into a new buffer
(``torch.cat``) as large as the bucket (``reduce_bucket_size`` 5e8 elements)."""

import trainplan
from trainplan.interface.scenario import build_problem
from trainplan.optimizer.search import search


def test_llama3_70b_zero3_pool_and_the_search_answer():
    """Llama 3 70B, dp 16 × tp 4, ZeRO-3, no recomputation, b 1: 17,639,415,808 parameters per
    GPU, so the largest flush is the whole bucket: 2 B × 5e8 = 1,000,000,000 B in the reduce
    stream's pool. Allocated 81,707,433,472 B + the pool + 1,207,959,552 B of communicators =
    83,915,393,024 B, above the 83,210,009,600 usable: this layout, the search's answer before
    (fit 82,915,393,024 B), now fits only through allocator retries, which the search does not
    rely on; the answer moves to tp 8."""
    e = trainplan.evaluate(
        model="llama3-70b", gpu="H100-SXM", dp=16, tp=4, framework="deepspeed", zero_stage=3,
        global_batch_size=2048, recompute="none", micro_batch_size=1,
    )  # fmt: skip
    p = e.peak
    assert p.dense_params + p.expert_params == 17_639_415_808
    assert p.stream_pool_bytes == 2 * 500_000_000
    assert p.allocated_bytes == 81_707_433_472 and p.communicator_bytes == 1_207_959_552
    assert p.reserved_total_bytes == 81_707_433_472 + 10**9 + 1_207_959_552 == 83_915_393_024
    assert p.reserved_total_bytes > e.capacity_bytes == 83_210_009_600
    assert e.fits  # the allocated verdict; the search's rule reads the reserved figure
    case = {"model": "llama3-70b", "gpus": "64", "gpu": "H100-SXM",
            "space": {"framework": ["deepspeed"]}}  # fmt: skip
    best = search(build_problem({}, case)).best.estimate.layout
    assert (best.dp, best.tp, best.zero_stage) == (8, 8, 3)


def test_a_stage_smaller_than_the_bucket_pools_its_own_size():
    """Megatron 1.7B at tp 4 has fewer parameters on a GPU than the bucket holds: the largest
    flush, and the pool, is all of them, 2 B each. ZeRO-1 and -2 (overlap_comm off by default)
    and dp 1 (no reduce-scatter) pool nothing."""
    common = dict(model="megatron-1.7b", gpu="H100-SXM", framework="deepspeed",
                  global_batch_size=64)  # fmt: skip
    p = trainplan.evaluate(dp=8, tp=4, zero_stage=3, **common).peak
    params = p.dense_params + p.expert_params
    assert params < 500_000_000 and p.stream_pool_bytes == 2 * params
    for zero in (1, 2):
        assert trainplan.evaluate(dp=8, tp=4, zero_stage=zero, **common).peak.stream_pool_bytes == 0
    assert trainplan.evaluate(dp=1, tp=4, zero_stage=3, **common).peak.stream_pool_bytes == 0
