"""A plan as the flags that launch it: Megatron-LM arguments and a torchtitan TOML fragment, each
with what the framework cannot express said in words (issue 13).

Sources, read for what exists (never copied):

* Megatron-LM ``megatron/training/arguments.py`` and NeMo's "Activation Recomputation" page:
  ``--recompute-granularity full|selective``, ``--recompute-method uniform|block``,
  ``--recompute-num-layers N`` — one N for every pipeline stage ("when training with pipeline
  parallelism, recompute_num_layers indicates the layers per pipeline stage"; per virtual stage
  under interleaving); ``--decoder-first-pipeline-num-layers`` /
  ``--decoder-last-pipeline-num-layers`` (the other stages share the rest evenly), the
  ``--account-for-embedding/loss-in-pipeline-split`` flags; a per-stage vector beyond those
  needs Megatron-Core's ``--pipeline-model-parallel-layout`` (:mod:`interface.launch_split`
  chooses the form). Full and selective granularity do not combine in one run.
* torchtitan ``[activation_checkpoint]``: ``mode = "none" | "selective" | "full"``,
  ``selective_ac_option = "op"`` (per-operator selective AC) or ``"N"`` (full AC of every N-th
  transformer block of the model); ``[parallelism]`` degrees, ``pipeline_parallel_schedule``
  (torch.distributed.pipelining's ``get_schedule_class`` names: ``GPipe``, ``1F1B``,
  ``Interleaved1F1B``, ``ZBVZeroBubble`` for ZB-V, ``DualPipeV``; torchtitan
  ``torchtitan/distributed/pipeline_parallel.py`` places the last two in V order, ``style="v"``,
  and refuses ``InterleavedZeroBubble`` at ZB-H1's one stage per rank) and
  ``module_fqns_per_model_part = [["tok_embeddings", "layers.0", …], …, [… "norm", "output"]]``
  (each model chunk's modules, written only where the plan's split is not the one torchtitan
  generates: :func:`interface.launch_torchtitan.torchtitan_split`). No per-stage AC count.

Every flag written is one of :data:`MEGATRON_ARGUMENTS` or :data:`TORCHTITAN_KEYS`, each read from
that framework's code at a cited commit (``tests/test_launch_flags.py`` walks the plans).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainplan.interface.launch_overlap import megatron_overlap_flags
from trainplan.interface.launch_parallel import (
    megatron_env,
    megatron_parallel_flags,
    megatron_run_flags,
)
from trainplan.interface.launch_split import megatron_pipeline_flags, pipeline_layout
from trainplan.interface.launch_torchtitan import (
    TORCHTITAN_COMMIT,
    TORCHTITAN_SCHEDULES,
    cpu_step_note,
    torchtitan_batch,
    torchtitan_cp,
    torchtitan_pipeline,
    torchtitan_recipe,
    torchtitan_reshard,
)
from trainplan.model.estimate import recomputed_by_stage
from trainplan.model.frameworks import gradient_bytes_for
from trainplan.model.fsdp2_pipeline import default_zero_stage
from trainplan.model.layout import Layout, Recompute
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.precision import Fp8Recipe, Precision, fp8_recipe_of
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_chunks, stage_layers
from trainplan.model.timing import CostOptions

__all__ = [
    "MEGATRON_ARGUMENTS",
    "TORCHTITAN_KEYS",
    "TORCHTITAN_SCHEDULES",
    "LaunchFlags",
    "megatron_flags",
    "pipeline_layout",
    "torchtitan_toml",
    "single_count_layout",
]


MEGATRON_ARGUMENTS = frozenset(
    """--tensor-model-parallel-size --pipeline-model-parallel-size --context-parallel-size
    --micro-batch-size --global-batch-size --cp-comm-type --hierarchical-context-parallel-sizes
    --expert-model-parallel-size --expert-tensor-parallel-size --sequence-parallel
    --use-distributed-optimizer
    --num-layers-per-virtual-pipeline-stage --pipeline-model-parallel-layout
    --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
    --num-virtual-stages-per-pipeline-rank --account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split --fp8-format
    --optimizer-cpu-offload --optimizer-offload-fraction --use-precision-aware-optimizer
    --fine-grained-activation-offloading --offload-modules --recompute-granularity
    --recompute-method --recompute-num-layers --use-megatron-fsdp --data-parallel-sharding-strategy
    --megatron-fsdp-main-grads-dtype --fsdp-double-buffer --cpu-offloading-num-layers
    --cross-entropy-loss-fusion --cross-entropy-fusion-impl --overlap-grad-reduce
    --overlap-param-gather --no-overlap-p2p-communication
    --overlap-p2p-communication-warmup-flush --tp-comm-overlap
    --no-create-attention-mask-in-dataloader --moe-token-dispatcher-type
    --moe-flex-dispatcher-backend --moe-grouped-gemm --moe-permute-fusion --moe-router-fusion
    --recompute-modules --overlap-moe-expert-parallel-comm --moe-shared-expert-overlap
    --ckpt-format --fp8-recipe --fp8-param-gather --muon-tp-mode""".split()
)
"""The Megatron-LM arguments :func:`megatron_flags` writes, each present at Megatron-LM d98e8a64dd
(2026-08-22): ``megatron/training/arguments.py`` (``add_argument`` calls, and
``ArgumentGroupFactory`` over ``TransformerConfig`` — which extends ``ModelParallelConfig``, the
parallel sizes and ``sequence_parallel`` — and ``TrainingConfig``, the batch sizes;
``megatron/training/argument_utils.py`` ``_format_arg_name``: field ``a_b`` is ``--a-b``;
``--fp8-format`` is ``TransformerConfig.fp8``'s ``arg_names``;
``--num-virtual-stages-per-pipeline-rank`` is an ``add_argument`` call beside
``--decoder-first-pipeline-num-layers``, the ``--account-for-*-in-pipeline-split`` flags are
``TransformerConfig``'s ``account_for_embedding_in_pipeline_split`` and
``account_for_loss_in_pipeline_split`` (``validate_args`` reads both as ``args.…``); ``--use-megatron-fsdp`` is
``DistributedInitConfig.use_megatron_fsdp``, ``megatron/training/config/common_config.py``;
``--fsdp-double-buffer``, ``--overlap-grad-reduce`` and ``--overlap-param-gather`` are
``add_argument`` calls of ``_add_distributed_args``;
``--cpu-offloading-num-layers`` is ``ModelParallelConfig``'s, and ``validate_args`` turns
``cpu_offloading`` on with it, that field itself being excluded from the arguments; so are
``--cross-entropy-loss-fusion`` and ``--cross-entropy-fusion-impl``; ``--overlap-grad-reduce``,
``--overlap-param-gather`` and ``--no-overlap-p2p-communication`` are ``add_argument`` calls
there, ``--overlap-p2p-communication-warmup-flush`` is ``ModelParallelConfig``'s
``overlap_p2p_comm_warmup_flush`` ``arg_names``; ``--tp-comm-overlap`` is its field
``tp_comm_overlap``; ``--no-create-attention-mask-in-dataloader`` is an ``add_argument`` call of
``_add_data_args``; the ``--moe-*`` flags are ``TransformerConfig``'s ``moe_token_dispatcher_type``,
``moe_flex_dispatcher_backend``, ``moe_grouped_gemm``, ``moe_permute_fusion`` and
``moe_router_fusion``; ``--ckpt-format`` is ``TrainingConfig.ckpt_format``,
``megatron/training/config/training_config.py``, whose ``Literal`` holds ``fsdp_dtensor``;
``--fp8-recipe`` is ``TransformerConfig.fp8_recipe``; ``--fp8-param-gather`` and
``--muon-tp-mode`` are ``add_argument`` calls of ``arguments.py``)."""

TORCHTITAN_KEYS: dict[str, frozenset[str]] = {
    "parallelism": frozenset(
        """tensor_parallel_degree pipeline_parallel_degree context_parallel_degree
        context_parallel_rotate_method pipeline_parallel_schedule
        module_fqns_per_model_part fsdp_reshard_after_forward data_parallel_shard_degree
        pipeline_parallel_microbatch_size expert_parallel_degree
        expert_tensor_parallel_degree""".split()
    ),
    "training": frozenset({"local_batch_size", "global_batch_size", "seq_len"}),
    "activation_checkpoint": frozenset({"mode", "selective_ac_option"}),
    "compile": frozenset({"enable"}),
}
"""The torchtitan TOML keys :func:`torchtitan_toml` writes, by section: ``JobConfig``'s
``Parallelism``, ``Training``, ``ActivationCheckpoint`` and ``Compile`` in
``torchtitan/config/job_config.py`` at e347b1e5e (2026-02-15), the last commit with TOML configurations (9810191bb, 2026-02-23,
moved them to Python, ``torchtitan/config/configs.py``, the same field names:
``parallelism.module_fqns_per_model_part``, ``compile.enable``); ``module_fqns_per_model_part``
is there since 6e06a49cd (2025-10-13; it replaced ``pipeline_parallel_split_points``),
``[compile] enable`` since 08b8b244f (2025-08-20; before it ``[training] compile``),
``fsdp_reshard_after_forward`` since 5940ddeb5 (2025-02-06)."""


@dataclass(frozen=True, slots=True)
class LaunchFlags:
    """What a framework is given, and what it cannot be given."""

    flags: tuple[str, ...]
    """Command-line arguments (Megatron-LM) or TOML lines (torchtitan), in order."""
    notes: tuple[str, ...]
    """One sentence per part of the plan the flags do not express exactly."""
    env: tuple[str, ...] = ()
    """The environment the line runs under, ``NAME=VALUE`` each
    (:func:`interface.launch_parallel.megatron_env`); none for torchtitan."""


def _split(arch: Architecture, layout: Layout, decoder: bool = False) -> tuple[int, ...]:
    """Layers per pipeline rank as the plan places them (:func:`model.split.stage_layers`: a V
    schedule's ranks hold chunks i and 2·pp − 1 − i, :func:`model.split.chunk_ranks`); with
    ``decoder`` the decoder layers only (the MTP blocks, which Megatron-LM's recompute counts
    leave out, :mod:`model.recompute_counts`, not counted)."""
    pp, v, uneven, sizes = (
        layout.pp,
        layout.virtual_stages,
        layout.split_rule,
        layout.stage_layers,
    )
    split = stage_layers(arch, pp, v, uneven, sizes, layout.schedule)
    if decoder:
        return tuple(sum(1 for j in s if j < arch.num_layers) for s in split)
    return tuple(len(s) for s in split)


def single_count_layout(layout: Layout, arch: Architecture | None = None) -> Layout | None:
    """The layout Megatron-LM runs for ``layout``'s per-stage counts with one
    ``--recompute-num-layers``: the largest count on every stage — with ``arch``, at most each
    stage's largest model chunk, as Megatron's block method recomputes ``min(N, the chunk's
    layers)`` (a larger count is the same run); None when the counts are already one number
    (or absent). More recomputation never holds more, so it fits where the plan fits; it is
    slower by the extra recomputation."""
    counts = layout.recompute_layers
    if counts is None or len(set(counts)) <= 1:
        return None
    top = max(counts)
    if arch is None:
        return layout.with_(recompute_layers=tuple(top for _ in counts))
    pp, v, uneven, sizes = (
        layout.pp,
        layout.virtual_stages,
        layout.split_rule,
        layout.stage_layers,
    )
    largest = [
        max(map(len, stage_chunks(arch, pp, v, uneven, i, sizes, layout.schedule)))
        for i in range(pp)
    ]
    return layout.with_(recompute_layers=tuple(min(top, n) for n in largest))


def megatron_flags(
    arch: Architecture,
    layout: Layout,
    global_batch_size: int,
    training: TrainingSpec | None = None,
    options: CostOptions | None = None,
    part: str | None = None,
) -> LaunchFlags:
    """Megatron-LM arguments for ``layout``: parallel sizes, the CP flavour
    (``--cp-comm-type p2p|allgather|a2a|a2a+p2p``, ``--hierarchical-context-parallel-sizes``),
    micro- and global batch, the stage split (per model chunk when interleaved) and
    recomputation, and with ``training`` the recipe the plan's figures assume: FP8
    (``--fp8-format hybrid``, ``--fp8-recipe`` unless delayed, ``--fp8-param-gather`` where the
    plan counts FP8 primary weights), optimizer offload (``--optimizer-cpu-offload
    --optimizer-offload-fraction F --use-precision-aware-optimizer``, the last required by
    ``validate_args``) and activation offload
    (``--fine-grained-activation-offloading --offload-modules …``), and the overlaps the step
    time assumes (``options``, default :class:`model.timing.CostOptions`:
    :func:`interface.launch_overlap.megatron_overlap_flags`) — Megatron-LM ``megatron/training/arguments.py``;
    :attr:`LaunchFlags.notes` says what does not map exactly, and :attr:`LaunchFlags.env` the
    environment ``validate_args`` requires of the line on the plan's accelerator ``part`` (a
    catalogue name; None: one before Blackwell), :func:`interface.launch_parallel.megatron_env`.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=8, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> lay = Layout(pp=2, stage_layers=(3, 5), recompute_layers=(2, 2))
    >>> megatron_flags(arch, lay, 8).flags[-10:-6]
    ('--decoder-first-pipeline-num-layers', '3', '--decoder-last-pipeline-num-layers', '5')
    >>> megatron_flags(arch, lay, 8).flags[-2:]
    ('--recompute-num-layers', '2')
    """
    out = [
        "--tensor-model-parallel-size", str(layout.tp),
        "--pipeline-model-parallel-size", str(layout.pp),
        "--context-parallel-size", str(layout.cp),
        "--micro-batch-size", str(layout.micro_batch_size),
        "--global-batch-size", str(global_batch_size),
    ]  # fmt: skip
    notes: list[str] = []
    if str(layout.framework) != "megatron":
        notes.append(
            f"framework {layout.framework}: the plan's memory and traffic are that profile's "
            "mechanism; these are Megatron-LM's flags for the same degrees, not a launch of it"
        )
    out += megatron_parallel_flags(layout, arch.moe is not None)
    out += megatron_run_flags(layout, training, arch.moe is not None, notes)
    out += megatron_overlap_flags(layout, options or CostOptions(), notes)
    out += megatron_pipeline_flags(arch, layout, notes)
    out += _megatron_recompute(layout, _split(arch, layout, decoder=True), notes)
    out += [] if training is None else _megatron_recipe(training, layout, notes)
    env = megatron_env(tuple(out), part, notes)
    return LaunchFlags(tuple(out), tuple(notes), env)


def _megatron_recipe(training: TrainingSpec, layout: Layout, notes: list[str]) -> list[str]:
    """The recipe's flags the plan's figures assume: FP8, Megatron-FSDP's main-gradient dtype
    (the plan's :func:`model.frameworks.gradient_bytes_for`; Megatron-LM's ``auto`` would be the
    parameters' BF16) and its ``--fsdp-double-buffer`` where the recipe has it, optimizer,
    whole-layer and fine-grained activation offload, the fused loss (``cross_entropy_fusion_impl``: ``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl native|te``; none writes nothing, Megatron-LM's default)."""
    out = []
    loss = training.cross_entropy_fusion_impl
    if loss != "none":
        out += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", loss]
    if loss == "te":
        notes.append(
            "cross_entropy_fusion_impl te: Megatron-LM refuses --cross-entropy-fusion-impl te "
            "in validate_args since 168cb15d70 (2026-06-03); Megatron Bridge's recipes still "
            'set it (model.cross_entropy_fusion_impl = "te"), and an earlier Megatron-LM takes it'
        )
    if layout.zero_stage == 3 and str(layout.framework) == "megatron":
        wide = gradient_bytes_for("megatron", training.gradient_bytes) == 4
        out += ["--megatron-fsdp-main-grads-dtype", "fp32" if wide else "bf16"]
        if training.fsdp_double_buffer:  # the plan counted the two-unit pools
            out.append("--fsdp-double-buffer")
    if training.cpu_offloading_num_layers:
        out += ["--cpu-offloading-num-layers", str(training.cpu_offloading_num_layers)]
    if training.precision is Precision.FP8:
        # the recipe the plan timed (TransformerConfig.fp8_recipe, default delayed) and FP8
        # primary weights only where the plan counted them (DistributedDataParallelConfig.
        # fp8_param_gather): without them TE caches every layer's FP8 copy, which it counts
        recipe = fp8_recipe_of("megatron", training.fp8_recipe)
        out += ["--fp8-format", "hybrid"]
        if recipe is not Fp8Recipe.DELAYED:
            out += ["--fp8-recipe", str(recipe)]
        if training.fp8_param_gather:
            out.append("--fp8-param-gather")
    if training.offload.optimizer:
        # arguments.py validate_args: "The optimizer cpu offload must be used in conjunction
        # with `--use-precision-aware-optimizer`" (HybridDeviceOptimizer reuses its path)
        out += ["--optimizer-cpu-offload", "--optimizer-offload-fraction",
                f"{float(training.offload.optimizer):g}",
                "--use-precision-aware-optimizer"]  # fmt: skip
        cpu_step_note(training, notes)
    if OptimizerKind(layout.optimizer) is OptimizerKind.MUON:
        # the mode the plan counted (model.muon.muon_tp_gathers), written even at its default
        # (Megatron-LM's default moved from blockwise to duplicated at bb47df5416)
        out += ["--muon-tp-mode", training.muon_tp_mode or "duplicated"]
    if training.offload.activations:
        out += ["--fine-grained-activation-offloading", "--offload-modules",
                *training.offload.activations]  # fmt: skip
    return out


def _megatron_recompute(layout: Layout, split: tuple[int, ...], notes: list[str]) -> list[str]:
    counts = layout.recompute_layers
    base = layout.recompute
    if counts is None or not any(counts):
        if base is Recompute.FULL:
            return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                    "--recompute-num-layers", "1"]  # fmt: skip
        if base is Recompute.SELECTIVE:
            return ["--recompute-granularity", "selective"]
        if base is Recompute.SQRT:
            every = max(1, round(math.sqrt(max(split))))
            notes.append(
                f"recompute sqrt: Megatron-LM's uniform method checkpoints every "
                f"--recompute-num-layers layers of a stage; {every} = round(√n) for the stage with "
                f"the most layers ({max(split)}), the same on every stage"
                + (
                    "; interleaved, Megatron applies it to each model chunk's layers, as the "
                    "plan counts"
                    if layout.virtual_stages > 1
                    else ""
                )
            )
            return ["--recompute-granularity", "full", "--recompute-method", "uniform",
                    "--recompute-num-layers", str(every)]  # fmt: skip
        return []
    flags = ["--recompute-granularity", "full", "--recompute-method", "block"]
    top = max(counts)
    flags += ["--recompute-num-layers", str(top)]  # per model chunk, as the plan's counts
    if len(set(counts)) > 1:
        where = "on each stage" if layout.virtual_stages == 1 else "of each model chunk"
        notes.append(
            f"recompute_layers {','.join(map(str, counts))} per stage: Megatron-LM's "
            f"--recompute-num-layers is one count for every stage; {top} (the largest) recomputes "
            f"the first min({top}, its layers) {where} — it fits wherever the plan fits but runs "
            "the extra recomputation (its step time is printed beside the plan); per-stage counts "
            "need a patch to the block method"
        )
    if base is Recompute.SELECTIVE:
        notes.append(
            "the layers not recomputed keep selective recomputation in the plan, but Megatron-LM "
            "runs one --recompute-granularity: with full they keep every activation (more memory "
            "than planned)"
        )
    return flags


def torchtitan_toml(
    arch: Architecture, layout: Layout, training: TrainingSpec | None = None
) -> LaunchFlags:
    """A torchtitan TOML fragment for ``layout`` at torchtitan
    :data:`interface.launch_torchtitan.TORCHTITAN_COMMIT` (the format of :data:`TORCHTITAN_KEYS`;
    its first line, a TOML comment, names that commit): ``[parallelism]`` degrees (data, tensor,
    pipeline, context, expert) and micro-batch (:func:`interface.launch_torchtitan.torchtitan_batch`),
    schedule and model chunks, FSDP reshard policy
    (:func:`interface.launch_torchtitan.torchtitan_reshard`); with ``training``
    ``[training]`` batch and sequence; ``[activation_checkpoint]``; and with ``training`` under
    ``fsdp2`` ``[compile] enable`` as the plan counted it
    (:func:`model.elementwise.elementwise_mode`). What it cannot express (per-stage AC counts,
    the pipeline runtime's memory settings, another framework's mechanism) is in
    :attr:`LaunchFlags.notes`.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=8, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> lay = Layout(pp=2, recompute="full", framework="fsdp2", zero_stage=2)
    >>> torchtitan_toml(arch, lay).flags[-2:]
    ('[activation_checkpoint]', 'mode = "full"')
    >>> torchtitan_toml(arch, lay).flags[0]
    '# torchtitan e347b1e5e (2026-02-15), its last TOML format: --job.config_file FILE'
    """
    split = _split(arch, layout)
    notes: list[str] = []
    fw = str(layout.framework)
    if fw != "fsdp2":
        runs = default_zero_stage("fsdp2", layout.pp)
        notes.append(
            f"framework {fw}: the plan's memory and traffic are that profile's mechanism "
            f"(ZeRO-{layout.zero_stage}); torchtitan runs FSDP2 over dp (ZeRO-{runs} here, its "
            "default reshard policy) with its own kernels: this is torchtitan's run of the same "
            "degrees, not a launch of the plan"
        )
    parallel, batch = torchtitan_batch(arch, layout, training, notes)
    lines = [
        f"# torchtitan {TORCHTITAN_COMMIT}, its last TOML format: --job.config_file FILE",
        "[parallelism]",
        f"tensor_parallel_degree = {layout.tp}",
        f"pipeline_parallel_degree = {layout.pp}",
        f"context_parallel_degree = {layout.cp}",
        *parallel,
        *torchtitan_cp(layout, notes),
        *torchtitan_reshard(layout),
    ]
    if layout.pp > 1:
        lines += torchtitan_pipeline(arch, layout, notes)
    lines += batch
    lines += _torchtitan_ac(arch, layout, split, notes)
    if training is not None and fw == "fsdp2":
        lines += torchtitan_recipe(layout, training, notes)
    return LaunchFlags(tuple(lines), tuple(notes))


def _torchtitan_ac(
    arch: Architecture, layout: Layout, split: tuple[int, ...], notes: list[str]
) -> list[str]:
    """``[activation_checkpoint]`` for the plan's recomputation: ``mode = "full"`` where every
    layer is recomputed, ``"selective"`` with ``selective_ac_option = "N"`` (full AC of every
    N-th block of the model; at e347b1e5e, removed by 114151ad4, 2026-03-23) for per-stage
    counts, ``"op"`` for selective, ``"none"``."""
    counts = layout.recompute_layers
    lines = ["[activation_checkpoint]"]
    done = tuple(map(len, recomputed_by_stage(arch, layout)))  # layers recomputed per stage
    if counts is not None and all(k == n for k, n in zip(done, split, strict=True)):
        lines.append('mode = "full"')
    elif counts is not None and any(counts):
        ratios = [n // k for k, n in zip(done, split, strict=True) if k]
        every = max(1, min(ratios))
        if every == 1:  # every block: torchtitan's full mode
            notes.append(
                f"recompute_layers {','.join(map(str, counts))} per stage: torchtitan has no "
                'count per stage; mode = "full" recomputes every block, more than the plan: it '
                "fits wherever the plan fits and runs the extra recomputation"
            )
            return [*lines, 'mode = "full"']
        lines += ['mode = "selective"', f'selective_ac_option = "{every}"']
        notes.append(
            f"recompute_layers {','.join(map(str, counts))} per stage: torchtitan checkpoints "
            f"every N-th block of the whole model, not a count per stage; N = {every} recomputes "
            "at least the plan's share on every stage (about n/N of a stage's n layers); "
            "torchtitan has this option until 114151ad4 (2026-03-23), which removed it"
        )
    elif layout.recompute is Recompute.FULL:
        lines.append('mode = "full"')
    elif layout.recompute is Recompute.SQRT:  # never an fsdp2 plan (check_framework_recompute)
        lines.append('mode = "full"')
        notes.append(
            "recompute sqrt: torchtitan has no multi-block checkpoint segment (each block is "
            "checkpointed by itself); mode full recomputes the same forward but keeps every "
            "block's input, not round(√n) of them: its memory is the plan's with recompute full"
        )
    elif layout.recompute is Recompute.SELECTIVE:
        lines += ['mode = "selective"', 'selective_ac_option = "op"']
    else:
        lines.append('mode = "none"')
    return lines
