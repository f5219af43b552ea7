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

**The embedding, the output weight and the reuse distance** (:func:`step_fetches`). The step's
trace is one micro-batch's forward then backward (``reset_step`` at the root module's forward,
``parameter_offload.py`` ``_start_of_forward_hook``), the backward's modules in reverse order.

* The output weight: Megatron-DeepSpeed's ``GPTModel.forward`` (4efb479d
  ``megatron/model/gpt_model.py`` ``post_language_model_processing``) reads
  ``language_model.output_layer.weight`` (untied) or the word embeddings (tied) in the root
  module's own forward, so ``ZeROOrderedDict.__getitem__`` registers it as an external
  parameter of the root module (``register_external_parameter``, which does not set
  ``is_external_param``): from then on the root module's fetch, the first of the trace, gathers
  it, and its release at the end of the forward keeps it (the root module's backward, the first
  of the backward, lies within any reuse distance). The root module's post-backward hook never
  runs (``_post_backward_module_hook`` counts only inputs that require grad; token ids do not),
  so the weight stays gathered until the optimizer step's ``_partition_all_parameters``
  (``stage3.py`` ``step``): one gather a step. The tied embedding is that weight, also held by
  the root module's ``ds_active_sub_modules`` while the embedding runs
  (``__release_param`` frees only a parameter no active module holds): one gather a step.
* The untied input embedding (and learned positions: ``Embedding.position_embeddings``) is
  freed after its forward like any module, gathered again for its backward, and never freed
  after that backward (its inputs are token ids: no post-backward): the next micro-batch's
  forward finds it gathered. One gather in the step's first forward and one in every backward.
* ``__params_to_release``: a module's parameters are not freed after its forward when one of
  the modules the trace runs next, scanned until ``stage3_max_reuse_distance`` elements
  (:data:`model.deepspeed_gathered.DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS`; each scanned module's
  ``ds_numel``, the root module's being the output weight) have passed, uses them again: a
  weight w of the forward is kept into its backward, and not gathered there, when
  2·F(w) + O < R, F(w) the elements the forward runs after w and O the output weight. The
  persistent parameters' elements (norms, biases) are left out of F (≈ 2h a layer).
* The prefetcher also keeps a weight whose later use it popped while the weight was still
  gathered (``__most_recent_step_id_param_fetched_for``); with the default distance and live
  limit (both 1e9) that adds nothing: a weight the distance does not keep has O ≥ R − 2·F(w),
  and O held gathered already fills the live limit, which stops the prefetches.

Pure functions over ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from trainplan.model.deepspeed_gathered import DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS
from trainplan.model.params import attention_params
from trainplan.model.specs import Architecture, AttentionKind, PositionEmbedding

__all__ = [
    "DEEPSPEED_PREFETCH_ELEMENTS",
    "DEEPSPEED_MAX_LIVE_ELEMENTS",
    "DEEPSPEED_PERSISTENCE_ELEMENTS",
    "layer_fetches",
    "pass_gathers",
    "head_fetches",
    "step_fetches",
    "deepspeed_gather_calls",
    "deepspeed_unfetched",
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


def head_fetches(arch: Architecture, tp: int) -> tuple[int, tuple[int, ...]]:
    """(the output weight, the input embedding's weights): elements on one GPU. The output weight
    ⌈V/tp⌉·h (Megatron-DeepSpeed's vocab-parallel ``output_layer``; the word embeddings when
    tied); the embedding's word embeddings ⌈V/tp⌉·h (``VocabParallelEmbedding``; none when tied:
    they are the output weight) and learned positions s_max·h (``position_embeddings``, whole
    on every tp rank), in forward order. The ``deepspeed`` profile does not pad V
    (:data:`model.vocab.VOCAB_MULTIPLE`).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu")
    >>> head_fetches(arch, 4)  # 32,064 rows of 4,096
    (131334144, (131334144,))
    """
    h = arch.hidden_size
    rows = -(-arch.vocab_size // tp) * h
    words = () if arch.tie_embeddings else (rows,)
    learned = arch.position_embedding is PositionEmbedding.LEARNED
    positions = (int(arch.max_position_embeddings or 0) * h,) if learned else ()
    return rows, words + positions


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
    gathered = tuple(n for n in weights if n > persist) * max(layers, 0)
    return _calls(gathered, sum(gathered), bucket, live)


def _calls(weights: Sequence[int], held: int, bucket: int, live: int) -> int:
    """Calls gathering ``weights`` in fetch order: greedy prefetches closed at ``bucket`` or
    past it, or one a weight where ``held`` elements (the pass's and those it found gathered)
    pass ``live``."""
    if held > live:
        return len(weights)
    calls, open_ = 0, 0
    for n in weights:
        open_ += n
        if open_ >= bucket:
            calls, open_ = calls + 1, 0
    return calls + (1 if open_ else 0)


@lru_cache(maxsize=4096)
def step_fetches(
    arch: Architecture,
    tp: int,
    etp: int,
    ep: int,
    layers: int,
    moe_layers: int,
    reuse: int = DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS,
    bucket: int = DEEPSPEED_PREFETCH_ELEMENTS,
    live: int = DEEPSPEED_MAX_LIVE_ELEMENTS,
    persist: int = DEEPSPEED_PERSISTENCE_ELEMENTS,
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int], tuple[int, int]]:
    """DeepSpeed ZeRO-3's gathers of one micro-batch (forward and backward) of a model of
    ``layers`` layers, the last ``moe_layers`` of them MoE, with its embedding and output weight
    (pp 1): ((dense calls, experts' calls, dense elements, experts' elements) of the step's
    first micro-batch, the same of each later one, (dense, experts' elements a pass fetches
    whole)). Elements on one GPU (:func:`layer_fetches`, :func:`head_fetches`); calls by
    :func:`pass_gathers`' rule per pass, the held elements counting against ``live``. The
    module docstring says what is kept and for how long (``reuse``:
    ``stage3_max_reuse_distance``).

    Examples
    --------
    Llama 3 8B at tp 4: the output weight 131,334,144 elements, a layer 54,525,952. The
    forward keeps the weights w with 2·F(w) + 131,334,144 < 1e9, F(w) < 434,332,928: the last
    seven layers (F ≤ 381,681,664 + the layer's own later weights) and layer 24's QKV (F =
    381,681,664 + 4,194,304 + 29,360,128 + 14,680,064 = 429,916,160), so the last eight layers'
    32 weights; layer 23's down projection has F = 8·54,525,952 = 436,207,616. The first
    micro-batch: 2 + 128 calls forward (the output weight, the embedding, one a weight: the
    pass is beyond 1e9 live), 128 − 32 + 1 backward; a later one 128 + 97.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu")
    >>> first, later, whole = step_fetches(arch, 4, 4, 1, 32, 0)
    >>> first[0], later[0]
    (227, 225)
    """
    sizes, forward, backward, heads = _trace(arch, tp, etp, ep, layers, moe_layers)
    frees = _forward_frees(sizes, forward, backward, reuse)
    rule = sizes, forward, backward, heads, frees, bucket, live, persist
    first, held = _micro_batch(set(), *rule)
    later, _ = _micro_batch(held, *rule)
    whole = [0, 0]
    for n, g in sizes:
        whole[g] += n if n > persist else 0
    return first, later, (whole[0], whole[1])


Trace = tuple[list[tuple[int, int]], list[int], list[int], int]
"""(elements and group of each parameter by id, the forward's modules, the backward's, how many
of the forward's first modules are the root module's and the embedding's), each module one
parameter id; id 0 the output weight."""


def _trace(arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int) -> Trace:
    """The trace of :func:`step_fetches`: the root module (the output weight), the word
    embeddings (the output weight again when tied), learned positions, then the layers' weights
    (group 1 the routed experts'); the backward the root module, then the rest reversed."""
    out, embedding = head_fetches(arch, tp)
    dense, moe_dense, experts = layer_fetches(arch, tp, etp, ep)
    sizes: list[tuple[int, int]] = [(out, 0), *((n, 0) for n in embedding)]
    emb = list(range(1, len(sizes)))
    body: list[int] = []
    for j in range(layers):
        moe = j >= layers - moe_layers
        weights = [(n, 0) for n in (moe_dense if moe else dense)]
        weights += [(n, 1) for n in experts] if moe else []
        body += range(len(sizes), len(sizes) + len(weights))
        sizes += weights
    heads = [0, 0, *emb] if arch.tie_embeddings else [0, *emb]
    return sizes, heads + body, [0, *body[::-1], *heads[:0:-1]], len(heads)


def _forward_frees(
    sizes: list[tuple[int, int]], forward: list[int], backward: list[int], reuse: int
) -> list[bool]:
    """Whether each forward module's parameter is freed at its release: not where the trace
    uses it again before ``reuse`` elements of the modules after it have passed
    (``__params_to_release``; the root module's release is at the forward's end), nor the
    output weight while the root module holds it (a tied word embedding)."""
    trace = forward + backward
    ends, after = [0], [len(trace)] * len(trace)
    seen: dict[int, int] = {}
    for pid in trace:
        ends.append(ends[-1] + sizes[pid][0])
    for k in range(len(trace) - 1, -1, -1):
        after[k], seen[trace[k]] = seen.get(trace[k], len(trace)), k
    frees = []
    for k, pid in enumerate(forward):
        start = len(forward) if k == 0 else k + 1
        kept = after[k] < len(trace) and ends[after[k]] - ends[start] < reuse
        frees.append(not kept and not (k and pid == 0))
    return frees


def _micro_batch(
    held: set[int],
    sizes: list[tuple[int, int]],
    forward: list[int],
    backward: list[int],
    heads: int,
    frees: list[bool],
    bucket: int,
    live: int,
    persist: int,
) -> tuple[tuple[int, int, int, int], set[int]]:
    """(dense calls, experts' calls, dense elements, experts' elements) one micro-batch gathers
    starting with ``held`` gathered, and what it leaves gathered: each pass gathers what is not
    held; the forward frees as ``frees`` says (the root module at its end), the backward every
    layer weight (the forward's first ``heads`` modules, the root module's and the embedding's,
    have no post-backward)."""
    calls, elements = [0, 0], [0, 0]
    kept = set(forward[:heads])
    for modules, forward_pass in ((forward, True), (backward, False)):
        carried = sum(sizes[i][0] for i in held)
        got: list[int] = []
        for k, pid in enumerate(modules):
            if pid not in held and sizes[pid][0] > persist:
                got.append(pid)
                held.add(pid)
            if (frees[k] and k > 0) if forward_pass else pid not in kept:
                held.discard(pid)
        if forward_pass and frees[0]:  # the root module's release, at the forward's end
            held.discard(0)
        total = carried + sum(sizes[i][0] for i in got)
        for g in (0, 1):
            mine = [sizes[i][0] for i in got if sizes[i][1] == g]
            calls[g] += _calls(mine, total, bucket, live)
            elements[g] += sum(mine)
    return (calls[0], calls[1], elements[0], elements[1]), held


def deepspeed_gather_calls(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int, m: int = 1
) -> tuple[float, float]:
    """(dense group's, experts' group's) all-gather calls of DeepSpeed ZeRO-3 per pass, the mean
    over a step of ``m`` micro-batches of their forward and backward passes
    (:func:`step_fetches`: the output weight and the embedding, the weights the reuse distance
    keeps), each at least 1.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> deepspeed_gather_calls(arch, 4, 4, 1, 126, 0)  # (506 + 503) / 2
    (504.5, 1.0)
    """
    first, later, _ = step_fetches(arch, *(int(x) for x in (tp, etp, ep, layers, moe_layers)))
    m = int(m)
    return tuple(  # type: ignore[return-value]
        max((first[g] + (m - 1) * later[g]) / (2 * m), 1.0) for g in (0, 1)
    )


def deepspeed_unfetched(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int, m: int = 1
) -> tuple[float, float]:
    """(dense, experts') elements on one GPU a micro-batch of DeepSpeed ZeRO-3 does not gather,
    the mean over a step of ``m`` micro-batches, against both passes gathering every fetched
    weight (:func:`model.comm.dp_bytes`' count): the output weight after the step's first
    forward, the embedding in the later forwards, the weights kept from the forward into the
    backward (:func:`step_fetches`).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> deepspeed_unfetched(arch, 4, 4, 1, 126, 0)  # the output and last down and gate-up once
    (1179648000.0, 0.0)
    """
    first, later, whole = step_fetches(arch, *(int(x) for x in (tp, etp, ep, layers, moe_layers)))
    m = int(m)
    return tuple(  # type: ignore[return-value]
        2 * whole[g] - (first[2 + g] + (m - 1) * later[2 + g]) / m for g in (0, 1)
    )
