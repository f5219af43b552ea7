"""The text report's reserved-memory line (``memory.reserved_bytes`` beside the verdict).

Llama 3 8B under fsdp2 at dp 8 (torchtitan's layout): the copy-in stream's pool is two units'
BF16 all-gather outputs and the next unit's copy-in buffer (model.terms.peak.stream_pool_term),
the largest unit being the embedding, 128,256 × 4,096 elements: 2 × 2 B × 525,336,576 +
2 B × 525,336,576 / 8 = 2,232,680,448 B, printed 2.23 GB.
Megatron-Core has no such pool, and the report prints no line.
"""

from trainplan.interface.inputs import build_case
from trainplan.interface.render.report import evaluate_text
from trainplan.interface.render.report_dict import estimate_to_dict

BASE = {"model": "llama3-8b", "gpu": "H100-SXM", "recompute": "full", "seq_len": 8192,
        "micro_batch_size": 1, "dp": 8, "global_batch_size": 8}  # fmt: skip


def test_reserved_line_under_fsdp2_and_none_under_megatron():
    d = estimate_to_dict(build_case({**BASE, "framework": "fsdp2"}).evaluate())
    m = d["memory"]
    assert m["stream_pool_bytes"] == 2 * 2 * 128_256 * 4096 + 2 * 128_256 * 4096 // 8
    line = next(x for x in evaluate_text(d).splitlines() if "max_memory_reserved" in x)
    assert f"{m['reserved_bytes'] / 1e9:.2f} GB" in line
    assert "+ 2.23 GB idle in a side stream's pool" in line
    mega = estimate_to_dict(build_case({**BASE, "framework": "megatron"}).evaluate())
    assert "max_memory_reserved" not in evaluate_text(mega)


def test_reserved_above_capacity_runs_with_allocator_retries_not_charged():
    """Llama 3 405B, fsdp2 ZeRO-3 at dp 2048, full recompute, s 8192, b 1 (the search's answer
    on 2,048 H100s with allocator_retries_ok). Its largest unit per GPU is one whole layer (ZeRO-3 gathers it):
    attention 2·16,384² + 2·16,384·1,024 = 570,425,344, MLP 3·16,384·53,248 = 2,617,245,696,
    two norms 32,768: U = 3,187,703,808 elements, so the copy-in stream's pool is
    2·2 B·U + 2 B·U/2,048 (the next unit's copy-in buffer) = 12,750,815,232 + 3,112,992 =
    12,753,928,224 B. With the allocated peak (82,552,487,552 B: its two gathered
    units whole beside the local shard) and NCCL's communicators (306,184,192 B: the world ring
    of torchtitan's barrier after step 1 over 256 nodes, 8 a node, 16 channels × 12 MiB +
    (16 × 3 + 2) × 2 MiB of set-up = 292 MiB; the FSDP group, dp 2048, is every GPU, so PyTorch's
    DeviceMesh hands it the default group and it shares that ring — before, a dp ring of its
    own, 292 MiB more, 612,368,384 B; model/terms/comm_memory.py, comm_groups.py own_group) the
    GPU would hold 95,612,599,968 B if every cached block stayed, 12,402,590,368 B more than the
    usable 83,210,009,600 B (81,559 MiB as the driver reports it less the runtime reserve).
    PyTorch's allocator (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc)
    then frees its cached unsplit blocks and retries cudaMalloc (release_cached_blocks) instead
    of raising out-of-memory: the allocated peak (82.86 GB with the communicators) decides the
    verdict, "fits", and the report says the run retries, uncharged in the step time."""
    case = {**BASE, "model": "llama3-405b", "framework": "fsdp2", "dp": 2048,
            "global_batch_size": 2048, "zero_stage": 3}  # fmt: skip
    d = estimate_to_dict(build_case(case).evaluate())
    m = d["memory"]
    unit = 2 * 16_384**2 + 2 * 16_384 * 1_024 + 3 * 16_384 * 53_248 + 2 * 16_384
    assert unit == 3_187_703_808
    assert m["stream_pool_bytes"] == 2 * 2 * unit + 2 * unit // 2048 == 12_753_928_224
    assert m["allocated_bytes"] == 82_552_487_552
    # + NVLink SHARP's 2 MiB of credits on the world ring, 8 ranks a node (nvls_memory.py)
    assert m["communicator_bytes"] == (16 * 12 + 16 * 3 * 2 + 2 * 2 + 2) * 2**20 == 308_281_344
    assert m["capacity_bytes"] == 83_210_009_600
    held = m["allocated_bytes"] + m["stream_pool_bytes"] + m["communicator_bytes"]
    assert held == 95_915_671_168 - 306_184_192 + 2 * 2**20 + 3_112_992 == 95_614_697_120
    assert m["reserved_over_bytes"] == held - m["capacity_bytes"] == 12_404_687_520
    assert m["allocator_retries"] is True and m["fits"] is True
    text = evaluate_text(d).splitlines()
    assert "  verdict: fits (with allocator retries, below)" in text
    retry = next(x for x in text if x.startswith("  allocator retries:"))
    assert "would exceed the capacity by 12.40 GB" in retry and "not charged" in retry


def test_no_retry_line_where_the_reserved_bytes_fit():
    """Llama 3 8B at dp 8 reserves 38.57 GB with the communicators well under 83.21 GB."""
    d = estimate_to_dict(build_case({**BASE, "framework": "fsdp2"}).evaluate())
    assert d["memory"]["allocator_retries"] is False
    assert d["memory"]["reserved_over_bytes"] == 0
    text = evaluate_text(d)
    assert "allocator retries" not in text and "verdict: fits\n" in text


def test_no_retry_line_where_the_layout_does_not_fit():
    """Llama 3 405B under fsdp2 ZeRO-3 at dp 1024, no recomputation: the allocated peak alone is
    over the capacity, so the verdict is "DOES NOT FIT" and no retry line promises a run."""
    case = {**BASE, "model": "llama3-405b", "framework": "fsdp2", "dp": 1024,
            "global_batch_size": 1024, "zero_stage": 3, "recompute": "none"}  # fmt: skip
    d = estimate_to_dict(build_case(case).evaluate())
    assert d["memory"]["fits"] is False and d["memory"]["allocator_retries"] is True
    text = evaluate_text(d)
    assert "verdict: DOES NOT FIT" in text and "allocator retries:" not in text
