"""Activation offload: chosen tensors of every layer on the host between forward and backward.

The mechanism modelled is Megatron-Core's *fine-grained activation offloading*
(``--fine-grained-activation-offloading --offload-modules M …``; Megatron-LM
``docs/source/api-guide/fine_grained_activation_offloading.md``,
``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``, and the user guide
https://docs.nvidia.com/megatron-core/developer-guide/latest/user-guide/features/fine_grained_activation_offloading.html):

* **What moves.** For each chosen module of each transformer layer, the tensors its forward
  saves for backward (``PipelineOffloadManager`` enters autograd's ``saved_tensors_hooks``
  around the module): the module's *input*, as Megatron's guide says, and for the attention
  core everything it saves (Q, K, V and, without FlashAttention, the score tensors). Module
  names are Megatron-Core's (:data:`OFFLOAD_MODULES`); each is mapped to the named tensors of
  :mod:`model.activations` by :func:`module_of`.
* **When.** Device→host after the module's forward, host→device before its backward, on
  dedicated CUDA streams (``_d2h_stream``, ``_h2d_stream``): the copy of layer i overlaps the
  compute of the next layer in forward, the reload of the next layer's tensors overlaps this
  layer's backward (prefetch). Exposed is what a layer's copy takes beyond that compute
  (:func:`activation_offload_seconds`).
* **What stays on the GPU.** The offload manager never offloads the last group of each module
  name (``PipelineOffloadManager.post_warmup_callback``: the offload margin is
  ``ChunkOffloadHandler.get_max_deduplicated_groups``, the number of distinct module names, and
  the last group of each name in the first backward chunk — the layer whose backward comes first
  — gets ``offload = False``): one layer's offloaded bytes stay on the GPU
  (:func:`offload_buffer_bytes`). Beside it, at the end of a micro-batch's forward: the
  tensors whose device→host copy has not finished — nothing bounds the copies in flight by
  default, and the allocator keeps each freed tensor's storage until its copy is done; a queue
  served at the host link's rate, :func:`model.activation_copies.offload_backlog_bytes` (the last layer's copy, and a
  backlog wherever a layer's copy outlasts the next layer's forward, the same excess the
  exposed time counts, :func:`model.activation_copies.copy_excess_bytes`) — and, on a stage that is not the last of a
  pipeline, the last layer of the next micro-batch, which a backward pre-reloads and keeps
  through the following forward (:func:`model.activation_copies.prefetched_layers`). Megatron-LM's own measurement
  (``tests/unit_tests/pipeline_parallel/test_fine_grained_activation_offloading.py``
  ``test_gpt_fine_grained_activation_offloading_correctness_and_memory``: 8 layers, pp 1,
  copies faster than the forward) asserts that the peak falls by the manager's
  ``offload_summary_bytes`` — every group but the kept one — within 30 % and 20 MiB: with one
  stage the last layer is kept, nothing is pre-reloaded and no backlog forms, so the rules add
  nothing there. The host holds the rest (:func:`model.memory.stage_activations`).
* **Rules** (:func:`check_activation_offload`; Megatron-Core's ``TransformerConfig``
  validation): the module names above; ``attn_proj`` only with ``core_attn`` (its input is the
  attention core's output, which the core's backward needs); ``expert_fc1`` and ``moe_act``
  only in MoE layers (a dense model has none); ``attn_norm`` only with MLA attention and
  ``mlp_norm`` only in MoE layers (:func:`norm_modules`: elsewhere Transformer Engine fuses the
  norm into the next linear layer and there is no norm module to offload); only the
  Megatron-Core profile runs it (its
  Transformer Engine path; DeepSpeed, FSDP2 and the textbook profile have no such mechanism).
  The planner also asks for recomputation ``none`` or ``selective`` (Megatron pairs offload with
  fine-grained recomputation; under full or √n recomputation a layer keeps only its input
  checkpoint, so there would be nothing to offload).

Alternative mechanisms, not modelled: PyTorch's ``torch.autograd.graph.save_on_cpu`` (every
saved tensor of a region, copied synchronously unless pinned; no prefetch) and Transformer
Engine's ``get_cpu_offload_context`` / Megatron-Core's older ``--cpu-offloading`` with
``cpu_offloading_num_layers`` (whole layers; refused by Megatron-Core with pp > 1 and with
recomputation) — the fine-grained mechanism is the one Megatron-Core supports with pipeline
parallelism, and it is what this module follows.

Approximate: Megatron's ``min_offloaded_tensor_size`` (tensors under 2²⁰ elements stay on the
GPU) is ignored; the copy backlog takes every layer's forward as the slowest stage's
micro-batch over the most layers, a third of it, and every layer as offloading the stage's
largest figure; the exposed time is per layer with the stage's micro-batch split evenly over its
layers (forward : backward = 1 : 2), added to the step as if on the critical path.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any

from trainplan.model.activation_copies import copy_excess_bytes
from trainplan.model.errors import LayoutError
from trainplan.model.xp import maximum, minimum, where

__all__ = [
    "OFFLOAD_MODULES",
    "MOE_MODULES",
    "NORM_MODULES",
    "norm_modules",
    "layer_modules",
    "parse_modules",
    "module_of",
    "offloaded_bytes",
    "check_activation_offload",
    "check_offload_modules",
    "check_offload_recompute",
    "offload_buffer_bytes",
    "activation_offload_seconds",
]

OFFLOAD_MODULES = (
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
)  # fmt: skip
"""Megatron-Core's ``--offload-modules`` choices (Megatron-LM
``docs/source/api-guide/fine_grained_activation_offloading.md``; d98e8a64dd
``megatron/core/transformer/transformer_config.py`` ``offload_modules``), in a layer's forward
order: the attention norm's input, what the QKV projection saves (``qkv_linear``:
``Attention.forward`` and ``MultiLatentAttention.forward`` run ``get_query_key_value_tensors``
inside its offload context, so every tensor saved there goes: the fused norm's input and output
under a ``TELayerNormColumnParallelLinear``, MLA's norm output, latents and latent norm outputs),
the attention core's saved tensors, the attention output projection's input, the MLP norm's
input, the routed experts' FC1 input, the MoE activation function's input. Not offered:
``fused_group_mlp`` (Megatron-Core requires ``use_transformer_engine_op_fuser``, Transformer
Engine's fused grouped MLP, which the model does not describe) and ``gdp_qkv`` (the
GatedDeltaProduct mixer, which no architecture here has)."""

MOE_MODULES = frozenset({"expert_fc1", "moe_act"})
"""Modules only a MoE layer has."""

NORM_MODULES = frozenset({"attn_norm", "mlp_norm"})
"""The norm modules, offloadable only where the layer has the norm as a module of its own
(:func:`norm_modules`)."""


def norm_modules(mla: bool, moe: bool) -> frozenset[str]:
    """The norm modules a Megatron-Core layer has as modules of their own under the Transformer
    Engine spec, so that ``attn_norm`` / ``mlp_norm`` offload something: ``attn_norm`` with MLA
    attention (its ``input_layernorm`` is a ``TENorm``), ``mlp_norm`` in a MoE layer (its
    ``pre_mlp_layernorm`` is a ``TENorm``: the router reads the normalised input). Elsewhere the
    norm is ``IdentityOp``, fused into the next linear layer (``TELayerNormColumnParallelLinear``
    as ``linear_qkv`` / ``linear_fc1``, which keeps the norm's input itself):
    ``megatron/core/models/gpt/gpt_layer_specs.py``
    ``get_gpt_layer_with_transformer_engine_submodules``; and
    ``megatron/core/transformer/transformer_layer.py`` ``_set_offload_modules`` turns
    ``offload_attn_norm`` / ``offload_mlp_norm`` off for an ``IdentityOp`` norm.

    >>> sorted(norm_modules(mla=False, moe=False)), sorted(norm_modules(mla=True, moe=True))
    ([], ['attn_norm', 'mlp_norm'])
    """
    return frozenset({"attn_norm"} if mla else set()) | frozenset({"mlp_norm"} if moe else set())


def layer_modules(modules: Iterable[str], mla: bool, moe: bool) -> tuple[str, ...]:
    """The chosen ``modules`` that offload something in a layer (MLA or not, MoE or not): the
    norm modules only where :func:`norm_modules` says the layer has them; without MLA,
    ``qkv_linear`` also takes the attention norm's rows (``attn_norm``'s names): the norm is
    fused into ``linear_qkv``, which saves its input.

    >>> layer_modules(("attn_norm", "core_attn", "mlp_norm"), mla=False, moe=True)
    ('core_attn', 'mlp_norm')
    >>> layer_modules(("qkv_linear",), mla=False, moe=False)
    ('qkv_linear', 'attn_norm')
    """
    has = norm_modules(mla, moe)
    out = tuple(m for m in modules if m not in NORM_MODULES or m in has)
    return out + (("attn_norm",) if "qkv_linear" in out and not mla else ())


_TERMS = {
    "attention norm input": "attn_norm",
    "Q": "core_attn",
    "K": "core_attn",
    "V": "core_attn",
    "QKV projection input": "qkv_linear",
    "attention projection input": "qkv_linear",
    "query latent": "qkv_linear",
    "query latent norm output": "qkv_linear",
    "kv latent with rope key": "qkv_linear",
    "kv latent norm output": "qkv_linear",
    "output projection input": "attn_proj",
    "MLP norm input": "mlp_norm",
    "routed expert inputs (top-k copies)": "expert_fc1",
    "routed expert SwiGLU input (gate, up)": "moe_act",
    "routed expert GeGLU input (gate, up)": "moe_act",
    "routed expert GeLU input": "moe_act",
}
"""Named tensors of :mod:`model.activations` → the module whose forward saves them."""

_PREFIXES = (
    ("attention norm statistics", "attn_norm"),
    ("MLP norm statistics", "mlp_norm"),
    ("query latent norm statistics", "qkv_linear"),
    ("kv latent norm statistics", "qkv_linear"),
    ("routed expert SiLU output", "moe_act"),
    ("routed expert GELU output", "moe_act"),
    ("routed expert up + glu_linear_offset", "moe_act"),  # model.unfused_glu
    ("routed expert glu output", "moe_act"),
    ("routed expert clamped GLU input", "moe_act"),
)
"""Term-name prefixes (the ``pytorch`` convention's extra tensors, a clamped activation's copy) → module."""


def parse_modules(value: Any) -> tuple[str, ...]:
    """The modules of a CLI value (``"core_attn,attn_proj"``) or a list, in
    :data:`OFFLOAD_MODULES` order, each once; ``()`` for none (``""``, ``"none"``, None).

    Raises
    ------
    LayoutError
        A name that is not one of :data:`OFFLOAD_MODULES`.

    >>> parse_modules("attn_proj, core_attn")
    ('core_attn', 'attn_proj')
    >>> parse_modules(None)
    ()
    """
    if value is None or value == "" or value == "none":
        return ()
    names = value.replace(";", ",").split(",") if isinstance(value, str) else list(value)
    out = {str(n).strip() for n in names if str(n).strip()}
    bad = sorted(out - set(OFFLOAD_MODULES))
    if bad:
        raise LayoutError(
            f"offload_activations: {', '.join(bad)} is not one of Megatron-Core's "
            f"--offload-modules ({', '.join(OFFLOAD_MODULES)})"
        )
    return tuple(m for m in OFFLOAD_MODULES if m in out)


def module_of(name: str, scores: Iterable[str] = ()) -> str | None:
    """The Megatron-Core module whose forward saves the tensor ``name`` of
    :mod:`model.activations` (its FP8 variant too), or None (kept on the GPU by every choice).
    ``scores``: the layer's attention-score tensors, saved inside the attention core.

    >>> module_of("output projection input (FP8)"), module_of("FC1 input")
    ('attn_proj', None)
    """
    base = name.split(" (FP8")[0]
    if base in _TERMS:
        return _TERMS[base]
    if name in set(scores):
        return "core_attn"
    return next((m for p, m in _PREFIXES if name.startswith(p)), None)


def offloaded_bytes(
    terms: Iterable[tuple[str, Fraction]], scores: frozenset[str], modules: Iterable[str]
) -> tuple[Fraction, Fraction]:
    """(bytes offloaded without recomputation, with selective recomputation) of one layer per
    GPU per micro-batch: the ``terms`` (:attr:`model.activations.LayerActivations.terms`) that
    a chosen module saves; under selective recomputation the score tensors are not saved at
    all, so they are not offloaded either. Exact.

    >>> terms = (("attention norm input", Fraction(4)), ("softmax output", Fraction(9)),
    ...          ("Q", Fraction(2)), ("FC1 input", Fraction(4)))
    >>> offloaded_bytes(terms, frozenset({"softmax output"}), ("core_attn",))
    (Fraction(11, 1), Fraction(2, 1))
    """
    chosen = set(modules)
    full = sel = Fraction(0)
    for name, value in terms:
        if module_of(name, scores) in chosen:
            full += value
            if name not in scores:
                sel += value
    return full, sel


def check_activation_offload(
    framework: str,
    recompute: str,
    modules: tuple[str, ...],
    has_moe: bool = True,
    recompute_layers: tuple[int, ...] | None = None,
    has_mla: bool = True,
) -> None:
    """Check that ``framework`` runs the activation offload of ``modules`` with ``recompute``.

    Raises
    ------
    LayoutError
        A profile other than Megatron-Core; ``attn_proj`` without ``core_attn``; an expert
        module or ``mlp_norm`` on a model without MoE layers; ``attn_norm`` on a model without
        MLA (:func:`norm_modules`); full or √n recomputation, or fully recomputed
        layers per stage (``recompute_layers`` with a count above 0: the two are not modelled
        together).

    >>> check_activation_offload("megatron", "selective", ("core_attn",))
    >>> try:
    ...     check_activation_offload("deepspeed", "none", ("core_attn",))
    ... except LayoutError as err:
    ...     print(err)  # doctest: +ELLIPSIS
    offload_activations: deepspeed has no fine-grained activation offload ...
    """
    if not modules:
        return
    if str(framework) != "megatron":
        raise LayoutError(
            f"offload_activations: {framework} has no fine-grained activation offload "
            "(Megatron-Core's --fine-grained-activation-offloading); use `framework` megatron"
        )
    check_offload_modules(modules, has_moe, has_mla)
    check_offload_recompute(recompute, recompute_layers)


def check_offload_modules(modules: tuple[str, ...], has_moe: bool, has_mla: bool) -> None:
    """Check the offloaded ``modules`` against each other and the model: ``attn_proj`` needs
    ``core_attn`` (Megatron-Core refuses it alone); an expert module needs MoE layers; a norm
    module needs the unfused norm (:func:`norm_modules`).

    Raises
    ------
    LayoutError
        One line naming ``offload_activations``, the module and the rule.

    >>> check_offload_modules(("core_attn", "attn_proj"), has_moe=False, has_mla=False)
    """
    if "attn_proj" in modules and "core_attn" not in modules:
        raise LayoutError(
            "offload_activations: attn_proj needs core_attn too (its input is the attention "
            "core's output, which core_attn's backward needs; Megatron-Core refuses it alone)"
        )
    moe = sorted(MOE_MODULES & set(modules))
    if moe and not has_moe:
        raise LayoutError(
            f"offload_activations: {', '.join(moe)} offloads MoE expert tensors; this model has "
            "no MoE layers"
        )
    fused = sorted(NORM_MODULES & set(modules) - norm_modules(has_mla, has_moe))
    if fused:
        raise LayoutError(
            f"offload_activations: {', '.join(fused)} offloads nothing on this model: "
            "Megatron-Core fuses that norm into the next linear layer "
            "(TELayerNormColumnParallelLinear keeps its input; attn_norm needs MLA, mlp_norm "
            "MoE layers)"
        )


def check_offload_recompute(recompute: str, recompute_layers: tuple[int, ...] | None) -> None:
    """Check the recomputation the activation offload runs beside: none or selective (full or
    √n recomputation keeps only each layer's input checkpoint), and no fully recomputed layers
    per stage (``recompute_layers`` above 0: the two are not modelled together).

    Raises
    ------
    LayoutError
        One line naming ``offload_activations``, the recompute setting and the rule.

    >>> check_offload_recompute("selective", None)
    """
    if str(recompute) not in ("none", "selective"):
        raise LayoutError(
            f"offload_activations: recompute {recompute} keeps only each layer's input "
            "checkpoint, nothing to offload; use `recompute` none or selective (Megatron-Core "
            "pairs the offload with fine-grained recomputation)"
        )
    if recompute_layers and any(recompute_layers):
        raise LayoutError(
            "offload_activations: with recompute_layers "
            f"{','.join(map(str, recompute_layers))} (fully recomputed layers per stage) the "
            "offload is not modelled; give one of the two"
        )


def offload_buffer_bytes(per_layer: Any, held: Any) -> Any:
    """Bytes of offloaded tensors still on one GPU at the peak: ``per_layer`` (the most any
    layer of the stage offloads per micro-batch) × min(1, ``held``), ``held`` the layer ×
    micro-batch pairs the stage keeps: the one group of each module name Megatron-Core never
    offloads (``post_warmup_callback``'s offload margin: the first backward's last layer). Not
    two: the reload of the next layer is prefetched during a backward, after the peak, and
    Megatron-LM's measurement finds the peak lowered by every other layer's offloaded bytes (see
    the module's notes). Exact for numbers; element-wise for arrays.

    >>> offload_buffer_bytes(Fraction(10), 32), offload_buffer_bytes(Fraction(10), 0)
    (Fraction(10, 1), Fraction(0, 1))
    """
    return per_layer * minimum(held, 1)


def activation_offload_seconds(
    dense_bytes: Any,
    moe_bytes: Any,
    n_dense: Any,
    n_moe: Any,
    microbatch_s: Any,
    m: Any,
    link_bytes_per_s: float,
) -> Any:
    """Seconds per step the offload leaves exposed on a stage of ``n_dense`` dense and ``n_moe``
    MoE layers, each offloading ``dense_bytes`` / ``moe_bytes`` per micro-batch.

    Each layer's copy device→host overlaps the next layer's forward and its reload host→device
    overlaps the backward before it (separate copy streams, prefetch; Megatron-Core
    ``fine_grained_activation_offload.py``). With ``t`` = ``microbatch_s`` / (layers) one layer's
    share of the stage's micro-batch, forward ``t/3`` and backward ``2t/3`` (backward = 2 ×
    forward), a layer of ``x`` bytes exposes ``max(0, x/B − t/3) + max(0, x/B − 2t/3)`` at
    ``B`` = ``link_bytes_per_s`` per direction; × m micro-batches. Exact for numbers;
    element-wise for arrays.

    Examples
    --------
    A layer offloading 64 MB at 64 GB/s (1 ms each way) in a 12-layer stage whose micro-batch
    takes 24 ms (t = 2 ms: forward 0.667 ms, backward 1.333 ms): 0.333 ms exposed per layer,
    × 12 layers × 4 micro-batches = 16 ms.

    >>> round(activation_offload_seconds(64e6, 0, 12, 0, 24e-3, 4, 64e9), 9)
    0.016
    """
    layers = n_dense + n_moe
    t = microbatch_s / maximum(layers, 1)

    def exposed(x: Any) -> Any:
        backward = maximum(x / link_bytes_per_s - 2 * t / 3, 0)
        return copy_excess_bytes(x, t / 3, link_bytes_per_s) / link_bytes_per_s + backward

    per_mb = n_dense * exposed(dense_bytes) + n_moe * exposed(moe_bytes)
    return where(layers > 0, m * per_mb, 0 * per_mb)


LAYER_OFFLOAD_SOURCE = (
    "Megatron-LM megatron/core/transformer/transformer_block.py (get_cpu_offload_context with "
    "cpu_offloading_num_layers) and transformer_config.py (__post_init__: 0 <= N < num_layers, "
    "no pipeline parallelism, no recomputation); Transformer Engine "
    "transformer_engine/pytorch/cpu_offload_v1.py AsyncDoubleBufferGroupOffloadHandler "
    "(layer_window_map, bulk_offload_group, bulk_reload_group) and cpu_offload.py "
    "DefaultOffloadSynchronizer._init_offload_synchronization_dicts"
)


def check_layer_offload(
    layers: int,
    framework: str,
    pp: int,
    recompute: str,
    recompute_layers: tuple[int, ...] | None,
    num_layers: int | None,
    has_moe: bool,
    modules: tuple[str, ...] = (),
) -> None:
    """Check whole-layer CPU activation offload (``cpu_offloading_num_layers`` = ``layers``)
    against the layout (:data:`LAYER_OFFLOAD_SOURCE`): Megatron-Core's own rules (fewer layers
    than the model's ``num_layers``, pp = 1, no recomputation) and the model's (the
    ``megatron`` profile, whose Transformer Engine path it is; dense layers, all of one size;
    not with fine-grained ``offload_activations``).

    Raises
    ------
    LayoutError
        One line naming ``cpu_offloading_num_layers``, the value and the rule.

    >>> check_layer_offload(40, "megatron", 1, "none", None, 80, False)
    >>> try:
    ...     check_layer_offload(40, "megatron", 2, "none", None, 80, False)
    ... except LayoutError as err:
    ...     print(str(err).split(" (")[0])
    cpu_offloading_num_layers: 40 needs pp = 1
    """
    if not layers:
        return
    problem = None
    if str(framework) != "megatron":
        problem = f"is Megatron-Core's (Transformer Engine's CPU offload), not {framework}'s"
    elif pp > 1:
        problem = f"needs pp = 1 (Megatron-Core refuses it with pipeline parallelism), pp is {pp}"
    elif str(recompute) != "none" or any(recompute_layers or ()):
        problem = "needs recompute none (Megatron-Core refuses it with recomputation)"
    elif num_layers is not None and layers >= num_layers:
        problem = f"must be below the model's {num_layers} layers (Megatron-Core's rule)"
    elif has_moe:
        problem = "is modelled for dense layers only"
    elif modules:
        problem = "is not modelled together with offload_activations"
    if problem:
        raise LayoutError(f"cpu_offloading_num_layers: {layers} {problem}")


def layer_offload_bytes(layer_bytes: Any, layers: int, offloaded: int) -> Any:
    """(bytes left on the GPU, bytes on the host) of one micro-batch's saved activations of
    ``layers`` equal layers of ``layer_bytes`` each when the first ``offloaded`` go to the host
    whole. Transformer Engine's offload handler copies every saved tensor of an offloaded layer
    (``tensor_push``: not parameters, and from v2 not tensors under 256 Ki elements, kept here
    as offloaded: they are norm statistics of a few MiB at most) and frees it once the copy is
    done, by the forward of layer ``(L // N)·(i + 1) − 1`` for offloaded layer ``i``
    (``layer_window_map``), so at the end of the forward, the activation peak, ``L − N``
    layers' tensors are on the GPU: TE's documented ``(num_layers − num_offloaded_layers) · T``.
    The reloads start in backward, after that peak. Exact for numbers; element-wise for arrays.

    >>> layer_offload_bytes(10, 80, 40)
    (400, 400)
    """
    return layer_bytes * (layers - offloaded), layer_bytes * offloaded


def layer_offload_seconds(
    layer_bytes: Any, layers: Any, offloaded: int, microbatch_s: Any, m: Any, link: float
) -> Any:
    """Seconds per step whole-layer offload leaves exposed: each of the ``offloaded`` layers'
    copy (``layer_bytes`` / ``link`` bytes per second per direction) runs on its own stream
    during the ``L // N`` layers' forward before its window (``layer_window_map``) and its
    reload during as many layers' backward (``bulk_reload_group``); with ``t`` one layer's share
    of the micro-batch, forward ``t/3`` and backward ``2t/3``, a layer exposes
    ``max(0, c − w·t/3) + max(0, c − w·2t/3)`` for ``c`` its copy time and ``w = L // N``; × N
    layers × m micro-batches. 0 without offload.

    A 3.9 GB layer over 450 GB/s (8.7 ms) with 2 layers' window of 47 ms layers: nothing exposed.

    >>> float(layer_offload_seconds(3.9e9, 80, 40, 80 * 47e-3, 2, 450e9))
    0.0
    >>> round(layer_offload_seconds(64e6, 12, 6, 24e-3, 4, 16e9), 6)  # c 4 ms, t 2 ms, w 2
    0.096
    """
    if not offloaded:
        return 0.0
    t = microbatch_s / layers
    window = layers // offloaded
    copy = layer_bytes / link
    per_layer = maximum(copy - window * t / 3, 0) + maximum(copy - window * 2 * t / 3, 0)
    return m * offloaded * per_layer
