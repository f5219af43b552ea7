"""DeepSpeed's routed experts run one after another (``deepspeed/moe/experts.py``,
``Experts.forward``: a loop over the local experts' modules, then ``torch.cat``), so each pass
of each expert's linear layer is a dense GEMM of its own: its own tiles and waves and its own
kernel launch. Transformer Engine's grouped GEMM (Megatron-Core) spreads the same GEMMs over
4 streams (``multi_stream_cublas_gemm``), ``ceil(E/4) − 1`` launch gaps beyond one kernel's.

Derivation for 16 local experts of 1,024 routed rows each, an expert FFN of 1,536 and
hidden 4,096 on an H100: one expert's forward GEMM [1,024 × 4,096] × [4,096 × 1,536] is a dense
GEMM (model.op_time.op_seconds of a batch-1 op, t_kernel included); the loop is 16 of them, so
its time is exactly 16 × that, in the forward, the input gradient and the weight gradient
(the FP32 accumulation's bytes are per expert too). The grouped form pays 3 gaps (ceil(16/4)
− 1) where the loop pays 15: 12 × 3 µs more launches, besides the per-expert waves.
"""

import dataclasses
import math

from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, dgrad_seconds, op_seconds, wgrad_seconds
from trainplan.model.ops import Op, OpKind

E, M, N, K = 16, 1024, 1536, 4096
P = deployed_params("H100-SXM")
LOOP = Clock(989.4e12, 3.35e12, P, expert_loop=True)
GROUPED = Clock(989.4e12, 3.35e12, P)
EXPERTS = Op("expert fc1", OpKind.GEMM, m=M, n=N, k=K, batch=E)
ONE = Op("expert fc1", OpKind.GEMM, m=M, n=N, k=K, batch=1)


def test_the_loop_is_each_experts_dense_gemm_in_turn():
    for f in (lambda o, c: op_seconds(o, c), dgrad_seconds, wgrad_seconds):
        assert math.isclose(f(EXPERTS, LOOP), E * f(ONE, LOOP), rel_tol=1e-12)
    assert P.kernel_overhead_s == 3e-6


def test_the_loop_launches_twelve_more_kernels_per_pass_than_four_streams():
    """Without the waves' difference (a part with no sourced SM count, rows a whole M block)
    the two differ by (16 − 1) − (ceil(16/4) − 1) = 12 launches per pass."""
    bare = dataclasses.replace(P, part="")
    loop, grouped = Clock(1e15, 3e12, bare, expert_loop=True), Clock(1e15, 3e12, bare)
    extra = op_seconds(EXPERTS, loop) - op_seconds(EXPERTS, grouped)
    assert math.isclose(extra, 12 * bare.kernel_overhead_s, rel_tol=1e-9)
