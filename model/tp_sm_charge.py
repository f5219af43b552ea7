"""What a tensor-parallel collective's kernels cost the GEMM they hide under (the SM share
``φ``), by the overlap that carries them: NCCL's under ``async`` (and the output layer's under
``full``), the userbuffers kernels' under ``full``. Read by :mod:`model.layer_time`; the
measured rule and its sources are :mod:`model.comm_sms`."""

from __future__ import annotations

from trainplan.model.op_time import PASSES, Clock
from trainplan.model.tp_overlap import TpOverlap
from trainplan.model.userbuffers_gemm import ub_sm_share

__all__ = ["tp_sm_share", "output_tp_sm_share"]


def tp_sm_share(c: Clock, role: str, which: str) -> float:
    """``φ`` the GEMM of ``role``'s pass ``which`` (``forward``, ``dgrad``, ``wgrad``) loses while
    the tensor-parallel collective it hides runs: NCCL's (:attr:`Clock.nccl_sm_share`) under
    ``async``; under ``full`` the userbuffers kernel's where it holds SMs beside a GEMM launched
    on every SM (:func:`model.userbuffers_gemm.ub_sm_share`); 0 under ``none`` (nothing hidden)
    and ``async-tp`` (SymmetricMemory's kernels, not charged).

    >>> from trainplan.model.op_rates import deployed_params
    >>> from trainplan.model.userbuffers_gemm import userbuffers_for
    >>> c = Clock(989.4e12, 3.35e12, deployed_params("H100-SXM"), tp_comm_overlap=TpOverlap.FULL,
    ...           userbuffers=userbuffers_for("te-1", 4))
    >>> round(tp_sm_share(c, "mlp_in", "wgrad"), 4), tp_sm_share(c, "mlp_in", "forward")
    (0.239, 0.0)
    """
    if c.tp_comm_overlap is TpOverlap.ASYNC:
        return c.nccl_sm_share
    if c.tp_comm_overlap is not TpOverlap.FULL:
        return 0.0
    return ub_sm_share(c.userbuffers, role, PASSES.index(which), c.params.part)


def output_tp_sm_share(c: Clock) -> float:
    """``φ`` the output layer's GEMMs lose while its backward tensor-parallel collectives run:
    NCCL's (:attr:`Clock.nccl_sm_share`) under ``async`` and ``full`` alike — Megatron-Core's
    output layer is a ``tensor_parallel.ColumnParallelLinear`` (``gpt_model.py``), not a
    Transformer Engine layer, so userbuffers never carry its collectives
    (``LinearWithGradAccumulationAndAsyncCommunication`` issues them through
    ``torch.distributed``, NCCL's); 0 under ``none`` and ``async-tp`` (as :func:`tp_sm_share`).

    >>> from dataclasses import replace
    >>> from trainplan.model.op_rates import deployed_params
    >>> c = Clock(989.4e12, 3.35e12, deployed_params("H100-SXM"), tp_comm_overlap=TpOverlap.FULL,
    ...           nccl_sm_share=0.2593)
    >>> output_tp_sm_share(c), output_tp_sm_share(replace(c, tp_comm_overlap=TpOverlap.NONE))
    (0.2593, 0.0)
    """
    if c.tp_comm_overlap in (TpOverlap.ASYNC, TpOverlap.FULL):
        return c.nccl_sm_share
    return 0.0
