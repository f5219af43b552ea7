"""The cost of the RLHF rollout engine: its memory fraction of every GPU of its pool (weights
÷ tp and the KV cache, :mod:`model.rollout`), its generation time and the weight sync — the rules
and their sources are in :mod:`model.rlhf.roles`; :func:`model.rlhf.costs.role_cost` calls
:func:`rollout_cost`."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import stage_params_per_gpu
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.nccl_channels import spans_nodes
from trainplan.model.op_rates import deployed_params
from trainplan.model.rlhf.openrlhf import (
    SLEEP_HOST_SOURCE,
    engine_receive_bytes,
    engine_sleep_host_bytes,
    receive_source,
)
from trainplan.model.rlhf.roles import RoleCost, RoleOption, Term
from trainplan.model.rlhf.spec import RLHFSpec, Role, RoleSpec
from trainplan.model.rlhf.sync_time import (
    RAY_ACTOR_CALL_S,
    broadcast_seconds,
    parameter_tensors,
    sync_bandwidth,
)
from trainplan.model.rollout import (
    EngineMemory,
    RolloutTime,
    engine_memory,
    kv_bytes_per_token,
    rollout_time,
)
from trainplan.model.rollout_prefix import saved_prompt_tokens
from trainplan.model.rollout_reduce import (
    engine_all_gather,
    engine_all_reduce,
    forward_collectives,
)
from trainplan.model.terms.comm_memory import communicator_bytes
from trainplan.model.terms.split_key import SplitKey
from trainplan.model.timing import kernel_efficiency_for

__all__ = [
    "CUSTOM_ALL_REDUCE_BYTES",
    "ENGINE_GRAPH_POOL_BYTES",
    "decode_efficiency",
    "engine_communicator_bytes",
    "engine_weights_bytes",
    "least_engine_tp",
    "SYNC_TIME_SOURCE",
    "rollout_cost",
    "sync_bandwidth",
    "sync_weights_bytes",
]

CUSTOM_ALL_REDUCE_MAX_BYTES = 8192 * 1024
"""vLLM's custom all-reduce ``max_size`` default, 8 MiB (``CustomAllreduce.__init__``,
``vllm/distributed/device_communicators/custom_all_reduce.py``)."""
CUSTOM_ALL_REDUCE_BYTES = 3 * CUSTOM_ALL_REDUCE_MAX_BYTES
"""Bytes vLLM's custom all-reduce allocates on each GPU of a tp group (``CustomAllreduce.__init__``):
its IPC metadata buffer (``meta_size() + max_size``: the synchronisation signals, a few KiB,
left out, and the 8 MiB of intermediate results), its registered IPC input buffer (``max_size``)
and ``rank_data`` (8 MiB of pointer tuples): 3 × 8 MiB = 25,165,824 B. The peers' buffers it
opens over CUDA IPC are their GPUs' memory."""
CUSTOM_ALL_REDUCE_SIZES = (2, 4, 6, 8)
"""``CustomAllreduce._SUPPORTED_WORLD_SIZES``: other tp sizes, or a group across nodes, run
without it."""

ENGINE_GRAPH_POOL_BYTES = math.ceil(Fraction(36, 100) * 2**30)
"""ASSUMED: the engine's CUDA graph pool per GPU, 0.36 GiB = 386,547,057 B (rounded up), held in
every phase of its pool — beyond ``gpu_memory_utilization`` while it generates and kept while it
sleeps (:mod:`model.rollout`, "The engine's CUDA graphs"). An allowance stated like the runtime
reserve's 1 GiB (:data:`model.frameworks.DEFAULT_RUNTIME_RESERVE_BYTES`), not a rule: no
per-graph figure could be tied to a graph count (docs/memory-mechanisms.md, "A rollout engine's
CUDA graphs"). It is the largest published pool of a model under 100 B parameters found: vLLM
0.27.1's startup line "Estimated CUDA graph memory: 0.36 GiB total" for 16 piecewise sizes of at
most 16 tokens (gpustack/runner PR #251: Qwen3.6-27B-AWQ, tp 2); the others are smaller (vLLM PR
#11349: Llama-3.2-1B, 35 sizes, "took 0.21 GiB"). A floor, not a bound: a default engine
captures 51 sizes up to 512 tokens (``VllmConfig._set_cudagraph_sizes``), and one large MoE
engine measured 1,503,657,984 B per GPU at tp 8 (vLLM issue #47654)."""
GRAPH_POOL_SOURCE = (
    "ASSUMED 0.36 GiB, the largest published small-model pool (vLLM 0.27.1 startup line, "
    "gpustack/runner PR #251); vLLM 35d5cda gpu_worker.py compile_or_warm_up_model: "
    "capture_model() after the KV cache (beyond the budget); CuMemAllocator.sleep frees only "
    "'weights'/'kv_cache' (kept asleep, vLLM PR #56373); issue #47654: 1.50 GB at tp 8"
)
_ENGINE_SOURCE = (
    "vLLM gpu_memory_utilization / SGLang mem_fraction_static: the fraction of each GPU's memory "
    "the engine takes (weights + KV cache); model.rollout"
)
_KV_SOURCE = (
    "KV cache 2·L·g·d·2 B per token, g/tp KV heads per GPU (one when tp > g; MLA: the latent, "
    "whole), for the sequences decoded at once (vLLM PagedAttention, max_num_seqs)"
)


def engine_weights_bytes(rs: RoleSpec, tp: int) -> Fraction:
    """The engine's BF16 weights on one GPU at ``tp`` (norms and routers whole on every rank:
    :func:`model.estimate.stage_params_per_gpu`)."""
    ((_, _, dense, experts),) = stage_params_per_gpu(
        SplitKey(rs.model, tp, 1, 1, 1, True, tp, True, None, 0)
    )
    return 2 * (dense + experts)


SYNC_TIME_SOURCE = (
    "the whole model's BF16 weights 2N to every engine GPU, one parameter tensor at a time "
    "(OpenRLHF 3c3be6234 ppo_actor.py broadcast_to_vllm _broadcast_param, vllm_worker_wrap.py "
    "update_weight torch.empty(shape) of the full shape; verl b178a3cd5 one-step off-policy "
    "DetachSync.sync_rollout_weights full_tensor() + broadcast) over the link between the pools, "
    "plus NCCL's ring-broadcast latency per tensor (model.rlhf.sync_time.broadcast_seconds)"
)


def sync_weights_bytes(rs: RoleSpec) -> Fraction:
    """Bytes of the weight sync's transfer to each engine GPU: the policy's whole BF16 weights,
    ``2·N`` (every expert too), whatever the engine's ``tp`` — not its ``2·N/tp`` shard.

    Every framework sends each parameter whole and the engine rank keeps its shard:

    * OpenRLHF (OpenRLHF/OpenRLHF 3c3be6234) ``openrlhf/trainer/ray/ppo_actor.py``
      ``broadcast_to_vllm``: for each parameter (gathered whole first under ZeRO-3 or DeepSpeed
      tp, ``_gather_params_ctx``) rank 0 broadcasts ``param.data`` over the model-update group,
      and ``vllm_worker_wrap.py`` ``update_weight`` receives it into ``torch.empty(shape)`` of
      the full shape on every engine rank before ``load_weights``; on a shared pool
      ``_handle_cuda_ipc`` hands each engine rank the whole clone.
    * verl (volcengine/verl b178a3cd5) ``ActorRolloutRefWorker.rollout_mode``: each parameter made
      whole (mbridge ``Bridge.export_weights``: the pp broadcast and the tp all-gather; FSDP:
      ``full_tensor()``) before the IPC bucket; the one-step off-policy recipe's
      ``DetachSync.sync_rollout_weights`` broadcasts each ``full_tensor()`` from rank 0.

    These are the bytes of the broadcast to an engine on GPUs of its own. On the actor's pool
    nothing is broadcast: each GPU receives what the actor's gather over its shards brings
    (:func:`model.rlhf.sync_time.gather_seconds`) and hands it to the engine on the same GPU;
    the step reads the sync by placement (:func:`model.rlhf.sync_time.placement_sync_seconds`).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> from trainplan.model.rlhf.spec import RLHFSpec, Role
    >>> m = get_model("llama3-8b").model
    >>> spec = RLHFSpec(algorithm="grpo", policy=m, reward="rule", prompts=1,
    ...                 samples_per_prompt=8, prompt_tokens=8, completion_tokens=8)
    >>> int(sync_weights_bytes(spec.role(Role.ROLLOUT))) == 2 * 8_030_261_248
    True
    """
    return engine_weights_bytes(rs, 1)


def engine_communicator_bytes(tp: int, gpus_per_node: int) -> tuple[int, int]:
    """What the engine's tp group holds on each GPU for its whole life, sleeping or not, in
    bytes: ``(made before vLLM sizes its budget, made inside it)``; ``(0, 0)`` at tp 1.

    vLLM (``vllm/distributed/parallel_state.py``) gives each ``GroupCoordinator`` a torch
    ``device_group`` (NCCL) and a ``cpu_group`` (gloo); ``CudaCommunicator.__init__``
    (``device_communicators/cuda_communicator.py``) opens a ``PyNcclCommunicator`` of its own over
    the cpu group for every group of more than one rank but the expert one, and a
    ``CustomAllreduce`` for the tp group only. The world group is made with
    ``use_device_communicator=False`` (``init_world_group``) and an engine replica runs pp 1 and
    data-parallel size 1 (verl sets vLLM's ``data_parallel_size`` only with expert parallelism,
    ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``), so the tp group is the one:

    * its ``PyNcclCommunicator``, a ring (``communicator_bytes``): the communicator's warm-up
      all-reduce (``pynccl.py``) runs in ``Worker.init_device`` before the memory snapshot the
      budget is measured from, so these bytes lie outside ``gpu_memory_utilization``; with
      :data:`CUSTOM_ALL_REDUCE_BYTES` where the group is one node of 2, 4, 6 or 8 GPUs;
    * torch's own communicator of the ``device_group`` — a second NCCL communicator over the same
      ranks, a ring: the V1 engine gathers logits with an all-gather (``Platform.use_all_gather``,
      ``vllm/platforms/interface.py``, True on CUDA: the base class's answer, and in the 0.8–0.10
      releases true whenever ``VLLM_USE_V1``), so ``LogitsProcessor._gather_logits`` calls
      ``tensor_model_parallel_all_gather`` → ``DeviceCommunicatorBase.all_gather``
      (``base_device_communicator.py``), which ``CudaCommunicator`` does not override:
      ``torch.distributed.all_gather_into_tensor`` on the device group. vLLM's profile run
      computes logits, so this one is made inside the budget.

    vLLM's sleep (``CuMemAllocator``, ``vllm/device_allocator/cumem.py``) releases only the
    allocations it tagged ``weights`` and ``kv_cache``; NCCL's buffers (``cudaMalloc`` inside
    NCCL) and the custom all-reduce's are none of them, so both sets stay through scoring and
    training. Not counted: NVLS buffers, and a collective on the world group's torch
    communicator (none found in the engine's path).

    Examples
    --------
    tp 4 in an 8-GPU node: the PyNccl ring, 24 channels inside a node
    (:data:`model.terms.comm_memory.RING_CHANNELS`) × 12 MiB = 301,989,888 B, plus 25,165,824 B
    of custom all-reduce; torch's ring for the logits all-gather, another 301,989,888 B.

    >>> engine_communicator_bytes(4, 8)
    (327155712, 301989888)
    >>> engine_communicator_bytes(1, 8)
    (0, 0)
    """
    if tp == 1:
        return 0, 0
    across = spans_nodes(tp, tp, gpus_per_node, tp)  # engine 0's ranks 0…tp−1: the peak GPU's
    ring = communicator_bytes(True, 0, 0)
    custom = CUSTOM_ALL_REDUCE_BYTES if not across and tp in CUSTOM_ALL_REDUCE_SIZES else 0
    return ring + custom, ring


def least_engine_tp(spec: RLHFSpec, fraction: Fraction, device: DeviceSpec) -> int | None:
    """The least power-of-two tp (up to the attention heads) at which the engine's weights and
    one full-length sequence's KV cache fit ``fraction`` of the device's bytes as CUDA reports
    them (:attr:`model.hardware.DeviceSpec.cuda_total_bytes`; None: none does) — what a tab's
    engine that does not fit its budget would need."""
    rs = spec.role(Role.ROLLOUT)
    arch = rs.model.arch
    assert arch is not None
    budget = fraction * device.cuda_total_bytes
    tp = 1
    while tp <= arch.num_attention_heads:
        try:
            need = engine_weights_bytes(rs, tp) + kv_bytes_per_token(arch, tp) * spec.seq_len
        except LayoutError:
            need = None
        if need is not None and need <= budget:
            return tp
        tp *= 2
    return None


def decode_efficiency(spec: RLHFSpec, device: DeviceSpec) -> float:
    """The fraction of the datasheet HBM bandwidth the engine's decode reads its weights and KV
    cache at: ``--bandwidth-efficiency`` when given, else the part's streaming fraction, the one
    the optimizer step reads (:attr:`model.roofline.RooflineParams.streaming_hbm_efficiency`:
    BabelStream's triad, :func:`model.op_rates.stream_triad_fraction`; 0.9 where none is
    published). A decode step streams whole weight matrices and KV blocks through HBM as the
    triad streams its arrays (vLLM's decode GEMMs at a few rows and its paged-attention kernel
    are bandwidth-bound: the module docstring of :mod:`model.rollout`). On an H100 SXM: 2.97
    of 3.35 TB/s, 0.8866 (``tests/model/test_rlhf_time.py``)."""
    if spec.bandwidth_efficiency is not None:
        return spec.bandwidth_efficiency
    return deployed_params(device.part).streaming_hbm_efficiency


def rollout_cost(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    links: ClusterLinks | None,
    cluster_gpus: int,
    over_budget: bool = False,
) -> RoleCost:
    """The engine's cost (:func:`model.rlhf.costs.role_cost`; ``sync_s``: :func:`_broadcast_s`
    over ``links`` of ``cluster_gpus``). An engine whose budget cannot hold its weights and one
    full-length sequence is a LayoutError, or with ``over_budget`` a cost whose rollout bytes are
    that need (above ``budget_bytes``: the plan does not fit), timed one sequence at a time.
    Under ``deepspeed`` its ``sync_bytes`` are its weights, which OpenRLHF wakes alone for the
    weight sync (:mod:`model.rlhf.openrlhf`)."""
    if opt.pp != 1:
        raise LayoutError("rollout: the engine runs tp × dp replicas (pp 1)")
    if opt.fraction is None:
        raise InputError("rollout: the engine needs its memory fraction")
    if device.hbm_bytes_per_s is None:
        raise InputError(f"rollout: {device.figures_from} has no HBM bandwidth for {device.name}")
    weights = engine_weights_bytes(rs, opt.tp)
    mem, need = _fitted_memory(spec, rs, opt, device, weights, over_budget)
    time = _rollout_time(spec, rs, opt, device, weights, mem.concurrent)
    sync_s = _broadcast_s(spec, rs, opt, device, links, cluster_gpus)
    outside, inside = engine_communicator_bytes(opt.tp, device.gpus_per_node)
    receive, group = engine_receive_bytes(spec, rs)
    terms = _engine_terms(mem, time, device, weights, need, decode_efficiency(spec, device))
    terms += _held_terms(outside, inside)
    terms += (Term("engine CUDA graph pool, kept asleep (assumed)", "held",
                   Fraction(ENGINE_GRAPH_POOL_BYTES), "bytes", GRAPH_POOL_SOURCE),)  # fmt: skip
    terms += _receive_terms(receive, group, receive_source(spec.framework), sync_s)
    asleep = engine_sleep_host_bytes(spec.framework, weights)
    if asleep:
        name = "host copy while asleep (vLLM level 1; on the actor's pool)"
        terms += (Term(name, "host", asleep, "bytes", SLEEP_HOST_SOURCE),)
    return RoleCost(
        opt,
        Fraction(0),
        need - inside,
        Fraction(0),
        Fraction(0),
        time.total_s,
        0.0,
        0.0,
        Fraction(0),
        terms,
        mem.concurrent,
        weights,
        phases=rs.phases,
        budget_bytes=mem.budget_bytes,
        resident_bytes=Fraction(outside + inside + ENGINE_GRAPH_POOL_BYTES),
        budget_resident_bytes=Fraction(inside),
        sync_bytes=weights,  # awake during the sync under every profile (model.rlhf.verl_sync)
        receive_bytes=receive,
        receive_resident_bytes=group,
        awake_apart=spec.framework is Framework.DEEPSPEED,  # OpenRLHF (model.rlhf.split)
        sleep_host_bytes=asleep,
        sync_s=sync_s,
    )


def _broadcast_s(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, device: DeviceSpec,
    links: ClusterLinks | None, gpus: int,
) -> float:  # fmt: skip
    """The engine's :attr:`~model.rlhf.roles.RoleCost.sync_s`
    (:func:`model.rlhf.sync_time.broadcast_seconds` of the policy's parameters and tensors to
    the engine's GPUs, with OpenRLHF's Ray round trip per tensor under ``deepspeed``; not in its
    rollout seconds: the step adds the placement's sync,
    :func:`model.rlhf.sync_time.placement_sync_seconds`); 0 without links."""
    if links is None:
        return 0.0
    arch = rs.model.arch
    assert arch is not None
    params = int(sync_weights_bytes(rs) / 2)
    p = deployed_params(device.part)
    call = RAY_ACTOR_CALL_S if spec.framework is Framework.DEEPSPEED else 0.0
    return broadcast_seconds(params, parameter_tensors(arch), opt.gpus, gpus, links, p, call)


def _held_terms(outside: int, inside: int) -> tuple[Term, ...]:
    """The engine's communicator terms, held in every phase (:func:`engine_communicator_bytes`)."""
    if not outside + inside:
        return ()
    src = "vLLM CudaCommunicator: PyNccl ring + custom all-reduce (tp); model.terms.comm_memory"
    gather = "torch device_group of tp: the logits all-gather's ring (inside the budget)"
    return (
        Term("engine tp communicators, kept asleep", "held", Fraction(outside), "bytes", src),
        Term("engine logits-gather communicator", "held", Fraction(inside), "bytes", gather),
    )


def _receive_terms(
    receive: Fraction, group: Fraction, src: str, sync_s: float = 0.0
) -> tuple[Term, ...]:
    """The NCCL weight sync's terms on a pool without the actor
    (:func:`model.rlhf.openrlhf.engine_receive_bytes`), with its seconds ``sync_s``
    (:func:`_broadcast_s`)."""
    sync = Term("weight sync on a pool without the actor (2N broadcast, one tensor at a time)",
                "rollout", sync_s, "s", SYNC_TIME_SOURCE, "nccl")  # fmt: skip
    if not receive:
        return (sync,) if sync_s else ()
    path = "nccl"  # counted on a pool without the actor only (model.rlhf.split.counted_terms)
    receive_name = "weight receive buffer (pool without the actor)"
    group_name = "model-update communicator (pool without the actor)"
    return (
        Term(receive_name, "rollout", receive, "bytes", src, path),
        Term(group_name, "held", group, "bytes", src, path),
    ) + ((sync,) if sync_s else ())


def _rollout_time(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    weights: Fraction,
    concurrent: int,
) -> RolloutTime:
    """:func:`model.rollout.rollout_time` of the engine under ``opt``, ``concurrent`` sequences
    per replica at once, with its tp collectives (:mod:`model.rollout_reduce`)."""
    arch = rs.model.arch
    assert arch is not None and device.hbm_bytes_per_s is not None
    reduce = forward_collectives(arch.num_layers, arch.hidden_size, arch.vocab_size,
                                 engine_all_reduce(device, opt.tp),
                                 engine_all_gather(device, opt.tp))  # fmt: skip
    return rollout_time(
        active_params=rs.active_params,
        weights_bytes=weights,
        kv_per_token_bytes=kv_bytes_per_token(arch, opt.tp),
        sequences_per_replica=math.ceil(spec.sequences / opt.dp),
        concurrent=concurrent,
        prompt_tokens=spec.prompt_tokens,
        completion_tokens=spec.completion_tokens,
        tp=opt.tp,
        peak_flops_per_s=device.peak_flops_per_s,
        kernel_efficiency=kernel_efficiency_for(device.part, arch.hidden_size),
        hbm_bytes_per_s=device.hbm_bytes_per_s,
        bandwidth_efficiency=decode_efficiency(spec, device),
        max_completion_tokens=spec.max_completion_tokens,
        tp_reduce=reduce,
        saved_prompt_tokens=prompt_sharing(spec, opt.dp),
    )


def prompt_sharing(spec: RLHFSpec, replicas: int) -> Fraction:
    """Prompt tokens a rollout reuses from the engine's prefix cache on average, neither
    prefilled nor held (:func:`model.rollout_prefix.saved_prompt_tokens`): verl's profiles
    (``megatron``, ``fsdp2``: every sample its own request, prefix caching on, the step's
    samples in :attr:`model.rlhf.spec.RLHFSpec.agent_workers` contiguous chunks, each
    worker's round robin over the ``replicas``); none under ``deepspeed`` (OpenRLHF's prefix
    caching is off by default). The one rule the evaluator and the rlhf-plan search both read.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> base = dict(policy=get_model("qwen2.5-7b").model, algorithm="grpo", reward="rule",
    ...             prompts=4, samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096)
    >>> verl, openrlhf = RLHFSpec(**base), RLHFSpec(**base, framework="deepspeed")
    >>> prompt_sharing(verl, 8), prompt_sharing(openrlhf, 8)
    (Fraction(504, 1), Fraction(0, 1))
    """
    if spec.framework is Framework.DEEPSPEED:
        return Fraction(0)
    assert spec.agent_workers is not None  # verl's profiles: RLHFSpec.agent_workers
    return saved_prompt_tokens(spec.samples_per_prompt, replicas, spec.prompt_tokens,
                               spec.prompts, spec.agent_workers)  # fmt: skip


def _fitted_memory(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    weights: Fraction,
    over_budget: bool,
) -> tuple[EngineMemory, Fraction]:
    """The engine's memory (:func:`model.rollout.engine_memory`) and the bytes it runs with: its
    budget; or, when the budget holds no full-length sequence and ``over_budget``, one sequence
    at a time above it (else a LayoutError)."""
    arch = rs.model.arch
    assert arch is not None and opt.fraction is not None
    per_replica = math.ceil(spec.sequences / opt.dp)
    mem = engine_memory(
        arch,
        weights,
        device.cuda_total_bytes,
        opt.fraction,
        spec.max_num_seqs,
        per_replica,
        spec.seq_len,
        opt.tp,
        prompt_sharing(spec, opt.dp),
    )
    need = mem.budget_bytes
    if not mem.fits:
        if not over_budget:
            raise LayoutError(
                f"rollout: tp {opt.tp} with fraction {float(opt.fraction):g} leaves "
                f"{float(mem.kv_space_bytes) / 1e9:.2f} GB of KV space per GPU, less than one "
                f"{spec.seq_len:,}-token sequence's {mem.kv_per_sequence_bytes / 1e9:.2f} GB"
            )
        need = weights + mem.kv_per_sequence_bytes
        mem = replace(mem, concurrent=1, limited_by="kv_space")
    return mem, need


def _engine_terms(
    mem: EngineMemory,
    time: RolloutTime,
    device: DeviceSpec,
    weights: Fraction,
    need: Fraction,
    efficiency: float,
) -> tuple[Term, ...]:
    """The engine's terms with their sources: its budget, weights, KV cache and concurrency, and
    the prefill and decode seconds (``need``: the bytes it runs with, above the
    budget when one sequence does not fit it; ``efficiency``: :func:`decode_efficiency`)."""
    assert device.hbm_bytes_per_s is not None
    bw = (f"{device.name} HBM {device.hbm_bytes_per_s / 1e12:g} TB/s ({device.bandwidth_source}) "
          f"× {efficiency:.4g} (decode_efficiency: the optimizer step's STREAM triad share)")  # fmt: skip
    kv = f"KV cache ({mem.concurrent} sequences at once, by {mem.limited_by})"
    if need > mem.budget_bytes:
        kv = "KV cache of one sequence (the least the engine runs with; its budget holds none)"
    steps = f"decode ({time.memory_bound_steps:,} of {time.total_steps:,} steps HBM-bound)"
    roof = f"roofline: max(2N·c, weights + KV read) + tp all-reduces, logits all-gather (model.rollout_reduce); {bw}"
    prefill_src = "model.rollout; kernel efficiency model.timing; tp collectives per chunk"
    return (
        Term("engine budget (fraction × HBM)", "rollout", mem.budget_bytes, "bytes", _ENGINE_SOURCE),
        Term("engine weights (BF16, ÷ tp)", "rollout", weights, "bytes", _ENGINE_SOURCE),
        Term(kv, "rollout", mem.kv_cache_bytes, "bytes", _KV_SOURCE),
        Term("sequences decoded at once", "rollout", mem.concurrent, "sequences", _KV_SOURCE),
        Term("prefill (2N per prompt token)", "rollout", time.prefill_s, "s", prefill_src),
        Term(steps, "rollout", time.decode_s, "s", roof),
    )  # fmt: skip
