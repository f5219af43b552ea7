"""verl's FSDP1 root unit: what ``rlhf --framework fsdp2`` holds beyond FSDP2's units.

verl's FSDP workers (volcengine/verl b178a3cd5, ``verl/workers/fsdp_workers.py``
``_build_model_optimizer``) run FSDP1 for every role by default: ``strategy: fsdp`` for the
actor (the reference follows it), the critic and the reward model in
``trainer/config/_generated_ppo_trainer.yaml``. ``FullyShardedDataParallel`` with flat
parameters (``use_orig_params: false``), ``FULL_SHARD`` (``reshard_after_forward: true``),
``MixedPrecision(param_dtype=bf16, reduce_dtype=fp32)``, ``forward_prefetch: false`` and the
default ``BackwardPrefetch.BACKWARD_PRE``, wrapping only the model's ``_no_split_modules``
(``get_fsdp_wrap_policy``, ``verl/utils/fsdp_utils.py``: the decoder layers), so the
embedding, the final norm and the output layer form the root unit, one flat parameter.
The ``fsdp2`` profile counts FSDP2's units (:func:`model.mechanisms._fsdp2`): two gathered
units of the largest unit (here the embedding or the output layer) and one unit's BF16 and FP32
gradients, at every moment of forward and backward. FSDP1's root differs (PyTorch 2.13,
``torch/distributed/fsdp/_runtime_utils.py``):

* ``_post_forward_reshard`` frees a unit's unsharded flat parameter after forward only ``not
  state._is_root``: the root unit stays gathered from its forward to the end of backward
  (``_post_backward_reshard``; in a no-grad forward until verl's own
  ``actor_module._handle.reshard(True)`` after ``compute_log_prob`` / ``compute_ref_log_prob``).
* The module parameters are views of the flat parameter (``_use_unsharded_views``), so its
  gradient is made by ``split_with_sizes``'s backward once every view's gradient is in: the
  output layer's BF16 gradient, made first in backward, waits until the embedding's, made last.
* A layer's backward holds the layer and the next, prefetched (``BACKWARD_PRE``), and the
  layer's unsharded BF16 gradient with its FP32 copy for the reduce-scatter
  (``_post_backward_hook``: ``flat_param.grad.to(handle._reduce_dtype)``).

So at a layer's backward a GPU holds, in BF16 elements, the root ``R`` (embedding + final norm
+ output layer), the output layer's waiting gradient ``O``, two layers ``2·L`` and the layer's
gradients at 2 + 4 B: ``2·R + 2·O + 2·2·L + 6·L``; in a forward, the root and the layer
computed: ``2·R + 2·L``. What is counted beyond evaluate()'s units is the excess of each over
``gathered_bytes + buffers_bytes`` (backward) or ``gathered_bytes`` (forward), none where the
units count more: Qwen2.5 7B (R = 1,089,998,336, O = 544,997,376, L = 233,057,792) holds
5,600,569,344 B at a layer's backward against FSDP2's 5,449,973,760: 150,595,584 B more in the
update, and 2,646,112,256 B against 2,179,989,504 in the scoring forward: 466,122,752 B more.

Not counted: the root's own backward end, when the embedding's gradient arrives and the
concatenated flat gradient (``2·R``) and its FP32 copy (``4·R``) follow, with no layer's
activations live any more (below the layers' backward wherever those hold more than ``6·R``).
The shards of every role and the reference's ``CPUOffload(offload_params=True)`` are counted as
FSDP2's (:data:`model.rlhf.roles.VERL_FSDP_SOURCE`).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.estimate import Estimate
from trainplan.model.frameworks import Framework
from trainplan.model.memory import ModelState
from trainplan.model.params import count_params, layer_params
from trainplan.model.rlhf.roles import Term

__all__ = [
    "GRADS_FREED_SOURCE",
    "ROOT_SOURCE",
    "grads_term",
    "held_state",
    "root_unit_bytes",
    "root_unit_extra",
    "root_unit_terms",
]

ROOT_SOURCE = (
    "verl b178a3cd5 fsdp_workers.py _build_model_optimizer: FSDP1 (strategy fsdp), decoder "
    "layers wrapped, embedding + final norm + output layer the root unit; torch 2.13 "
    "fsdp/_runtime_utils.py _post_forward_reshard (not state._is_root): the root stays gathered "
    "to the end of backward, the output layer's BF16 gradient waiting for the embedding's "
    "(split_with_sizes backward of the flat parameter); beyond FSDP2's units (model.rlhf.verl_fsdp1)"
)


def root_unit_bytes(est: Estimate, backward: bool) -> Fraction:
    """Bytes FSDP1's units hold on a GPU of ``est``'s (only) stage at a layer's backward
    (``backward``) or in a forward (the module docstring's rules); 0 for a size-only model or
    where nothing is sharded (one rank: FSDP1 runs ``NO_SHARD``).

    >>> from trainplan.optimizer.case import Case
    >>> est = Case.of(model="qwen2.5-7b", num_gpus=64, dp=64, framework="fsdp2",
    ...               zero_stage=3, global_batch_size=64, seq_len=4096).evaluate()
    >>> int(root_unit_bytes(est, True)), int(root_unit_bytes(est, False))
    (5600569344, 2646112256)
    """
    arch, lay = est.model.arch, est.layout
    if arch is None or lay.dp * lay.cp == 1:
        return Fraction(0)
    counts = count_params(arch, est.padded_vocab_size or arch.vocab_size)
    root = counts.embedding + counts.final_norm + counts.output
    waiting = counts.output or counts.embedding  # tied: the one matrix's output-layer gradient
    layer = max(
        (lambda p: p.attention + p.norms + p.ffn_dense + p.experts)(layer_params(arch, j))
        for j in range(arch.num_layers)
    )
    if backward:
        return Fraction(2 * root + 2 * waiting + 2 * 2 * layer + (2 + 4) * layer)
    return Fraction(2 * root + 2 * layer)


def root_unit_extra(est: Estimate, backward: bool) -> Fraction:
    """What FSDP1's root unit adds, under the ``fsdp2`` profile (verl), to evaluate()'s figure on
    its stage: :func:`root_unit_bytes` less the FSDP2 units counted there (``gathered_bytes``,
    and ``buffers_bytes`` at the backward), at least 0; 0 for another framework."""
    if est.layout.framework is not Framework.FSDP2 or len(est.stages) != 1:
        return Fraction(0)
    state = est.stages[0].state
    counted = state.gathered_bytes + (state.buffers_bytes if backward else 0)
    return max(Fraction(0), root_unit_bytes(est, backward) - counted)


def root_unit_terms(est: Estimate, backward: bool) -> list[Term]:
    """The term of :func:`root_unit_extra` (the update's or the scoring forward's); none when
    0."""
    extra = root_unit_extra(est, backward)
    if not extra:
        return []
    phase, when = ("training", "through backward") if backward else ("scoring", "in the forward")
    name = f"FSDP1 root unit gathered {when} (verl), beyond FSDP2's units"
    return [Term(name, phase, extra, "bytes", ROOT_SOURCE)]


GRADS_FREED_SOURCE = (
    "verl b178a3cd5 dp_actor.py DataParallelPPOActor.update_policy and dp_critic.py "
    "DataParallelPPOCritic.update_critic end with optimizer.zero_grad() (torch 2.13 "
    "Optimizer.zero_grad, set_to_none=True: each FSDP1 FlatParameter's FP32 gradient shard "
    "freed until the next update's backward)"
)


def held_state(framework: Framework, state: ModelState) -> Fraction:
    """What a trainable role's ``state`` keeps on the GPU between its updates: all of it, but
    under ``fsdp2`` (verl's FSDP workers) without its gradients, which the update frees
    (:data:`GRADS_FREED_SOURCE`); they are part of the update's own peak.

    Qwen2.5 7B's actor at dp 8: weights and the two Adam moments, 3 × 3,807,808,256 B, kept;
    its FP32 gradients, 4 × 7,615,616,512 / 8 = 3,807,808,256 B, only in the update.

    >>> from trainplan.optimizer.case import Case
    >>> est = Case.of(model="qwen2.5-7b", num_gpus=8, dp=8, framework="fsdp2",
    ...               zero_stage=3, global_batch_size=8, seq_len=4096).evaluate()
    >>> st = est.stages[0].state
    >>> int(st.gradients_bytes), int(st.total_bytes - held_state(Framework.FSDP2, st))
    (3807808256, 3807808256)
    >>> held_state(Framework.MEGATRON, st) == st.total_bytes
    True
    """
    if framework is Framework.FSDP2:
        return Fraction(state.total_bytes - state.gradients_bytes)
    return Fraction(state.total_bytes)


def grads_term(framework: Framework, value: Fraction, source: str) -> Term:
    """The trainable role's gradients term: held in every phase, or under ``fsdp2`` (verl) in
    the training phase only (:func:`held_state`)."""
    if framework is Framework.FSDP2:
        return Term("gradients (freed after each update)", "training", value, "bytes",
                    f"{source}; {GRADS_FREED_SOURCE}")  # fmt: skip
    return Term("gradients", "held", value, "bytes", source)
