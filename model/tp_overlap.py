"""The tensor-parallel overlap mechanisms (:class:`TpOverlap`), which framework profile runs
which (:data:`TP_OVERLAP_FRAMEWORKS`), the default a layout runs (:func:`tp_overlap_for`) and the
rule that refuses one a framework or FP8 recipe cannot run (:func:`check_tp_overlap`); what each
does to a layer's collectives is :mod:`model.layer_time`'s, what it does to the GEMMs
:mod:`model.op_time`'s and :mod:`model.userbuffers_gemm`'s."""

from __future__ import annotations

from enum import StrEnum

from trainplan.model.errors import InputError, LayoutError

__all__ = [
    "TpOverlap",
    "TP_OVERLAP_FRAMEWORKS",
    "tp_overlap_for",
    "tp_overlap_run",
    "check_tp_overlap",
    "check_layout_tp_overlap",
]


class TpOverlap(StrEnum):
    """How tensor-parallel collectives overlap GEMMs (see the module docstring)."""

    NONE = "none"
    ASYNC = "async"
    FULL = "full"
    ASYNC_TP = "async-tp"


TP_OVERLAP_FRAMEWORKS: dict[TpOverlap, tuple[str, ...]] = {
    TpOverlap.FULL: ("megatron", "textbook"),
    TpOverlap.ASYNC_TP: ("fsdp2",),
}
"""The framework profiles that run a tensor-parallel overlap mechanism (the others run under
every profile): Transformer Engine's userbuffers (``full``) under Megatron-Core
(``--tp-comm-overlap``, :mod:`model.terms.userbuffers`), not under ``deepspeed``:
Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed f4157bea) has no ``--tp-comm-overlap``
argument (``megatron/arguments.py``) and never calls Transformer Engine's ``initialize_ub``, so
its TE layers run without userbuffers; torchtitan's async TP (``async-tp``) only in torchtitan, the
``fsdp2`` profile (``torchtitan/distributed/compile.py`` ``_maybe_enable_async_tp``)."""


def tp_overlap_for(
    framework: str,
    overlap: TpOverlap | str | None,
    gathered_inputs: bool = True,
    launch_ordered: bool = True,
) -> TpOverlap:
    """The tensor-parallel overlap a layout runs: ``overlap`` when given, else the framework's
    default — ``none`` under ``fsdp2`` with torchtitan's tensor-parallel plan
    (``gathered_inputs``, :func:`model.memory.keeps_gathered_inputs`: torchtitan's collectives
    wait unless ``enable_async_tensor_parallel``, default False in torchtitan
    ``config/configs.py``, which is ``async-tp``), ``async`` elsewhere (Megatron-Core's
    backward collectives beside the weight-gradient GEMMs, Megatron-DeepSpeed's ``layers.py``
    the same, and the Megatron-style sequence-parallel plan ``tp_block_inputs = sharded``
    stands for) — but ``none`` where the run does not keep its launches in order
    (``launch_ordered`` False, :func:`model.launch_order.launch_order_kept`: Megatron-FSDP or
    the combined-1F1B expert overlap before Blackwell, without ``CUDA_DEVICE_MAX_CONNECTIONS=1``
    the async collectives are not sure to start before the GEMM they hide under). A given
    ``overlap`` is run as asked (``async`` there: the upper bound the user asked for, said in
    the assumptions).

    >>> str(tp_overlap_for("fsdp2", None)), str(tp_overlap_for("megatron", None))
    ('none', 'async')
    >>> str(tp_overlap_for("megatron", None, True, False))
    'none'
    >>> str(tp_overlap_for("fsdp2", None, False)), str(tp_overlap_for("fsdp2", "async-tp"))
    ('async', 'async-tp')
    """
    if overlap is not None:
        return TpOverlap(str(overlap).lower())
    torchtitan_plan = str(framework) == "fsdp2" and gathered_inputs
    return TpOverlap.NONE if torchtitan_plan or not launch_ordered else TpOverlap.ASYNC


def tp_overlap_run(overlap: TpOverlap, tp: int, sequence_parallel: bool) -> TpOverlap:
    """The mechanism a layer's tensor-parallel collectives run under ``overlap`` on tp ``tp``
    ranks with sequence parallelism on or off (``sequence_parallel``): ``none`` for ``async-tp``
    without sequence parallelism (or at tp 1), else ``overlap``. torchtitan b5bcd76c6 accepts
    ``compile.enable_async_tensor_parallel`` with ``parallelism.enable_sequence_parallel`` off
    (``config/configs.py`` ``CompileConfig.__post_init__`` asks only for ``compile.enable`` with
    the model compiled; ``distributed/compile.py`` ``_maybe_enable_async_tp`` sets Inductor's
    ``_micro_pipeline_tp`` and nothing else), and Inductor's pass (PyTorch 2.13.0
    ``torch/_inductor/fx_passes/micro_pipeline_tp.py`` ``micro_pipeline_tp_pass``) fuses only
    the all-gathers and reduce-scatters ``find_all_gather_patterns`` and
    ``find_reduce_scatter_patterns`` find; without sequence parallelism the plan's collectives
    are all-reduces, the pass logs "async TP found no matching all-gather/reduce-scatter
    patterns for fusion" and each all-reduce is waited for as under ``none``. ``full`` without
    sequence parallelism is refused (:func:`check_tp_overlap`), not run.

    >>> str(tp_overlap_run(TpOverlap.ASYNC_TP, 8, False)), str(tp_overlap_run(TpOverlap.ASYNC_TP, 8, True))
    ('none', 'async-tp')
    """
    if overlap is TpOverlap.ASYNC_TP and not (tp > 1 and sequence_parallel):
        return TpOverlap.NONE
    return overlap


def check_tp_overlap(
    overlap: TpOverlap, framework: str, fp8_recipe: str | None = None, tp: int = 1, sp: bool = False
) -> None:
    """Refuse a tensor-parallel overlap mechanism the framework does not have, that does not
    run with the FP8 recipe ``fp8_recipe`` (:class:`model.precision.Fp8Recipe`'s value; None
    outside FP8) or, for ``full``, on tp ``tp`` > 1 ranks without sequence parallelism
    (``sp``: whether it is on, :func:`model.layout.sequence_parallel_on`):
    Megatron-LM d98e8a64dd ``megatron/training/arguments.py`` ``validate_args`` asserts
    ``args.sequence_parallel`` when ``args.tp_comm_overlap`` ("Tensor parallel
    communication/GEMM overlap can happen only when sequence parallelism is enabled"; at tp 1 it
    turns sequence parallelism off first, so ``full`` there is refused too: the planner lets it
    stand, as nothing is overlapped and no userbuffers are made, and
    :func:`interface.launch_overlap.megatron_overlap_flags` does not write the flag). Transformer
    Engine's userbuffers fill their all-gather buffer through
    ``fill_userbuffers_buffer_for_all_gather`` (``transformer_engine/pytorch/module/base.py``),
    which takes FP8 delayed and current (tensorwise) scaling and MXFP8 quantizers only and
    raises ``Unsupported quantizer for Userbuffers`` for the blockwise one, and Megatron-Core
    turns the all-gather overlap on with ``tp_comm_overlap`` (``tp_comm_overlap_ag`` default
    True, ``TELayerNormColumnParallelLinear``).

    Raises
    ------
    InputError
        ``async-tp`` outside torchtitan (``fsdp2``), ``full`` under ``fsdp2`` or ``deepspeed``,
        ``full`` at tp > 1 without sequence parallelism, ``full`` with the ``blockwise`` FP8
        recipe.

    Examples
    --------
    >>> try:
    ...     check_tp_overlap(TpOverlap.ASYNC_TP, "megatron")
    ... except InputError as err:
    ...     print(err)
    tp_comm_overlap: async-tp (torchtitan's enable_async_tensor_parallel) needs framework fsdp2, not megatron
    """
    allowed = TP_OVERLAP_FRAMEWORKS.get(overlap)
    if allowed is not None and str(framework) not in allowed:
        name = {
            TpOverlap.ASYNC_TP: "torchtitan's enable_async_tensor_parallel",
            TpOverlap.FULL: "Transformer Engine's userbuffers",
        }[overlap]
        raise InputError(
            f"tp_comm_overlap: {overlap} ({name}) needs framework {' or '.join(allowed)}, "
            f"not {framework}"
        )
    if overlap is TpOverlap.FULL and tp > 1 and not sp:
        raise InputError(
            "tp_comm_overlap: full (Transformer Engine's userbuffers) needs sequence parallelism "
            f"at tp {tp} (Megatron-LM's validate_args asserts it); turn sequence_parallel on or "
            "use tp_comm_overlap async"
        )
    if overlap is TpOverlap.FULL and str(fp8_recipe) == "blockwise":
        raise InputError(
            "tp_comm_overlap: full (Transformer Engine's userbuffers) does not run with "
            "fp8_recipe blockwise (fill_userbuffers_buffer_for_all_gather takes delayed, "
            "tensorwise and mxfp8 quantizers only); use another recipe or tp_comm_overlap async"
        )


def check_layout_tp_overlap(
    overlap: TpOverlap | str | None, framework: str, tp: int, sp: bool
) -> None:
    """:func:`check_tp_overlap` of a chosen ``overlap`` (None: the framework's default, which
    every layout runs) on a layout's ``framework``, ``tp`` and sequence parallelism ``sp``, as a
    legality rule (:data:`model.legality.RULES`): the evaluator refuses the layout before
    timing it, and the search drops the candidates that cannot run it (a framework without the
    mechanism, tp > 1 without sequence parallelism) and keeps the others.

    Raises
    ------
    LayoutError
        :func:`check_tp_overlap`'s line.
    """
    if overlap is None:
        return
    try:
        check_tp_overlap(TpOverlap(str(overlap)), str(framework), None, int(tp), bool(sp))
    except InputError as err:
        raise LayoutError(str(err)) from None
