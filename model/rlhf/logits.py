"""Bytes the RLHF log-prob passes hold over the vocabulary's logits, by framework and pass.

Every forward of the actor and the reference ends in logits ``[T, V/tp]`` (T tokens of one
micro-batch, the vocabulary split over tp); the log-probs of the sampled tokens and, for the
actor's old log-probs, the entropy are computed over them. What the GPU holds at that moment
depends on the framework's code path and on the pass: :func:`logits_element_bytes` gives the
bytes per element ``[T, V/tp]`` held as logits and the transient working set beside them,
:func:`logits_bytes` the bytes of one micro-batch. The training roles' cost
(:func:`model.rlhf.network.network_cost`) reads it for every pass, and the placement search and
its oracle read those costs.

The passes (:class:`LogitsPass`):

* ``reference`` — the reference's log-probs (verl ``compute_ref_log_prob``:
  ``calculate_entropy=False``; OpenRLHF ``ReferenceModelActor.forward``);
* ``old_log_prob`` / ``old_log_prob_entropy`` — the actor's recomputed log-probs, without or
  with the entropy. verl computes the entropy there (``compute_log_prob``:
  ``calculate_entropy=not is_lora``, ``verl/workers/megatron_workers.py`` and
  ``fsdp_workers.py``); OpenRLHF does not (``ppo_actor.py`` ``ActorModelActor.forward`` under
  ``torch.no_grad``, no ``return_entropy``) — :func:`old_log_prob_pass`;
* ``update`` — the actor's training forward and backward, without the entropy (verl
  ``entropy_coeff: 0``, ``verl/trainer/config/actor/actor.yaml``; OpenRLHF ``--actor.entropy_coef``
  default None).

Sources: verl volcengine/verl b178a3cd5, Megatron-LM NVIDIA/Megatron-LM d98e8a64dd, OpenRLHF
OpenRLHF/OpenRLHF 3c3be6234 (each row of :data:`_ELEMENT`). ``chunked`` and ``fused`` logits
(:class:`model.rlhf.spec.LogitsMode`) keep their own rule: FP32 logits and a 2,048-token
temporary, or one chunk of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework
from trainplan.model.rlhf.spec import LOGITS_CHUNK_TOKENS, LogitsMode, RLHFSpec

__all__ = [
    "LogitsPass",
    "logits_element_bytes",
    "logits_bytes",
    "logits_source",
    "old_log_prob_pass",
    "PassLogits",
    "pass_logits",
]


class LogitsPass(StrEnum):
    """A pass over the logits (module docstring)."""

    REFERENCE = "reference"
    OLD_LOG_PROB = "old_log_prob"
    OLD_LOG_PROB_ENTROPY = "old_log_prob_entropy"
    UPDATE = "update"


_MEGATRON_CAST = (
    "verl Megatron: Float16Module.forward(fp32_output=True) float16_to_fp32 val.float() on the "
    "last stage (megatron/core/transformer/module.py) — FP32 logits 4 B beside the BF16 output "
    "2 B at the cast; "
)
_MEGATRON_CE = (
    "vocab_parallel_log_probs_from_logits (verl/utils/megatron/tensor_parallel.py) → "
    "_VocabParallelCrossEntropy in place (calculate_predicted_logits: logits -= max, "
    "torch.exp(out=), megatron/core/tensor_parallel/cross_entropy.py)"
)
_FSDP = (
    "verl FSDP: dp_actor._forward_micro_batch under torch.autocast(bfloat16): BF16 logits 2 B "
    "(remove-padding); logprobs_from_logits → flash-attn cross_entropy_loss "
    "(verl/utils/torch_functional.py), no [T, V] temporary"
)
_DIV_BACKWARD = (
    "verl divides the logits by the temperature in place before the log-prob, unconditionally "
    "(dp_actor._forward_micro_batch logits_rmpad.div_(temperature); megatron_actor "
    "forward_backward_batch logits_processor logits.div_(temperature)); on the backward "
    "DivBackward (torch derivatives.yaml div_.Scalar: grad / other) returns a new gradient "
    "tensor while the cross-entropy's in-place gradient is still live"
)
_OPENRLHF = (
    "OpenRLHF Actor.forward (openrlhf/models/actor.py): output['logits'].to(torch.float32) — "
    "FP32 4 B beside the BF16 2 B at the cast; log_probs_from_logits → flash-attn "
    "cross_entropy_loss (openrlhf/models/utils.py)"
)

_ELEMENT: dict[tuple[Framework, LogitsPass], tuple[int, int, str]] = {
    (Framework.MEGATRON, LogitsPass.REFERENCE): (4, 2, _MEGATRON_CAST + _MEGATRON_CE),
    (Framework.MEGATRON, LogitsPass.OLD_LOG_PROB): (4, 2, _MEGATRON_CAST + _MEGATRON_CE),
    (Framework.MEGATRON, LogitsPass.OLD_LOG_PROB_ENTROPY): (
        4,
        8,
        "verl megatron_actor.forward_backward_batch logits_processor: logits_bak = "
        "logits.clone() (4 B) and vocab_parallel_entropy's normalized = logits - logits_max "
        "(4 B, _VocabParallelEntropy.forward) beside the FP32 logits",
    ),
    (Framework.MEGATRON, LogitsPass.UPDATE): (
        4,
        4,
        _MEGATRON_CAST + "the cross-entropy's softmax is the logits' storage and its gradient "
        "in place; " + _DIV_BACKWARD + ": FP32 4 B beside it (the cast's backward after, 4 + 2 B)",
    ),
    (Framework.FSDP2, LogitsPass.REFERENCE): (2, 0, _FSDP),
    (Framework.FSDP2, LogitsPass.OLD_LOG_PROB): (2, 0, _FSDP),
    (Framework.FSDP2, LogitsPass.OLD_LOG_PROB_ENTROPY): (
        2,
        8,
        _FSDP + "; entropy_from_logits, compiled as verl runs it by default (dp_actor.py: "
        "torch.compile(entropy_from_logits) unless use_torch_compile is false): softmax's FP32 "
        "input copy 4 B and output 4 B; run eagerly, logsumexp's own FP32 copy and its "
        "(x - max) temporary make it 2 + 12 = 14 B, not counted",
    ),
    (Framework.FSDP2, LogitsPass.UPDATE): (
        2,
        2,
        _FSDP
        + "; inplace_backward=True: the gradient overwrites the logits; "
        + _DIV_BACKWARD
        + ": BF16 2 B beside it",
    ),
    (Framework.DEEPSPEED, LogitsPass.REFERENCE): (4, 2, _OPENRLHF),
    (Framework.DEEPSPEED, LogitsPass.OLD_LOG_PROB): (4, 2, _OPENRLHF),
    (Framework.DEEPSPEED, LogitsPass.OLD_LOG_PROB_ENTROPY): (
        4,
        8,
        _OPENRLHF + "; compute_entropy: softmax 4 B and pd * logits 4 B over the FP32 logits",
    ),
    (Framework.DEEPSPEED, LogitsPass.UPDATE): (
        4,
        4,
        _OPENRLHF + "; its backward (inplace_backward=False) allocates an FP32 gradient "
        "torch.empty_like(logits) 4 B beside the saved logits",
    ),
}


def _row(framework: Framework | str, pass_: LogitsPass | str) -> tuple[int, int, str]:
    try:
        return _ELEMENT[Framework(framework), LogitsPass(pass_)]
    except (KeyError, ValueError):
        raise InputError(
            f"logits: no log-prob path for framework {framework!r} and pass {pass_!r} "
            "(megatron, fsdp2, deepspeed × reference, old_log_prob, old_log_prob_entropy, update)"
        ) from None


def logits_element_bytes(framework: Framework | str, pass_: LogitsPass | str) -> tuple[int, int]:
    """(logits, transient) bytes per element of ``[T, V/tp]`` of ``pass_`` under ``framework``'s
    path (:data:`_ELEMENT`, module docstring); their sum is the pass's peak over the logits.

    Examples
    --------
    >>> [sum(logits_element_bytes(f, p)) for f in ("megatron", "fsdp2", "deepspeed")
    ...  for p in ("reference", "old_log_prob_entropy", "update")]
    [6, 12, 8, 2, 10, 4, 6, 12, 8]
    """
    held, temp, _ = _row(framework, pass_)
    return held, temp


def logits_source(framework: Framework | str, pass_: LogitsPass | str) -> str:
    """Where :func:`logits_element_bytes`' figures come from (file and function)."""
    return _row(framework, pass_)[2]


def old_log_prob_pass(framework: Framework | str) -> LogitsPass:
    """The actor's old-log-prob pass under ``framework``: verl (``megatron``, ``fsdp2``) computes
    the entropy there, OpenRLHF (``deepspeed``) does not (module docstring)."""
    if Framework(framework) is Framework.DEEPSPEED:
        return LogitsPass.OLD_LOG_PROB
    return LogitsPass.OLD_LOG_PROB_ENTROPY


def logits_bytes(
    tokens: int,
    vocab: int,
    tp: int,
    mode: LogitsMode | str,
    chunk: int = LOGITS_CHUNK_TOKENS,
    *,
    framework: Framework | str = Framework.MEGATRON,
    pass_: LogitsPass | str = LogitsPass.REFERENCE,
) -> tuple[Fraction, Fraction]:
    """(logits, transient) bytes on one GPU for one micro-batch of ``tokens`` over a vocabulary
    of ``vocab`` split over ``tp``: ``full``, the framework's path for the pass
    (:func:`logits_element_bytes` × ``T·V/tp``); ``chunked``, FP32 logits ``4·T·V/tp`` and a
    ``4·min(T, chunk)·V/tp`` temporary (verl ``entropy_from_logits_with_chunking``); ``fused``,
    ``4·min(T, chunk)·V/tp`` each (fused linear cross-entropy).

    Examples
    --------
    A 7B GRPO micro-batch of 16,384 tokens over Qwen2.5's V = 152,064 (2,491,416,576 elements):
    verl Megatron's reference 4 + 2 B, its actor's old log-probs with the entropy 4 + 8 B.

    >>> [int(x) for x in logits_bytes(16384, 152064, 1, "full", pass_="reference")]
    [9965666304, 4982833152]
    >>> [int(x) for x in logits_bytes(16384, 152064, 1, "full", pass_="old_log_prob_entropy")]
    [9965666304, 19931332608]
    >>> [int(x) for x in logits_bytes(16384, 152064, 1, "chunked")]
    [9965666304, 1245708288]
    >>> [int(x) for x in logits_bytes(16384, 152064, 1, "fused")]
    [1245708288, 1245708288]
    """
    mode = LogitsMode(mode)
    part = Fraction(4 * min(tokens, chunk) * vocab, tp)
    if mode is LogitsMode.FUSED:
        return part, part
    if mode is LogitsMode.CHUNKED:
        return Fraction(4 * tokens * vocab, tp), part
    held, temp = logits_element_bytes(framework, pass_)
    return Fraction(held * tokens * vocab, tp), Fraction(temp * tokens * vocab, tp)


_MODE_SOURCE = {
    LogitsMode.CHUNKED: "FP32 logits [tokens × V]/tp; log-softmax/entropy 2,048 tokens at a time "
    "(verl entropy_from_logits_with_chunking)",
    LogitsMode.FUSED: "fused linear cross-entropy: logits and log-softmax one 2,048-token chunk at "
    "a time (Liger Kernel; verl use_fused_kernels)",
}


@dataclass(frozen=True)
class PassLogits:
    """One pass's bytes over the logits of a micro-batch on one GPU, and their source."""

    logit: Fraction
    temp: Fraction
    source: str


def pass_logits(spec: RLHFSpec, tokens: int, vocab: int, tp: int, pass_: LogitsPass) -> PassLogits:
    """:func:`logits_bytes` of ``pass_`` under ``spec``'s framework and logits mode, with the
    source of its figures."""
    logit, temp = logits_bytes(
        tokens, vocab, tp, spec.logits, spec.logits_chunk_tokens, framework=spec.framework,
        pass_=pass_,
    )  # fmt: skip
    source = _MODE_SOURCE.get(spec.logits) or logits_source(spec.framework, pass_)
    return PassLogits(logit, temp, f"{pass_}: {source}")
