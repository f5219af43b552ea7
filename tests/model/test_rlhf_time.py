"""RLHF step-time terms held to hand derivations: decode at the optimizer step's measured HBM
share, one-step off-policy's weight sync on the trainer's chain, and the scoring forward's
parameter all-gathers under FSDP2 / ZeRO-3."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.comm_sms import collective_sm_share
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import Layout, Recompute
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.rlhf.engine import decode_efficiency
from trainplan.model.rlhf.off_policy import off_policy_seconds
from trainplan.model.rlhf.role_time import forward_microbatch_s, forward_s
from trainplan.model.rlhf.roles import RoleCost, RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rlhf.step import compose, step_seconds
from trainplan.model.roofline import RooflineParams
from trainplan.model.specs import TrainingSpec
from trainplan.optimizer.rlhf.tables import make_evaluator
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

H100 = get_accelerator("H100-SXM")
QWEN = get_model("qwen2.5-7b").model


def _spec(**kw) -> RLHFSpec:
    base = dict(algorithm="grpo", policy=QWEN, reward="rule", prompts=4, samples_per_prompt=16,
                prompt_tokens=1024, completion_tokens=4096)  # fmt: skip
    return RLHFSpec(**{**base, **kw})


def test_decode_reads_at_the_optimizer_steps_streaming_share():
    """One rule for HBM-streaming kernels: BabelStream's triad on an H100 SXM reaches 2.97 of
    the datasheet's 3.35 TB/s (scenarios/kernels/memory.toml), 0.88657; the optimizer step and
    the decode both read it. A part without a published run falls back to hbm_efficiency (0.9,
    Calculon's table); --bandwidth-efficiency overrides it."""
    assert decode_efficiency(_spec(), H100) == pytest.approx(2.97 / 3.35, rel=1e-12)
    assert decode_efficiency(_spec(bandwidth_efficiency=1.0), H100) == 1.0
    assert decode_efficiency(_spec(), get_accelerator("B200")) == 0.9
    assert (
        RooflineParams(gemm_efficiency=0.7, optimizer_hbm_efficiency=0.8).streaming_hbm_efficiency
        == 0.8
    )
    assert RooflineParams(gemm_efficiency=0.7).streaming_hbm_efficiency == 0.9


def _cost(role: Role, gpus: int, seconds: tuple[float, float, float], sync: float = 0.0):
    z = Fraction(0)
    return RoleCost(RoleOption(role, gpus, gpus), z, z, z, z, *seconds, z, (), sync_s=sync)


def test_off_policy_sync_blocks_the_trainer():
    """verl's one-step off-policy step waits for the previous generation, syncs the weights
    (both sides blocked: actor_wg.sync_rollout_weights, ray.get(rollout_wg...)) and only then
    launches the next generation beside scoring and training: step = sync + max(R, S + T).
    Engine on 8 GPUs: 69.5 s of generation and a 0.5 s sync (its rollout seconds 70); actor on
    8 others: scoring 10 s, training 69.5 s. Before: max(70, 10 + 69.5) = 79.5 s; now
    0.5 + max(69.5, 79.5) = 80.0 s. With training 40 s the engine's pool sets it: 70 s either
    way. Synchronous, or on one shared pool, the sync is already in the pool's sum."""
    engine = _cost(Role.ROLLOUT, 8, (70.0, 0.0, 0.0), sync=0.5)
    actor = _cost(Role.ACTOR, 8, (0.0, 10.0, 69.5))
    plan = compose([engine, actor], [0, 1], 80 * 2**30, 2 * 10**12, 8, off_policy=1)
    assert plan.step_s == 80.0
    assert off_policy_seconds([[70, 0, 0], [0, 10, 40]], 0.5) == 70
    assert step_seconds([[70, 0, 0], [0, 10, 69.5]], 0, 0.5) == 149.5
    one = [[70.0, 10.0, 69.5]]
    assert step_seconds(one, 1, 0.5) == step_seconds(one, 0, 0.5) == 149.5


def test_scoring_forward_counts_its_fsdp2_all_gathers():
    """Llama 3 8B (8,030,261,248 parameters) on 16 H100 (two nodes), FSDP2 fully sharded over
    dp 16, 4 micro-batches of one 4,096-token sequence. A forward re-gathers every unit each
    micro-batch (reshard_after_forward): 15/16 · 8,030,261,248 · 2 B = 15,056,739,840 B, in the
    training step's 32 buckets (one per block) of 470,523,120 B. Across the two nodes, 8 ranks
    on each, NCCL's ring crosses the network in 1 of its 15 steps: 8.4 + 14 + 14 × 3.4 =
    70.0 µs of latency (``ncclTopoTuneModel``), plus its bytes at the slower of 8 NICs · 50 GB/s
    · 0.96 = 384 GB/s and NVLink's 450 × 0.8 = 360 GB/s (model.nvlink_bound.ring_busbw; NCCL's
    graph 8 × 45): 70.0 + 1,307.01 = 1,377.01 µs; 32 of them 44.064 ms per micro-batch. The window
    is one micro-batch's forward, a third of evaluate()'s 1.88982 s / 4 = 157.49 ms, which
    covers it: each waits the SM share φ = 0.23896 of it (model.comm_sms), 10.530 ms; 4
    micro-batches 42.12 ms (39.62 ms with the bytes at the NICs' 384 GB/s; 44.16 ms before that
    with every ring step at the network's 14 µs). The
    scoring forward is the forward-only pipeline plus that. Megatron's distributed optimizer
    and FSDP2 without resharding gather nothing per forward: 0."""
    model = get_model("llama3-8b").model
    evaluate = make_evaluator(H100, ClusterLinks.from_device(H100))
    training = TrainingSpec(seq_len=4096, global_batch_size=64)

    def layout(framework: str, zero: int) -> Layout:
        return Layout(dp=16, tp=1, pp=1, framework=framework, zero_stage=zero,
                      micro_batch_size=1, recompute=Recompute.NONE)  # fmt: skip

    est = evaluate(model, training, layout("fsdp2", 3))
    assert est.num_params == 8_030_261_248 and est.num_microbatches == 4
    assert 15 * 8_030_261_248 * 2 // 16 == 15_056_739_840 == 32 * 470_523_120
    per_call = (8.4 + 14 + 14 * 3.4) * 1e-6 + 470_523_120 / min(400e9 * 0.96, 450e9 * 0.8)
    assert per_call == pytest.approx(1_377.01e-6, abs=1e-8)
    t = est.time_terms
    assert t is not None and t.compute_and_pipeline_s == pytest.approx(1.88982, abs=1e-5)
    assert 32 * per_call < t.compute_and_pipeline_s / 4 / 3  # the forward covers the gathers
    # the dp group of 16 over two nodes, 8 a node: its all-gathers run as rings on 16 channels
    # (8 search channels at 48 GB/s, Postset ×2; model.nccl_channels), φ(16) = 1 − 1/1.314
    across = (16, 16, 8, 16, False, 50e9, nvlink_node("H100-SXM", 450e9))
    phi = collective_sm_share("ring", "H100-SXM", est.options.nccl_sm_charge, True, *across)
    assert phi == pytest.approx(0.23896, abs=1e-5)
    assert t.forward_gather_s == pytest.approx(4 * phi * 32 * per_call, rel=1e-9)
    assert t.forward_gather_s == pytest.approx(0.04212, abs=1e-5)
    assert forward_s(est) == t.forward_pass_s + t.forward_gather_s
    for framework, zero in (("megatron", 1), ("fsdp2", 2)):
        assert evaluate(model, training, layout(framework, zero)).time_terms.forward_gather_s == 0


def test_the_forward_gather_is_not_in_the_training_step():
    """The training step already counts its forward and backward gathers (8 B a parameter a
    micro-batch: two BF16 gathers and the FP32 reduce-scatter); the forward-only term is
    reported beside it, not added: step_s is compute_and_pipeline + exposed dp + optimizer +
    offload + FSDP2's copies around its collectives (model.fsdp2_copies)."""
    model = get_model("llama3-8b").model
    evaluate = make_evaluator(H100, ClusterLinks.from_device(H100))
    lay = Layout(dp=16, tp=1, pp=1, framework="fsdp2", zero_stage=3, micro_batch_size=1,
                 recompute=Recompute.NONE)  # fmt: skip
    t = evaluate(model, TrainingSpec(seq_len=4096, global_batch_size=64), lay).time_terms
    assert t is not None and t.forward_gather_s > 0
    copies = t.grad_accumulation_s
    assert copies > 0
    assert t.step_s == (
        t.compute_and_pipeline_s + t.exposed_dp_s + t.optimizer_s + t.offload_s + copies
    )
    assert replace(t, forward_gather_s=0.0).step_s == t.step_s


def test_scoring_forward_is_a_forward_only_pipeline():
    """Megatron-Core's forward-only schedule (``forward_only=True``, what verl's scoring
    forwards run) takes (m + pp − 1) slots of the slowest stage's forward, plus half the step's
    exposed pipeline sends (the m·v activations of its 2·m·v messages). Llama 3 8B (32 layers)
    on H100, tp 1, 4,096-token micro-batches, 64 sequences: pp 1 on dp 16 (m = 4), pp 2 on
    dp 8 (m = 8), pp 4 on dp 4 (m = 16). With L one layer's forward, E the embedding's and O
    the output layer's, the slowest stage is the last (8L + O at pp 4, 16L + O at pp 2):

        pp 4: 19·(8L + O) + pp₄/2 = 0.849554 s, pp₄ = 11.902 ms → 8L + O = 44.400 ms
        pp 2:  9·(16L + O) + pp₂/2 = 0.685812 s, pp₂ = 11.543 ms → 16L + O = 75.560 ms
        so 8L = 31.160 ms (L = 3.895 ms), O = 13.240 ms;
        pp 1:  4·(32L + E + O) = 0.551620 s → E = 137.905 − 124.639 − 13.240 ≈ 0.02 ms,

    an embedding gather of 4,096 rows of 8 KiB (tens of µs): the three layouts agree on one L,
    E and O. A forward counts none of the backward's passes, so it is not a third of the three
    passes: here it is more (1.5 % at pp 1; at pp 4 the last stage's output layer holds the
    forward pipeline's slot, 0.8496 s against a third of the step's 0.7677 s)."""
    model = get_model("llama3-8b").model
    evaluate = make_evaluator(H100, ClusterLinks.from_device(H100))
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    forward, sends = {}, {}
    for pp in (1, 2, 4):
        lay = Layout(dp=16 // pp, tp=1, pp=pp, framework="megatron", zero_stage=1,
                     micro_batch_size=1, recompute=Recompute.NONE)  # fmt: skip
        est = evaluate(model, training, lay)
        assert est.num_microbatches == 4 * pp and est.time_terms is not None
        forward[pp] = est.time_terms.forward_pass_s
        sends[pp] = sum(r.exposed_seconds for r in est.traffic if r.traffic.axis == "pp")
    assert sends[1] == 0 and sends[4] == pytest.approx(11.902e-3, abs=1e-6)
    x = (forward[4] - sends[4] / 2) / 19  # 8L + O
    y = (forward[2] - sends[2] / 2) / 9  # 16L + O
    layer, output = (y - x) / 8, 2 * x - y
    embedding = forward[1] / 4 - 32 * layer - output
    assert x == pytest.approx(44.400e-3, abs=1e-6) and y == pytest.approx(75.560e-3, abs=1e-6)
    assert layer == pytest.approx(3.895e-3, abs=1e-6) and output == pytest.approx(
        13.240e-3, abs=1e-6
    )
    assert 0 < embedding < 50e-6


def test_scoring_forward_leaves_out_the_backward_pair_all_reduce_and_fills_by_chunks():
    """Two rules of ``forward_pass_term`` against the one-chunk case above. (1) The pair
    all-reduce after the flush (a tied embedding's gradients between the first and last stage,
    ``pair_reduce_bytes``) is backward-only: Llama 3 8B with its embedding tied to its output
    layer, at pp 2, has the same forward-only pass as untied (the same operations), though its
    step waits on the all-reduce. (2) Megatron-Core's interleaved forward-only schedule fills
    with pp − 1 of a chunk's forwards, t_f/v each: at pp 2, v 2, m = 8 the pass is
    (8 + 1/2)·t_f + sends/2 where 1F1B's is (8 + 1)·t_f + sends/2, the slowest stage's forward
    t_f the same (16 layers and the output layer either way)."""
    model = get_model("llama3-8b").model
    evaluate = make_evaluator(H100, ClusterLinks.from_device(H100))
    training = TrainingSpec(seq_len=4096, global_batch_size=64)

    def est(arch, schedule="1f1b", v=1):  # type: ignore[no-untyped-def]
        lay = Layout(dp=8, tp=1, pp=2, framework="megatron", zero_stage=1, micro_batch_size=1,
                     recompute=Recompute.NONE, schedule=schedule, virtual_stages=v)  # fmt: skip
        out = evaluate(arch, training, lay)
        assert out.num_microbatches == 8 and out.time_terms is not None
        sends = sum(r.exposed_seconds for r in out.traffic if r.traffic.axis == "pp")
        return out.time_terms, sends

    untied, _ = est(model)
    tied, _ = est(replace(model, arch=replace(model.arch, tie_embeddings=True)))
    assert tied.compute_and_pipeline_s > untied.compute_and_pipeline_s  # the step waits on it
    assert tied.forward_pass_s == pytest.approx(untied.forward_pass_s, rel=1e-12)
    one, one_sends = est(model)
    chunks, chunk_sends = est(model, "interleaved", 2)
    t_f = (one.forward_pass_s - one_sends / 2) / 9
    assert (chunks.forward_pass_s - chunk_sends / 2) / 8.5 == pytest.approx(t_f, rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from([(1, 1, "1f1b"), (2, 1, "1f1b"), (4, 1, "1f1b"), (2, 2, "interleaved"),
                     (4, 2, "interleaved"), (2, 4, "interleaved"), (4, 4, "interleaved")]),
    st.integers(1, 4),
    st.integers(1, 6),
)  # fmt: skip
def test_scoring_forward_floor_is_the_pass_per_slot_and_never_above_a_pass(shape, k, j):
    """``forward_microbatch_s`` divides the forward-only pass by the slots it is timed with,
    m + pp − 1, or m + (pp − 1)/v under ``interleaved`` (the same fill as ``forward_pass_term``,
    ``forward_only_fill``), and n times it never exceeds the pass over n micro-batches of the
    same shape, (n + fill)·t_f + its sends (``model.rlhf.network.seconds_floor`` scales it to
    another dp: a floor must never exceed what it bounds). Llama 3 8B, tp 1, dp 1, b 1, s 4,096,
    m = k·pp and n = j·pp micro-batches (the interleaved schedule's m a multiple of pp)."""
    pp, v, schedule = shape
    model = get_model("llama3-8b").model
    evaluate = make_evaluator(H100, ClusterLinks.from_device(H100))

    def est(m: int):  # type: ignore[no-untyped-def]
        lay = Layout(dp=1, tp=1, pp=pp, framework="megatron", zero_stage=1, micro_batch_size=1,
                     recompute=Recompute.NONE, schedule=schedule, virtual_stages=v)  # fmt: skip
        out = evaluate(model, TrainingSpec(seq_len=4096, global_batch_size=m), lay)
        assert out.num_microbatches == m and out.time_terms is not None
        return out

    m, n = k * pp, j * pp
    fill = (pp - 1) / v if schedule == "interleaved" else pp - 1
    base, other = est(m), est(n)
    floor = forward_microbatch_s(base)
    assert floor == pytest.approx(base.time_terms.forward_pass_s / (m + fill), rel=1e-12)
    assert m * floor <= base.time_terms.forward_pass_s
    assert n * floor <= other.time_terms.forward_pass_s * (1 + 1e-9)


def test_verls_update_is_timed_as_fsdp1():
    """Under fsdp2 the roles are verl's FSDP workers, whose default ``strategy: fsdp`` is FSDP1
    (``FullyShardedDataParallel``, flat parameters; model.rlhf.roles.VERL_FSDP_SOURCE): the
    update's evaluate() runs with ``flat_parameters`` (FSDP1's copies around the collectives,
    4 B an element a micro-batch, not FSDP2's 14; model.fsdp2_copies), the other profiles'
    without it."""
    from trainplan.model.rlhf.network import network_cost

    seen: dict[str, list[bool]] = {}
    for fw in ("fsdp2", "megatron"):
        inner = make_evaluator(H100, ClusterLinks.from_device(H100))

        def spy(model, training, layout, _fw=fw, _inner=inner):
            seen.setdefault(_fw, []).append(training.flat_parameters)
            return _inner(model, training, layout)

        spec = _spec(framework=fw)
        network_cost(spec, spec.role(Role.ACTOR), RoleOption(Role.ACTOR, 16, 16), H100, spy)
    # the scoring forward (no copies charged there) and the update
    assert seen == {"fsdp2": [False, True], "megatron": [False, False]}
