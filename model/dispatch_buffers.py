"""The token dispatcher's resident buffers on one GPU: DeepEP's normal-mode ``Buffer``
(:func:`model.moe.deepep_buffer_bytes`, with NVSHMEM's heap across nodes,
:mod:`model.nvshmem_heap`) and HybridEP's ``HybridEPBuffer`` (:func:`hybridep_buffer_bytes`),
each allocated once per process for the whole run and shared by every MoE layer (Megatron-Core
``moe/fused_a2a.py``: ``get_buffer``'s global ``_buffer``, ``init_hybrid_ep_buffer``'s global
``_hybrid_ep_buffer``; torchtitan ``DeepEPTokenDispatcher.init_buffer``), as the model-state
term counts them (:mod:`model.terms.dispatch_buffers`).

HybridEP as read at deepseek-ai/DeepEP ``hybrid-ep`` 94a9f8f6b1 (the branch Megatron-LM
d98e8a64dd ``moe/token_dispatcher.py`` ``_HybridEPManager`` names): ``deep_ep/
hybrid_ep_buffer.py`` ``HybridEPBuffer.__init__`` splits its group into NVLink domains (the ranks
that can map each other's memory, ``detect_accessible_ranks``) and builds a ``Configurer``
(``csrc/hybrid_ep/config.cuh``), whose ``BufferConfig`` sizes the buffers the C++
``HybridEPBuffer`` constructor allocates (``csrc/hybrid_ep/hybrid_ep.cu`` ``allocate_buffer``):
the NVLink coordinator's (``buffer/intranode.cu``), across domains the RDMA coordinator's
(``buffer/internode_doca.cu``, the default multinode build) and the custom all-gather's output
(``extension/allgather.cu``, allocated whether or not ``enable_custom_allgather`` is set).

Units: bytes on one GPU.
"""

from __future__ import annotations

import math

from trainplan.model.moe import DEEPEP_WORKSPACE_BYTES, deepep_buffer_bytes
from trainplan.model.moe_dispatch import PROB_BYTES, SCALE_BLOCK
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.nvshmem_heap import nvshmem_gpu_bytes
from trainplan.model.rank_groups import in_one_domain

__all__ = [
    "HYBRIDEP_CHUNK_TOKENS",
    "HYBRIDEP_MIN_TOKENS",
    "HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS",
    "hybridep_token_refusal",
    "deepep_group_ranks",
    "hybridep_tokens_per_rank",
    "hybridep_buffer_bytes",
    "dispatch_buffer_bytes",
]

HYBRIDEP_CHUNK_TOKENS = 64
"""Tokens per chunk of HybridEP's combine (``NUM_OF_TOKENS_PER_CHUNK_COMBINE_API``, 64 unless
the environment sets it: ``Configurer`` in ``csrc/hybrid_ep/config.cuh``), the multiple
``hybrid_ep_pad_num_of_tokens_per_rank`` pads ``max_num_of_tokens_per_rank`` to."""

HYBRIDEP_MIN_TOKENS = 512
"""The fewest tokens per rank a ``Configurer`` sizes buffers for
(``std::max(max_num_of_tokens_per_rank, 512)``)."""

_TOKEN_BYTES = 2  # BF16 tokens: Megatron-Core asserts "not fp8_dispatch" (init_hybrid_ep_buffer);
# the combine's buffers are uint16_t whatever the dispatch type (internode_doca.cu, intranode.cu);
# probabilities and scaling factors as the dispatch sends them (model.moe_dispatch, one rule)


_IB_QP_MAX_TX_DEPTH = 65536  # HYBRID_EP_IB_QP_MAX_TX_DEPTH, csrc/hybrid_ep/config.cuh
_TX_DEPTH_TOKEN_FACTOR, _TX_DEPTH_EXTRA = 3, 1  # HYBRID_EP_DISPATCH_TX_DEPTH_TOKEN_FACTOR, _EXTRA

HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS = (
    _IB_QP_MAX_TX_DEPTH - 1 - _TX_DEPTH_EXTRA
) // _TX_DEPTH_TOKEN_FACTOR
"""21,844: the most tokens a rank (``BufferConfig.max_num_of_tokens_per_rank``, padded:
:func:`hybridep_tokens_per_rank`) HybridEP takes when its group spans more than one NVLink
domain: its dispatch may post 3 InfiniBand work requests a token (token, probabilities,
scaling factors) and one more, which must stay under the queue pair's 65,536
(``hybrid-ep`` 94a9f8f6b1 ``csrc/hybrid_ep/config.cuh`` ``hybrid_ep_token_capacity_is_valid``:
``3·T + 1 < 65536``, checked by ``BufferConfig.is_valid`` in the ``Configurer`` the buffer is
built with, which throws "The buffer config is not valid", and by
``HybridEpConfigInstance.is_valid``, asserted in ``update_template_config``). In one domain
(no RDMA) there is no limit."""


def hybridep_token_refusal(
    micro_batch_size: int, seq_len: int, cp: int, sp_tp: int, group_ranks: int, span: int,
    domain: int, total: int | None = None,
) -> str | None:  # fmt: skip
    """The one line that refuses a layout under HybridEP whose rank dispatches ``T = b·s/cp``
    tokens a micro-batch (``/tp`` under sequence parallelism: ``sp_tp``, 1 without;
    :func:`model.terms.dispatch_tokens`' count) when its group of ``group_ranks`` (Megatron-Core's
    etp·ep ``tp_ep_group``), laid over ``span`` consecutive ranks of the layout's ``total``
    (None: ``span``), leaves one NVLink domain of ``domain`` GPUs (some group does:
    :func:`model.rank_groups.in_one_domain`, a block of ``span`` across a domain's edge
    included) and ``T`` padded (:func:`hybridep_tokens_per_rank`) is above
    :data:`HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS`; None otherwise.

    >>> hybridep_token_refusal(8, 4096, 1, 1, 16, 16, 8)[:66]
    'micro_batch_size: 8 × seq_len 4,096 = 32,768 tokens a rank dispatc'
    >>> hybridep_token_refusal(8, 4096, 1, 1, 64, 64, 72), hybridep_token_refusal(5, 4096, 1, 1, 16, 16, 8)
    (None, None)
    >>> hybridep_token_refusal(8, 4096, 1, 1, 64, 64, 72, 256)[:14]  # ranks 64–127: 8 in 0–71
    'micro_batch_si'

    """
    tokens = micro_batch_size * seq_len // (cp * sp_tp)
    padded = hybridep_tokens_per_rank(tokens)
    inside = in_one_domain(span, span if total is None else total, domain)
    if inside or padded <= HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS:
        return None
    split = "".join(
        f" / {name} {n}" for name, n in (("cp", cp), ("tp (sequence parallelism)", sp_tp)) if n > 1
    )
    return (
        f"micro_batch_size: {micro_batch_size} × seq_len {seq_len:,}{split} = {tokens:,} tokens "
        f"a rank dispatches each micro-batch exceed the {HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS:,} "
        f"HybridEP takes across NVLink domains (its group of {group_ranks} ranks spans {span} "
        f"GPUs, domains of {domain}; its dispatch posts 3 InfiniBand work requests a token + 1, "
        "under the queue pair's 65,536: hybrid-ep config.cuh hybrid_ep_token_capacity_is_valid); "
        "use a smaller micro-batch, more cp or tp, or an ep group inside one domain"
    )


def deepep_group_ranks(framework: str, ep: int, expert_tp: int) -> int:
    """Ranks of the group the flex dispatcher's buffer spans (DeepEP's ``Buffer``, HybridEP's
    ``HybridEPBuffer``): Megatron-Core builds it over the expert tensor- and expert-parallel
    group, etp·ep ranks (Megatron-LM d98e8a64dd ``moe/token_dispatcher.py``
    ``MoEFlexTokenDispatcher.__init__``: ``_DeepepManager(group=self.tp_ep_group, ...)``, and
    ``_HybridEPManager`` the same; ``moe/fused_a2a.py`` ``get_buffer`` sizes DeepEP's by
    ``group.size()``); torchtitan's over the ep group alone.

    >>> deepep_group_ranks("megatron", 8, 2), deepep_group_ranks("fsdp2", 8, 2)
    (16, 8)
    """
    return ep * expert_tp if str(framework) == "megatron" else ep


def hybridep_tokens_per_rank(tokens: float) -> int:
    """``BufferConfig.max_num_of_tokens_per_rank`` for a rank that dispatches ``tokens`` rows a
    micro-batch (Megatron-Core passes the first dispatch's ``x.shape[-2]``: ``fused_a2a.py``
    ``HybridEPDispatch.forward``): at least :data:`HYBRIDEP_MIN_TOKENS`, rounded up to
    :data:`HYBRIDEP_CHUNK_TOKENS` (``Configurer``; ``update_template_config`` and
    ``adjust_template`` keep it there for a run of one shape).

    >>> hybridep_tokens_per_rank(4096), hybridep_tokens_per_rank(100), hybridep_tokens_per_rank(1000)
    (4096, 512, 1024)
    """
    rows = max(math.ceil(tokens - 1e-9), HYBRIDEP_MIN_TOKENS)
    return -(-rows // HYBRIDEP_CHUNK_TOKENS) * HYBRIDEP_CHUNK_TOKENS


def hybridep_buffer_bytes(
    hidden: int, tokens: float, local_experts: int, ranks_per_domain: int, domains: int
) -> tuple[int, int]:
    """(NVLink-registered bytes, RDMA bytes) of HybridEP's buffers on each rank of a group of
    ``domains`` NVLink domains of ``ranks_per_domain`` ranks, ``local_experts`` experts a rank,
    for ``T`` = :func:`hybridep_tokens_per_rank` tokens (``R``, ``N``, ``L``, ``h``; ``s =
    h // 128`` scaling factors a token; BF16 tokens, float probabilities). Worst-case sized:
    every token of the group may land on one rank.

    * NVLink (``NVLCoordinator``, dispatch and combine sharing one buffer by default,
      ``use_shared_buffer``): ``M = T·R·N`` tokens of ``2h`` bytes, their probabilities
      ``4·L·R`` and scaling factors ``4·s`` (allocated for BF16 too); the custom all-gather's
      routing map, ``(L·R·N)·T·R·N`` booleans;
    * RDMA, ``N > 1`` (``RDMACoordinator``): the dispatch's staging of the rank's own ``T``
      tokens (``2h + 4·L·R·N + 4·s`` a token) and its receive buffer for ``T·(N − 1)`` tokens
      from the other domains' peers (``2h + 4·L·R + 4·s``); the combine's pre-reduced send and
      receive buffers, ``2·T·(N − 1)`` tokens of ``2h + 4·L·R``.

    Left out: the flags and scan state (``chunk_flags``, completion flags, the preprocessing
    kernel's 108-block scratch), under 1 MiB at every size in the catalogue; the fabric
    allocator's rounding of each buffer up to its granularity on multi-node NVLink
    (``allocator.cu`` ``get_size_align_to_granularity``).

    Examples
    --------
    DeepSeek-V3 (h 7,168, 4 experts a rank of 256 at EP 64), 4,096 tokens a rank, 8 domains of 8
    (the branch's ``docs/Hybrid-EP_Implementation.md`` §4.2 table, which shows the token and
    probability buffers and the dispatch's receive buffer, about 4 GB):
    NVLink 262,144 × (14,336 + 128 + 224) + 256 × 4,096 × 64 = 3,917,479,936; RDMA 4,096 ×
    (14,336 + 1,024 + 224) + 28,672 × 14,688 + 2 × 28,672 × 14,464 = 1,314,390,016:

    >>> hybridep_buffer_bytes(7168, 4096, 4, 8, 8)
    (3917479936, 1314390016)
    >>> hybridep_buffer_bytes(7168, 4096, 4, 64, 1)  # one domain of 64: no RDMA, 1,024 B of probs
    (4152360960, 0)
    """
    t, r, n = hybridep_tokens_per_rank(tokens), ranks_per_domain, domains
    lr = local_experts * r
    scales = PROB_BYTES * (hidden // SCALE_BLOCK)
    token = _TOKEN_BYTES * hidden + PROB_BYTES * lr + scales
    nvl = t * r * n * token + lr * n * t * r * n
    if n == 1:
        return nvl, 0
    remote = t * (n - 1)
    staging = t * (_TOKEN_BYTES * hidden + PROB_BYTES * lr * n + scales)
    combine = 2 * remote * (_TOKEN_BYTES * hidden + PROB_BYTES * lr)
    return nvl, staging + remote * token + combine


def dispatch_buffer_bytes(
    run: MoERun,
    hidden: int,
    ep: int,
    heap: bool = True,
    tokens: float = 0.0,
    local_experts: int = 0,
    per_domain: int = 0,
) -> int:
    """Bytes per GPU of the dispatcher's resident buffers on every rank of its group of ``ep`` >
    1 ranks (:func:`deepep_group_ranks`); 0 for the NCCL all-to-all (its buffers are NCCL's
    own) and at ep = 1:

    * ``deepep`` — DeepEP's normal-mode ``Buffer`` (:func:`model.moe.deepep_buffer_bytes`,
      BF16 hidden): ``num_nvl_bytes``, the constructor's 32 MiB workspace
      (:data:`model.moe.DEEPEP_WORKSPACE_BYTES`) and, across nodes, what NVSHMEM maps for
      ``num_rdma_bytes`` on the ``ep // 8`` PEs, heap granules and IBGDA queue pairs
      (:func:`model.nvshmem_heap.nvshmem_gpu_bytes`); with ``heap`` False (the ``textbook``
      profile, which counts the tensors a run asks for and no library's own allocations or
      rounding) ``num_nvl_bytes + num_rdma_bytes`` as asked;
    * ``hybridep`` — :func:`hybridep_buffer_bytes` for ``tokens`` a rank, ``local_experts``
      a rank and ``per_domain`` of the group's ranks in each NVLink domain (the whole group in
      one domain where that is 0 or does not divide ``ep``, the convention of
      :func:`model.moe_dispatch.dispatch_copies`; HybridEP asserts it divides).

    Raises
    ------
    InputError
        An ``ep`` DeepEP has no config for (``Buffer.get_dispatch_config``).

    Examples
    --------
    >>> dispatch_buffer_bytes(MoERun(dispatcher="deepep"), 7168, 64)  # + 32 MiB + 658,747,459
    1069979715
    >>> dispatch_buffer_bytes(MoERun(dispatcher="deepep"), 7168, 64, heap=False)  # + 336,047,360
    713725184
    >>> dispatch_buffer_bytes(MoERun(dispatcher="hybridep"), 7168, 64, True, 4096, 4, 8)
    5231869952
    >>> dispatch_buffer_bytes(MoERun(), 7168, 64)
    0
    """
    if ep == 1 or run.dispatcher is Dispatcher.ALLTOALL:
        return 0
    if run.dispatcher is Dispatcher.HYBRIDEP:
        r = per_domain if per_domain and ep % per_domain == 0 else ep
        return sum(hybridep_buffer_bytes(hidden, tokens, local_experts, r, ep // r))
    nvl, rdma = deepep_buffer_bytes(hidden, ep)
    if not heap:
        return nvl + rdma
    return nvl + DEEPEP_WORKSPACE_BYTES + nvshmem_gpu_bytes(rdma, ep // 8)
