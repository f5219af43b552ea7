"""Mixture-of-experts layers as they run: expert capacity and padding, tokens and FLOPs per
expert, the expert all-to-all's volume, node-limited routing and de-duplicated dispatch across a
node, shared experts, expert load imbalance, and DeepEP's communication buffers.

Leaf functions, each with its source; :mod:`model.moe_run` turns a run's choices
(:class:`model.moe_run.MoERun`) into what the cost model's terms read (docs/moe.md).

Conventions: ``tokens`` are the tokens one expert-parallel rank routes in one micro-batch
(micro-batch × sequence ÷ cp); ``experts`` the routed experts of the layer (``E``), ``top_k``
the experts each token goes to (``k``), ``ep`` the expert-parallel degree. Counts are exact
:class:`~fractions.Fraction` where they are expectations.
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import comb
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.xp import exact, is_array

__all__ = [
    "expert_capacity",
    "capacity_rows",
    "expert_flops",
    "shared_expert_flops",
    "all_to_all_bytes",
    "distinct_nodes_distribution",
    "expected_distinct_nodes",
    "expected_remote_nodes",
    "scale_out_dispatch_bytes",
    "DEEPEP_NUM_SMS",
    "DEEPEP_NVL_PEERS",
    "DEEPEP_TOPK_IDX_BYTES",
    "DEEPEP_SOURCE_META_BYTES",
    "DEEPEP_DISPATCH_CONFIGS",
    "DEEPEP_COMBINE_CONFIGS",
    "deepep_buffer_bytes",
    "deepep_low_latency_bytes",
]


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise InputError(f"{name}: {value} must be at least 1")
    return value


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: Fraction) -> int:
    """Tokens one expert takes from one rank under a capacity factor: ``ceil(tokens·k/E · cf)``
    (Megatron-Core ``megatron/core/transformer/moe/moe_utils.py`` ``get_capacity`` with
    ``num_tokens = tokens × moe_router_topk``, as ``token_dispatcher.py`` calls it; Lepikhin et al.
    2020, GShard §2.2), in Megatron-Core's own float arithmetic: :func:`capacity_rows`.

    Raises
    ------
    InputError
        A count below 1 or a capacity factor not positive.

    Examples
    --------
    >>> expert_capacity(4096, 256, 8, Fraction(1))
    128
    >>> expert_capacity(4096, 64, 6, Fraction(5, 4))
    480
    """
    if Fraction(capacity_factor) <= 0:
        raise InputError(f"capacity_factor: {capacity_factor} must be positive")
    for name, value in (("tokens", tokens), ("experts", experts), ("top_k", top_k)):
        _positive(name, value)
    return int(capacity_rows(tokens * top_k, experts, capacity_factor))


def capacity_rows(rows: Any, experts: int, capacity_factor: Fraction) -> Any:
    """Megatron-Core's expert capacity of ``rows`` = ``T·k`` routed rows a rank, rows an expert
    takes from it: ``math.ceil((num_tokens / num_experts) * capacity_factor)`` in float64, as
    Megatron-LM d98e8a64dd ``megatron/core/transformer/moe/moe_utils.py`` ``get_capacity``
    computes it (``num_tokens = T·k``; its ``min_capacity`` is None at every MoE call site:
    ``apply_router_token_dropping`` and ``token_dispatcher.py``'s two ``get_capacity`` calls
    pass none), the capacity factor a Python float. The float product can land just above a
    whole number the exact product equals (``100 × 1.1`` is 110.00000000000001 in float64),
    and Megatron-Core then takes one row more; so does this. An int for scalars, element-wise
    for arrays of ``rows``.

    Examples
    --------
    >>> capacity_rows(32768, 256, Fraction(3, 2))  # 128 × 1.5
    192
    >>> capacity_rows(1000, 10, Fraction(11, 10))  # 100.0 × 1.1 = 110.00000000000001 → 111
    111
    """
    product = (rows / experts) * float(capacity_factor)
    return math.ceil(product) if not is_array(product) else -((-product) // 1)


def expert_flops(
    rows: Fraction | int, hidden: int, ffn_hidden: int, gated: bool = True
) -> Fraction:
    """Forward FLOPs of ``rows`` token-rows through one expert MLP of width ``ffn_hidden``:
    ``2·rows·hidden·ffn_hidden`` per matrix, 3 matrices when gated (SwiGLU: gate, up, down), else
    2 (Narayanan et al. 2021 §3's 2·m·n·k per GEMM; the backward is twice the forward). With
    padding, ``rows`` counts the padded rows: the grouped GEMM computes them.

    Examples
    --------
    >>> expert_flops(1, 7168, 2048)
    Fraction(88080384, 1)
    """
    return 2 * Fraction(rows) * hidden * ffn_hidden * (3 if gated else 2)


def shared_expert_flops(
    tokens: int, hidden: int, ffn_hidden: int, shared_experts: int = 1, gated: bool = True
) -> Fraction:
    """Forward FLOPs of the shared experts (every token, no routing, no all-to-all: DeepSeekMoE,
    Dai et al. 2024 §3.2; Megatron-Core ``moe_shared_expert_intermediate_size``, computed beside
    the routed experts and overlappable with their dispatch, ``moe_shared_expert_overlap``).

    Examples
    --------
    >>> shared_expert_flops(4096, 7168, 2048) == expert_flops(4096, 7168, 2048)
    True
    """
    return shared_experts * expert_flops(tokens, hidden, ffn_hidden, gated)


def all_to_all_bytes(rows: Any, hidden: int, bytes_per_element: Fraction | int, ep: Any) -> Any:
    """Bytes one rank sends in one dispatch (and again in the combine) of an expert all-to-all
    over ``ep`` ranks: ``rows·hidden·bytes·(ep − 1)/ep`` — the rows bound for the other ranks'
    experts under uniform routing (each of ``ep`` ranks holds ``E/ep`` experts). With padding the
    rows are ``E·C``. Dispatch in FP8 (DeepSeek-V3 §3.3: 1 byte plus scales) or BF16 (2 bytes);
    the combine in BF16. Exact for ints and Fractions, element-wise for arrays of ``rows``
    and ``ep``.

    Examples
    --------
    >>> all_to_all_bytes(32768, 7168, Fraction(2), 64)
    Fraction(462422016, 1)
    """
    if is_array(rows) or is_array(ep):  # float columns: no Fraction (an object array)
        return rows * hidden * float(bytes_per_element) * (ep - 1) / ep
    _positive("ep", ep)
    return exact(rows) * hidden * Fraction(bytes_per_element) * exact(ep - 1) / ep


def distinct_nodes_distribution(experts: int, nodes: int, top_k: int) -> list[Fraction]:
    """``P(D = d)`` for ``d = 0 … nodes``: the distinct nodes one token's ``top_k`` experts live
    on, when they are ``top_k`` different experts drawn uniformly from ``experts`` spread evenly
    over ``nodes`` nodes (``g = experts/nodes`` each). By inclusion–exclusion on the nodes missed:
    ``P(D = d) = C(N, d) · Σ_{i=0}^{d} (−1)^i · C(d, i) · C((d − i)·g, k) / C(E, k)``.

    Raises
    ------
    InputError
        ``experts`` not a multiple of ``nodes``, or ``top_k`` above ``experts``.

    Examples
    --------
    >>> distinct_nodes_distribution(4, 2, 2)  # {a1 a2 | b1 b2}: 2 of 6 pairs on one node
    [Fraction(0, 1), Fraction(1, 3), Fraction(2, 3)]
    """
    g = _per_node(experts, nodes, top_k)
    total = comb(experts, top_k)
    out = []
    for d in range(nodes + 1):
        ways = sum((-1) ** i * comb(d, i) * comb((d - i) * g, top_k) for i in range(d + 1))
        out.append(Fraction(comb(nodes, d) * ways, total))
    return out


def _per_node(experts: int, nodes: int, top_k: int) -> int:
    for name, value in (("experts", experts), ("nodes", nodes), ("top_k", top_k)):
        _positive(name, value)
    if experts % nodes:
        raise InputError(f"experts: {experts} must be a multiple of nodes = {nodes}")
    if top_k > experts:
        raise InputError(f"top_k: {top_k} must be at most experts = {experts}")
    return experts // nodes


def expected_distinct_nodes(
    experts: int, nodes: int, top_k: int, node_limit: int | None = None
) -> Fraction:
    """Expected distinct nodes a token's experts are on, uniform routing: ``N·(1 − C(E − g, k) /
    C(E, k))`` (each node missed with the hypergeometric probability of drawing all ``k`` from
    the other ``E − g`` experts). With DeepSeek-V3's node-limited routing (report §2.1.2: each
    token to at most ``M`` nodes, ``M = 4``) the count is capped: ``E[min(D, M)]`` over
    :func:`distinct_nodes_distribution` — the cap applied to uniform routing's count (the
    router's own choice among the M nodes is not modelled).

    The nodes are any even split of the experts into groups: DeepEP's nodes, HybridEP's NVLink
    domains, or the ``ep`` ranks of ``E/ep`` experts each, whose count is the distinct ranks a
    token is sent to once each (:func:`model.moe_dispatch.dispatch_copies`).

    Examples
    --------
    >>> expected_distinct_nodes(4, 2, 2)
    Fraction(5, 3)
    """
    g = _per_node(experts, nodes, top_k)
    if node_limit is None:
        return nodes * (1 - Fraction(comb(experts - g, top_k), comb(experts, top_k)))
    _positive("node_limit", node_limit)
    dist = distinct_nodes_distribution(experts, nodes, top_k)
    return sum((min(d, node_limit) * p for d, p in enumerate(dist)), Fraction(0))


def expected_remote_nodes(
    experts: int, nodes: int, top_k: int, node_limit: int | None = None
) -> Fraction:
    """Expected nodes other than its own a token is sent to, de-duplicated: ``E[D]·(N − 1)/N``
    (by symmetry each node a token reaches is its own with probability ``1/N``); the count of
    copies crossing the scale-out network when a token routed to several experts of one node is
    sent to that node once and forwarded over NVLink (DeepEP's internode dispatch:
    ``csrc/kernels/legacy/internode.cu``, RDMA to the node, then NVLink within it; DeepSeek-V3
    report §3.2.2).

    Examples
    --------
    >>> expected_remote_nodes(4, 2, 2)
    Fraction(5, 6)
    """
    return expected_distinct_nodes(experts, nodes, top_k, node_limit) * Fraction(nodes - 1, nodes)


def scale_out_dispatch_bytes(
    tokens: int,
    hidden_bytes: Fraction | int,
    experts: int,
    nodes: int,
    top_k: int,
    dedup: bool = True,
    node_limit: int | None = None,
) -> Fraction:
    """Bytes one rank's ``tokens`` send over the scale-out links in one dispatch, uniform
    routing over an expert-parallel group of ``nodes`` nodes: de-duplicated, ``tokens ·
    E[remote nodes] · hidden_bytes`` (:func:`expected_remote_nodes`); without de-duplication
    every remote expert copy goes by itself, ``tokens · k·(E − g)/E · hidden_bytes``.

    Raises
    ------
    InputError
        ``node_limit`` without ``dedup`` (the limit is DeepSeek-V3's, with its de-duplicated
        dispatch).

    Examples
    --------
    >>> scale_out_dispatch_bytes(1, 1, 4, 2, 2, dedup=False)
    Fraction(1, 1)
    """
    g = _per_node(experts, nodes, top_k)
    if not dedup:
        if node_limit is not None:
            raise InputError("node_limit: node-limited routing is modelled with dedup=True")
        return tokens * Fraction(hidden_bytes) * Fraction(top_k * (experts - g), experts)
    return (
        tokens * Fraction(hidden_bytes) * expected_remote_nodes(experts, nodes, top_k, node_limit)
    )


# ------------------------------------------------------------------ DeepEP buffers
DEEPEP_NUM_SMS = 20
"""``deep_ep.Buffer.num_sms``, the SMs of the high-throughput kernels (``deep_ep/buffers/
legacy.py``, deepseek-ai/DeepEP dd758ca); two per channel."""

DEEPEP_WORKSPACE_BYTES = 32 << 20
"""``LEGACY_NUM_WORKSPACE_BYTES`` (``csrc/kernels/legacy/compiled.cuh``, DeepEP dd758ca): the
workspace the legacy ``Buffer`` constructor allocates with ``cudaMalloc`` on every rank,
whatever its group (``csrc/legacy/buffer.hpp``, "Create 32 MiB workspace")."""

DEEPEP_NVL_PEERS = 8
"""``LEGACY_NUM_MAX_NVL_PEERS`` (``csrc/kernels/legacy/compiled.cuh``, DeepEP dd758ca; the legacy
``Buffer`` asserts it is 8, ``csrc/legacy/buffer.hpp``): the ranks of a group the normal kernels
reach over NVLink. A group of more than 8 ranks is split into runs of 8 consecutive ranks
(``rdma_rank = rank / 8``, ``nvl_rank = rank % 8``) and runs the internode kernels between them,
whatever the NVLink domain (:attr:`model.moe_run.Dispatcher.nvlink_ranks`)."""
_MAX_TOPK = _MAX_SCALES = 128  # kNumMaxTopK, kNumMaxScales, csrc/legacy/config.hpp
DEEPEP_TOPK_IDX_BYTES = 8
"""``sizeof(topk_idx_t)``: int64 (``EP_NUM_TOPK_IDX_BITS`` 64 by default,
``deep_ep/include/deep_ep/common/compiled.cuh``, DeepEP dd758ca)."""
DEEPEP_SOURCE_META_BYTES = 8
"""``sizeof(SourceMeta)``: two ints a token row across nodes (``csrc/kernels/legacy/
internode.cu``, DeepEP dd758ca)."""
_ALIGN = 128  # LEGACY_NUM_BUFFER_ALIGNMENT_BYTES

DEEPEP_DISPATCH_CONFIGS = {
    2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128), 16: (36, 288, 20, 128),
    24: (32, 288, 8, 128), 32: (32, 288, 8, 128), 48: (32, 288, 8, 128), 64: (32, 288, 8, 128),
    96: (20, 480, 12, 128), 128: (20, 560, 12, 128), 144: (32, 720, 12, 128),
    160: (28, 720, 12, 128),
}  # fmt: skip
"""``Buffer.get_dispatch_config(num_ranks)``: (NVL send, NVL receive, RDMA send, RDMA receive)
chunked tokens per channel, by EP ranks (``deep_ep/buffers/legacy.py``)."""

DEEPEP_COMBINE_CONFIGS = {
    2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128), 16: (4, 288, 12, 128),
    24: (1, 288, 8, 128), 32: (1, 288, 8, 128), 48: (1, 288, 8, 128), 64: (1, 288, 8, 128),
    96: (1, 480, 8, 128), 128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128),
}  # fmt: skip
"""``Buffer.get_combine_config(num_ranks)``, as :data:`DEEPEP_DISPATCH_CONFIGS`."""


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _nvl_hint(hidden_bytes: int, ep: int, recv: int, num_sms: int) -> int:
    """``Config::get_nvl_buffer_size_hint`` (``csrc/legacy/config.hpp``)."""
    rdma, nvl, channels = (
        max(ep // DEEPEP_NVL_PEERS, 1),
        min(ep, DEEPEP_NVL_PEERS),
        num_sms // 2,
    )
    per_token = (
        hidden_bytes
        + DEEPEP_SOURCE_META_BYTES
        + _MAX_TOPK * DEEPEP_TOPK_IDX_BYTES
        + _MAX_TOPK * 4
        + _MAX_SCALES * 4
    )
    return _align(channels * nvl * ((2 * rdma + 3) * 4 + recv * per_token))


def _rdma_hint(hidden_bytes: int, ep: int, send: int, recv: int, num_sms: int) -> int:
    """``Config::get_rdma_buffer_size_hint``: 0 within one node, else double-buffered chunks."""
    if ep <= DEEPEP_NVL_PEERS:
        return 0
    rdma, channels = ep // DEEPEP_NVL_PEERS, num_sms // 2
    recv = -(-recv // send) * send  # the Config constructor aligns the receive chunk up to send
    per_token = 2 * (
        hidden_bytes
        + DEEPEP_SOURCE_META_BYTES
        + _MAX_TOPK * DEEPEP_TOPK_IDX_BYTES
        + _MAX_TOPK * 4
        + _MAX_SCALES * 4
        + 16
    )
    return _align(channels * rdma * ((DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4 + recv * per_token))


def deepep_buffer_bytes(
    hidden: int, ep: int, bytes_per_element: int = 2, num_sms: int = DEEPEP_NUM_SMS
) -> tuple[int, int]:
    """(``num_nvl_bytes``, ``num_rdma_bytes``) of DeepEP's normal-mode ``Buffer`` on each rank of
    an expert-parallel group of ``ep`` ranks: the larger of the dispatch and combine configs'
    size hints for ``hidden_bytes = hidden · max(bytes_per_element, 2)`` — DeepEP
    ``docs/legacy.md`` ``get_buffer``, and Megatron-Core's DeepEP path the same
    (``megatron/core/transformer/moe/fused_a2a.py`` ``get_buffer``). Resident GPU memory for the
    whole run, whatever the tokens (the kernels stream tokens through these chunked buffers);
    ``num_rdma_bytes`` is 0 within one node (``ep <= 8``).

    Raises
    ------
    InputError
        An ``ep`` DeepEP has no config for.

    Examples
    --------
    >>> deepep_buffer_bytes(7168, 64)  # DeepSeek-V3's hidden size, EP 64
    (377677824, 336047360)
    """
    if ep not in DEEPEP_DISPATCH_CONFIGS:
        raise InputError(
            f"ep: {ep} has no DeepEP config (Buffer.get_dispatch_config supports "
            f"{', '.join(map(str, DEEPEP_DISPATCH_CONFIGS))})"
        )
    hidden_bytes = hidden * max(bytes_per_element, 2)
    nvl = rdma = 0
    for configs in (DEEPEP_DISPATCH_CONFIGS, DEEPEP_COMBINE_CONFIGS):
        _, nvl_recv, rdma_send, rdma_recv = configs[ep]
        nvl = max(nvl, _nvl_hint(hidden_bytes, ep, nvl_recv, num_sms))
        rdma = max(rdma, _rdma_hint(hidden_bytes, ep, rdma_send, rdma_recv, num_sms))
    return nvl, rdma


def deepep_low_latency_bytes(max_tokens_per_rank: int, hidden: int, experts: int) -> int:
    """``num_rdma_bytes`` of DeepEP's low-latency ``Buffer``
    (``Buffer.get_low_latency_rdma_size_hint``; ``csrc/legacy/config.hpp`` ``LowLatencyLayout``):
    two send, two receive and two signalling buffers, a dispatch message ``16 + max(2·hidden,
    hidden + hidden/128·4)`` bytes and a combine message ``hidden/128·4 + 2·hidden`` bytes,
    receive buffers for every expert's ``max_tokens_per_rank``; then rounded as DeepEP rounds it
    (adding 128 before flooring to 128). It grows with the tokens and the experts.

    Raises
    ------
    InputError
        ``hidden`` not a multiple of 128, a count below 1.

    Examples
    --------
    >>> deepep_low_latency_bytes(128, 7168, 256)
    1908410496
    """
    for name, value in (
        ("max_tokens_per_rank", max_tokens_per_rank),
        ("hidden", hidden),
        ("experts", experts),
    ):
        _positive(name, value)
    if hidden % 128:
        raise InputError(f"hidden: {hidden} must be a multiple of 128 (DeepEP's per-128 scales)")
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(max_tokens_per_rank * dispatch_msg, experts * max_tokens_per_rank * combine_msg)
    recv = max(
        experts * max_tokens_per_rank * dispatch_msg, experts * max_tokens_per_rank * combine_msg
    )
    signalling = _align(experts * 4)
    total = 2 * send + 2 * recv + 2 * signalling
    return (total + _ALIGN) // _ALIGN * _ALIGN
