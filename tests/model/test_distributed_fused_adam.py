"""Apex's ``DistributedFusedAdam`` as NeMo 24.07 runs it (``distributed_optimizer =
distributed_fused_adam``), against Megatron-Core's distributed optimizer: every figure derived
here from the code cited in :func:`trainplan.model.mechanisms._apex_distributed_fused_adam`
(Apex 810ffae3 ``distributed_fused_adam.py``; NeMo r2.0.0rc1 ``distributed_adam.py``,
``megatron_base_model.py``, ``megatron_gpt_model.py``)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout
from trainplan.model.memory import model_state
from trainplan.model.offload import Offload
from trainplan.model.specs import TrainingSpec
from trainplan.optimizer.case import Case

APEX = "distributed_fused_adam"
P = Fraction(10_000_000_000)


def _state(**training):
    t = TrainingSpec(seq_len=1, global_batch_size=32, **training)
    return model_state(P, Fraction(0), Layout(dp=32, framework="megatron", zero_stage=1), t)


def test_apex_holds_a_gradient_shard_and_the_master_as_a_remainder():
    """BF16 gradients on dp 32. Megatron-Core: main_grad 2P whole, FP32 master and moments
    12P/32, the 16-bit shard copied to FP32 for the step 4P/32. Apex: the grad buffer 2P whole
    (``_init_grad_buffer`` in grad_sync_dtype), the master as a 16-bit remainder beside the BF16
    weight and FP32 moments 2 + 8 = 10P/32 (``store_param_remainders``), and the reduce-scatter's
    own shard 2P/32 at the step (``sync_grads_shard``), read as it is by the fused kernel."""
    mcore = _state(gradient_bytes=2)
    apex = _state(gradient_bytes=2, distributed_optimizer=APEX)
    assert (
        (mcore.weights_bytes, mcore.gradients_bytes)
        == (apex.weights_bytes, apex.gradients_bytes)
        == (2 * P, 2 * P)
    )
    assert (mcore.optimizer_bytes, mcore.step_bytes) == (12 * P / 32, 4 * P / 32)
    assert (apex.optimizer_bytes, apex.step_bytes) == (10 * P / 32, 2 * P / 32)
    # Apex's default grad_sync_dtype is the optimizer's (FP32): 4P whole, 4P/32 shard
    fp32 = _state(distributed_optimizer=APEX)
    assert (fp32.gradients_bytes, fp32.step_bytes) == (4 * P, 4 * P / 32)
    # NeMo's optim.dtype bf16: moments in BF16 and no master (store_params False): 4P/32
    bf16 = _state(gradient_bytes=2, optimizer_bytes=4, distributed_optimizer=APEX)
    assert bf16.optimizer_bytes == 4 * P / 32


GPT3_175B = {"model": "gpt3-175b", "device": "H100-SXM", "dp": 4, "tp": 4, "pp": 2,
             "micro_batch_size": 1, "global_batch_size": 64, "seq_len": 2048}  # fmt: skip


def test_embedding_gradients_stay_fp32_on_the_stages_that_hold_them():
    """NeMo marks the word and position embeddings (and the last stage's tied copy)
    ``_with_fp32_optimizer``: FP32 gradient buckets under a BF16 grad_sync_dtype. GPT-3 175B at
    tp 4: 50,688 · 12,288 ÷ 4 + 2,048 · 12,288 = 180,879,360 embedding elements on stage 0 and
    the tied copy's 155,713,536 on stage 1, 2 B more each."""
    base = {**GPT3_175B, "gradient_bytes": 2, "distributed_optimizer": APEX}
    est = Case.of(**base).evaluate()
    extra = [s.state.gradients_bytes - 2 * s.dense_params for s in est.stages]
    assert extra == [2 * 180_879_360, 2 * 155_713_536]
    # the ZeRO table's ZeRO-1 row is the busiest stage's model state, embeddings included
    zero1 = next(r for r in est.zero_table if r.zero_stage == 1)
    assert zero1.model_state_bytes == est.stages[est.busiest].state.total_bytes
    mcore = Case.of(**{**base, "distributed_optimizer": "mcore_distributed_optim"}).evaluate()
    assert [s.state.gradients_bytes - 2 * s.dense_params for s in mcore.stages] == [0, 0]
    fp32 = Case.of(**{**base, "gradient_bytes": 4}).evaluate()
    assert [s.state.gradients_bytes - 4 * s.dense_params for s in fp32.stages] == [0, 0]


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        ({"framework": "fsdp2", "zero_stage": 3}, "needs `framework` megatron with `zero_stage` 1"),
        ({"zero_stage": 0}, "not megatron ZeRO-0"),
        ({"optimizer": "muon"}, "optimizer muon is not"),
        ({"precision": "fp8", "fp8_param_gather": True}, "whole FP32 master"),
        ({"offload": Offload(optimizer=1)}, "no optimizer or parameter offload"),
    ],
)
def test_refused_where_apex_does_not_run(extra, rule):
    with pytest.raises(LayoutError, match=rule) as err:
        Case.of(**{**GPT3_175B, "distributed_optimizer": APEX, **extra}).evaluate()
    assert "\n" not in str(err.value) and str(err.value).startswith("distributed_optimizer: ")


def test_refused_with_expert_parallelism():
    """NeMo refuses Apex's optimizer with ep > 1 (``MegatronGPTModel.__init__``, "Expert
    parallelism is currently not supporting Apex distributed optimizer"); a search took Mixtral
    at dp 64 × ep 8 under it at 73.09 GB where the runnable optimizer needs 88.77 GB."""
    moe = {"model": "mixtral-8x7b", "device": "H100-SXM", "seq_len": 4096, "global_batch_size": 128,
           "dp": 64, "ep": 8, "etp": 1, "gradient_bytes": 2,
           "distributed_optimizer": APEX}  # fmt: skip
    with pytest.raises(LayoutError, match="does not run with expert parallelism") as err:
        Case.of(**moe).evaluate()
    assert "\n" not in str(err.value) and str(err.value).startswith("distributed_optimizer: ")
    assert Case.of(**{**moe, "ep": 1}).evaluate().layout.ep == 1


def test_the_search_runs_it_through_the_same_terms():
    """A search under distributed_fused_adam finds a megatron layout (the axes' legality runs
    without it; its rule masks the other stages in the tables) whose figures are evaluate's:
    Llama 3 8B's word embedding, 128,256 · 4,096 = 525,336,576 elements ÷ tp, keeps 2 B more."""
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.search import search
    from trainplan.optimizer.space import SearchSpace

    case = Case.of(**{"model": "llama3-8b", "device": "H100-SXM", "seq_len": 4096,
                       "global_batch_size": 64, "gradient_bytes": 2,
                       "distributed_optimizer": APEX})  # fmt: skip
    space = SearchSpace(num_gpus=8, tp=(1,), pp=(1,), frameworks=("megatron",),
                        micro_batch_size=(1,), recomputes=("none",))  # fmt: skip
    result = search(Problem(jobs=(Job(case, 8, "apex"),), space=space))
    assert result.status == "optimal"
    est = result.best.estimate
    assert est.layout.zero_stage == 1 and est.layout.pp == 1
    stage = est.stages[0]
    embedding = Fraction(525_336_576, est.layout.tp)  # vocabulary-parallel (V a multiple of 256)
    assert stage.state.gradients_bytes == 2 * stage.dense_params + 2 * embedding
