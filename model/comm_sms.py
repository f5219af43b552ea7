"""The SMs a token dispatcher's kernels hold while they run beside computation, and what that
costs the computation they hide under.

DeepEP's high-throughput dispatch and combine are persistent kernels on ``num_sms`` SMs for
their whole run (deepseek-ai/DeepEP ``deep_ep/buffers/legacy.py`` ``Buffer.num_sms`` = 20, two
per channel; Megatron-Core ``transformer_config.py`` ``moe_deepep_num_sms`` = 20, set through
``moe/fused_a2a.py`` ``set_deepep_num_sms``). DeepSeek-V3 says what that takes from the
computation it overlaps: "the current communication implementation relies on expensive SMs
(e.g., we allocate 20 out of the 132 SMs available in the H800 GPU for this purpose), which
will limit the computational throughput" (report §3.5.1). A GEMM or attention kernel that runs
while the dispatch holds ``s`` of the part's ``S`` SMs runs on ``S − s`` of them.

So an all-to-all of ``a`` seconds beside ``c`` seconds of SM-bound computation (both as each
takes alone) ends after ``max(c + φ·a, a)``, ``φ = s/S`` (:func:`dispatcher_sm_share`): while
the communication runs the computation proceeds at ``1 − φ`` of its rate, so ``φ·a`` of it is
left over when the communication ends (or the communication paces the block). What waits
beyond the computation is :func:`contended_wait` ``= max(φ·a, a − c)`` in place of the
uncontended ``max(0, a − c)``. Read by :func:`model.moe_run.exposed_all_to_all` (Megatron-Core's
overlaps) and :func:`model.schedule_cost.dualpipe_block` (DualPipe's F&B block).

The NCCL all-to-all (``alltoall``) is charged nothing: NCCL's kernels also run on SMs (one
block per channel), but its channel count per all-to-all on a part is not published as a
per-operation figure; a part without a sourced SM count (``scenarios/kernels/gemm.toml``
``[[sm_count]]``) is charged nothing either.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.gemm_shapes import sm_count
from trainplan.model.moe import DEEPEP_NUM_SMS
from trainplan.model.op_rates import SM_PART
from trainplan.model.part_family import catalogue_part
from trainplan.model.xp import maximum
from trainplan.scenarios.kernel_data import gemm_data

__all__ = ["DISPATCHER_SMS", "dispatcher_sm_share", "contended_wait"]

DISPATCHER_SMS: dict[str, int] = {"deepep": DEEPEP_NUM_SMS}
"""SMs a dispatcher's communication kernels hold while they run (DeepEP: ``Buffer.num_sms``,
the default both DeepSeek-V3 (§3.2.2: "20 SMs … partitioned into 10 communication channels")
and Megatron-Core run). A dispatcher not listed is charged none (module docstring)."""


@lru_cache(maxsize=64)
def dispatcher_sm_share(dispatcher: str, device_name: str) -> float:
    """``φ``: the share of the part's SMs the dispatcher's kernels hold while they run beside
    computation (``DISPATCHER_SMS`` ÷ the part's ``[[sm_count]]``); 0 for a dispatcher or a part
    without a sourced count. ``dispatcher``: a :class:`model.moe_run.Dispatcher` value.

    Examples
    --------
    DeepEP on an H800 (132 SMs), DeepSeek-V3's own figure:

    >>> round(dispatcher_sm_share("deepep", "H800"), 4)  # 20 / 132
    0.1515
    >>> dispatcher_sm_share("deepep", "B200")  # 20 / 148
    0.13513513513513514
    >>> dispatcher_sm_share("deepep", "GB300")  # 20 / 160 (Blackwell Ultra)
    0.125
    >>> dispatcher_sm_share("alltoall", "H800"), dispatcher_sm_share("deepep", "MI300X")
    (0.0, 0.0)
    """
    sms = DISPATCHER_SMS.get(str(dispatcher))
    part = SM_PART.get(catalogue_part(device_name))
    if sms is None or part is None:
        return 0.0
    return sms / sm_count(gemm_data().sm_counts, part)


def contended_wait(comm_s: Any, compute_s: Any, share: float) -> Any:
    """Seconds a block of ``compute_s`` of computation with ``comm_s`` of communication beside
    it lasts beyond its computation, the communication holding ``share`` (``φ``) of the SMs:
    ``max(φ·a, a − c)`` (module docstring). Scalars or arrays.

    Examples
    --------
    >>> contended_wait(2.0, 3.0, 0.0), contended_wait(2.0, 3.0, 0.25)
    (0.0, 0.5)
    >>> contended_wait(4.0, 3.0, 0.25)  # the communication paces: 4 − 3
    1.0
    """
    return maximum(share * comm_s, comm_s - compute_s)
