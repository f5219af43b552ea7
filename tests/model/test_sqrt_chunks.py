"""√n recomputation as Megatron-LM runs it: one ``--recompute-num-layers k`` (round(√n) of the
stage with the most layers, what the launch line writes), applied by the uniform method to each
model chunk's own layers. Source: Megatron-LM d98e8a64dd ``megatron/core/recompute.py``
``checkpointed_forward`` walks ``num_layers_per_pipeline_rank``, which
``megatron/core/transformer/transformer_block.py`` ``TransformerBlock.__init__`` sets to
``len(self.layers)`` — the layers of the block's model chunk — checkpointing the input of each
run ``[i, min(i + k, n))``."""

from __future__ import annotations

from tests.archs import llama_like
from trainplan.model.estimate import Estimate
from trainplan.model.layout import Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.stage_bytes import chunk_segment_forms, stage_forms
from trainplan.model.terms.activation_fields import layer_figures
from trainplan.optimizer.case import Case


def _case(layers: int = 16, **layout: object) -> Case:
    arch = llama_like(layers, 2048, 16, 5504, 32000)
    return Case.of(
        model=ModelSpec(name="small", source="test", arch=arch), tp=2, seq_len=2048,
        global_batch_size=8, device="H100-SXM", recompute="sqrt", **layout,
    )  # fmt: skip


def _figures(e: Estimate) -> tuple:
    """(full, checkpoint, input) bytes of one dense layer for one micro-batch of ``e``."""
    lay = e.layout
    fields = (lay.micro_batch_size, lay.cp, lay.tp, lay.sp, lay.cp_kind, lay.ep, lay.expert_tp)
    q = layer_figures(e.model.arch, e.training, *fields, lay.framework)
    return q[0], q[2], q[3]


def test_interleaved_sqrt_checkpoints_each_chunk():
    """16 layers, pp 2, v 2: 8 layers a stage in two chunks of 4; k = round(√8) = 3. Megatron
    cuts each chunk [3, 1]: 2 checkpoints a chunk, 4 a stage per micro-batch (one pass over the
    stage's 8 layers would keep ⌈8/3⌉ = 3). The transient, while a chunk's 3-layer segment is
    recomputed: 3 full layers less the segment's input less the chunk's later checkpoint (its
    1-layer segment's, freed by backward first): 3·full − input − checkpoint."""
    kept, transients = chunk_segment_forms(((False,) * 4,) * 2, 3)
    assert [k[:4] for k in kept] == [(0, 0, 2, 0)] * 2
    e = _case(pp=2, schedule="interleaved", virtual_stages=2).evaluate()
    a = e.stages[0].activations
    full, ckpt, inp = _figures(e)
    assert a.per_microbatch_bytes == 4 * ckpt
    assert a.recompute_transient_bytes == 3 * full - inp - ckpt
    # the chunks are held as the interleaved schedule keeps them: both weigh 2 checkpoints
    assert a.layers_bytes == 2 * ckpt * 2 * a.microbatches_in_flight


def test_one_k_on_every_stage():
    """Uneven stages 9 and 4 (v = 1): k = round(√9) = 3 on both, as the launch line's one
    --recompute-num-layers. Stage 1 cuts its 4 layers [3, 1]: 2 checkpoints and the transient
    3·full − input − checkpoint (with its own round(√4) = 2, [2, 2]: 2·full − input)."""
    e = _case(13, pp=2, stage_layers="9,4").evaluate()
    full, ckpt, inp = _figures(e)
    one = e.stages[1].activations
    assert one.per_microbatch_bytes == 2 * ckpt
    assert one.recompute_transient_bytes == 3 * full - inp - ckpt
    assert e.stages[0].activations.per_microbatch_bytes == 3 * ckpt
    kept, transients = stage_forms((False,) * 4, Recompute.SQRT, 3)
    assert kept[:4] == (0, 0, 2, 0) and max(t[0] for t in transients) == 3
