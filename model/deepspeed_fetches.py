"""DeepSpeed ZeRO-3's parameter all-gathers in one micro-batch: how many launches, and how many
elements, as its fetch coordinator issues them over Megatron-DeepSpeed's modules.

The coordinator's rule is :func:`model.deepspeed_coordinator.walk` (DeepSpeed 38327e07
``partitioned_param_coordinator.py``, lines cited there); this module builds the trace it walks
(:func:`module_trace`) and reads the walk per micro-batch (:func:`step_fetches`), per pass
(:func:`deepspeed_gather_calls`) and as the elements not gathered (:func:`deepspeed_unfetched`).
The defaults are ``zero/config.py`` ``DeepSpeedZeroConfig``'s (:208–237); the ``deepspeed``
profile sets no other.

What the walk finds. Every hooked module's fetch prefetches up to
``min(stage3_max_live_parameters − n_available, stage3_prefetch_bucket_size)`` elements, whole
parameters, and ``n_available`` counts the prefetched parameters from their launch (:484): with
ten hooked modules a layer each taking up to 5e7 elements, the look-ahead grows until
``n_available`` reaches 1e9 (the output weight and a held embedding count in it), and from then
on a prefetch finds room only after a release, the room what was released less what the last
prefetch took past the limit, capped at the bucket. So a pass is neither one launch per weight
nor one per 5e7 bucket: Llama 3 8B tp 1 takes 3 launches a layer ([QKV, output projection],
[gate-up], [down]), 70B tp 4 two ([QKV, output, gate-up] closing at 5e7, [down]), 70B tp 8
three; weights each above 5e7 (405B tp 4) one each.

**The embedding, the output weight and the reuse distance** (the trace's ends).

* The output weight: Megatron-DeepSpeed's ``GPTModel.forward`` (``megatron/model/gpt_model.py``
  ``post_language_model_processing``) reads ``language_model.output_layer.weight`` (untied) or
  the word embeddings (tied) in the root module's own forward, so ``ZeROOrderedDict.__getitem__``
  registers it as an external parameter of the root module (``register_external_parameter``,
  which does not set ``is_external_param``): the root module's fetch, the first of the trace,
  gathers it; its release at the end of the forward keeps it (the root module's backward, the
  next step, uses it); the root module's post-backward never runs (``_post_backward_module_hook``
  counts only inputs that require grad; token ids do not), so it stays gathered until the
  optimizer step's ``release_and_reset_all``: one gather a step.
* The untied input embedding (and learned positions) is freed after its forward, gathered again
  for its backward and never freed after it (no post-backward): the next micro-batch's forward
  finds it gathered, and it counts in ``n_available`` until that forward frees it.
* ``__params_to_release`` keeps a forward weight whose backward lies within
  ``stage3_max_reuse_distance`` elements of the trace
  (:data:`model.deepspeed_gathered.DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS`), and one whose later
  use the prefetcher popped while it was gathered.

Parameters of at most ``stage3_param_persistence_threshold`` elements
(:data:`DEEPSPEED_PERSISTENCE_ELEMENTS`; norms, most biases) are never partitioned
(``parameter_offload.py`` ``mark_persistent_parameters``) and never gathered. Activation
recomputation's second forward is not in the trace (a limit of this count). DeepSpeed refuses MoE
under ZeRO-3 (``engine.py`` :1675, :func:`model.moe_rules.check_deepspeed_moe`); the experts'
group is counted for completeness.

Pure functions over ints.
"""

from __future__ import annotations

from functools import lru_cache

from trainplan.model.deepspeed_coordinator import State, Trace, walk, walk_held
from trainplan.model.deepspeed_gathered import DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS
from trainplan.model.params import attention_params
from trainplan.model.specs import Architecture, AttentionKind, Norm, PositionEmbedding

__all__ = [
    "DEEPSPEED_PREFETCH_ELEMENTS",
    "DEEPSPEED_MAX_LIVE_ELEMENTS",
    "DEEPSPEED_PERSISTENCE_ELEMENTS",
    "layer_fetches",
    "head_fetches",
    "module_trace",
    "step_fetches",
    "gathered_envelope",
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


Node = tuple[int, tuple[int, ...], tuple["Node", ...], bool, bool]
"""A hooked module: (its id, its parameter ids, its children in call order, whether its
backward runs ``fetch_sub_module`` (an output that requires grad), whether it runs
``release_sub_module`` after its backward (an input that requires grad))."""

Event = tuple[bool, int, tuple[int, ...]]


def _events(node: Node, forward: bool, out: list[Event]) -> None:
    """Append ``node``'s events, forward (pre-forward, children, post-forward) or backward
    (pre-backward, children reversed, post-backward)."""
    module, params, children, pre, post = node
    if forward or pre:
        out.append((True, module, params))
    for child in children if forward else children[::-1]:
        _events(child, forward, out)
    if params and (forward or post):
        out.append((False, module, params))


@lru_cache(maxsize=4096)
def module_trace(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int
) -> Trace:
    """One micro-batch's hooked modules of Megatron-DeepSpeed's GPTModel (pp 1) over ``layers``
    layers, the last ``moe_layers`` of them MoE (f4157bea ``megatron/model/gpt_model.py``,
    ``language_model.py``, ``transformer.py``): the root module (its external parameter the
    output weight, :func:`head_fetches`), ``language_model``, ``embedding``
    (``word_embeddings``, the output weight when tied; learned ``position_embeddings``;
    ``embedding_dropout``), RoPE's ``rotary_pos_emb``, ``encoder``: each
    ``ParallelTransformerLayer`` (``input_layernorm``, ``self_attention`` with
    ``query_key_value``, ``core_attention_flash`` and ``dense``, ``post_attention_layernorm``,
    ``mlp`` with ``dense_h_to_4h`` and ``dense_4h_to_h``; a MoE layer's shared experts' MLP,
    ``gate.wg`` and each local expert's MLP), ``final_layernorm``. Weights by
    :func:`layer_fetches`; each norm's weight (and a LayerNorm's bias) h, each linear's bias
    (``linear_bias``) its output width, all persistent at the default threshold. The modules
    whose inputs are token ids (root, ``language_model``, ``embedding`` and its tables) have no
    post-backward; ``rotary_pos_emb`` (cos, sin) none in the backward. The backward mirrors the
    forward (autograd reaches a container's output before its children's).

    Llama 3 8B at tp 1: 10 forward fetches a layer (the layer, 2 norms, the attention box, QKV,
    core attention, dense, the MLP box, its 2 linears), 8 at the front and end (root,
    language model, embedding, word embeddings, dropout, rotary, encoder, final norm); the
    backward has no rotary.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> t = module_trace(arch, 1, 1, 1, 32, 0)
    >>> sum(1 for fetch, _, _ in t.events if fetch), len(t.sizes)  # 2 + 32·6 + 1 parameters
    (655, 195)
    """
    tree = _Tree(arch)
    out, embedding = head_fetches(arch, tp)
    dense, moe_dense, experts = layer_fetches(arch, tp, etp, ep)
    root_weight = tree.param(out)
    words = () if arch.tie_embeddings else (tree.param(embedding[0]),)
    table = tree.leaf(*(words or (root_weight,)), post=False)
    positions = tuple(tree.leaf(tree.param(n), post=False) for n in embedding[len(words) :])
    front = tree.box(table, *positions, tree.leaf(), post=False)
    rope = arch.position_embedding is PositionEmbedding.ROPE
    rotary = (tree.leaf(pre=False, post=False),) if rope else ()
    body = tuple(
        tree.layer(moe_dense, experts) if j >= layers - moe_layers else tree.layer(dense, ())
        for j in range(layers)
    )
    language_model = tree.box(front, *rotary, tree.box(*body, tree.norm()), post=False)
    root: Node = (tree.module(), (root_weight,), (language_model,), True, False)
    events: list[Event] = []
    _events(root, True, events)
    forward = len(events)
    _events(root, False, events)
    return Trace(
        tuple(tree.sizes),
        tuple(tree.groups),
        tuple(events),
        _unheld(events, forward, tuple(node[0] for node in body), front[0]),
    )


def _unheld(
    events: list[Event], forward: int, layers: tuple[int, ...], front: int
) -> tuple[int, ...]:
    """Per event of :func:`module_trace`, the layers whose saved activations are not live: in
    the forward, ``L`` before the first layer's fetch and ``L − 1 − j`` from layer ``j``'s on
    (layer ``j`` counted live while it runs); in the backward (from event ``forward``), ``L − 1
    − j`` from layer ``j``'s fetch on (the later layers' backward done) and ``L`` from the
    embedding box's (``front``) fetch on."""
    n = len(layers)
    index = {module: j for j, module in enumerate(layers)}
    out, k = [], n
    for i, (fetch, module, _) in enumerate(events):
        if fetch and module in index:
            k = n - 1 - index[module]
        elif fetch and module == front and i >= forward:
            k = n
        out.append(k)
    return tuple(out)


class _Tree:
    """The parameters and modules :func:`module_trace` builds (private): ids in order."""

    def __init__(self, arch: Architecture) -> None:
        self.h, self.bias = arch.hidden_size, arch.linear_bias
        self.norms = 2 if arch.norm is Norm.LAYERNORM else 1
        self.sizes: list[int] = []
        self.groups: list[int] = []
        self.modules = 0

    def module(self) -> int:
        self.modules += 1
        return self.modules - 1

    def param(self, n: int, g: int = 0) -> int:
        self.sizes.append(n)
        self.groups.append(g)
        return len(self.sizes) - 1

    def leaf(self, *params: int, pre: bool = True, post: bool = True) -> Node:
        return self.module(), params, (), pre, post

    def box(self, *children: Node, post: bool = True) -> Node:
        return self.module(), (), children, True, post

    def norm(self) -> Node:
        return self.leaf(*(self.param(self.h) for _ in range(self.norms)))

    def linear(self, weight: int, width: int, g: int = 0) -> Node:
        return self.leaf(self.param(weight, g), *((self.param(width, g),) if self.bias else ()))

    def mlp(self, weights: tuple[int, ...], g: int = 0) -> Node:
        first, second = weights
        return self.box(self.linear(first, first // self.h, g), self.linear(second, self.h, g))

    def layer(self, w: tuple[int, ...], experts: tuple[int, ...]) -> Node:
        """A ``ParallelTransformerLayer``; a MoE one where ``w`` ends with the router."""
        h = self.h
        attention = self.box(self.linear(w[0], w[0] // h), self.leaf(), self.linear(w[1], h))
        if len(w) == 4 and not experts:
            return self.box(self.norm(), attention, self.norm(), self.mlp(w[2:4]))
        shared = (self.mlp(w[2:4]),) if len(w) > 3 else ()
        router = self.box(self.leaf(self.param(w[-1])))
        local = self.box(*(self.mlp(experts[k : k + 2], 1) for k in range(0, len(experts), 2)))
        return self.box(self.norm(), attention, self.norm(), self.box(*shared, router, local))


@lru_cache(maxsize=4096)
def step_fetches(
    arch: Architecture,
    tp: int,
    etp: int,
    ep: int,
    layers: int,
    moe_layers: int,
    accumulates: bool = False,
    reuse: int = DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS,
    bucket: int = DEEPSPEED_PREFETCH_ELEMENTS,
    live: int = DEEPSPEED_MAX_LIVE_ELEMENTS,
    persist: int = DEEPSPEED_PERSISTENCE_ELEMENTS,
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int], tuple[int, int]]:
    """DeepSpeed ZeRO-3's all-gathers of one micro-batch (forward and backward) of
    :func:`module_trace`: ((dense launches, experts' launches, dense elements, experts'
    elements) of the step's first micro-batch, the same of each later one, (dense, experts'
    elements a pass fetches whole)), elements on one GPU. :func:`model.deepspeed_coordinator.walk`
    over the trace: the first micro-batch from nothing gathered (the optimizer step's
    ``release_and_reset_all``), a later one from what the first leaves (the output weight and
    the embedding, which no post-backward frees). The release sets are those of the first
    micro-batch whose trace is complete (the coordinator caches them): a later one's where the
    step ``accumulates`` (more than one micro-batch: the run's first step records the trace in
    its first), else the first's.

    Llama 3 8B at tp 1 (a layer's weights 25,165,824, 16,777,216, 117,440,512, 58,720,256; the
    output weight and the embedding 525,336,576 each): 187 launches in the first micro-batch,
    185 in each later one, three a layer in each pass (``tests/model/test_zero_gather_calls.py``
    walks the trace).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> first, later, whole = step_fetches(arch, 1, 1, 1, 32, 0, True)
    >>> first[0], later[0]
    (187, 185)
    """
    trace = module_trace(arch, tp, etp, ep, layers, moe_layers)
    cache = _release_sets(trace, accumulates, bucket, live, reuse, persist)
    calls, got, left = walk(trace, State(), cache, bucket, live, reuse, persist)
    later_calls, later_got, _ = walk(trace, left, cache, bucket, live, reuse, persist)
    whole = [0, 0]
    for n, g in zip(trace.sizes, trace.groups, strict=True):
        whole[g] += n if n > persist else 0
    return (*calls, *got), (*later_calls, *later_got), (whole[0], whole[1])


def _release_sets(
    trace: Trace, accumulates: bool, bucket: int, live: int, reuse: int, persist: int
) -> dict[tuple[int, int], frozenset[int]]:
    """The coordinator's cached ``__params_to_release`` sets (by (module, step)) of the first
    micro-batch whose trace is complete: the second micro-batch's where the step
    ``accumulates``, else the second step's first (:func:`step_fetches`)."""
    _, _, after = walk(trace, State(), None, bucket, live, reuse, persist)
    cache: dict[tuple[int, int], frozenset[int]] = {}
    walk(trace, after if accumulates else State(), cache, bucket, live, reuse, persist)
    return cache


@lru_cache(maxsize=4096)
def gathered_envelope(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int
) -> tuple[tuple[int, int], ...]:
    """DeepSpeed ZeRO-3's gathered parameters against the activations then live, over a
    micro-batch of :func:`module_trace`: ``(k, elements)`` pairs, ``elements`` the most held
    gathered (:func:`model.deepspeed_coordinator.walk_held`, dense and experts' groups together,
    elements on one GPU, whole) at any moment when ``k`` or more transformer layers' saved
    activations are not live (:attr:`model.deepspeed_coordinator.Trace.unheld`), ascending in
    both and only the pairs a smaller ``k`` does not reach (the upper envelope: a memory peak
    ``wb·elements + activations − k·(one layer's saved bytes)`` is largest at one of them). Over
    the step's first micro-batch and a later one, with the release sets of a step that
    accumulates and of one that does not (the largest of the four at each moment). The
    ``deepspeed`` profile's limits (the defaults of :func:`step_fetches`).

    Llama 3 8B at tp 1: at the turn (``k`` 0) the output weight (525,336,576) and what the
    reuse distance and the prefetch hold of the last layers; in the forward of layer 29 two
    layers' activations not yet saved; in layer 2's backward (``k`` 29) the embedding's
    525,336,576 prefetched beside the output weight and layers 0 to 2
    (``tests/model/test_deepspeed_gathered.py`` writes them out).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> gathered_envelope(arch, 1, 1, 1, 32, 0)
    ((0, 1078984704), (2, 1095761920), (29, 1512046592))
    """
    trace = module_trace(arch, tp, etp, ep, layers, moe_layers)
    limits = (
        DEEPSPEED_PREFETCH_ELEMENTS,
        DEEPSPEED_MAX_LIVE_ELEMENTS,
        DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS,
        DEEPSPEED_PERSISTENCE_ELEMENTS,
    )
    most: dict[int, int] = {}
    for accumulates in (False, True):
        cache = _release_sets(trace, accumulates, *limits)
        first, left = walk_held(trace, State(), cache, limits)
        later, _ = walk_held(trace, left, cache, limits)
        for k, a, b in zip(trace.unheld, first, later, strict=True):
            most[k] = max(most.get(k, 0), a, b)
    out: list[tuple[int, int]] = []
    for k in sorted(most):
        if not out or most[k] > out[-1][1]:
            out.append((k, most[k]))
    return tuple(out)


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
    m = int(m)
    first, later, _ = step_fetches(
        arch, *(int(x) for x in (tp, etp, ep, layers, moe_layers)), m > 1
    )
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
    m = int(m)
    first, later, whole = step_fetches(
        arch, *(int(x) for x in (tp, etp, ep, layers, moe_layers)), m > 1
    )
    return tuple(  # type: ignore[return-value]
        2 * whole[g] - (first[2 + g] + (m - 1) * later[2 + g]) / m for g in (0, 1)
    )
