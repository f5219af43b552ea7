"""Megatron-DeepSpeed's pipeline model (pp > 1) recomputes every layer or none: 4efb479d
``GPTModelPipe.__init__`` gives DeepSpeed's ``PipelineModule`` one
``activation_checkpoint_interval`` (``recompute_num_layers`` only under ``--recompute-method
uniform``; block: 0), and ``PipelineModule.forward`` (edaa72212) checkpoints runs of that many
transformer layers on every stage. Per-stage counts ("the first N layers of each stage") are
refused there; without a pipeline Megatron-DeepSpeed's ``GPTModel`` runs the block method."""

import pytest

import trainplan
from trainplan.model.errors import PlannerError

MIXTRAL = dict(
    model="mixtral-8x7b", gpu="H100-SXM", framework="deepspeed", dp=8, pp=2, ep=8, zero_stage=1,
    micro_batch_size=1, global_batch_size=128, recompute="none",
)  # fmt: skip


def test_per_stage_counts_refused_under_the_pipeline():
    with pytest.raises(PlannerError) as err:
        trainplan.evaluate(**MIXTRAL, recompute_layers=(16, 15))
    assert str(err.value).startswith(
        "recompute_layers: 16,15 does not run: framework deepspeed with pp 2 recomputes every "
        "layer or none"
    )
    assert str(err.value).endswith("use recompute full or none")


def test_no_count_and_no_pipeline_still_run():
    none = trainplan.evaluate(**MIXTRAL, recompute_layers=(0, 0))
    assert none.layout.recompute_layers == (0, 0)
    flat = trainplan.evaluate(
        model="llama3-8b", gpu="H100-SXM", framework="deepspeed", dp=8, recompute="none",
        recompute_layers=(4,),
    )  # fmt: skip
    assert flat.layout.recompute_layers == (4,)
