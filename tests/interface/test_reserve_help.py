"""The help of ``memory_reserve_gib`` states the reserve the evaluator uses."""

from __future__ import annotations

from trainplan.interface.scenario_keys import KEY_HELP
from trainplan.optimizer.case import Case


def test_reserve_help_reads_the_reserve_used():
    """An H100-SXM's driver keeps 480 MiB (nvidia-smi -q capture), the CUDA context 666,632,192 B,
    the cuBLAS workspaces 32 MiB + (32 MiB + 1 KiB) and the fragmentation allowance 1 GiB:
    503,316,480 + 666,632,192 + 67,109,888 + 1,073,741,824 = 2,310,800,384 B = 2.15 GiB; a part
    with no driver capture keeps the H100's 841 MiB instead (881,852,416 B): 2,689,336,320 B =
    2.50 GiB."""
    reserve = 480 * 2**20 + 666_632_192 + (32 * 2**20 + 32 * 2**20 + 1024) + 2**30
    assert reserve == 2_310_800_384
    assert Case.of(model="llama3-8b").evaluate().device.runtime_reserve_bytes == reserve
    text = KEY_HELP["memory_reserve_gib"]
    assert "2.15 on the H100-SXM, 2.50 on a part with no driver capture" in text
    assert "2.04" not in text
