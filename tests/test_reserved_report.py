"""The text report's reserved-memory line (``memory.reserved_bytes`` beside the verdict).

Llama 3 8B under fsdp2 at dp 8 (torchtitan's layout): the copy-in stream's pool is two units'
BF16 all-gather outputs (model.terms.peak.stream_pool_term), the largest unit being the
embedding, 128,256 × 4,096 elements: 2 × 2 B × 525,336,576 = 2,101,346,304 B, printed 2.10 GB.
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
    assert m["stream_pool_bytes"] == 2 * 2 * 128_256 * 4096
    line = next(x for x in evaluate_text(d).splitlines() if "max_memory_reserved" in x)
    assert f"{m['reserved_bytes'] / 1e9:.2f} GB" in line
    assert "+ 2.10 GB idle in the all-gather stream's pool" in line
    mega = estimate_to_dict(build_case({**BASE, "framework": "megatron"}).evaluate())
    assert "max_memory_reserved" not in evaluate_text(mega)
