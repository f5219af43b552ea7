"""The module trace DeepSpeed ZeRO-3's fetch coordinator walks over one micro-batch of
Megatron-DeepSpeed's GPTModel (:func:`module_trace`): every hooked module's forward, backward and,
under activation recomputation, recomputed forward, in the order the hooks fire.

**The hooks** (DeepSpeed 38327e07 ``deepspeed/runtime/zero/parameter_offload.py``
``_register_deepspeed_module``, every module hooked, containers included):
``register_forward_pre_hook`` → ``pre_sub_module_forward_function`` → ``fetch_sub_module``
(a trace step); ``register_forward_hook`` → ``post_sub_module_forward_function`` →
``release_sub_module``; ``_pre_backward_module_hook`` (a forward hook) applies
``PreBackwardFunctionForModule`` to each output tensor, whose ``backward`` runs
``pre_sub_module_backward_function`` → ``fetch_sub_module`` when autograd reaches that output;
``_post_backward_module_hook`` (a forward-pre hook) applies ``PostBackwardFunctionModule`` to
each input that requires grad, whose ``backward`` runs ``release_sub_module`` once the last of
them is reached. The hooks fire whatever the grad mode: a forward run under ``torch.no_grad``
fetches and releases as any other (its ``PreBackwardFunctionForModule`` only raises
``applied_pre_backward_ref_cnt``: no graph, no backward call).

**The backward's order, read from the code.** A module's pre-backward fires when autograd first
reaches one of its outputs, so a container's fires before its children's (its output is made from
theirs), and its children's in the reverse of their forward: each child's output feeds the next
child or the container's, and autograd runs a node only once every gradient flowing into it has
arrived (the residual adds of ``ParallelTransformerLayer.forward`` join the attention's and the
MLP's branches after them). So the backward is the forward mirrored, less the modules whose
outputs do not require grad (``rotary_pos_emb``'s cos and sin) and the post-backwards of modules
whose inputs do not (token ids: the root, ``language_model``, ``embedding``). This holds for
modules with one output tensor that requires grad, every hooked module of a model without
linear biases (Llama: Megatron-DeepSpeed's ``ColumnParallelLinear`` / ``RowParallelLinear``
return ``(output, None)``, ``ParallelAttention`` and ``ParallelMLP`` their ``(output, None)``).
With ``linear_bias`` and ``skip_bias_add`` the bias parameter is a second output requiring
grad: its ``PreBackwardFunctionForModule`` runs ``fetch_sub_module`` a second time when the
bias's gradient arrives (``applied_pre_backward_ref_cnt`` counts both outputs); that second step
is not in this trace (a limit: the bias persists, so it gathers nothing of its own, but it is one
more prefetch opportunity).

**Recomputation** (Megatron-DeepSpeed 4efb479d ``megatron/model/transformer.py``
``ParallelTransformer._checkpointed_forward``: the layers in chunks of ``checkpoint_num_layers``
— ``--checkpoint-activations``, default 1 — or ``recompute_num_layers`` under ``--recompute-method
uniform``, each chunk through ``tensor_parallel.checkpoint``, which is DeepSpeed's
``deepspeed.checkpointing.checkpoint`` where that is configured (``megatron/core/tensor_parallel/
random.py`` ``checkpoint``); ``ParallelAttention._checkpointed_attention_forward`` the core
attention alone under selective recomputation). DeepSpeed 38327e07 ``deepspeed/runtime/
activation_checkpointing/checkpointing.py`` ``CheckpointFunction.forward`` runs the chunk under
``torch.no_grad`` (the modules' hooks fire: fetches and releases as in a plain forward);
``CheckpointFunction.backward``, when autograd reaches the chunk's output, runs the chunk's
forward again under ``torch.enable_grad`` (every module's pre-forward fetch and post-forward
release again, in forward order) and then ``torch.autograd.backward`` over the recomputed
outputs (the chunk's pre-backward fetches and post-backward releases, as above). Megatron's own
``CheckpointFunction`` (``random.py``) orders them alike. So the chunk's backward in the trace is
its recomputed forward, then its backward; the coordinator records it so
(``pre_sub_module_forward_function`` and ``pre_sub_module_backward_function`` both call
``record_module`` while the trace is recorded: the micro-batch after the first, ``reset_step``
turning ``INVALID`` to ``RECORD``, then ``COMPLETE``) and replays it from then on
(``trace_prologue`` invalidates it only where a module differs from the recorded one at the same
``__step_id``; every micro-batch runs the same order, so it stays ``COMPLETE``).

Pure functions over ints.
"""

from __future__ import annotations

from functools import lru_cache

from trainplan.model.deepspeed_coordinator import Trace
from trainplan.model.params import attention_params
from trainplan.model.specs import Architecture, AttentionKind, Norm, PositionEmbedding
from trainplan.model.value_head import output_params, ties_output

__all__ = ["layer_fetches", "head_fetches", "module_trace"]


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
    tied; a value head's h (+ bias) whole, :mod:`model.value_head`); the embedding's word
    embeddings ⌈V/tp⌉·h (``VocabParallelEmbedding``; none when tied: they are the output
    weight) and learned positions s_max·h (``position_embeddings``, whole on every tp rank), in
    forward order. The ``deepspeed`` profile does not pad V
    (:data:`model.vocab.VOCAB_MULTIPLE`).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu")
    >>> head_fetches(arch, 4)  # 32,064 rows of 4,096
    (131334144, (131334144,))
    """
    h = arch.hidden_size
    rows = -(-arch.vocab_size // tp) * h
    words = () if ties_output(arch) else (rows,)
    out = output_params(arch) if arch.value_head else rows  # OpenRLHF's value head, whole
    learned = arch.position_embedding is PositionEmbedding.LEARNED
    positions = (int(arch.max_position_embeddings or 0) * h,) if learned else ()
    return out, words + positions


Node = tuple[int, tuple[int, ...], tuple["Node", ...], bool, bool]
"""A hooked module: (its id, its parameter ids, its children in call order, whether its
backward runs ``fetch_sub_module`` (an output that requires grad), whether it runs
``release_sub_module`` after its backward (an input that requires grad))."""

Event = tuple[bool, int, tuple[int, ...]]

Reruns = dict[int, tuple[tuple[int, int], ...]]
"""Per container id, the ranges ``[a, b)`` of its children run under one checkpoint."""


def _events(node: Node, forward: bool, out: list[Event], reruns: Reruns) -> None:
    """Append ``node``'s events, forward (pre-forward, children, post-forward) or backward
    (pre-backward, children reversed, post-backward); in the backward a checkpointed range of
    children (``reruns``) is their forward again, then their backward
    (``CheckpointFunction.backward``)."""
    module, params, children, pre, post = node
    if forward or pre:
        out.append((True, module, params))
    if forward:
        for child in children:
            _events(child, True, out, reruns)
    else:
        ends = {b: a for a, b in reruns.get(module, ())}
        i = len(children)
        while i > 0:
            a = ends.get(i, i - 1)
            if i in ends:
                for child in children[a:i]:
                    _events(child, True, out, reruns)
            for child in children[a:i][::-1]:
                _events(child, False, out, reruns)
            i = a
    if params and (forward or post):
        out.append((False, module, params))


def segments(layers: int, segment: int) -> tuple[tuple[int, int], ...]:
    """The checkpointed chunks ``[a, b)`` of ``layers`` layers in chunks of ``segment``
    (``_checkpointed_forward``'s ``while l < num_layers``: ``custom(l, l + n)``, the last chunk
    what is left); none for ``segment`` 0.

    >>> segments(5, 2), segments(3, 0)
    (((0, 2), (2, 4), (4, 5)), ())
    """
    if segment <= 0:
        return ()
    return tuple((a, min(a + segment, layers)) for a in range(0, layers, segment))


@lru_cache(maxsize=4096)
def module_trace(
    arch: Architecture,
    tp: int,
    etp: int,
    ep: int,
    layers: int,
    moe_layers: int,
    segment: int = 0,
    core: bool = False,
    first: int | None = None,
) -> Trace:
    """One micro-batch's hooked modules of Megatron-DeepSpeed's GPTModel (pp 1) over ``layers``
    layers, the last ``moe_layers`` of them MoE (:meth:`_Tree.model` lists them), each event a
    ``fetch_sub_module`` or ``release_sub_module``. The backward mirrors the forward (the
    module docstring reads it from the hooks). Recomputation: ``segment`` layers a
    checkpointed chunk (0 none, 1 full recomputation, round(√n) Chen's), each chunk's backward
    its recomputed forward then its backward; ``core``: the core attention checkpointed alone
    (selective recomputation where Megatron-DeepSpeed runs it,
    :func:`model.recompute_modules.profile_recompute_modules`), its recomputed forward (no
    parameters: a fetch, a prefetch opportunity) just before its backward. ``first``: only the
    first that many layers in checkpointed chunks, the core attention of the others where
    ``core`` (``Layout.recompute_layers``: ``_checkpointed_forward``'s ``recompute_method ==
    'block'``, ``checkpoint`` for ``l < recompute_num_layers`` and a plain call after); None:
    every layer.

    Llama 3 8B at tp 1: 10 forward fetches a layer (the layer, 2 norms, the attention box, QKV,
    core attention, dense, the MLP box, its 2 linears), 8 at the front and end (root,
    language model, embedding, word embeddings, dropout, rotary, encoder, final norm); the
    backward has no rotary: 328 + 327. Under full recomputation the backward runs each layer's
    10 forward fetches again: 328 + 320 + 327.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> t = module_trace(arch, 1, 1, 1, 32, 0)
    >>> sum(1 for fetch, _, _ in t.events if fetch), len(t.sizes)  # 2 + 32·6 + 1 parameters
    (655, 195)
    >>> sum(1 for fetch, _, _ in module_trace(arch, 1, 1, 1, 32, 0, 1).events if fetch)
    975
    """
    tree = _Tree(arch)
    root, encoder, body, front = tree.model(arch, tp, etp, ep, layers, moe_layers)
    covered = layers if first is None else min(first, layers)
    chunks = segments(covered, segment)
    reruns: Reruns = {encoder: chunks} if chunks else {}
    if core:
        reruns.update((box, ((1, 2),)) for box in tree.attentions[covered if chunks else 0 :])
    events: list[Event] = []
    _events(root, True, events, reruns)
    forward = len(events)
    _events(root, False, events, reruns)
    chunk = tuple(c for c, (a, b) in enumerate(chunks) for _ in range(a, b))
    if chunk:  # the layers after the checkpointed ones: each its own
        chunk += tuple(range(len(chunks), len(chunks) + layers - covered))
    return Trace(
        tuple(tree.sizes),
        tuple(tree.groups),
        tuple(events),
        _unheld(events, forward, body, front, chunk or None),
    )


def _unheld(
    events: list[Event],
    forward: int,
    layers: tuple[int, ...],
    front: int,
    chunk: tuple[int, ...] | None,
) -> tuple[int, ...]:
    """Per event of :func:`module_trace`, the layer inputs whose saved activations are not live,
    counted by checkpointed chunk (``chunk[j]``: layer ``j``'s of ``C``; None: every layer its
    own, ``C = L``), each not live one a layer's input at least (a chunk keeps its input, a layer
    not recomputed its input and more): ``C`` before the first layer's fetch; ``C − 1 − c`` from
    the fetch of a layer of chunk ``c`` on, in the forward (the chunk's input saved as it starts)
    and in the backward (the later chunks' backward done, this chunk's input held until its own
    is); ``C`` from the embedding box's (``front``) fetch in the backward (from event
    ``forward``) on."""
    index = {module: j for j, module in enumerate(layers)}
    of = chunk or tuple(range(len(layers)))
    n = max(of, default=-1) + 1
    out, k = [], n
    for i, (fetch, module, _) in enumerate(events):
        if fetch and module in index:
            k = n - 1 - of[index[module]]
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
        self.attentions: list[int] = []  # each layer's ``self_attention`` box

    def model(
        self, arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int
    ) -> tuple[Node, int, tuple[int, ...], int]:
        """(the root module, the ``encoder`` box's id, the layers' ids, the embedding box's id)
        of :func:`module_trace`'s GPTModel. The modules (f4157bea ``megatron/model/gpt_model.py``,
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
        post-backward; ``rotary_pos_emb`` (cos, sin) none in the backward."""
        out, embedding = head_fetches(arch, tp)
        dense, moe_dense, experts = layer_fetches(arch, tp, etp, ep)
        root_weight = self.param(out)
        words = () if ties_output(arch) else (self.param(embedding[0]),)
        table = self.leaf(*(words or (root_weight,)), post=False)
        positions = tuple(self.leaf(self.param(n), post=False) for n in embedding[len(words) :])
        front = self.box(table, *positions, self.leaf(), post=False)
        rope = arch.position_embedding is PositionEmbedding.ROPE
        rotary = (self.leaf(pre=False, post=False),) if rope else ()
        body = tuple(
            self.layer(moe_dense, experts) if j >= layers - moe_layers else self.layer(dense, ())
            for j in range(layers)
        )
        encoder = self.box(*body, self.norm())
        language_model = self.box(front, *rotary, encoder, post=False)
        root: Node = (self.module(), (root_weight,), (language_model,), True, False)
        return root, encoder[0], tuple(node[0] for node in body), front[0]

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
        self.attentions.append(attention[0])
        if len(w) == 4 and not experts:
            return self.box(self.norm(), attention, self.norm(), self.mlp(w[2:4]))
        shared = (self.mlp(w[2:4]),) if len(w) > 3 else ()
        router = self.box(self.leaf(self.param(w[-1])))
        local = self.box(*(self.mlp(experts[k : k + 2], 1) for k in range(0, len(experts), 2)))
        return self.box(self.norm(), attention, self.norm(), self.box(*shared, router, local))
