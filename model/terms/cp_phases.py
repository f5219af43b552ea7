"""Where the context-parallel exchange's buffers sit in a stage's peak: each phase's at the step
where they are live (:func:`model.context_parallel.cp_phase_bytes`).

* The forward's buffers (the ring's K/V chunks and partial outputs, the all-gather's gathered
  K/V, the all-to-all's staging) live while the forward's attention core runs and are freed
  when it returns: beside the kept layers and the recompute transient (an upper bound where no
  backward replays the attention's forward: at the forward's attention core only the kept
  layers are held).
* The backward's buffers (the ring's double buffer and dQ accumulator, the all-gather's
  whole-length dK, dV and re-gathered K/V, the all-to-all's gradients in flight) are
  allocated inside the attention core's backward and freed when it returns: at the working
  set's attention-core step (:func:`model.attention_core.attention_core_step`), beside the
  recompute transient. Where another step of the layer's backward holds more than the core
  step, the buffers fill that headroom first (:func:`core_headroom_figures`).

:func:`cp_buffers_term` gives what the buffers add to the layers' backward phase
(:attr:`model.terms.activations.StageActivations.cp_transient_bytes`): the larger of the two
phases less the backward working set the phase counts already.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.attention_core import attention_core_step
from trainplan.model.backward_working import backward_working_bytes, input_pass_retains
from trainplan.model.context_parallel import cp_phase_bytes, templated_method_code
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Recompute
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.te_fp8_backward import TeFp8Backward
from trainplan.model.terms.activation_fields import (
    CACHE,
    CONTEXT_FIELDS,
    activation_context,
    attention_kernels,
    backward_figures,
    cp_kv_repeat_of,
    cp_mechanism_of,
    te_fp8_of,
)
from trainplan.model.terms.fields import Context, Fields, LayoutFields
from trainplan.model.xp import maximum, where

__all__ = ["core_headroom_figures", "te_a2a_of", "cp_phase_buffers", "cp_buffers_term"]


@lru_cache(maxsize=CACHE)
def core_headroom_figures(
    arch: Architecture, training: TrainingSpec, kernels: tuple[tuple[str, str | None], ...],
    retained: bool, te_fp8: TeFp8Backward | None, *fields: Any,
) -> tuple[Fraction, Fraction]:  # fmt: skip
    """(dense, MoE): how far one layer's backward working set
    (:func:`model.backward_working.backward_working_bytes`, arguments as
    :func:`model.terms.activation_fields.backward_figures`) lies above its attention-core step
    (:func:`model.attention_core.attention_core_step`), for the
    :data:`model.terms.activation_fields.CONTEXT_FIELDS` values ``fields``; the same under
    selective recomputation, which adds its recomputed tensors to every step. 0 for a kind the
    model has no layer of and under ``textbook`` (no working set)."""
    ctx = activation_context(training, *fields)
    framework = Framework(fields[-1])
    kernel = dict(kernels).get(framework.value)
    out = []
    for moe in (False, True):
        if arch.kind_index(moe) is None or framework is Framework.TEXTBOOK:
            out.append(Fraction(0))
            continue
        work = backward_working_bytes(arch, moe, ctx, framework, kernel, retained, te_fp8)
        out.append(work - attention_core_step(ctx, arch, kernel))
    return out[0], out[1]


def te_a2a_of(kind: Any, framework: Any) -> int:
    """1 where the flavour's head all-to-all is Transformer Engine's ``AttnFuncWithCPAndQKVOA2A``
    (Megatron-Core's ``a2a`` and ``a2a+p2p``), 0 elsewhere (DeepSpeed's ``DistributedAttention``,
    verl's Ulysses).

    >>> te_a2a_of("ulysses", "megatron"), te_a2a_of("ulysses", "deepspeed")
    (1, 0)
    """
    return 1 if Framework(framework) is Framework.MEGATRON and str(kind) != "ring" else 0


def cp_phase_buffers(c: Context, f: Fields, tokens: Any) -> tuple[Any, Any]:
    """(forward, backward) buffers of the layout's context-parallel flavour
    (:func:`model.context_parallel.cp_phase_bytes`), for ``tokens`` S a rank."""
    arch = c.arch
    r, u, gather = f.lookup(cp_mechanism_of, (), "cp_kind", "cp", "cp_a2a")
    rep = f.lookup(cp_kv_repeat_of, (arch,), "cp_kind", "cp", "tp", "framework")
    torch_cp = f.lookup(templated_method_code, (), "cp_kind")
    te = f.lookup(te_a2a_of, (), "cp_kind", "framework")
    args = (arch, r, u, gather, f.tp, tokens, c.training.activation_bytes, rep, torch_cp, te)
    return _exact_phase_bytes(*args) if type(f) is LayoutFields else cp_phase_bytes(*args)


@lru_cache(maxsize=CACHE)
def _exact_phase_bytes(*args: Any) -> tuple[Any, Any]:
    """:func:`model.context_parallel.cp_phase_bytes` of one layout's exact scalars, cached: it
    reads no stage and no split, so a layout's stages and the per-stage tables' rows share it."""
    return cp_phase_bytes(*args)


def cp_buffers_term(
    c: Context, f: Fields, tokens: Any, n_layers: Any, n_moe: Any, working: Any
) -> Any:
    """What the context-parallel buffers add to the layers' backward phase of rank ``f.stage``
    beyond its backward working set ``working`` less the output layer's ``freed`` bytes
    (:attr:`model.terms.activations.StageActivations.layer_backward_bytes` adds it): the larger
    of the backward's buffers beyond the headroom of the working set above its attention-core
    step, per layer kind (:func:`core_headroom_figures`), and the forward's phase beyond the
    backward's, ``forward − (working − freed)``; never negative; 0 on a stage without layers.

    Examples
    --------
    Llama 3 8B at cp 8 (ring), 4,096 tokens a rank: the backward's ``4·KV + Q`` = 96 MiB sit in
    the headroom of the SwiGLU's step over the attention core's, and the forward's 420.5 MiB
    (``8·KV`` and nine partial outputs) less the working set is what the phase adds
    (``tests/model/test_context_parallel.py``)."""
    fwd, bwd = cp_phase_buffers(c, f, tokens)
    retained = input_pass_retains(f.schedule)
    args = (c.arch, c.training, attention_kernels(c), retained, te_fp8_of(c.training, c.device))
    w = f.lookup(backward_figures, args, *CONTEXT_FIELDS)
    room = f.lookup(core_headroom_figures, args, *CONTEXT_FIELDS)
    s = 2 if f.recompute is Recompute.SELECTIVE else 0
    dense, moe = n_layers - n_moe > 0, n_moe > 0
    with_cp = maximum(
        where(dense, w[s] + maximum(bwd - room[0], 0 * bwd), 0),
        where(moe, w[s + 1] + maximum(bwd - room[1], 0 * bwd), 0),
    )
    over = with_cp - maximum(where(dense, w[s], 0), where(moe, w[s + 1], 0))
    return where(n_layers > 0, maximum(over, fwd - working), 0 * bwd)
