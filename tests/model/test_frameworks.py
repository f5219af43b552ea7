"""Framework profiles (issue 9): peak memory and traffic of one mechanism, per framework.

Figures held here, each derived in the test:

* DeepSpeed ZeRO-2, P = 13e9 on N = 8 GPUs: peak 2P + 18P/N = 55.25e9 B (DeepSpeed's own
  ``estimate_zero2_model_states_mem_needs`` since PR #5099; deepspeedai/DeepSpeed #3734 measured
  a 52.37 GiB = 56.23e9 B peak for that run, activations and buffers included).
* DeepSpeed ZeRO-3's buffers at their default sizes (``deepspeed/runtime/zero/config.py``) and
  FSDP2's per-unit gradient buffer.
* Llama-2 7B at tp 2 holds 6,738,681,856 B of bf16 weights per GPU: its 266,240 norm weights
  stay whole on each tensor-parallel rank (6,738,415,616 if everything were split).
* Mixtral 8x7B with tp 2, ep 8, etp 1: 45,097,156,608 routed-expert parameters / 8 per rank.
* Megatron-LM's table (docs/user-guide/features/dist_optimizer.md): 18 and 6 + 12/d B/param.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.comm_layers import NOTHING_AGAIN, recomputed_sends, tp_bytes
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import (
    DEEPSPEED_PREFETCH_BUCKET_ELEMENTS,
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    DEEPSPEED_SUB_GROUP_ELEMENTS,
    ZERO_STAGES,
    Framework,
)
from trainplan.model.layout import Layout, Recompute
from trainplan.model.mechanisms import mechanism
from trainplan.model.memory import model_state
from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.optimizer.case import Case

T = TrainingSpec(seq_len=1, global_batch_size=8)
P13 = Fraction(13 * 10**9)


def test_deepspeed_zero2_peak_is_2p_plus_18p_over_n():
    """2 bf16 params + (2 bf16 grads + 2 bf16 flat copy + 4 fp32 cast + 4 fp32 params + 8 Adam)
    / N at the step's cast (``stage_1_and_2.py`` ``step``: the flat BF16 copy of the partition
    is cast to FP32 before ``del flat_grad_partition``; was 18 / N without the copy)."""
    st = model_state(P13, Fraction(0), Layout(dp=8, framework="deepspeed", zero_stage=2), T)
    assert st.optimizer_step_bytes == 2 * P13 + 20 * P13 / 8 == 58_500_000_000
    # backward: without the step's two tensors, plus the 5e8-element IPG bucket and
    # allreduce_bucket's flattened copy of it (self.flatten(bucket), 5e8 × 2 B more)
    assert st.backward_bytes == 2 * P13 + 14 * P13 / 8 + 2 * 2 * DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    assert st.optimizer_step_bytes > st.backward_bytes  # the step is the peak without activations
    # deepspeedai/DeepSpeed #3734, ZeRO-2 "max" allocated, 52.37 GiB = 56.23e9 B: between the
    # step's tensors without the flat copy (2 + 18/N: 55.25e9) and with it (58.5e9). Not
    # re-derived: the count with the copy is what the step's code holds once Adam's moments
    # exist (from the second step on); a first-step measurement creates them after the cast.
    measured = 52.37 * 2**30
    assert 2 * P13 + 18 * P13 / 8 < measured < st.optimizer_step_bytes


def test_deepspeed_zero3_buffers_at_their_default_sizes():
    """ZeRO-3 keeps 16P/N, gathers two layer units (current and prefetched), holds the IPG bucket
    (reduce_bucket_size 5e8 elements × 2 B, allocated in ``stage3.py``'s ``__init__``, so held
    through the step as well) and one sub-group's gradients during the step: the flattened BF16
    copy (``_prepare_fp32_grad_for_sub_group``: ``self.flatten(...)``, 2 B) beside its FP32 cast
    (4 B), sub_group_size 1e9 elements × 6 B."""
    unit = Fraction(400_000_000)  # a layer's parameters on this GPU
    lay = Layout(dp=8, framework="deepspeed", zero_stage=3)
    st = model_state(P13, Fraction(0), lay, T, gather_unit=(unit, Fraction(0)))
    assert st.total_bytes == 16 * P13 / 8
    assert st.gathered_bytes == 2 * 2 * unit  # whole, beside the local shard
    assert st.buffers_bytes == 2 * DEEPSPEED_REDUCE_BUCKET_ELEMENTS == 10**9
    assert st.step_bytes == 6 * min(P13 / 8, DEEPSPEED_SUB_GROUP_ELEMENTS) + 10**9 == 7 * 10**9
    assert DEEPSPEED_PREFETCH_BUCKET_ELEMENTS == 5 * 10**7  # stage3_prefetch_bucket_size
    # memory does rise with the stage here: ZeRO-3's step and buckets against ZeRO-2's
    zero2 = model_state(P13, Fraction(0), lay.with_(zero_stage=2), T)
    assert st.total_bytes < zero2.total_bytes


def test_fsdp2_units_and_sharded_master():
    """FSDP2 (torchtitan's bf16 params, fp32 reduce): 4 B fp32 sharded master + 4 B fp32 sharded
    gradients + 8 B moments = 16/D; ZeRO-3 gathers two bf16 units; in backward a unit's bf16
    gradients and their fp32 copy (6 B per parameter of the unit) wait for the reduce-scatter."""
    unit = Fraction(10**8)
    lay = Layout(dp=8, framework="fsdp2", zero_stage=3)
    st = model_state(P13, Fraction(0), lay, T, gather_unit=(unit, Fraction(0)))
    assert (st.weights_bytes, st.gradients_bytes, st.optimizer_bytes) == (
        4 * P13 / 8,
        4 * P13 / 8,
        8 * P13 / 8,
    )
    assert st.gathered_bytes == 2 * 2 * unit  # whole, beside the local shard
    assert st.buffers_bytes == 6 * unit and st.step_bytes == 0
    zero2 = model_state(P13, Fraction(0), lay.with_(zero_stage=2), T, gather_unit=(unit, 0))
    assert zero2.weights_bytes == 2 * P13 + 4 * P13 / 8 and zero2.gathered_bytes == 0


def test_megatron_table_bytes_per_parameter():
    """Megatron-LM docs: bf16 params with fp32 gradients 18 (DDP) and 6 + 12/d (distributed
    optimizer); fp16 params and gradients 20 and 4 + 16/d (the step copies gradients to fp32)."""
    d = 8
    for g, ddp, dist in ((None, 18, (6, 12)), (2, 20, (4, 16))):
        m0, m1 = mechanism("megatron", 0, 2, g), mechanism("megatron", 1, 2, g)
        assert m0.weights_full + m0.grads_full + m0.optimizer_full + m0.step_full == ddp
        assert (m1.weights_full + m1.grads_full, m1.optimizer_sharded + m1.step_sharded) == dist
        st = model_state(P13, Fraction(0), Layout(dp=d, zero_stage=1), TrainingSpec(
            seq_len=1, global_batch_size=d, gradient_bytes=g))  # fmt: skip
        assert st.optimizer_step_bytes == (dist[0] + Fraction(dist[1], d)) * P13


LLAMA2_7B = ModelSpec(
    name="llama2-7b",
    arch=Architecture(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        ffn_hidden_size=11008,
        vocab_size=32000,
        mlp="swiglu",
        norm="rmsnorm",
    ),
)


@pytest.mark.parametrize(
    ("framework", "weights"), [("megatron", 6_738_681_856), ("textbook", 6_738_415_616)]
)
def test_norms_stay_whole_on_every_tp_rank(framework, weights):
    """Llama-2 7B (6,738,415,616 parameters) at tp 2: the 2·32 + 1 RMSNorms of 4,096 (266,240
    parameters) are replicated, so a rank holds (N − 266,240)/2 + 266,240 parameters:
    2 B × 3,369,340,928 = 6,738,681,856 B; the textbook divides everything by tp."""
    norms = (2 * 32 + 1) * 4096
    assert norms == 266_240
    lay = Layout(tp=2, zero_stage=0, framework=framework)
    from trainplan.model.estimate import stage_memory

    st = stage_memory(LLAMA2_7B, TrainingSpec(seq_len=4096, global_batch_size=1), lay)[0]
    assert st.state.weights_bytes == weights
    if framework == "megatron":
        assert weights == 2 * ((6_738_415_616 - norms) // 2 + norms)


def test_mixtral_expert_tensor_parallel_one():
    """Mixtral 8x7B, tp 2, ep 8, etp 1 on 8 GPUs (dp 4): experts are split over etp·ep = 8 ranks
    only, 45,097,156,608 / 8 = 5,637,144,576 per rank (32 layers × 8 experts × 3·4096·14336),
    and the expert data-parallel group is tp·dp·cp/(etp·ep) = 1."""
    case = Case.of(
        **{
            "model": "mixtral-8x7b",
            "tp": 2,
            "dp": 4,
            "ep": 8,
            "etp": 1,
            "num_gpus": 8,
            "global_batch_size": 4,
            "seq_len": 4096,
        }  # fmt: skip
    )
    est = case.evaluate()
    assert 32 * 8 * 3 * 4096 * 14336 == 45_097_156_608
    assert est.peak.expert_params == Fraction(45_097_156_608, 8) == 5_637_144_576
    assert est.layout.expert_shard_degree == 1 and est.layout.expert_tp == 1
    # with etp = tp = 2 (default) the same ep is illegal: ep must divide dp·cp = 4
    with pytest.raises(LayoutError, match="ep: 8 must divide dp × cp = 4"):  # model.layout
        Case.of(**{**case_params(), "etp": None}).evaluate()


def case_params():
    return {"model": "mixtral-8x7b", "tp": 2, "dp": 4, "ep": 8, "num_gpus": 8,
            "global_batch_size": 4, "seq_len": 4096}  # fmt: skip


def test_etp_token_collectives_are_tp_traffic():
    """With etp = tp = 2, each MoE layer all-gathers its routed tokens over etp before the
    experts and reduce-scatters after, forward and backward: 4·(etp − 1)·k·T·h·β per layer per
    micro-batch, T = s·b/tp tokens per rank (sequence parallel). Mixtral: k = 2, h = 4096."""
    base = {"model": "mixtral-8x7b", "tp": 2, "dp": 4, "ep": 2, "num_gpus": 8,
            "global_batch_size": 4, "seq_len": 4096}  # fmt: skip
    with_etp = Case.of(**base).evaluate()
    without = Case.of(**{**base, "etp": 1, "ep": 2}).evaluate()
    tp = {e: next(r.traffic for r in x.traffic if r.traffic.axis == "tp")
          for e, x in (("2", with_etp), ("1", without))}  # fmt: skip
    tokens, k, h, layers, m = 4096 // 2, 2, 4096, 32, 1
    assert (
        tp["2"].bytes_per_step - tp["1"].bytes_per_step == 4 * 1 * k * tokens * h * 2 * layers * m
    )
    assert "etp" in tp["2"].collective


# ------------------------------------------------------------------ one mechanism per candidate


def _walk():
    """Every physical (framework, ZeRO stage) the search can tabulate, with m = 1 and m = 4."""
    for fw in (Framework.MEGATRON, Framework.DEEPSPEED, Framework.FSDP2):
        for z in ZERO_STAGES[fw]:
            for m in (1, 4):
                yield fw, z, m


@pytest.mark.parametrize(("framework", "zero", "m"), list(_walk()))
def test_memory_and_traffic_describe_the_same_mechanism(framework, zero, m):
    """From the reported figures alone: weights held as a shard must be gathered for every
    micro-batch; gradients held as a shard must be reduced every micro-batch; a whole gradient
    buffer is reduced once per step in its own dtype; gathered units are held exactly when the
    weights are gathered per micro-batch."""
    dp = 4
    case = Case.of(
        **{
            "model": "llama3-8b",
            "dp": dp,
            "framework": str(framework),
            "zero_stage": zero,
            "micro_batch_size": 1,
            "global_batch_size": dp * m,
            "seq_len": 1024,
        }  # fmt: skip
    )
    est = case.evaluate()
    st = est.peak
    p = st.dense_params
    ring = Fraction(dp - 1, dp) * p
    dp_row = next(r.traffic for r in est.traffic if r.traffic.axis == "dp")
    per_mb, per_step = dp_row.microbatch_bytes, dp_row.bytes_per_step - m * dp_row.microbatch_bytes
    w = est.training.weight_bytes
    weights_whole = st.state.weights_bytes >= w * p
    if not weights_whole:  # bf16 weights only as a shard: gathered for each micro-batch
        assert per_mb >= w * ring and st.state.gathered_bytes > 0
    else:
        assert st.state.gathered_bytes == 0
    grads_whole = st.state.gradients_bytes >= 2 * p
    if grads_whole:  # a whole buffer, reduced once per step in its dtype
        g = st.state.gradients_bytes / p
        assert per_step >= g * ring and per_mb == 0
    else:  # a shard: reduced after every micro-batch's backward
        assert per_mb >= 2 * ring
    assert dp_row.bytes_per_step == per_step + m * per_mb


def test_textbook_is_named_and_not_the_default():
    """The textbook profile is named and not the default; every profile's ZeRO-3 gathers per
    micro-batch (the ZeRO paper's §7.2.2 gathers for each forward and backward), and the
    planner's default is physical."""
    assert Layout().framework is Framework.MEGATRON and Framework.MEGATRON.physical
    assert not Framework.TEXTBOOK.physical
    for fw in ("textbook", "deepspeed", "fsdp2"):
        assert mechanism(fw, 3).gathers_per_microbatch == 2


def test_deepspeed_zero1_allocates_the_ipg_bucket_in_backward():
    """DeepSpeed's ZeRO-1 runs the same ``stage_1_and_2.py`` optimizer as ZeRO-2: its first
    gradient hook of a backward allocates the contiguous IPG bucket (``setup_buckets``:
    ``reduce_bucket_size`` = 5e8 elements in the parameters' bf16, ``contiguous_gradients`` on
    by default), released at the backward's end: 1e9 B in backward, none at the step. The step
    holds the flat BF16 copy of the gradient partition and its FP32 cast: (2 + 4)/N."""
    st = model_state(P13, Fraction(0), Layout(dp=8, framework="deepspeed", zero_stage=1), T)
    assert st.buffers_bytes == 2 * DEEPSPEED_REDUCE_BUCKET_ELEMENTS == 1_000_000_000
    assert st.backward_bytes == 2 * P13 + 2 * P13 + 12 * P13 / 8 + 1_000_000_000
    assert st.optimizer_step_bytes == 2 * P13 + 2 * P13 + 12 * P13 / 8 + 6 * P13 / 8


def test_deepspeed_offload_accumulates_bf16_gradients_on_the_host():
    """DeepSpeed ZeRO-1/2 with ``offload_optimizer`` and gradient accumulation keeps a host
    buffer per parameter of the rank's partition in the parameters' dtype
    (``stage_1_and_2.py`` ``async_accumulate_grad_in_cpu_via_gpu``, ``accumulated_grads_in_cpu``):
    P = 13e9 on 8 ranks, 2 micro-batches: 2 × 13e9/8 = 3.25e9 B more on the host than with one
    micro-batch (where ``copy_grads_in_partition`` skips it)."""
    from dataclasses import replace

    from trainplan.model.offload import Offload

    for zero in (1, 2):
        lay = Layout(dp=8, framework="deepspeed", zero_stage=zero)
        one = replace(T, offload=Offload(optimizer=1))
        two = replace(one, global_batch_size=16)
        host1 = model_state(P13, Fraction(0), lay, one).host_bytes
        host2 = model_state(P13, Fraction(0), lay, two).host_bytes
        assert host2 - host1 == 2 * P13 / 8 == 3_250_000_000
        assert host1 == (12 + 4) * P13 / 8  # the optimizer state and its FP32 gradients


def test_torchtitan_tp_sends_no_backward_regather():
    """torchtitan's plan keeps the blocks' all-gathered inputs (PrepareModuleInput's
    redistribute to Replicate is saved by the column-parallel linears), so sequence parallelism
    sends no second all-gather in backward; Megatron-Core gathers the input again for each
    weight gradient: 2 all-gathers of (tp − 1)/tp·β·T·h per layer per micro-batch. By hand:
    2 layers, tp 2, 4 tokens, h 8, β 2: one gather = ½·2·4·8 = 32 B, the re-gathers 2·32·2 = 128."""
    arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
                        ffn_hidden_size=32, vocab_size=16)  # fmt: skip
    args = (arch, 2, 0, False, False, 2, 1, 1, 1, 1, 4, 2, True, True, NOTHING_AGAIN)
    megatron, megatron_hidden = tp_bytes(*args)
    torchtitan, torchtitan_hidden = tp_bytes(*args, keeps_gathered=True)
    assert megatron - torchtitan == 128 and megatron_hidden == 128 and torchtitan_hidden == 0


def test_torchtitan_selective_recompute_gathers_the_block_inputs_again():
    """torchtitan's op-level SAC saves ``reduce_scatter_tensor`` outputs but not
    ``all_gather_into_tensor``'s (``torchtitan/distributed/activation_checkpoint.py``
    ``_get_default_save_ops``), so its recomputed forward gathers each half's input again: one
    all-gather per half, the re-gather the step time charges (``repeated_tp``), on top of the
    8 units of a layer's forward and backward. Megatron-Core's default ``core_attn`` repeats no
    tp collective; its ``mlp`` module repeats the MLP's gather and scatter. By hand: 2 layers,
    tp 2, 4 tokens, h 8, β 2, one = 32 B: torchtitan 2·(8 + 2)·32 = 640 B, Megatron-Core
    (re-gathering for the weight gradients) 2·(8 + 2)·32 = 640 B, with ``mlp`` 2·12·32 = 768 B."""
    from dataclasses import replace

    arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
                        ffn_hidden_size=32, vocab_size=16)  # fmt: skip
    t = TrainingSpec(seq_len=4, global_batch_size=1)
    titan = recomputed_sends(arch, Framework.FSDP2, Recompute.SELECTIVE, t)
    assert titan.tp[0] == (2, 4) and titan.core == (False, False)
    args = (arch, 2, 0, False, False, 2, 1, 1, 1, 1, 4, 2, True, True)
    assert tp_bytes(*args, titan, keeps_gathered=True)[0] == 640
    assert tp_bytes(*args, NOTHING_AGAIN, keeps_gathered=True)[0] == 512
    core = recomputed_sends(arch, Framework.MEGATRON, Recompute.SELECTIVE, t)
    assert core.tp[0] == (0, 0) and tp_bytes(*args, core)[0] == 640
    mlp = replace(t, recompute_modules=("mlp",))
    again = recomputed_sends(arch, Framework.MEGATRON, Recompute.SELECTIVE, mlp)
    assert tp_bytes(*args, again)[0] == 768
