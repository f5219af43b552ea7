"""DeepSpeed ZeRO-3's parameter all-gathers in one pass: how many calls, as its fetch
coordinator issues them.

DeepSpeed 38327e07 ``deepspeed/runtime/zero/partitioned_param_coordinator.py``
``PartitionedParameterCoordinator.fetch_sub_module`` runs before each submodule's forward and
backward (``parameter_offload.py`` ``pre_sub_module_forward_function`` /
``pre_sub_module_backward_function``). It gathers the submodule's own parameters that are not
yet available in one ``all_gather_coalesced`` (``__all_gather_params_``), then, once the step's
trace is complete, prefetches the parameters the trace needs next: it pops them off
``__param_queue`` while ``numel_prefetching < min(max_live − available, prefetch_bucket_sz)``
and gathers those not yet available in one more ``all_gather_coalesced``, so a prefetch closes
at the first parameter that takes it to ``stage3_prefetch_bucket_size`` elements or past it
(:data:`DEEPSPEED_PREFETCH_ELEMENTS`; ``ds_numel``, the parameter's whole element count on
this tensor-parallel rank). While the pass's parameters fit ``stage3_max_live_parameters``
(:data:`DEEPSPEED_MAX_LIVE_ELEMENTS`) the prefetches run ahead in calls of at least a bucket;
beyond it each prefetch may take only what the previous submodule released
(``release_sub_module`` → ``__release_param``), about one parameter: one call each.
Parameters of at most ``stage3_param_persistence_threshold`` elements
(:data:`DEEPSPEED_PERSISTENCE_ELEMENTS`; norms, most biases) are never partitioned
(``parameter_offload.py`` ``mark_persistent_parameters``: ``ds_persist``) and never gathered.
The three defaults are ``zero/config.py`` ``DeepSpeedZeroConfig``'s.

The submodules are Megatron-DeepSpeed's (microsoft/Megatron-DeepSpeed f4157bea
``megatron/model/transformer.py``): ``ParallelAttention.query_key_value`` (the fused Q, K, V
projection) and ``dense``, ``ParallelMLP.dense_h_to_4h`` (gate and up fused when gated) and
``dense_4h_to_h``, each weight split over tp; a MoE layer's ``TopKGate.wg`` router and each
local expert's two linears (DeepSpeed ``deepspeed/moe/experts.py`` ``Experts``: a copy of the
expert MLP per local expert), the experts' gathered over the expert data-parallel group.
Pure functions over ints.
"""

from __future__ import annotations

from functools import lru_cache

from trainplan.model.params import attention_params
from trainplan.model.specs import Architecture, AttentionKind

__all__ = [
    "DEEPSPEED_PREFETCH_ELEMENTS",
    "DEEPSPEED_MAX_LIVE_ELEMENTS",
    "DEEPSPEED_PERSISTENCE_ELEMENTS",
    "layer_fetches",
    "pass_gathers",
    "deepspeed_gather_calls",
]

DEEPSPEED_PREFETCH_ELEMENTS = 50_000_000
"""``stage3_prefetch_bucket_size`` default, elements (DeepSpeed 38327e07 ``zero/config.py``
``DeepSpeedZeroConfig.prefetch_bucket_size = Field(pp_int(5e7), alias=
"stage3_prefetch_bucket_size")``)."""

DEEPSPEED_MAX_LIVE_ELEMENTS = 1_000_000_000
"""``stage3_max_live_parameters`` default, elements (same place: ``max_live_parameters =
Field(pp_int(1e9))``)."""

DEEPSPEED_PERSISTENCE_ELEMENTS = 100_000
"""``stage3_param_persistence_threshold`` default, elements (same place:
``param_persistence_threshold = Field(pp_int(1e5))``); a parameter of at most this many
elements stays whole on every rank."""


def layer_fetches(arch: Architecture, tp: int, etp: int, ep: int) -> tuple[tuple[int, ...], ...]:
    """Elements on one GPU of each weight a layer's submodules fetch, in forward order: (a dense
    layer's, a MoE layer's dense group's, a MoE layer's experts'). Dense: the fused QKV
    projection ``h·(a + 2g)·d / tp``, the output projection ``a·d·h / tp`` (MLA: its
    projections less the output one, then the output ``a·d_v·h / tp``), the FFN's first linear
    ``h·f·(2 if gated else 1) / tp`` and its second ``f·h / tp``. A MoE layer: the attention's,
    the shared experts' FFN (if any), the router ``h·E``; its experts: each of the ``E / ep``
    local experts' two linears over ``etp``. Biases and norms are left out: below
    :data:`DEEPSPEED_PERSISTENCE_ELEMENTS` they are never gathered.

    Llama 3 405B (h 16384, 128 heads of 128, 8 KV heads, f 53248, SwiGLU) at tp 4:

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> layer_fetches(arch, 4, 4, 1)[0]  # 16384·(128 + 16)·128 / 4, 16384² / 4, 2·16384·53248 / 4, …
    (75497472, 67108864, 436207616, 218103808)
    """
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        out = a * arch.mla.v_head_dim * h
        attention = ((attention_params(arch) - out) // tp, out // tp)
    else:
        d, g = arch.dim_per_head, arch.kv_heads
        attention = (h * (a + 2 * g) * d // tp, a * d * h // tp)
    gate = 2 if arch.mlp.gated else 1

    def ffn(f: int, over: int) -> tuple[int, int]:
        return h * f * gate // over, f * h // over

    dense = attention + ffn(arch.ffn_hidden_size, tp)
    moe = arch.moe
    if moe is None:
        return dense, dense, ()
    shared = moe.num_shared_experts * (
        moe.shared_expert_ffn_hidden_size or moe.expert_ffn_hidden_size
    )
    moe_dense = attention + (ffn(shared, tp) if shared else ()) + (h * moe.num_experts,)
    experts = ffn(moe.expert_ffn_hidden_size, etp) * (moe.num_experts // ep)
    return dense, moe_dense, experts


@lru_cache(maxsize=4096)
def pass_gathers(
    weights: tuple[int, ...],
    layers: int,
    bucket: int = DEEPSPEED_PREFETCH_ELEMENTS,
    live: int = DEEPSPEED_MAX_LIVE_ELEMENTS,
    persist: int = DEEPSPEED_PERSISTENCE_ELEMENTS,
) -> int:
    """All-gather calls of one pass over ``layers`` layers whose submodules fetch ``weights``
    (elements on one GPU, in fetch order; see the module docstring): the weights of more than
    ``persist`` elements, greedily in prefetches that close at ``bucket`` or past it while the
    pass's gathered weights fit ``live``, else one call each. At least 1 where any is
    gathered; 0 where none is.

    Examples
    --------
    Llama 3 405B at tp 4 (:func:`layer_fetches`), its 126 layers, 101.8e9 elements, far
    beyond 1e9 live: 4 calls a layer. Llama 3 8B at tp 8 on a stage of 8 layers: QKV
    3,145,728, output 2,097,152, gate-up 14,680,064, down 7,340,032 elements, 27,262,976 a
    layer, 218e6 in all (within 1e9): a prefetch closes at the second layer's down projection
    (54,525,952 ≥ 5e7), so every second layer, 4 calls in all.

    >>> pass_gathers((75497472, 67108864, 436207616, 218103808), 126)
    504
    >>> pass_gathers((3145728, 2097152, 14680064, 7340032), 8)
    4
    >>> pass_gathers((50_000,), 10), pass_gathers((), 4)
    (0, 0)
    """
    gathered = [n for n in weights if n > persist]
    if not gathered or layers <= 0:
        return 0
    if layers * sum(gathered) > live:
        return layers * len(gathered)
    calls, open_ = 0, 0
    for _ in range(layers):
        for n in gathered:
            open_ += n
            if open_ >= bucket:
                calls, open_ = calls + 1, 0
    return calls + (1 if open_ else 0)


def deepspeed_gather_calls(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int
) -> tuple[int, int]:
    """(dense group's, experts' group's) all-gather calls of one pass of DeepSpeed ZeRO-3 over
    a stage of ``layers`` layers, ``moe_layers`` of them MoE (:func:`pass_gathers` of
    :func:`layer_fetches`), each at least 1. The embedding and output layer (one weight each
    on the stages that hold them) are left out: their bytes ride in the layers' calls.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> deepspeed_gather_calls(arch, 4, 4, 1, 126, 0)
    (504, 1)
    """
    tp, etp, ep, layers, moe_layers = (int(x) for x in (tp, etp, ep, layers, moe_layers))
    dense, moe_dense, experts = layer_fetches(arch, tp, etp, ep)
    if moe_layers:
        d = pass_gathers(dense * (layers - moe_layers) + moe_dense * moe_layers, 1)
    else:
        d = pass_gathers(dense, layers)
    return max(d, 1), max(pass_gathers(experts, moe_layers), 1)
