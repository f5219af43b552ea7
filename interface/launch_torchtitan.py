"""The parts of :func:`interface.launch.torchtitan_toml` (torchtitan :data:`TORCHTITAN_COMMIT`'s
TOML, which :func:`interface.launch_torchtitan_head.torchtitan_config` translates for torchtitan's
HEAD) that read the batch, the recipe, the context parallelism and the stage split: the batch,
sequence and data/expert degrees (:func:`torchtitan_batch`), ``[parallelism]
context_parallel_rotate_method`` (:func:`torchtitan_cp`), the schedule and
``module_fqns_per_model_part`` (:func:`torchtitan_pipeline`, :func:`torchtitan_split`) and
``[compile] enable`` with the pipeline runtime's settings torchtitan has no key for
(:func:`torchtitan_recipe`)."""

from __future__ import annotations

from trainplan.model.context_parallel import torch_rotate_method
from trainplan.model.elementwise import Elementwise, elementwise_mode
from trainplan.model.fsdp2_pipeline import default_zero_stage
from trainplan.model.layout import Layout
from trainplan.model.schedule_support import IMPLEMENTATIONS
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import TORCHTITAN_SPLIT, default_chunk_sizes, model_chunks

__all__ = [
    "TORCHTITAN_COMMIT",
    "TORCHTITAN_SCHEDULES",
    "torchtitan_batch",
    "torchtitan_cp",
    "torchtitan_pipeline",
    "torchtitan_recipe",
    "torchtitan_reshard",
    "torchtitan_split",
]

TORCHTITAN_COMMIT = "e347b1e5e (2026-02-15)"
"""The torchtitan commit the TOML fragment is written for: the last with TOML configurations
(9810191bb, 2026-02-23, moved them to Python functions), whose ``torchtitan/config/
job_config.py`` holds every key of :data:`interface.launch.TORCHTITAN_KEYS`."""
TORCHTITAN_SCHEDULES: dict[str, str | None] = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved": "Interleaved1F1B",
    "zb-h1": None,  # InterleavedZeroBubble needs ≥ 2 stages per rank; ZB-H1 has one
    "zb-h2": None,
    "zb-v": "ZBVZeroBubble",
    "dualpipe": None,
    "dualpipev": "DualPipeV",
}
"""torchtitan's ``[parallelism] pipeline_parallel_schedule`` value for each schedule
(torch.distributed.pipelining ``schedules.py`` ``get_schedule_class``); None: not there, or
not at one chunk per rank (:data:`_WHY_NOT`)."""

_WHY_NOT = {
    "zb-h1": "torchtitan's InterleavedZeroBubble needs at least 2 stages per rank "
    "(pipeline_parallel.py _get_pipeline_metadata) and ZB-H1 has one",
}
"""Why torchtitan cannot run a schedule it names (the default: it has no such schedule)."""

_SINGLE_STAGE = frozenset({"GPipe", "1F1B"})
"""torchtitan's schedules of one stage per rank (``PipelineScheduleSingle``); the others get two
stages per rank by default (``_get_pipeline_metadata``)."""


def torchtitan_split(arch: Architecture, layout: Layout, schedule: str) -> list[str]:
    """``module_fqns_per_model_part`` for the plan's model chunks when they are not the split
    torchtitan generates itself, else nothing. Without the key torchtitan (e347b1e5e,
    ``torchtitan/distributed/pipeline_parallel.py`` ``pipeline_llm``) cuts the model into pp
    stages under a one-stage ``schedule`` and 2·pp otherwise, by
    ``generate_llm_fqn_per_model_part`` (:func:`model.split.default_chunk_sizes` with
    :data:`model.split.TORCHTITAN_SPLIT`). With it, each model chunk's modules in model order:
    ``tok_embeddings`` on the first, ``layers.N``, ``norm`` and ``output`` on the last (the
    Llama module names at that commit, ``torchtitan/models/llama3/model/model.py``).

    Examples
    --------
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> torchtitan_split(arch, Layout(pp=2, framework="fsdp2"), "1F1B")
    []
    >>> torchtitan_split(arch, Layout(pp=2, stage_layers=(1, 3)), "1F1B")
    ['module_fqns_per_model_part = [["tok_embeddings", "layers.0"], \
["layers.1", "layers.2", "layers.3", "norm", "output"]]']
    """
    chunks = tuple(
        sum(1 for j in c if j < arch.num_layers)  # decoder layers: no MTP blocks
        for c in model_chunks(
            arch, layout.pp, layout.virtual_stages, layout.split_rule, layout.stage_layers
        )
    )
    v = 1 if schedule in _SINGLE_STAGE else 2
    if len(chunks) == layout.pp * v:
        if chunks == default_chunk_sizes(arch.num_layers, layout.pp, v, TORCHTITAN_SPLIT):
            return []
    parts, at = [], 0
    for i, n in enumerate(chunks):
        names = ["tok_embeddings"] * (i == 0) + [f"layers.{j}" for j in range(at, at + n)]
        names += ["norm", "output"] * (i == len(chunks) - 1)
        parts.append("[" + ", ".join(f'"{x}"' for x in names) + "]")
        at += n
    return [f"module_fqns_per_model_part = [{', '.join(parts)}]"]


def torchtitan_cp(layout: Layout, notes: list[str]) -> list[str]:
    """torchtitan's ``context_parallel_rotate_method`` for ``layout`` at cp > 1: its two values
    (``"allgather"``, the default, and ``"alltoall"``; ``Parallelism`` in
    ``torchtitan/config/job_config.py`` at 248aca2) select PyTorch's ``context_parallel``
    rotater, which is all torchtitan runs. A flavour it has not (Transformer Engine's, Llama 3's
    all-gather of K and V counted as Transformer Engine's, verl's Ulysses) is written as the
    default torchtitan would run anyway, ``"allgather"``, and said in ``notes``: the run's
    memory and time are the plan's with ``cp_kind`` pytorch-allgather, not this plan's."""
    if layout.cp == 1:
        return []
    rotate = torch_rotate_method(layout.cp_kind)
    if not rotate:
        rotate = "allgather"
        notes.append(
            f"cp_kind {layout.cp_kind}: torchtitan has no such context parallelism; it runs "
            "PyTorch's context_parallel, written with its all-gather rotation (cp SDPA calls "
            "merged in FP32): plan it with cp_kind pytorch-allgather for that run's figures"
        )
    return [f'context_parallel_rotate_method = "{rotate}"']


def torchtitan_reshard(layout: Layout) -> list[str]:
    """torchtitan's ``fsdp_reshard_after_forward`` where an ``fsdp2`` plan's ZeRO stage is not
    what its ``"default"`` runs (:func:`model.fsdp2_pipeline.default_zero_stage`: ZeRO-3 without
    pp, ZeRO-2 with it): ``"always"`` for ZeRO-3, ``"never"`` for ZeRO-2; nothing elsewhere."""
    fsdp2 = str(layout.framework) == "fsdp2"
    if not fsdp2 or layout.zero_stage == default_zero_stage("fsdp2", layout.pp):
        return []
    return [f'fsdp_reshard_after_forward = "{"always" if layout.zero_stage == 3 else "never"}"']


def torchtitan_recipe(layout: Layout, training: TrainingSpec, notes: list[str]) -> list[str]:
    """``[compile] enable`` as the plan counted it; the pipeline runtime's memory settings,
    which torchtitan has no key for, said in ``notes``."""
    compiled = elementwise_mode(layout.framework, training.compile) is Elementwise.COMPILED
    if training.flat_parameters:
        notes.append(
            "flat_parameters true: torchtitan runs FSDP2's fully_shard, not FSDP1's "
            "FullyShardedDataParallel; the plan's step time counts FSDP1's copies, fewer than "
            "the ones this launch's FSDP2 makes"
        )
    if layout.pp > 1 and training.pipeline_frees_stage_tensors:
        notes.append(
            "pipeline_frees_stage_tensors true: torchtitan has no setting for it "
            "(torch.distributed.pipelining keeps each stage's inputs and outputs until their "
            "backward); the plan's memory assumes a runtime that frees them, as Meta's for Llama 3"
        )
    if layout.pp > 1:
        kept = "keeps" if training.pipeline_keeps_outputs else "keeps no"
        notes.append(
            f"pipeline_keeps_outputs {str(training.pipeline_keeps_outputs).lower()}: torchtitan "
            "has no setting for it; its trainer keeps every micro-batch's logits until "
            "e5ef99aab (2025-10-22) and none since; the plan's last stage "
            f"{kept} logits"
        )
    cpu_step_note(training, notes)
    return ["[compile]", f"enable = {'true' if compiled else 'false'}"]


def cpu_step_note(training: TrainingSpec, notes: list[str]) -> None:
    """Under optimizer offload, the thread count the CPU Adam step's rate assumes
    (:func:`model.offload.host_threads_per_rank`), which neither framework's flags carry."""
    if training.offload.active:
        notes.append(
            "optimizer offload: the CPU Adam step's time assumes OMP_NUM_THREADS at the host's "
            "cores per GPU (the offload assumption gives it: 14 on a DGX H100); export it before "
            "torchrun, which sets OMP_NUM_THREADS=1 when it is unset (torch/distributed/run.py)"
        )


def torchtitan_pipeline(arch: Architecture, layout: Layout, notes: list[str]) -> list[str]:
    """torchtitan's pipeline schedule and, where the plan's split is not torchtitan's own, its
    model chunks (:func:`torchtitan_split`); a schedule torch.distributed.pipelining lacks is
    noted in ``notes`` and 1F1B written."""
    name = TORCHTITAN_SCHEDULES[str(layout.schedule)]
    if name is None:
        notes.append(
            f"schedule {layout.schedule}: "
            + _WHY_NOT.get(
                str(layout.schedule), "torch.distributed.pipelining has no such schedule"
            )
            + f" ({'; '.join(IMPLEMENTATIONS[str(layout.schedule)])} run it); 1F1B written"
        )
    name = name or "1F1B"
    return [f'pipeline_parallel_schedule = "{name}"', *torchtitan_split(arch, layout, name)]


def torchtitan_batch(
    arch: Architecture, layout: Layout, training: TrainingSpec | None, notes: list[str]
) -> tuple[list[str], list[str]]:
    """The plan's data and expert degrees and micro-batch (``[parallelism]`` lines) and its batch
    and sequence (``[training]`` lines, with ``training`` only), so that torchtitan's defaults
    (e347b1e5e ``torchtitan/config/job_config.py``: ``local_batch_size`` 8, ``seq_len`` 2048,
    ``pipeline_parallel_microbatch_size`` 1, ``expert_parallel_degree`` 1,
    ``expert_tensor_parallel_degree`` 1) run no other job:

    * ``data_parallel_shard_degree = dp`` (FSDP2 over the plan's dp; the default -1 takes the
      ranks left, the same count, written so a wrong world size fails at start);
    * ``pipeline_parallel_microbatch_size = b`` at pp > 1: ``pipeline_llm`` cuts
      ``local_batch_size`` into ``local_batch_size / b`` micro-batches;
    * ``[training] local_batch_size``: b at pp 1, where ``train.py`` runs
      ``global_batch_size / (local_batch_size · dp)`` gradient-accumulation steps (the plan's m);
      b·m at pp > 1, one step of m pipeline micro-batches; ``global_batch_size`` B,
      ``seq_len`` s;
    * for a MoE model at ep > 1 ``expert_parallel_degree`` and ``expert_tensor_parallel_degree``
      (``parallel_dims.py`` asserts ``etp == tp or etp == 1``; another expert tp is said in
      ``notes`` and not written).

    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4096, global_batch_size=64)
    >>> torchtitan_batch(arch, Layout(dp=4, pp=2, micro_batch_size=2), t, [])  # m = 8
    (['data_parallel_shard_degree = 4', 'pipeline_parallel_microbatch_size = 2'], \
['[training]', 'local_batch_size = 16', 'global_batch_size = 64', 'seq_len = 4096'])
    """
    parallel = [f"data_parallel_shard_degree = {layout.dp}"]
    if layout.pp > 1:
        parallel.append(f"pipeline_parallel_microbatch_size = {layout.micro_batch_size}")
    if arch.moe is not None and layout.ep > 1:
        parallel.append(f"expert_parallel_degree = {layout.ep}")
        if layout.expert_tp in (1, layout.tp):
            parallel.append(f"expert_tensor_parallel_degree = {layout.expert_tp}")
        else:
            notes.append(
                f"expert tp {layout.expert_tp}: torchtitan runs the experts at tp {layout.tp} "
                "or 1 only (parallel_dims.py asserts etp == tp or etp == 1); not written"
            )
    if training is None:
        return parallel, []
    b, big_b = layout.micro_batch_size, training.global_batch_size
    local = b if layout.pp == 1 else b * layout.num_microbatches(big_b)
    return parallel, [
        "[training]",
        f"local_batch_size = {local}",
        f"global_batch_size = {big_b}",
        f"seq_len = {training.seq_len}",
    ]
