"""One row of the per-stage tables (:mod:`optimizer.stage_tables`): what one pipeline stage
costs holding n layers of which k are fully recomputed, and the units its passes are held in
for the order's own step, 1F1B or interleaved (:mod:`optimizer.stage_exact`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PASS_UNITS", "StageOption"]


PASS_UNITS = 1024
"""Units per ns of :attr:`StageOption.forward` and :attr:`StageOption.backward`: fine enough that
a path of the order over m micro-batches (at most about 2·(m + pp) passes, each rounded down by
less than a unit) loses under a ns at m up to about 500 (:mod:`optimizer.stage_exact`), coarse
enough that CP-SAT's sums stay far inside 64 bits (a second of work is 2^40 units)."""


@dataclass(frozen=True, slots=True)
class StageOption:
    """One stage holding ``layers`` layers, ``recomputed`` of them fully recomputed, that fits."""

    layers: int
    """n, transformer layers on the stage."""
    recomputed: int
    """k, fully recomputed: the first k layers of each of the stage's model chunks (Megatron-LM's
    block method; the stage's first k when v = 1), k ≤ its largest chunk's layers."""
    paced_ns: int
    """The step's pipeline term if this stage were the slowest, whole ns:
    ``round(m·t·(1 + bubble_ratio)·1e9)``, t its micro-batch (operations and exposed tp, cp, ep
    collectives; :func:`model.terms.roofline.stage_parts_term`)."""
    bare_ns: int
    """Its micro-batch without recomputation, whole ns (the dp overlap window when it is the
    longest: :func:`model.terms.roofline.slowest_microbatch`)."""
    params_key: int
    """Dense parameters on one GPU of the stage (after tp) × :meth:`optimizer.stage_view.StageView.params_scale`, whole:
    with :attr:`expert_key` the busiest stage's (:func:`model.terms.stage_params.busiest_params`)
    decide the dp bytes, the optimizer step and offload."""
    peak_bytes: int
    """Its peak bytes per GPU, rounded up (:func:`model.terms.peak.stage_memory_term`)."""
    residue: int = 0
    """Where the stage starts within the period of the model's layers
    (:func:`optimizer.stage_rules.start_residue`; 0 for the first stage and for a model whose
    layers after a leading block are alike): its layers' spans and kinds (MoE or dense), and so
    its figures, read it."""
    forward: int = 0
    """Its forward of one micro-batch in :data:`PASS_UNITS` per ns, rounded down, and
    :attr:`backward` its backward (recomputation included):
    :func:`model.terms.pipeline_span.stage_passes` of its micro-batch and the same without
    recomputation, the passes the one-chunk order's step reads (:mod:`model.pipeline_onef`).
    Rounded down, so a path's length over them (:func:`model.pipeline_paths.path_seconds`)
    never exceeds the evaluator's."""
    backward: int = 0
    expert_key: int = 0
    """Routed-expert parameters on one GPU of the stage (after etp·ep) × :attr:`params_key`'s
    scale, apart from the dense ones: ZeRO shards them over edp, the dense over dp
    (:func:`model.terms.traffic.dp_group_traffic_bytes`); 0 for a dense model."""
    held: tuple[int, int] = (0, 0)
    """(transformer layers, of them MoE) the evaluator counts on the stage, MTP blocks included
    (:func:`model.terms.activation_fields.stage_layer_counts`): their maxima over the stages are
    :func:`model.terms.traffic.most_layers`, which the dp buckets read."""
    chunk_forward: tuple[int, ...] = ()
    """Interleaved (v > 1), each of the stage's v model chunks' forward of one micro-batch in
    :data:`PASS_UNITS` per ns, rounded down, its first chunk first, and :attr:`chunk_backward`
    their backwards (:func:`model.terms.pipeline_span.chunk_seconds` of the row's layout: the
    chunk's layers of each span group, those recomputed, the embedding on the first stage's
    first chunk and the output layer on the last stage's last): the passes the interleaved
    order's step reads (:mod:`model.interleaved_paths`). Empty at v = 1, where
    :attr:`forward` and :attr:`backward` are the stage's one chunk's."""
    chunk_backward: tuple[int, ...] = ()

    def passes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(each chunk's forward, each chunk's backward) of one micro-batch, :data:`PASS_UNITS`
        per ns: :attr:`chunk_forward`, :attr:`chunk_backward`, or at v = 1 the stage's
        ``((forward,), (backward,))``."""
        if self.chunk_forward:
            return self.chunk_forward, self.chunk_backward
        return (self.forward,), (self.backward,)
