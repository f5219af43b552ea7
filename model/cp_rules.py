"""Which context-parallel layouts run: a flavour's own rules (:func:`check_cp_kind`: its degrees
and the head all-to-all's divisibility), a framework's (:func:`check_cp_framework`), and what
sliding-window layers change (:func:`has_window`, :func:`window_kv_tokens`,
:func:`window_note`). The flavours themselves and their bytes are :mod:`model.context_parallel`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from trainplan.model.attention import AttentionSpan
from trainplan.model.context_parallel import CpKind
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture, AttentionKind

PYTORCH_KINDS = (CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL)
"""PyTorch's ``context_parallel`` flavours (:func:`model.context_parallel.torch_rotate_method`)."""

__all__ = [
    "PYTORCH_KINDS",
    "FSDP2_REFUSED",
    "FSDP2_SEARCHED",
    "check_cp_kind",
    "check_cp_framework",
    "has_window",
    "window_kv_tokens",
    "window_note",
]


def check_cp_kind(
    kind: CpKind,
    cp: int,
    cp_a2a: int | None,
    tp: int,
    arch: Architecture | None,
    framework: str | None = None,
) -> None:
    """The flavour's own legality rules (:func:`model.layout.validate` calls this; so does the
    search's shape list for each flavour after the first): a flavour other than the ring needs
    cp > 1; ``cp_a2a`` is the hybrid's inner degree, given with it alone, strictly between 1 and
    cp and dividing cp; the head all-to-all over u ranks (Ulysses: u = cp; hybrid: u =
    ``cp_a2a``) needs u to divide the query heads and the K/V heads on a tensor-parallel rank,
    a/tp and g/tp (TE ``AttnFuncWithCPAndQKVOA2A``: "The number of attention heads needs to be
    divisible by CP size"; MLA's keys and values have a heads). Under ``framework`` deepspeed,
    whose attention repeats K and V to every query head before the all-to-all
    (:func:`model.context_parallel.kv_repeat`), the K/V heads are a/tp too: u divides a/tp
    (DeepSpeed ``deepspeed/sequence/layer.py`` ``single_all_to_all`` splits the head dimension
    into u parts). The 2·cp sequence split is
    checked by :func:`model.layout.validate` for every flavour. A model without dimensions
    skips the head rule.

    Raises
    ------
    LayoutError
        One line naming the parameter, its value and the rule.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> llama = Architecture(num_layers=1, hidden_size=1024, num_attention_heads=8,
    ...                      num_kv_heads=2, ffn_hidden_size=128, vocab_size=16)
    >>> check_cp_kind(CpKind.ULYSSES, 2, None, 1, llama)
    >>> check_cp_kind(CpKind.ULYSSES, 4, None, 1, llama)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: cp: ulysses splits the heads over 4 ranks, ... num_kv_heads / tp = 2 / 1 = 2 ...
    """
    if cp_a2a is not None and kind is not CpKind.HYBRID:
        raise LayoutError(
            f"cp_a2a: {cp_a2a} is the inner all-to-all degree of cp_kind a2a+p2p, not of {kind}"
        )
    if kind is CpKind.RING:
        return
    if cp == 1:
        raise LayoutError(f"cp_kind: {kind} needs cp > 1 (cp 1 has no context parallelism)")
    if kind is CpKind.HYBRID:
        _check_hybrid_degree(cp, cp_a2a)
    if kind in (CpKind.ALL_GATHER, *PYTORCH_KINDS) or arch is None:
        return
    u = cp if kind in (CpKind.ULYSSES, CpKind.ULYSSES_KV_REPEAT) else cp_a2a
    assert u is not None
    a = arch.num_attention_heads
    g = a if arch.attention is AttentionKind.MLA else arch.kv_heads
    if kind is CpKind.ULYSSES_KV_REPEAT:
        _check_kv_repeat(u, tp, a, g)
    elif kind == CpKind.ULYSSES and framework == Framework.DEEPSPEED:
        _check_repeated_heads(u, tp, a)
    else:
        _check_head_split(kind, u, tp, a, g)


def _check_repeated_heads(u: int, tp: int, a: int) -> None:
    """DeepSpeed-Ulysses under Megatron-DeepSpeed: u divides a/tp (K and V are a heads too)."""
    if a % tp or (a // tp) % u:
        raise LayoutError(
            f"cp: DeepSpeed-Ulysses splits the heads over {u} ranks, which does not divide "
            f"num_attention_heads / tp = {a} / {tp} = {a / tp:g} (K and V are repeated to "
            "every query head before its all-to-all)"
        )


def _check_hybrid_degree(cp: int, cp_a2a: int | None) -> None:
    """The hybrid's inner all-to-all degree: given, strictly between 1 and cp, dividing cp."""
    if cp_a2a is None:
        raise LayoutError(
            "cp_a2a: cp_kind a2a+p2p needs the inner all-to-all degree (`cp_a2a`, Megatron's "
            "--hierarchical-context-parallel-sizes)"
        )
    if not 1 < cp_a2a < cp or cp % cp_a2a:
        raise LayoutError(
            f"cp_a2a: {cp_a2a} must divide cp = {cp} and lie strictly between 1 and cp "
            "(1 is cp_kind ring, cp is ulysses)"
        )


def _check_head_split(kind: CpKind, u: int, tp: int, a: int, g: int) -> None:
    """Transformer Engine's all-to-all rule: u divides the query heads and the K/V heads on a
    tensor-parallel rank, a/tp and g/tp."""
    for name, heads in (("num_attention_heads", a), ("num_kv_heads", g)):
        if heads % tp or (heads // tp) % u:
            raise LayoutError(
                f"cp: {kind} splits the heads over {u} ranks, which does not divide "
                f"{name} / tp = {heads} / {tp} = {heads / tp:g} (Transformer Engine's all-to-all "
                "rule; cp_kind ulysses-kv-repeat, verl's, repeats K/V heads instead)"
            )


def _check_kv_repeat(u: int, tp: int, a: int, g: int) -> None:
    """verl's rule (``apply_monkey_patch``): u divides the query heads, and u and the K/V heads
    divide one another (per tensor-parallel rank here)."""
    if a % tp or (a // tp) % u:
        raise LayoutError(
            f"cp: ulysses-kv-repeat splits the query heads over {u} ranks, which does not divide "
            f"num_attention_heads / tp = {a} / {tp} = {a / tp:g} (verl's rule)"
        )
    if g % tp or ((g // tp) % u and u % (g // tp)):
        raise LayoutError(
            f"cp: ulysses-kv-repeat needs num_kv_heads / tp = {g} / {tp} = {g / tp:g} to be a "
            f"multiple or a divisor of the {u} ranks (verl repeats K/V heads u // g times)"
        )


def check_cp_framework(
    kind: CpKind, cp: int, framework: str, arch: Architecture | None, tp: int = 1, pp: int = 1
) -> None:
    """Check that ``framework`` runs context parallelism of ``kind`` on ``arch``'s layers.

    * ``pytorch-allgather`` and ``pytorch-alltoall`` are PyTorch's ``context_parallel``
      (torchtitan): refused under ``megatron`` and ``deepspeed``, which run their own.
    * ``ulysses-kv-repeat`` is verl's, run under FSDP (``fsdp2``, ``textbook``); Megatron-Core
      runs Transformer Engine's all-to-all, which asserts that cp divides the K/V heads, and
      DeepSpeed-Ulysses splits uneven heads its own way (not modelled).
    * ``deepspeed`` runs Ulysses only (:func:`_check_deepspeed_cp`).
    * ``fsdp2`` (torchtitan) runs PyTorch's ``context_parallel``, verl's Ulysses and Llama 3's
      all-gather (:func:`_check_fsdp2_cp`).
    * Under ``megatron``, Transformer Engine's limits for sliding-window layers and learned
      attention sinks (:func:`_check_te_layers`).

    Raises
    ------
    LayoutError
        One line naming ``cp_kind``, the framework or the sliding-window layers, and the rule.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> mistral = Architecture(num_layers=1, hidden_size=64, num_attention_heads=8,
    ...     ffn_hidden_size=128, vocab_size=16, sliding_window=32)
    >>> check_cp_framework(CpKind.ALL_GATHER, 2, "megatron", mistral)
    >>> check_cp_framework(CpKind.RING, 2, "megatron", mistral)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: cp_kind: ring on a model with sliding-window layers ...
    >>> check_cp_framework(CpKind.RING, 1, "deepspeed", mistral)  # cp 1: no context parallelism
    >>> check_cp_framework(CpKind.RING, 4, "deepspeed", mistral)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: cp_kind: ring does not run under framework deepspeed, ...
    """
    fw = str(framework)
    if kind in PYTORCH_KINDS and fw in _OWN_CP:
        own, runs = _OWN_CP[fw]
        raise LayoutError(
            f"cp_kind: {kind} is PyTorch's context_parallel (torchtitan, `framework` fsdp2); "
            f"{fw} runs {own}: use `cp_kind` {runs}"
        )
    if kind is CpKind.ULYSSES_KV_REPEAT and fw in _OWN_CP:
        raise LayoutError(
            f"cp_kind: ulysses-kv-repeat is verl's Ulysses (FSDP); {fw} does not repeat K/V "
            "heads (use `framework` fsdp2, or `cp_kind` ulysses with cp dividing the K/V heads)"
        )
    if fw in _ONLY_CP:
        _ONLY_CP[fw](kind, cp, tp, pp)
    if cp > 1 and fw == Framework.MEGATRON:
        _check_te_layers(kind, arch)


def _check_te_layers(kind: CpKind, arch: Architecture | None) -> None:
    """Transformer Engine's limits on context parallelism ``kind`` for ``arch``'s layers (under
    ``megatron``, cp > 1), :func:`check_cp_framework`'s last rules:

    * Learned attention sinks (gpt-oss, ``softmax_type = "learnable"``): Transformer Engine
      d0067d0da ``get_attention_backend`` (``dot_product_attention/utils.py``, its softmax-type
      filter) disables FlashAttention for any softmax but the vanilla one, FusedAttention under
      context parallelism unless ``cp_comm_type`` is ``a2a``, and the unfused backend under any
      context parallelism: only ``ulysses`` (``a2a``) has a backend.
    * Sliding-window layers: ``attn_forward_func_with_cp``
      (``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``)
      asserts "Context parallelism does not support sliding window attention with
      cp_comm_type=…" for anything but ``all_gather`` and ``a2a``: the ring and the hybrid are
      refused on a model with ``local`` layers.
    """
    if arch is not None and arch.attention_sinks and kind is not CpKind.ULYSSES:
        raise LayoutError(
            f"cp_kind: {kind} on a model with learned attention sinks has no attention backend "
            "in Transformer Engine (get_attention_backend: with softmax_type learnable and "
            "context parallelism only FusedAttention with cp_comm_type a2a); use cp_kind ulysses"
        )
    if kind in (CpKind.RING, CpKind.HYBRID) and has_window(arch):
        raise LayoutError(
            f"cp_kind: {kind} on a model with sliding-window layers is refused by Transformer "
            "Engine (attn_forward_func_with_cp: sliding window only with all_gather or a2a); "
            "use cp_kind all-gather or ulysses"
        )


_OWN_CP: dict[str, tuple[str, str]] = {
    Framework.MEGATRON: (
        "Transformer Engine's context parallelism (cp_comm_type p2p, all_gather, a2a, a2a+p2p)",
        "ring, all-gather, ulysses or a2a+p2p",
    ),
    Framework.DEEPSPEED: (
        "its own DeepSpeed-Ulysses (deepspeed/sequence/layer.py DistributedAttention)",
        "ulysses",
    ),
}
"""What a framework with its own context parallelism runs, and the ``cp_kind`` values it takes
(the flavours :func:`check_cp_framework` does not refuse it), for its refusal's line."""


def _check_deepspeed_cp(kind: CpKind, cp: int, tp: int = 1, pp: int = 1) -> None:
    """DeepSpeed runs Ulysses only: DeepSpeed edaa72212 ``deepspeed/sequence/layer.py``
    ``DistributedAttention`` exchanges heads for sequence with ``single_all_to_all`` (its FPDT,
    ``fpdt_layer.py``, chunks the same all-to-all), and Megatron-DeepSpeed f4157bea
    ``megatron/arguments.py`` has ``--ds-sequence-parallel-size`` only (no context-parallel
    size, no ring), which ``megatron/model/transformer.py`` ``ParallelAttention`` wraps in
    ``DistributedAttention``. The ring, the all-gather and the hybrid are refused at cp > 1
    (the PyTorch and verl flavours have their own refusals), and so is Ulysses beside tp or pp
    (Megatron-DeepSpeed 4efb479d ``megatron/core/parallel_state.py``
    ``initialize_model_parallel`` asserts "DeepSpeed's sequence parallel does not work with tensor
    parallel or pipeline parallel")."""
    if cp > 1 and kind in (CpKind.RING, CpKind.ALL_GATHER, CpKind.HYBRID):
        raise LayoutError(
            f"cp_kind: {kind} does not run under framework deepspeed, whose context parallelism "
            "is DeepSpeed-Ulysses only (deepspeed/sequence/layer.py DistributedAttention, an "
            "all-to-all); use cp_kind ulysses"
        )
    if cp > 1 and (tp > 1 or pp > 1):
        raise LayoutError(
            f"cp: {cp} with tp {tp} × pp {pp} does not run under framework deepspeed: "
            "Megatron-DeepSpeed asserts that DeepSpeed's sequence parallelism runs with tp = pp = 1 "
            "(parallel_state.initialize_model_parallel)"
        )


DEFAULT_CP_KIND: dict[Framework, CpKind] = {
    Framework.MEGATRON: CpKind.RING,
    Framework.DEEPSPEED: CpKind.ULYSSES,
    Framework.FSDP2: CpKind.PYTORCH_ALLGATHER,
    Framework.TEXTBOOK: CpKind.RING,
}
"""The flavour a layout gets at cp > 1 when none is named: each framework's own default.
Megatron-Core's ``--cp-comm-type`` defaults to ``p2p`` (the ring; megatron/training/arguments.py);
DeepSpeed's only flavour is Ulysses (``deepspeed/sequence/layer.py`` ``DistributedAttention``);
torchtitan's ``context_parallel_rotate_method`` defaults to ``allgather`` (PyTorch's
``context_parallel``, :func:`_check_fsdp2_cp`); the textbook keeps the ring."""


FSDP2_REFUSED = (CpKind.RING, CpKind.ULYSSES, CpKind.HYBRID)
"""Transformer Engine's flavours that ``fsdp2`` refuses (:func:`_check_fsdp2_cp`)."""

FSDP2_SEARCHED = (CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL)
"""The flavours torchtitan runs, which the search tries under ``fsdp2`` when no flavour is
named (the all-gather runs there only as Llama 3's, named; :func:`_check_fsdp2_cp`)."""


def _check_fsdp2_cp(kind: CpKind, cp: int, tp: int = 1, pp: int = 1) -> None:
    """torchtitan runs PyTorch's ``context_parallel`` only: torchtitan 114151ad4
    ``torchtitan/distributed/context_parallel.py`` ``apply_cp_to_attention_module`` wraps every
    attention module in PyTorch's ``_ContextParallel`` (``torch/distributed/tensor/experimental/
    _attention.py``, SDPA or FlexAttention) and ``config/configs.py`` offers
    ``context_parallel_rotate_method`` ``allgather`` or ``alltoall`` only; at b5bcd76c6
    ``torchtitan/distributed/context_parallel/api.py`` still shards through that module
    (``_context_parallel_shard``). No Transformer Engine attention, no head all-to-all: the
    ring, Ulysses and the hybrid are refused at cp > 1. ``all-gather`` stays for Llama 3's
    all-gather of K and V (Dubey et al. 2024 §3.3.2) where the profile stands for Meta's stack
    (the published Llama 3 recipes), counted as Transformer Engine's; the search tries it under
    ``fsdp2`` only when it is named (:data:`FSDP2_SEARCHED`). verl's Ulysses
    (``ulysses-kv-repeat``) runs under FSDP."""
    if cp > 1 and kind in FSDP2_REFUSED:
        raise LayoutError(
            f"cp_kind: {kind} does not run under fsdp2, whose context parallelism is "
            "PyTorch's context_parallel (torchtitan apply_cp_to_attention_module); use cp_kind "
            "pytorch-allgather or pytorch-alltoall (all-gather: Llama 3's; ulysses-kv-repeat: "
            "verl's Ulysses)"
        )


_ONLY_CP: dict[str, Callable[[CpKind, int, int, int], None]] = {
    Framework.DEEPSPEED: _check_deepspeed_cp,
    Framework.FSDP2: _check_fsdp2_cp,
}
"""The frameworks that run only some flavours, and the check that refuses the others."""


def has_window(arch: Architecture | None) -> bool:
    """Whether any layer of ``arch`` is a sliding-window (``local``) layer."""
    if arch is None or arch.sliding_window is None:
        return False
    return any(
        arch.layer_span(i) is AttentionSpan.LOCAL
        for i in range(max(len(arch.attention_pattern), 1))
    )


def window_kv_tokens(seq_len: int, cp: int, window: int) -> int:
    """K/V tokens the busiest rank needs from other ranks for one sliding-window layer of
    window W under the load-balanced split (rank i holds chunks i and 2·cp − 1 − i of
    c = s/(2·cp) tokens): for each held chunk j, the min(W − 1, j·c) keys before it that lie on
    other ranks (chunk cp's predecessor is chunk cp − 1, on the same rank). What a
    neighbour-only exchange would move — the lower bound; no framework modelled here does it
    (Transformer Engine's all-gather gathers the whole K/V, its ring refuses windows), so the
    traffic counts the whole exchange and this figure is reported beside it.

    Examples
    --------
    s = 32,768, cp 4 (c = 4,096), W = 4,096: rank 1 holds chunks 1 and 6 and needs 4,095 keys
    before each; the whole ring brings (cp − 1)·s/cp = 24,576.

    >>> window_kv_tokens(32768, 4, 4096)
    8190
    """
    c = seq_len // (2 * cp)
    most = 0
    for i in range(cp):
        need = 0
        for j in (i, 2 * cp - 1 - i):
            before = min(window - 1, j * c)
            if j == cp:  # its predecessor, chunk cp - 1, is this rank's own
                before = max(0, before - c)
            need += before
        most = max(most, need)
    return min(most, (cp - 1) * seq_len // cp)


def window_note(kind: CpKind, cp: int, seq_len: int, arch: Architecture | None) -> str | None:
    """The estimate's note on sliding-window layers under context parallelism: the K/V exchange
    is counted whole for them (Transformer Engine's all-gather does gather it whole; a ring is
    an upper bound), beside what a neighbour-only exchange would need
    (:func:`window_kv_tokens`). None without cp, without windowed layers, or under the
    all-to-all flavours (each rank attends over the whole sequence of its heads).

    >>> from trainplan.model.specs import Architecture
    >>> mistral = Architecture(num_layers=1, hidden_size=64, num_attention_heads=8,
    ...     ffn_hidden_size=128, vocab_size=16, sliding_window=4096)
    >>> print(window_note(CpKind.RING, 4, 32768, mistral))  # doctest: +NORMALIZE_WHITESPACE
    cp: the ring's traffic counts the whole K/V exchange for the sliding-window layers too (an
    upper bound): a layer of window 4096 needs the 4095 keys before each query chunk, 8190 of
    the 24576 tokens' K/V the busiest rank receives
    """
    if cp == 1 or kind in (CpKind.ULYSSES, CpKind.ULYSSES_KV_REPEAT) or not has_window(arch):
        return None
    assert arch is not None and arch.sliding_window is not None
    w = arch.sliding_window
    need, whole = window_kv_tokens(seq_len, cp, w), (cp - 1) * seq_len // cp
    how = {
        CpKind.ALL_GATHER: "the all-gather gathers the whole K/V for the sliding-window layers "
        "too (Transformer Engine does; exact for it)",
        CpKind.RING: "the ring's traffic counts the whole K/V exchange for the sliding-window "
        "layers too (an upper bound)",
        CpKind.HYBRID: "the hybrid's ring counts the whole K/V exchange for the sliding-window "
        "layers too (an upper bound)",
        CpKind.PYTORCH_ALLGATHER: "PyTorch's ring attention exchanges the whole K/V for the "
        "sliding-window layers too",
        CpKind.PYTORCH_ALLTOALL: "PyTorch's ring attention exchanges the whole K/V for the "
        "sliding-window layers too",
    }[kind]
    return (
        f"cp: {how}: a layer of window {w} needs the {w - 1} keys before each query chunk, "
        f"{need} of the {whole} tokens' K/V the busiest rank receives"
    )
