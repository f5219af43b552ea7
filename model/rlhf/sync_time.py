"""The weight sync's seconds, by placement: what the actor's updated weights cost to reach the
rollout engine on the actor's own GPUs (colocated, the hybrid engine) or on GPUs of their own.
Every framework sends the weights one parameter tensor at a time, so the sync is its bytes over
the link they ride plus a fixed cost per tensor × the number of tensors
(:func:`parameter_tensors`), each fixed cost NCCL's latency of the collective
(:mod:`model.nccl_latency`). Read at OpenRLHF/OpenRLHF 3c3be6234 and volcengine/verl b178a3cd5.

* **Making each tensor whole on the actor's ranks** (:func:`gather_seconds`, every placement):
  OpenRLHF (``openrlhf/trainer/ray/ppo_actor.py`` ``broadcast_to_vllm``, ``_gather_params_ctx``)
  gathers each parameter over its ZeRO-3 shards (``deepspeed.zero.GatheredParameters``, the
  actor's dp ranks) and its DeepSpeed tensor-parallel ranks (``GatherReplacedLayerParams``);
  at ZeRO-1/2 without tp ``param.data`` is whole. verl's FSDP worker
  (``verl/workers/fsdp_workers.py`` ``ActorRolloutRefWorker.rollout_mode``, and the one-step
  off-policy ``DetachSync.sync_rollout_weights``) calls ``full_tensor()`` on each parameter of
  the state dict, an all-gather over the whole device mesh (dp × tp), of the actor's FP32
  weights (``_build_model_optimizer``: ``model_dtype`` unset gives ``torch.float32`` for the
  actor) before ``weight.to(bfloat16)`` (``vllm_rollout.py`` ``ServerAdapter.update_weights``).
  verl's Megatron worker exports each HF tensor through mbridge (``Bridge.export_weights``: the
  tp all-gather inside a stage, then the pp broadcast from the stage holding it) of the BF16
  working weights. A GPU so receives ``b·N·(1 − 1/k)`` bytes over its ``k`` shards (``b`` 4
  under verl's FSDP, else 2; Megatron: ``2N/pp·(1 − 1/tp) + 2N·(1 − 1/pp) = 2N·(1 − 1/(tp·pp))``),
  at the pool's link (:func:`sync_bandwidth` of the ``k`` ranks), and each
  tensor waits an all-gather's latency over ``k`` ranks (Megatron: over tp, then a broadcast's
  over pp, on the ``⌈tp·pp / domain⌉`` hosts of the stage's ranks). Megatron's export does
  gather the experts across expert parallelism (verl ``per_tensor_generator``,
  ``verl/utils/megatron_utils.py``: each local expert's ``linear_fc*`` all-gathered over the ep
  group, then over etp; mbridge 04fe4d52 ``Bridge.export_weights``: ``if self.mpu.ep_size >
  1``), but the placement's roles carry no expert parallelism (:class:`~model.rlhf.roles.
  RoleOption`: dp, tp and pp only; its experts sharded over tp, Megatron-Core's default
  ``expert_tensor_parallel_size`` = tp, ``initialize_model_parallel`` in
  ``megatron/core/parallel_state.py``, NVIDIA/Megatron-LM d98e8a64), so that gather never runs
  here: nothing to count.
* **Colocated** (:func:`shared_sync_seconds`): the gathered tensor reaches the engine rank on
  the same GPU without crossing a link. OpenRLHF (``colocate_all``: ``_handle_cuda_ipc``) clones
  it, exchanges the CUDA IPC handles with ``torch.distributed.all_gather_object`` (two
  all-gathers over the actor's ranks: the objects' sizes, then their bytes; ``torch``
  ``distributed_c10d.py``) and ends every tensor with ``torch_dist_barrier_and_cuda_sync``
  (``openrlhf/utils/distributed_util.py``: ``torch.distributed.barrier()``, under NCCL a
  one-element all-reduce): three collectives' latencies per tensor over the pool. verl copies the
  tensors into a CUDA IPC bucket of ``update_weights_bucket_megabytes`` and hands each full
  bucket to the engine over ZMQ (``ServerAdapter.update_weights``): no NCCL call per tensor.
  OpenRLHF's clone (``weight = param.data.clone()``) is a memory-bound copy of each whole
  gathered BF16 tensor on every GPU of the pool, counted by the model's memory-bound kernel
  rule (:func:`clone_seconds`). Not counted: verl's copy into its bucket and the engine's
  ``load_weights`` taking its rank's shard (vLLM's weight loaders, every framework alike).
* **On GPUs of their own** (:func:`broadcast_seconds`, the engine's
  :attr:`~model.rlhf.roles.RoleCost.sync_s`): after the gather, actor rank 0 broadcasts each
  tensor whole, ``2N`` in all, to every engine GPU over the model-update group (OpenRLHF
  ``_broadcast_param``: ``self._model_update_group.broadcast(param.data, src=0)``, engines ×
  tp + 1 ranks; verl's one-step off-policy ``DetachSync.sync_rollout_weights``:
  ``collective.broadcast`` over the ``actor_rollout`` group) one tensor at a time: ``2N`` at
  the link between the pools (:func:`sync_bandwidth`) and a ring broadcast's
  latency per tensor (:func:`model.nccl_latency.broadcast_latency`).
* **OpenRLHF's Ray call per tensor** (both placements): rank 0 calls every engine for each
  tensor (``engine.update_weight.remote``, or ``update_weight_cuda_ipc.remote`` colocated) and
  waits for them (``ray.get(refs)``) before the next tensor; the engine's side of the broadcast
  runs inside the call, so each tensor adds a Ray round trip, :data:`RAY_ACTOR_CALL_S`.
  verl makes one Ray call per sync, not per tensor.

The step reads the placement's sync (:func:`placement_sync_seconds`): on a pool holding the
engine and the actor, the actor's :attr:`~model.rlhf.roles.RoleCost.sync_shared_s`; on a pool
holding the engine without the actor, the actor's :attr:`~model.rlhf.roles.RoleCost.sync_gather_s`
plus the engine's :attr:`~model.rlhf.roles.RoleCost.sync_s`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from trainplan.model.frameworks import Framework
from trainplan.model.hardware import ClusterLinks
from trainplan.model.nccl_latency import broadcast_latency, collective_latency
from trainplan.model.rlhf.roles import RoleCost
from trainplan.model.rlhf.spec import Role
from trainplan.model.roofline import RooflineParams, memory_seconds
from trainplan.model.specs import Architecture

__all__ = [
    "RAY_ACTOR_CALL_S",
    "SYNC_SOURCE",
    "clone_seconds",
    "broadcast_seconds",
    "gather_seconds",
    "parameter_tensors",
    "placement_sync_seconds",
    "shared_sync_seconds",
    "sync_bandwidth",
]

SYNC_SOURCE = (
    "bytes over the link + NCCL latency per parameter tensor (model.rlhf.sync_time): OpenRLHF "
    "3c3be6234 ppo_actor.py broadcast_to_vllm (_gather_params_ctx, _broadcast_param, "
    "_handle_cuda_ipc); verl b178a3cd5 fsdp_workers.py rollout_mode full_tensor(), "
    "vllm_rollout.py ServerAdapter.update_weights (IPC buckets), one-step off-policy "
    "DetachSync.sync_rollout_weights broadcast; NCCL 5067397c tuning.cc ncclTopoTuneModel "
    "latencies"
)


RAY_ACTOR_CALL_S = 1 / 1950.1566973268486
"""Seconds of one synchronous Ray actor call, the caller to the actor and back: the inverse of
Ray's published ``1_1_actor_calls_sync`` microbenchmark, 1,950.16 calls/s (± 59.77) from one
caller to one actor (ray-project/ray 6aae543b7 ``release/perf_metrics/microbenchmark.json``,
the figures the release tests publish), 512.8 µs. OpenRLHF waits on one round of such calls per
tensor (module docstring); with several engines the calls go out at once and one round trip
is counted (the extra submissions, ``1_n_actor_calls_async`` 8,575 calls/s, are not)."""


def clone_seconds(params: int, tensors: int, hbm_bytes_per_s: float, p: RooflineParams) -> float:
    """Seconds of OpenRLHF's clone of each of ``tensors`` whole BF16 parameter tensors, ``params``
    elements in all, on one GPU before its CUDA IPC hand-over (``_handle_cuda_ipc``: ``weight =
    param.data.clone()``, OpenRLHF 3c3be6234 ``openrlhf/trainer/ray/ppo_actor.py``): each a
    memory-bound kernel reading and writing 2 B an element, ``tensors`` ×
    :func:`model.roofline.memory_seconds` of ``4·params / tensors`` bytes at ``hbm_bytes_per_s``.
    Units: seconds.

    Examples
    --------
    Llama 3 8B's 291 tensors on an H100 (3.35 TB/s × 0.9): 4 × 8,030,261,248 B / 3.015 TB/s =
    10.654 ms, plus 291 × 3 µs = 0.873 ms.

    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> round(clone_seconds(8_030_261_248, 291, 3.35e12, p) * 1e3, 3)
    11.527
    """
    if tensors < 1:
        return 0.0
    return tensors * memory_seconds(4 * params / tensors, hbm_bytes_per_s, p)


def _attention_tensors(arch: Architecture, norm: int) -> int:
    """One layer's attention tensors as :func:`parameter_tensors` lists them (``norm``: 2 for a
    LayerNorm with its bias, else 1)."""
    if arch.mla is not None:
        attn = (3 if arch.mla.q_lora_rank is not None else 1) + 4
        attn += norm if arch.mla.q_lora_rank is not None else 0
        attn += norm - 1  # kv_a_layernorm's bias
    else:
        attn = 4 + (3 if arch.qkv_bias else 0) + (4 if arch.linear_bias else 0)
    attn += 2 if arch.qk_norm else 0
    return attn + (1 if arch.attention_sinks else 0)


def parameter_tensors(arch: Architecture, per_expert: bool = False) -> int:
    """Parameter tensors of the model's Hugging Face checkpoint, each synced on its own: per
    layer Q, K, V and O (``q_proj`` … ``o_proj``; MLA: ``q_proj`` or ``q_a_proj``,
    ``q_a_layernorm`` and ``q_b_proj``, then ``kv_a_proj_with_mqa``, ``kv_a_layernorm``,
    ``kv_b_proj``, ``o_proj``), Q/K/V biases (``qkv_bias``), every linear's bias
    (``linear_bias``), ``q_norm`` and ``k_norm`` (``qk_norm``), the attention sinks, two norms
    (four with ``post_norms``; a LayerNorm's bias doubles them), the FFN's gate, up and down
    (two without a gate) — per routed expert in a MoE layer, plus the router (its bias) and one
    shared-expert MLP; then the embedding, the learned position table, the final norm and an
    untied output layer (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``DeepseekV3ForCausalLM``
    ``named_parameters()``). MTP layers are not counted.

    A model that stacks its routed experts (:attr:`~model.arch_parts.MoESpec.stacked_experts`,
    gpt-oss) holds, and sends, one tensor per projection for all of a layer's experts:
    ``gate_up_proj`` and ``down_proj`` (two without a gate too), each with its bias under
    ``linear_bias`` — 4 tensors a layer for gpt-oss's 32 or 128 experts. So the engine receives
    them: OpenRLHF's ``broadcast_to_vllm`` (3c3be6234) and verl's FSDP ``rollout_mode``
    (b178a3cd5) send each HF parameter; Megatron-Bridge's export (verl's Megatron worker with
    ``vanilla_mbridge: False``; mbridge 04fe4d52 has no gpt-oss) stacks all E experts into the
    one HF tensor before yielding it (Megatron-Bridge 067f987d ``gpt_oss_bridge.py``;
    ``conversion/model_bridge.py`` ``_accumulate_grouped_export``). ``per_expert``: count each
    routed expert's gate, up and down apart — the collectives of Megatron's export, which gathers
    each local expert's parameter on its own before stacking (:func:`gather_seconds`).

    Examples
    --------
    Llama 3 8B: 32 × (4 + 2 + 3) + 3 = 291, the tensors of its safetensors; Qwen2.5 7B adds the
    Q/K/V biases: 28 × 12 + 3 = 339. gpt-oss-20b: per layer q, k, v, o and their 4 biases, the
    sinks, 2 norms, the router and its bias and the 4 stacked expert tensors, 24 × 17 + 3 = 411;
    with each of the 32 experts' 3 apart, 24 × (11 + 32 × 3 + 2) + 3 = 2,619.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> parameter_tensors(get_model("llama3-8b").model.arch)
    291
    >>> parameter_tensors(get_model("qwen2.5-7b").model.arch)
    339
    >>> oss = get_model("gpt-oss-20b").model.arch
    >>> parameter_tensors(oss), parameter_tensors(oss, per_expert=True)
    (411, 2619)
    """
    norm = 2 if arch.norm == "layernorm" else 1
    ffn = 3 if arch.mlp.gated else 2
    total = 0
    for i in range(arch.num_layers):
        attn = _attention_tensors(arch, norm)
        norms = (4 if arch.post_norms else 2) * norm
        if arch.is_moe_layer(i):
            assert arch.moe is not None
            moe = arch.moe
            if moe.stacked_experts and not per_expert:
                mlp = 2 * (2 if arch.linear_bias else 1)  # gate_up_proj, down_proj (+ biases)
            else:
                mlp = moe.num_experts * ffn
            mlp += 1 + (1 if moe.router_bias else 0)
            mlp += ffn if moe.num_shared_experts else 0
        else:
            mlp = ffn * (2 if arch.linear_bias else 1)
        total += attn + norms + mlp
    total += 1 + norm + (0 if arch.tie_embeddings else 1)
    return total + (1 if arch.position_embedding == "learned" else 0)


def sync_bandwidth(links: ClusterLinks, gpus: int) -> float:
    """Bandwidth, bytes/s per GPU per direction, the weight sync's bytes move at between
    ``gpus`` GPUs (the cluster's, for the broadcast between pools; the ``k`` ranks of the actor's
    gather): NVLink when they fit one NVLink domain, else the scale-out NIC.

    >>> links = ClusterLinks(nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9, nvlink_domain=8)
    >>> sync_bandwidth(links, 8), sync_bandwidth(links, 16)
    (450000000000.0, 50000000000.0)
    """
    return links.nvlink_bytes_per_s if gpus <= links.nvlink_domain else links.across_domains()


def _latency_ag(k: int, links: ClusterLinks, p: RooflineParams) -> float:
    """NCCL's latency of one all-gather over ``k`` ranks laid out ``nvlink_domain`` a domain
    (:func:`model.nccl_latency.collective_latency`); 0 for one rank."""
    if k <= 1:
        return 0.0
    inside = k <= links.nvlink_domain
    return float(collective_latency("all-gather", k, inside, p, links.nvlink_domain))


def gather_seconds(
    framework: Framework,
    params: int,
    tensors: int,
    dp: int,
    tp: int,
    pp: int,
    zero_stage: int,
    links: ClusterLinks,
    p: RooflineParams,
) -> float:
    """Seconds the actor's ranks take to make each of its ``tensors`` parameter tensors
    (``params`` parameters in all) whole at degrees ``dp``, ``tp``, ``pp`` (module docstring):
    ``b·N·(1 − 1/k)`` bytes at the link of ``k`` ranks plus ``tensors`` × an all-gather's
    latency over them (``megatron``: over tp, plus a broadcast's over pp). ``deepspeed``: ``k =
    tp`` (× dp at ZeRO-3), ``b`` = 2; ``megatron``: ``k = tp·pp``, ``b`` = 2; verl's FSDP
    (``fsdp2``, ``textbook``): ``k = dp·tp``, ``b`` = 4 (FP32). 0 where ``k`` = 1. Units: seconds.

    Examples
    --------
    Llama 3 8B (8,030,261,248 parameters, 291 tensors) under verl's FSDP on 8 GPUs of an H100
    node (450 GB/s NVLink): 4 × N × 7/8 B / 450 GB/s = 62.46 ms, plus 291 × (8.4 + 7 × 3.4) µs
    = 9.37 ms.

    >>> from trainplan.model.roofline import RooflineParams, memory_seconds
    >>> links = ClusterLinks(nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9, nvlink_domain=8)
    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> s = gather_seconds(Framework.FSDP2, 8_030_261_248, 291, 8, 1, 1, 3, links, p)
    >>> round(s * 1e3, 2), round((4 * 8_030_261_248 * 7 / 8 / 450e9 + 291 * 32.2e-6) * 1e3, 2)
    (71.83, 71.83)
    >>> gather_seconds(Framework.DEEPSPEED, 8_030_261_248, 291, 8, 1, 1, 2, links, p)
    0.0
    """
    if framework is Framework.DEEPSPEED:
        k, width = tp * (dp if zero_stage == 3 else 1), 2
    elif framework is Framework.MEGATRON:
        k, width = tp * pp, 2
    else:
        k, width = dp * tp, 4
    if k <= 1:
        return 0.0
    moved = Fraction(width * params) * (1 - Fraction(1, k))
    each = _latency_ag(tp if framework is Framework.MEGATRON else k, links, p)
    if framework is Framework.MEGATRON and pp > 1:
        each += broadcast_latency(
            pp, 1 if k <= links.nvlink_domain else -(-k // links.nvlink_domain), p
        )
    return float(moved / Fraction(sync_bandwidth(links, k))) + tensors * each


def shared_sync_seconds(
    framework: Framework, gather_s: float, params: int, tensors: int, gpus: int,
    links: ClusterLinks, p: RooflineParams, hbm_bytes_per_s: float,
) -> float:  # fmt: skip
    """The whole sync to an engine on the actor's ``gpus`` GPUs (module docstring, colocated):
    the gather ``gather_s`` (:func:`gather_seconds`), then under ``deepspeed`` per tensor two
    all-gathers and a one-element all-reduce over the pool (``all_gather_object`` and the
    barrier; none on one GPU) and a Ray round trip (:data:`RAY_ACTOR_CALL_S`), and the clone of
    the ``params`` parameters (:func:`clone_seconds` at ``hbm_bytes_per_s``); verl's buckets add
    nothing per tensor. Units: seconds.

    Examples
    --------
    OpenRLHF on one 8-GPU node of H100s, Llama 3 8B's 291 tensors, nothing to gather: 291 ×
    (2 × 32.2 µs + the all-reduce's 8.4 + 14 × 3.4 µs = 56 µs) = 35.04 ms, 291 × 512.78 µs =
    149.22 ms of Ray calls and the clone's 11.53 ms: 195.78 ms.

    >>> from trainplan.model.roofline import RooflineParams
    >>> links = ClusterLinks(nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9, nvlink_domain=8)
    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> n = 8_030_261_248
    >>> round(shared_sync_seconds(Framework.DEEPSPEED, 0.0, n, 291, 8, links, p, 3.35e12) * 1e3, 2)
    195.78
    >>> shared_sync_seconds(Framework.FSDP2, 0.5, n, 291, 8, links, p, 3.35e12)
    0.5
    """
    if framework is not Framework.DEEPSPEED:
        return gather_s
    each = RAY_ACTOR_CALL_S
    if gpus > 1:
        inside = gpus <= links.nvlink_domain
        each += 2 * _latency_ag(gpus, links, p)
        each += float(collective_latency("all-reduce", gpus, inside, p, links.nvlink_domain))
    return gather_s + tensors * each + clone_seconds(params, tensors, hbm_bytes_per_s, p)


def broadcast_seconds(
    params: int, tensors: int, engine_gpus: int, cluster_gpus: int, links: ClusterLinks,
    p: RooflineParams, call_s: float = 0.0,
) -> float:  # fmt: skip
    """The broadcast to an engine of ``engine_gpus`` GPUs on GPUs of their own (module
    docstring): ``2N`` bytes at the link between the pools (NVLink when the cluster of
    ``cluster_gpus`` is one domain, else the NIC) plus ``tensors`` × a ring broadcast's latency
    over the engine's GPUs and actor rank 0 (one node inside one domain, else rank 0's node and
    the engine's ``⌈engine_gpus / domain⌉``) and ``call_s`` (OpenRLHF's Ray round trip,
    :data:`RAY_ACTOR_CALL_S`; 0 under verl). Units: seconds.

    Examples
    --------
    Llama 3 8B to 16 engine GPUs over 50 GB/s NICs: 2N / 50 GB/s = 321.21 ms, plus 291 × 246.4
    µs (17 ranks on 3 nodes, :func:`model.nccl_latency.broadcast_latency`) = 71.70 ms.

    >>> from trainplan.model.roofline import RooflineParams, memory_seconds
    >>> links = ClusterLinks(nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9, nvlink_domain=8)
    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> round(broadcast_seconds(8_030_261_248, 291, 16, 32, links, p) * 1e3, 2)
    392.91
    """
    link = sync_bandwidth(links, cluster_gpus)
    nodes = 1
    if cluster_gpus > links.nvlink_domain:
        nodes += math.ceil(engine_gpus / links.nvlink_domain)
    each = broadcast_latency(engine_gpus + 1, nodes, p) + call_s
    return float(Fraction(2 * params) / Fraction(link)) + tensors * each


def placement_sync_seconds(members: Sequence[RoleCost], step: Sequence[RoleCost]) -> float:
    """The weight sync's seconds a pool holding ``members`` spends in the rollout phase, given
    every role of the step ``step`` (module docstring): with the engine and the actor, the
    actor's :attr:`~model.rlhf.roles.RoleCost.sync_shared_s`; with the engine alone of the two,
    the actor's :attr:`~model.rlhf.roles.RoleCost.sync_gather_s` and the engine's
    :attr:`~model.rlhf.roles.RoleCost.sync_s`; without the engine, 0.

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                   sync_s=0.3)
    >>> actor = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                  sync_gather_s=0.05, sync_shared_s=0.07)
    >>> placement_sync_seconds([engine, actor], [engine, actor])
    0.07
    >>> round(placement_sync_seconds([engine], [engine, actor]), 6)
    0.35
    >>> placement_sync_seconds([actor], [engine, actor])
    0.0
    """
    engine = next((c for c in members if c.option.role is Role.ROLLOUT), None)
    if engine is None:
        return 0.0
    here = next((c for c in members if c.option.role is Role.ACTOR), None)
    if here is not None:
        return here.sync_shared_s
    actor = next((c for c in step if c.option.role is Role.ACTOR), None)
    return engine.sync_s + (actor.sync_gather_s if actor is not None else 0.0)
