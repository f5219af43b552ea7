"""Legality of recipe keys that only some frameworks, ZeRO stages or pipeline layouts read.

A key given where nothing reads it is refused (one line naming the key, the value and the rule)
rather than silently dropped. The rules are per framework and ZeRO stage, so a search over a
space some of whose frameworks cannot take the key keeps the others
(:data:`model.legality.RULES`, ``optimizer/tables.py`` ``_legal``). The pipeline send options
(:class:`model.timing.CostOptions` ``p2p_*``) are read only by Megatron-Core's interleaved
schedule (:func:`model.comm.p2p_overlapped`, :func:`model.comm.p2p_waiting_sends`);
``grad_reduce_overlap`` by megatron and fsdp2
(:func:`check_option_keys`); ``grad_stats_group`` by Megatron-Core's optimizer at ZeRO ≥ 1 only
(:func:`check_grad_stats_group`); ``grad_clip_scaling`` and ``loss_scaling`` by
megatron's own optimizer step only (:func:`model.step_setting_rules.check_megatron_step_settings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.loss_memory import check_cross_entropy_fusion
from trainplan.model.moe_rules import check_deepspeed_moe
from trainplan.model.precision import check_framework_fp8_recipe

__all__ = [
    "OPTION_DEFAULTS",
    "options_given",
    "check_stage_keys",
    "check_options",
    "check_option_keys",
    "check_layout_reads_options",
    "check_p2p_options",
    "check_framework_recipe",
    "check_memory_efficient_norm",
    "check_sac_scaled_mm",
    "check_flat_parameters",
    "FLAT_PARAMETERS_FSDP2_ONLY",
    "check_grad_stats_group",
    "check_bias_dropout_fusion",
]

P2P_KEYS = ("p2p_overlap", "p2p_warmup_flush", "p2p_forward_send_wait")
"""The pipeline send options (:class:`model.timing.CostOptions` fields)."""

OPTION_DEFAULTS: Mapping[str, bool] = {
    "p2p_overlap": True,
    "p2p_warmup_flush": False,
    "p2p_forward_send_wait": True,
    "grad_reduce_overlap": True,
    "lp_grads_set_to_none": False,
}
"""The on/off cost options whose legality depends on the framework or the pipeline, with their
defaults (:class:`model.timing.CostOptions` fields)."""


def options_given(options: Any) -> tuple[tuple[str, bool], ...]:
    """The on/off cost options of ``options`` (a :class:`model.timing.CostOptions`, or None)
    set away from their defaults (:data:`OPTION_DEFAULTS`), as (name, value) pairs: what
    :func:`check_p2p_options` and :func:`check_option_keys` read.

    >>> from trainplan.model.timing import CostOptions
    >>> options_given(CostOptions(p2p_overlap=False)), options_given(None)
    ((('p2p_overlap', False),), ())
    """
    if options is None:
        return ()
    values = ((k, bool(getattr(options, k))) for k in OPTION_DEFAULTS)
    return tuple((k, v) for k, v in values if v != OPTION_DEFAULTS[k])


def check_stage_keys(framework: Any, zero_stage: int, training: Any) -> None:
    """Refuse ``fsdp_double_buffer`` outside ``megatron`` ZeRO-3 (Megatron-FSDP's
    ``FixedPoolAllocator``, Megatron-LM ``megatron_fsdp/param_and_grad_buffer.py``) and
    ``deepspeed_overlap_comm`` outside ``deepspeed`` ZeRO-1/2 (DeepSpeed ``zero/config.py``
    ``overlap_comm_valid``: ZeRO-3 turns it on itself; the other profiles have no such key) and
    ``seq_parallel_communication_data_type`` bf16 outside ``deepspeed`` (DeepSpeed's key).

    Raises
    ------
    LayoutError
        One line naming the key, its value and where it is read.

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8, fsdp_double_buffer=True)
    >>> check_stage_keys("megatron", 3, t)
    """
    fw = str(framework)
    if training.fsdp_double_buffer and not (fw == Framework.MEGATRON and zero_stage == 3):
        raise LayoutError(
            "fsdp_double_buffer: true is read by Megatron-FSDP only (`framework` megatron with "
            f"zero_stage 3), not {fw} zero_stage {zero_stage}"
        )
    if training.deepspeed_overlap_comm and not (fw == Framework.DEEPSPEED and zero_stage in (1, 2)):
        raise LayoutError(
            "deepspeed_overlap_comm: true is read by DeepSpeed ZeRO-1/2 only (`framework` "
            f"deepspeed with zero_stage 1 or 2), not {fw} zero_stage {zero_stage}"
        )
    if training.seq_parallel_communication_data_type != "fp32" and fw != Framework.DEEPSPEED:
        raise LayoutError(
            "seq_parallel_communication_data_type: bf16 is DeepSpeed-Ulysses' (`framework` "
            f"deepspeed with cp > 1), not {fw}'s"
        )


def check_options(given: tuple[tuple[str, bool], ...], framework: Any, pp: int, v: int) -> None:
    """The cost options' legality rules (:func:`model.legality.RULES`): :func:`check_option_keys`
    then :func:`check_p2p_options`.

    Raises
    ------
    LayoutError
        The first rule broken, one line.
    """
    check_option_keys(given, framework)
    check_p2p_options(given, framework, pp, v)


def check_option_keys(given: tuple[tuple[str, bool], ...], framework: Any) -> None:
    """Refuse the cost options ``given`` (:func:`options_given`) under a profile that never
    reads them:

    * ``grad_reduce_overlap`` false under ``deepspeed`` or ``textbook``: DeepSpeed's
      once-per-step traffic never overlaps (:func:`model.comm.grad_reduce_overlaps`: its
      pipeline engine reduces after the flush, ZeRO-1/2 end in a blocking all-gather in
      ``step()``) and its ZeRO-3 has none (every collective per micro-batch); its own key is
      ``deepspeed_overlap_comm``. The textbook profile runs the single time model, whose
      overlap is the ``overlap`` fractions.
    * ``lp_grads_set_to_none`` true outside ``deepspeed``: DeepSpeed's ``BF16_Optimizer`` of
      2022–2025 (:mod:`model.deepspeed_accumulate`); no other profile reads it.

    Raises
    ------
    LayoutError
        One line naming the key, its value and where it is read.

    >>> check_option_keys((("lp_grads_set_to_none", True),), "deepspeed")
    >>> check_option_keys((("grad_reduce_overlap", False),), "deepspeed")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: grad_reduce_overlap: false is read by megatron and fsdp2 only ...
    """
    fw = str(framework)
    for key, _ in given:
        if key == "lp_grads_set_to_none" and fw != Framework.DEEPSPEED:
            raise LayoutError(
                "lp_grads_set_to_none: true is read by deepspeed only (its BF16_Optimizer's "
                f"gradient accumulation in each backward), not {fw}"
            )
        if key == "grad_reduce_overlap" and fw in (Framework.DEEPSPEED, Framework.TEXTBOOK):
            raise LayoutError(
                "grad_reduce_overlap: false is read by megatron and fsdp2 only (Megatron-Core's "
                "--overlap-grad-reduce, FSDP's prefetch), not "
                + (
                    "deepspeed, whose once-per-step reduction never overlaps (use "
                    "deepspeed_overlap_comm for its ZeRO-1/2 buckets)"
                    if fw == Framework.DEEPSPEED
                    else "textbook, whose single time model reads the `overlap` fractions"
                )
            )


def check_layout_reads_options(
    given: tuple[tuple[str, bool], ...], framework: Any, zero_stage: int, pp: int, v: int
) -> None:
    """Refuse, for one layout a user evaluates, the cost options ``given``
    (:func:`options_given`) that its framework reads elsewhere but not on this layout:

    * the pipeline send options under ``megatron`` without virtual stages (``v`` 1, pp 1
      included): only the interleaved schedule reads them (:func:`model.comm.p2p_overlapped`
      is false at v = 1, where Megatron-Core's 1F1B sends batched and blocking;
      :func:`model.comm.p2p_waiting_sends` counts the interleaved schedule's messages);
    * ``grad_reduce_overlap`` false under ``fsdp2`` ZeRO-3 at pp 1: every collective is per
      micro-batch (``fully_shard`` with ``reshard_after_forward=True`` and gradient sync each
      micro-batch), so the step has no once-per-step traffic for it to expose
      (:func:`model.dp_exposure.dp_exposed_seconds`).

    Not a legality rule: a search's keys describe the code the run uses and apply to the
    layouts that read them; the others stay candidates (and the published runs' settings
    apply row by row). The rules that hold whatever the layout are :func:`check_option_keys`
    and :func:`check_p2p_options`.

    Raises
    ------
    LayoutError
        One line naming the key, its value and where it is read.

    >>> check_layout_reads_options((("p2p_overlap", False),), "megatron", 0, 4, 2)
    >>> check_layout_reads_options((("p2p_overlap", False),), "megatron", 1, 1, 1)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: p2p_overlap: false is read by Megatron-Core's interleaved ...
    """
    fw = str(framework)
    for key, value in given:
        if key in P2P_KEYS and fw == Framework.MEGATRON and v == 1:
            raise LayoutError(
                f"{key}: {str(value).lower()} is read by Megatron-Core's interleaved schedule "
                f"only (virtual_stages > 1), not pp {pp} with virtual_stages 1"
            )
        if key == "grad_reduce_overlap" and fw == Framework.FSDP2 and zero_stage == 3 and pp == 1:
            raise LayoutError(
                "grad_reduce_overlap: false changes nothing under fsdp2 zero_stage 3 at pp 1: "
                "every gather and reduce-scatter is per micro-batch, none once per step "
                "(it applies to zero_stage 2, or to pp > 1)"
            )


def check_memory_efficient_norm(framework: Any, on: bool, arch: Any) -> None:
    """Refuse ``memory_efficient_norm`` on an RMSNorm model (``arch.norm``; ``arch`` None, a
    size-only model, is not checked) under a profile whose RMSNorm keeps its input:

    * ``megatron``: Megatron-LM d98e8a6 reads ``memory_efficient_layer_norm`` in
      ``megatron/core/fusions/fused_layer_norm.py`` ``FusedLayerNorm`` only (Apex's
      ``memory_efficient`` argument), whose ``__init__`` asserts ``normalization ==
      "LayerNorm"``; an RMSNorm model gets ``WrappedTorchNorm``
      (``megatron/core/models/backends.py`` ``LocalSpecProvider.layer_norm``), which asserts
      the flag off (``megatron/core/transformer/torch_norm.py``), or Transformer Engine's
      ``TENorm`` / ``TELayerNormColumnParallelLinear``, which never read it. A LayerNorm model
      runs it through Apex's ``FusedLayerNorm`` (Megatron-Core's local layer spec).
    * ``deepspeed``: Megatron-DeepSpeed f4157bea ``megatron/model/transformer.py`` builds
      ``--normalization rmsnorm`` as ``megatron/model/rmsnorm.py`` ``RMSNorm``, eager PyTorch
      (autograd keeps its input); only ``megatron/model/fused_layer_norm.py``
      ``MixedFusedLayerNorm`` (LayerNorm) passes Apex's ``memory_efficient``.

    Raises
    ------
    LayoutError
        One line naming the key, its value, the framework and the rule.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, Norm
    >>> gpt = Architecture(num_layers=1, hidden_size=64, num_attention_heads=8,
    ...     ffn_hidden_size=128, vocab_size=16, norm=Norm.LAYERNORM)
    >>> check_memory_efficient_norm("megatron", True, gpt)
    >>> from dataclasses import replace
    >>> check_memory_efficient_norm("deepspeed", True, replace(gpt, norm=Norm.RMSNORM))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: memory_efficient_norm: true needs Apex's ... rmsnorm (...)
    """
    if not on or arch is None or str(arch.norm) != "rmsnorm":
        return
    fw = str(framework)
    why = _NORM_KEEPS_INPUT.get(fw)
    if why is not None:
        raise LayoutError(
            "memory_efficient_norm: true needs Apex's memory-efficient LayerNorm, which "
            f"{fw} runs for LayerNorm models only; this model's norm is rmsnorm ({why})"
        )


_NORM_KEEPS_INPUT: dict[str, str] = {
    Framework.MEGATRON: "Megatron-Core's FusedLayerNorm asserts LayerNorm; torch's RMSNorm asserts "
    "memory_efficient_layer_norm off and Transformer Engine's never reads it",
    Framework.DEEPSPEED: "Megatron-DeepSpeed's RMSNorm is eager PyTorch and keeps its input",
}
"""Why each profile's RMSNorm keeps its input (:func:`check_memory_efficient_norm`)."""


def check_p2p_options(given: tuple[tuple[str, bool], ...], framework: Any, pp: int, v: int) -> None:
    """Refuse pipeline send options (``given``: :func:`options_given`) that nothing reads or that
    Megatron-LM refuses: any of them off its default under a profile other than ``megatron``
    (only Megatron-Core's interleaved schedule reads them, :func:`model.comm.p2p_overlapped`);
    ``p2p_overlap`` false with virtual stages at pp 2 (Megatron-LM
    ``megatron/training/arguments.py`` ``validate_args``: interleaving without
    ``overlap_p2p_comm`` asserts ``pipeline_model_parallel_size > 2``, since at pp 2 both
    neighbours are one rank and its batched sends would pair wrongly).

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    Examples
    --------
    >>> off = (("p2p_overlap", False),)
    >>> check_p2p_options(off, "megatron", 4, 2)
    """
    for key, value in given:
        if key in P2P_KEYS and str(framework) != Framework.MEGATRON:
            raise LayoutError(
                f"{key}: {str(value).lower()} is read by Megatron-Core's interleaved schedule "
                f"only (`framework` megatron), not {framework}"
            )
    if ("p2p_overlap", False) in given and v > 1 and pp == 2:
        raise LayoutError(
            f"p2p_overlap: false with virtual stages (v {v}) needs pp > 2, not pp {pp} "
            "(Megatron-LM validate_args); use p2p_overlap true or pp ≥ 3"
        )


SAC_SCALED_MM_FSDP2_ONLY = (
    "sac_saves_scaled_mm: false is read by fsdp2 only (torchtitan's op-level selective "
    "checkpointing)"
)
"""The refusal's rule, one wording for ``evaluate`` (:func:`check_sac_scaled_mm`) and the
search (``optimizer.problem.SearchProblem``, where no framework searched is ``fsdp2``)."""


def check_sac_scaled_mm(framework: Any, training: Any, recompute: Any = None) -> None:
    """Refuse ``sac_saves_scaled_mm`` false (:attr:`model.specs.TrainingSpec.sac_saves_scaled_mm`)
    where no save list it changes runs: outside ``fsdp2`` (torchtitan's op-level selective
    checkpointing, :mod:`model.op_checkpoint`), without ``precision = fp8`` (torchao's
    ``Float8Linear`` GEMMs are the ``aten._scaled_mm`` calls the list names) and, for one
    layout (``recompute`` given), without ``recompute = selective``.

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8, precision="fp8",
    ...     sac_saves_scaled_mm=False)
    >>> check_sac_scaled_mm("fsdp2", t, "selective")
    >>> check_sac_scaled_mm("megatron", t)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: sac_saves_scaled_mm: false is read by fsdp2 only ...
    """
    if training.sac_saves_scaled_mm:
        return
    fw = str(framework)
    if fw != Framework.FSDP2:
        raise LayoutError(f"{SAC_SCALED_MM_FSDP2_ONLY}, not {fw}")
    if str(training.precision) != "fp8":
        raise LayoutError(
            "sac_saves_scaled_mm: false needs precision fp8 (torchao's Float8Linear GEMMs, "
            f"aten._scaled_mm), not {training.precision}"
        )
    if recompute is not None and str(recompute) != "selective":
        raise LayoutError(
            "sac_saves_scaled_mm: false is read by recompute selective only (the op-level save "
            f"list), not recompute {recompute}"
        )


FLAT_PARAMETERS_FSDP2_ONLY = (
    "flat_parameters: true is read by fsdp2 only (PyTorch FSDP1's FlatParameter, counted "
    "beside FSDP2)"
)
"""The refusal's rule, one wording for ``evaluate`` (:func:`check_flat_parameters`) and the
search (``optimizer.problem.SearchProblem``, where no framework searched is ``fsdp2``)."""


def check_flat_parameters(framework: Any, training: Any, pp: int | None = None) -> None:
    """Refuse ``flat_parameters`` true (:attr:`model.specs.TrainingSpec.flat_parameters`)
    outside ``fsdp2`` and, where ``pp`` is given, with pp > 1: PyTorch's pipeline schedules
    (``torch.distributed.pipelining``, as torchtitan runs them) take FSDP2's ``fully_shard``
    modules, and FSDP1's unsynchronised accumulation keeps gradients the ``fsdp2`` pipeline
    mechanism does not count (:func:`model.fsdp2_copies.fsdp2_copy_bytes`).

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8, flat_parameters=True)
    >>> check_flat_parameters("fsdp2", t, 1)
    >>> check_flat_parameters("fsdp2", t, 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: flat_parameters: true needs pp 1 ...
    """
    if not training.flat_parameters:
        return
    fw = str(framework)
    if fw != Framework.FSDP2:
        raise LayoutError(f"{FLAT_PARAMETERS_FSDP2_ONLY}, not {fw}")
    if pp is not None and pp > 1:
        raise LayoutError(
            "flat_parameters: true needs pp 1 (PyTorch's pipeline schedules run FSDP2's "
            f"fully_shard, not FSDP1), not pp {pp}"
        )


def check_grad_stats_group(group: str, layouts: Iterable[tuple[Any, int]], what: str) -> None:
    """Refuse ``grad_stats_group`` ``world`` (:attr:`model.timing.CostOptions.grad_stats_group`)
    where no layout of ``layouts`` ((framework, ZeRO stage) pairs: the one evaluated, or those a
    search covers) reads it. It is read by :func:`model.terms.comm_groups.grad_stats_rings`
    under ``megatron`` at ZeRO ≥ 1 only, where Megatron-Core's distributed optimizer (and
    Megatron-FSDP's) reduces the grad norm over ``get_grad_stats_parallel_group()``
    (``megatron/core/optimizer/__init__.py`` ``_get_megatron_optimizer_based_on_param_groups``,
    at d98e8a64dd); at ZeRO-0 ``Float16OptimizerWithFloat16Params`` reduces over the
    model-parallel group whatever the Megatron-LM version, and DeepSpeed and torchtitan reduce
    over groups of their own. ``what`` names the layouts in the message ("megatron zero_stage
    0", "the frameworks searched ...").

    Raises
    ------
    LayoutError
        One line naming the key, its value and the rule.

    >>> check_grad_stats_group("world", [("megatron", 1)], "megatron zero_stage 1")
    >>> check_grad_stats_group("world", [("fsdp2", 2)], "fsdp2 zero_stage 2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: grad_stats_group: 'world' is read by Megatron-Core's ...
    """
    if group == "intra_dist_opt_instance":
        return
    if any(str(fw) == Framework.MEGATRON and z >= 1 for fw, z in layouts):
        return
    raise LayoutError(
        f"grad_stats_group: {group!r} is read by Megatron-Core's optimizer at ZeRO ≥ 1 only "
        f"(`framework` megatron with zero_stage 1 or 3, the group its grad norm reduces over), "
        f"not {what}"
    )


def check_bias_dropout_fusion(framework: Any, training: Any) -> None:
    """Refuse ``bias_dropout_fusion`` false outside ``deepspeed``: it is Megatron-DeepSpeed's
    ``--no-bias-dropout-fusion`` (deepspeedai/Megatron-DeepSpeed 6acc370a ``megatron/arguments.py``;
    :data:`model.activation_rows.BIAS_DROPOUT_MASKS`). The other profiles' residual dropout is
    eager (Megatron-Core's fused bias-dropout-add is ``torch.compile``'s, torchtitan has none)
    and keeps a mask only where the model has dropout, whatever the key.

    Raises
    ------
    LayoutError
        One line naming the key, its value and where it is read.

    >>> from trainplan.model.specs import TrainingSpec
    >>> off = TrainingSpec(seq_len=8, global_batch_size=8, bias_dropout_fusion=False)
    >>> check_bias_dropout_fusion("deepspeed", off)
    >>> check_bias_dropout_fusion("megatron", off)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: bias_dropout_fusion: false is read by deepspeed only ...
    """
    fw = str(framework)
    if not training.bias_dropout_fusion and fw != Framework.DEEPSPEED:
        raise LayoutError(
            "bias_dropout_fusion: false is read by deepspeed only (Megatron-DeepSpeed's "
            f"--no-bias-dropout-fusion), not {fw}, whose residual dropout keeps no mask at rate 0"
        )


def check_framework_recipe(
    framework: Any, zero_stage: int, training: Any, arch: Any, pp: int | None = None
) -> None:
    """The recipe's choices that one framework and ZeRO stage can or cannot run, each its
    own rule: Megatron-Core's fused loss (:func:`model.loss_memory.check_cross_entropy_fusion`),
    the stage-only keys (:func:`check_stage_keys`), torchao's FP8 recipes under fsdp2
    (:func:`model.precision.check_framework_fp8_recipe`), DeepSpeed's native MoE below ZeRO-3
    (:func:`model.moe_rules.check_deepspeed_moe`; ``arch`` None: a size-only model) and the
    memory-efficient norm (:func:`check_memory_efficient_norm`) and, under fsdp2, the op-level
    save list's FP8 GEMMs (:func:`check_sac_scaled_mm`; under another framework the key is
    refused for one layout by the evaluation and for a search without fsdp2 by
    :class:`optimizer.problem.Problem`, not here, so a search over several keeps theirs) and,
    under fsdp2, FSDP1's flat parameters with ``pp`` (:func:`check_flat_parameters`).

    Raises
    ------
    LayoutError
        The first rule broken, one line.
    """
    check_cross_entropy_fusion(framework, training.cross_entropy_fusion_impl)
    check_stage_keys(framework, zero_stage, training)
    check_framework_fp8_recipe(framework, training.fp8_recipe)
    check_deepspeed_moe(framework, zero_stage, arch is not None and arch.moe is not None)
    check_memory_efficient_norm(framework, training.memory_efficient_norm, arch)
    check_bias_dropout_fusion(framework, training)
    if str(framework) == Framework.FSDP2:  # the others never read it: a search keeps their layouts
        check_sac_scaled_mm(framework, training)
        check_flat_parameters(framework, training, pp)
