"""The overlap flags a Megatron-LM launch needs for the step time a plan assumes
(:func:`megatron_overlap_flags`, written by :func:`interface.launch.megatron_flags`)."""

from __future__ import annotations

from trainplan.model.layout import Layout
from trainplan.model.op_time import TpOverlap, tp_overlap_for
from trainplan.model.timing import CostOptions
from trainplan.model.userbuffers_gemm import DEFAULT_UB_CONFIG

__all__ = ["megatron_overlap_flags"]

INTERLEAVED = ("1f1b", "interleaved")
"""Schedules Megatron-Core runs with virtual stages (its interleaved 1F1B)."""


def megatron_overlap_flags(layout: Layout, options: CostOptions, notes: list[str]) -> list[str]:
    """The overlap flags the step time assumes, for Megatron-LM d98e8a64dd (2026-08-22), whose
    ``arguments.py`` leaves every one off by default: ``--overlap-grad-reduce`` (DDP and the
    distributed optimizer) and ``--overlap-param-gather`` (the distributed optimizer only:
    ``validate_args`` asserts it, and that it comes with ``--overlap-grad-reduce``) when
    ``grad_reduce_overlap``; Megatron-FSDP's (ZeRO-3) line writes both always (they also size
    its gradient buckets). With virtual stages: ``--no-overlap-p2p-communication`` when
    ``p2p_overlap`` is off, ``--overlap-p2p-communication-warmup-flush`` when
    ``p2p_warmup_flush`` (:func:`model.comm.p2p_waiting_sends`); a figure for Megatron-Core
    before 0.18 (``p2p_forward_send_wait`` off) is said in ``notes``. ``--tp-comm-overlap``
    (``ModelParallelConfig.tp_comm_overlap``; Transformer Engine's userbuffers, whose memory
    :func:`model.terms.userbuffers.userbuffers_term` counts) when ``tp_comm_overlap`` is
    ``full`` and sequence parallelism is on (``validate_args`` asserts it, and turns sequence
    parallelism off at tp 1, where there is nothing to overlap); at tp > 1 without it a note
    says the flag is not written; a ``tp_comm_overlap_cfg`` other than Transformer Engine's
    defaults is said in ``notes`` (Megatron-LM takes it as a YAML file).

    Examples
    --------
    >>> megatron_overlap_flags(Layout(tp=8), CostOptions(tp_comm_overlap=TpOverlap.FULL), [])
    ['--overlap-grad-reduce', '--overlap-param-gather', '--tp-comm-overlap']
    """
    if str(layout.framework) != "megatron":
        return []
    out = []
    if layout.zero_stage == 3:
        # Megatron-FSDP: the overlap the plan times; --overlap-grad-reduce also sizes the DDP
        # buckets (training.py resolve_ddp_bucket_size: max(4e7, 1e6·dp·cp), else None), which
        # cuts the parameters outside the layers into the buckets the memory count assumes
        # (model.megatron_fsdp_buckets.non_unit_buckets)
        out += ["--overlap-grad-reduce", "--overlap-param-gather"]
    elif options.grad_reduce_overlap:
        out.append("--overlap-grad-reduce")
        out += ["--overlap-param-gather"] if layout.zero_stage == 1 else []
    if layout.pp > 1 and layout.virtual_stages > 1 and str(layout.schedule) in INTERLEAVED:
        if not options.p2p_overlap:
            out.append("--no-overlap-p2p-communication")
        elif options.p2p_warmup_flush:
            out.append("--overlap-p2p-communication-warmup-flush")
        if options.p2p_overlap and not options.p2p_forward_send_wait:
            notes.append(
                "p2p_forward_send_wait false: the pipeline figure is Megatron-Core before 0.18; "
                "0.18 and later wait on each forward send before freeing its output"
            )
    return out + _tp_overlap_flags(layout, options, notes)


def _tp_overlap_flags(layout: Layout, options: CostOptions, notes: list[str]) -> list[str]:
    """``--tp-comm-overlap`` where the plan times Transformer Engine's userbuffers, with the notes
    of :func:`megatron_overlap_flags`."""
    if tp_overlap_for(layout.framework, options.tp_comm_overlap) is not TpOverlap.FULL:
        return []
    if layout.sp:
        if options.tp_comm_overlap_cfg != DEFAULT_UB_CONFIG:
            notes.append(
                f"tp_comm_overlap_cfg {options.tp_comm_overlap_cfg}: the step time assumes "
                "that userbuffers configuration (model.userbuffers_gemm.UB_CONFIGS); "
                "Megatron-LM reads one from a YAML file given as --tp-comm-overlap-cfg, not "
                "written here"
            )
        return ["--tp-comm-overlap"]
    if layout.tp > 1:
        notes.append(
            "tp_comm_overlap full: --tp-comm-overlap not written; Megatron-LM runs "
            "Transformer Engine's userbuffers only with sequence parallelism, so the step "
            "time assumes an overlap this layout cannot run"
        )
    return []
