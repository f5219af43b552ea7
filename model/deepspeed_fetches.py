"""DeepSpeed ZeRO-3's parameter all-gathers in one micro-batch: how many launches, and how many
elements, as its fetch coordinator issues them over Megatron-DeepSpeed's modules.

The coordinator's rule is :func:`model.deepspeed_coordinator.walk` (DeepSpeed 38327e07
``partitioned_param_coordinator.py``, lines cited there); this module builds the trace it walks
(:func:`model.deepspeed_trace.module_trace`) and reads the walk per micro-batch (:func:`step_fetches`), per pass
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
(``parameter_offload.py`` ``mark_persistent_parameters``) and never gathered.

**Recomputation** puts each checkpointed chunk's forward again in the backward, before the
chunk's backward (:mod:`model.deepspeed_trace`; :func:`step_fetches`' ``segment`` and ``core``).
The prefetcher, whose queue now holds the recomputed forward's entries, has those weights
gathered before the recomputation reaches them, and the recomputed forward's releases keep them
for the backward that follows within the reuse distance: each weight is gathered in the forward
and once more for the recomputation and backward together, so the elements gathered are about
those without recomputation (Llama 3 8B tp 1, full recomputation: 14,047,772,672 a later
micro-batch either way; tp 4 2,754,871,296 → 2,803,105,792, the forward keeping other layers
for the backward), but the launches differ, each prefetch's room being what the last release
freed: 185 → 214 at tp 1 (three a layer in the forward, four in the backward's steady state),
144 → 115 at tp 4, Llama 3 70B tp 8 441 → 512. Chen's √n chunks (6 layers of 218,103,808 elements at tp 1) outrun the reuse
distance inside a chunk, so the recomputed forward frees part of a chunk's weights and they are
gathered a third time for their backward: 17,529,044,992 elements, 249 launches. Selective
recomputation's core attention (no parameters) adds a fetch and so a prefetch opportunity, which
moves no launch for the Llama 3 layouts above. The dp term reads the walk of the layout's own
recompute mode (:func:`recompute_walk`, :func:`model.terms.traffic.deepspeed_walk`), and the
search tabulates it per ZeRO stage and recompute mode (:mod:`optimizer.tables`).

DeepSpeed refuses MoE under ZeRO-3 (``engine.py`` :1675,
:func:`model.moe_rules.check_deepspeed_moe`); the experts' group is counted for completeness.

Pure functions over ints.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.deepspeed_coordinator import State, Trace, walk, walk_held
from trainplan.model.deepspeed_gathered import DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS
from trainplan.model.deepspeed_trace import head_fetches, layer_fetches, module_trace
from trainplan.model.specs import Architecture
from trainplan.model.stage_bytes import sqrt_segment

__all__ = [
    "DEEPSPEED_PREFETCH_ELEMENTS",
    "DEEPSPEED_MAX_LIVE_ELEMENTS",
    "DEEPSPEED_PERSISTENCE_ELEMENTS",
    "layer_fetches",
    "head_fetches",
    "module_trace",
    "step_fetches",
    "gathered_envelope",
    "recompute_walk",
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
    segment: int = 0,
    core: bool = False,
    first: int | None = None,
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int], tuple[int, int]]:
    """DeepSpeed ZeRO-3's all-gathers of one micro-batch (forward and backward, and the
    recomputed forward of ``segment``-layer checkpointed chunks of the ``first`` layers, or of
    the core attention where ``core``) of :func:`module_trace`: ((dense launches, experts' launches, dense elements, experts'
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
    trace = module_trace(arch, tp, etp, ep, layers, moe_layers, segment, core, first)
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
    arch: Architecture,
    tp: int,
    etp: int,
    ep: int,
    layers: int,
    moe_layers: int,
    segment: int = 0,
    core: bool = False,
    first: int | None = None,
) -> tuple[tuple[int, int], ...]:
    """DeepSpeed ZeRO-3's gathered parameters against the activations then live, over a
    micro-batch of :func:`module_trace` (``segment``, ``core``, ``first``: its recomputation):
    ``(k, elements)`` pairs, ``elements`` the most held gathered
    (:func:`model.deepspeed_coordinator.walk_held`, dense and experts' groups together,
    elements on one GPU, whole) at any moment when ``k`` or more layer inputs' saved
    activations are not live (:attr:`model.deepspeed_coordinator.Trace.unheld`: layers, or
    checkpointed chunks), ascending in both and only the pairs a smaller ``k`` does not reach
    (the upper envelope: a memory peak ``wb·elements + activations − k·(one layer's input)`` is
    largest at one of them). Over the step's first micro-batch and a later one, with the release
    sets of a step that accumulates and of one that does not (the largest of the four at each
    moment). The ``deepspeed`` profile's limits (the defaults of :func:`step_fetches`).

    Llama 3 8B at tp 1: at the turn (``k`` 0) the output weight (525,336,576) and what the
    reuse distance and the prefetch hold of the last layers; in the forward of layer 29 two
    layers' activations not yet saved; in layer 2's backward (``k`` 29) the embedding's
    525,336,576 prefetched beside the output weight and layers 0 to 2
    (``tests/model/test_deepspeed_gathered.py`` writes them out). Under full recomputation
    (``segment`` 1) the turn holds 16,777,216 fewer, the rest alike
    (``tests/model/test_deepspeed_recompute_walk.py``).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
    ...     num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu", norm="rmsnorm")
    >>> gathered_envelope(arch, 1, 1, 1, 32, 0)
    ((0, 1078984704), (2, 1095761920), (29, 1512046592))
    >>> gathered_envelope(arch, 1, 1, 1, 32, 0, 1)
    ((0, 1062207488), (2, 1095761920), (29, 1512046592))
    """
    trace = module_trace(arch, tp, etp, ep, layers, moe_layers, segment, core, first)
    limits = (
        DEEPSPEED_PREFETCH_ELEMENTS,
        DEEPSPEED_MAX_LIVE_ELEMENTS,
        DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS,
        DEEPSPEED_PERSISTENCE_ELEMENTS,
    )
    most: dict[int, int] = {}
    for accumulates in (False, True):
        cache = _release_sets(trace, accumulates, *limits)
        opening, left = walk_held(trace, State(), cache, limits)
        later, _ = walk_held(trace, left, cache, limits)
        for k, a, b in zip(trace.unheld, opening, later, strict=True):
            most[k] = max(most.get(k, 0), a, b)
    out: list[tuple[int, int]] = []
    for k in sorted(most):
        if not out or most[k] > out[-1][1]:
            out.append((k, most[k]))
    return tuple(out)


def recompute_walk(
    recompute: str, layers: int, core: bool = False, first: int | None = None
) -> tuple[int, bool, int | None]:
    """The ``(segment, core, first)`` of :func:`module_trace` a recompute mode runs over
    ``layers`` layers (pp 1: DeepSpeed runs ZeRO-3 only there). ``recompute``: a
    :class:`model.layout.Recompute` value. ``full``: every layer its own checkpointed chunk
    (Megatron-DeepSpeed's ``checkpoint_num_layers`` default 1); ``sqrt``: chunks of
    :func:`model.stage_bytes.sqrt_segment` layers (``--recompute-method uniform
    --recompute-num-layers``); ``selective``: the core attention checkpointed where ``core``
    (the profile recomputes it, :func:`model.recompute_modules.profile_recompute_modules`);
    ``none``: nothing. ``first`` (``Layout.recompute_layers``' count): the first that many
    layers each checkpointed whole (``--recompute-method block``), the others as the mode
    says (the core attention under ``selective``).

    >>> recompute_walk("full", 32), recompute_walk("sqrt", 32), recompute_walk("none", 32, True)
    ((1, False, None), (6, False, None), (0, False, None))
    >>> recompute_walk("selective", 32, True), recompute_walk("none", 32, False, 4)
    ((0, True, None), (1, False, 4))
    """
    mode = str(recompute)
    core = bool(core) and mode == "selective"
    if first is not None:
        return 1, core, int(first)
    if mode == "full":
        return 1, False, None
    if mode == "sqrt":
        return sqrt_segment(int(layers)), False, None
    return 0, core, None


def _mode_fetches(
    arch: Architecture, fields: tuple[Any, ...], m: int, walk: tuple[Any, ...]
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int], tuple[int, int]]:
    """:func:`step_fetches` of ``fields`` (tp, etp, ep, layers, moe_layers) under the walk of
    ``walk`` (:func:`recompute_walk`'s arguments after ``layers``)."""
    tp, etp, ep, layers, moe_layers = (int(x) for x in fields)
    segment, core, first = recompute_walk(walk[0], layers, *walk[1:])
    return step_fetches(
        arch, tp, etp, ep, layers, moe_layers, m > 1, segment=segment, core=core, first=first
    )


def deepspeed_gather_calls(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int, m: int = 1,
    recompute: str = "none", core: bool = False, first: int | None = None,
) -> tuple[float, float]:  # fmt: skip
    """(dense group's, experts' group's) all-gather calls of DeepSpeed ZeRO-3 per pass, the mean
    over a step of ``m`` micro-batches of their two gathering passes (:func:`step_fetches`: the
    output weight and the embedding, the weights the reuse distance keeps; the recomputed
    forward's gathers with the backward's), each at least 1, under the walk of the layout's
    recompute mode (``recompute``, ``core``, ``first``: :func:`recompute_walk`).

    Llama 3 405B at tp 4 without recomputation (Llama 3 8B at tp 1, a later micro-batch: 185
    launches without recomputation, 214 under full recomputation, the module docstring):

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> deepspeed_gather_calls(arch, 4, 4, 1, 126, 0)  # (506 + 503) / 2
    (504.5, 1.0)
    """
    m = int(m)
    first_mb, later, _ = _mode_fetches(
        arch, (tp, etp, ep, layers, moe_layers), m, (recompute, core, first)
    )
    return tuple(  # type: ignore[return-value]
        max((first_mb[g] + (m - 1) * later[g]) / (2 * m), 1.0) for g in (0, 1)
    )


def deepspeed_unfetched(
    arch: Architecture, tp: int, etp: int, ep: int, layers: int, moe_layers: int, m: int = 1,
    recompute: str = "none", core: bool = False, first: int | None = None,
) -> tuple[float, float]:  # fmt: skip
    """(dense, experts') elements on one GPU a micro-batch of DeepSpeed ZeRO-3 does not gather,
    the mean over a step of ``m`` micro-batches, against both passes gathering every fetched
    weight (:func:`model.comm.dp_bytes`' count): the output weight after the step's first
    forward, the embedding in the later forwards, the weights kept from the forward into the
    backward (:func:`step_fetches`), under the walk of the layout's recompute mode
    (:func:`recompute_walk`); negative where the walk gathers a weight a third time (Chen's √n
    chunks beyond the reuse distance).

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...     num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu")
    >>> deepspeed_unfetched(arch, 4, 4, 1, 126, 0)  # the output and last down and gate-up once
    (1179648000.0, 0.0)
    """
    m = int(m)
    first_mb, later, whole = _mode_fetches(
        arch, (tp, etp, ep, layers, moe_layers), m, (recompute, core, first)
    )
    return tuple(  # type: ignore[return-value]
        2 * whole[g] - (first_mb[2 + g] + (m - 1) * later[2 + g]) / m for g in (0, 1)
    )
