"""The per-stage frontier (issue 13, item 3: ``frontier --per-stage``): its points equal what
per_stage_search gives per job / per ε by hand, are non-dominated, are never slower than the
uniform frontier at the same axis value, and each per-stage point's step time equals an
exhaustive oracle over its base layout (every composition of L and every recomputed count,
each evaluated with ``evaluate()``) at the point's own byte capacity.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from tests.archs import llama_like
from tests.optimizer.test_per_stage import oracle_at, tiny_case
from trainplan.model.errors import InfeasibleError
from trainplan.model.model_spec import ModelSpec
from trainplan.model.pipeline import Schedule
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import peak_bytes, per_stage_search
from trainplan.optimizer.per_stage_frontier import per_stage_frontier
from trainplan.optimizer.problem import Constraints, Job, Problem
from trainplan.optimizer.search import frontier
from trainplan.optimizer.space import SearchSpace


def tiny_problem(gpus: tuple[int, ...], capacity: float | None = None, price: float | None = None):
    """The 6-layer tiny model of test_per_stage on H100 (s 8192, B 8, b 1), tp 1 when a
    ``capacity`` (bytes per GPU, through the headroom) is given so that pipelining is what
    saves memory. Megatron-Core's distributed optimizer (ZeRO-1) only, so that every layout of
    more than one GPU holds its gradient-statistics ring over all the GPUs
    (:func:`model.terms.comm_memory.grad_stats_rings`) beside its other communicators; at dp 1
    ZeRO-1 holds the bytes of ZeRO-0 (2 + 4 + 12/1 B per parameter).

    With a ``capacity`` NCCL's NVLink SHARP is off (``nccl_nvls`` false, ``NCCL_NVLS_ENABLE=0``):
    the budgets below are whole rings beside the tensors, and NVLS's bytes differ by layout (a dp
    ring of 8 in the node 2 + 256 MiB, of 2: 2 + 64, a one-float ring 2; model/terms/
    nvls_memory.py), so one budget with them would admit other layouts than the counts these
    tests derive (dp 8 needs 262 MiB more, past 160 MB + 3·RING, where dp 2 needs 70)."""
    case = tiny_case(6, 1)
    if capacity is not None:
        case = replace(case, options=replace(case.options, nccl_nvls=False))
    headroom = 0.0 if capacity is None else 1 - capacity / case.device.usable_bytes(True)
    jobs = tuple(Job(case, g, f"{g} GPUs", price) for g in gpus)
    tp = None if capacity is None else (1,)
    space = SearchSpace(num_gpus=gpus[0], max_micro_batch_size=1, tp=tp, zero_stages=(1,))
    return Problem(jobs=jobs, space=space, constraints=Constraints(headroom=headroom))


def non_dominated(found):
    """(value, step, kind) ascending in value, each strictly faster than every cheaper one."""
    out = []
    for value, step, kind in sorted(found):
        if not out or step < out[-1][1]:
            out.append((value, step, kind))
    return out


def staircase(points, value):
    """The least step time among (value, step) points at or below ``value`` (None if none)."""
    steps = [s for v, s in points if v <= value]
    return min(steps) if steps else None


def check_per_stage_points(result, capacity_of):
    for p in result.points:
        if p.kind != "per-stage":
            assert p.estimate.layout.stage_layers is None
            continue
        lay = p.estimate.layout
        base = lay.with_(stage_layers=None, recompute_layers=None)
        assert oracle_at(p.job.case, base, capacity_of(p))[0] == pytest.approx(p.step_ns, abs=2)


def test_memory_frontier_equals_the_sweep_by_hand_the_oracle_and_beats_uniform():
    """Against memory on 2 GPUs: ε sweep by hand with per_stage_search (fresh tables each ε)
    gives the same points; the 7 points run from the uniform full recomputation over dp 2
    (178,330,624 B of tensors, 15.75 ms) through per-stage plans of dp 2 (5, 4, … 1 of 6 layers
    recomputed) to the uniform 526,195,712 B plan without recomputation (12.00 ms). Before
    Megatron-LM's model-parallel group was counted (model/terms/comm_groups.py
    ``megatron_rings``: train_step's all-reduces, every ZeRO stage) three tp 2 points led
    (the uniform full recomputation at 105,073,152 B + the output layer's gather buffer, 32.65
    ms, and per-stage plans from 121,063,936 B + that buffer, 31.21 ms); a tp 2 layout now
    holds that group's ring beside its tp ring, one RING more than dp 2, so they are dominated.

    The loss's working set (Megatron-LM's unfused cross entropy: 2·s·V/tp beyond the kept fp32
    softmax, 16,777,216 B at tp 1; :mod:`model.loss_memory`) and the layers' backward phase (the
    recompute transient, 63,176,704 B at tp 1, plus one layer's backward working set, 26,738,688 B
    at tp 1, less the output layer's 5·s·V = 41,943,040 B released before any layer's backward:
    47,972,352 B) do not coincide: the peak takes the larger. So a plan that keeps every layer
    whole on the last stage (no transient) holds the loss: 509,418,496 + 16,777,216 =
    526,195,712 B (tp 1, no recomputation), 112,609,792 + 8,388,608 = 120,998,400 B (tp 2, 5 of
    6 recomputed, its last layer whole); the uniform full recomputation at tp 1 over dp 2
    (ZeRO-1: 5,270,784 × (2 + 4 + 12/2) = 63,249,408 B of state) holds 6 × 4,194,304 +
    47,972,352 + 41,943,040 = 115,081,216 B of activations, 178,330,624 B in all; each figure
    also holds, in both phases, Transformer Engine's placeholder weight gradients (below)."""
    problem = tiny_problem((2,))
    got = per_stage_frontier(problem, "memory")
    assert got.status == "optimal"
    found, gaps, eps = [], {}, None
    while True:
        try:
            r = per_stage_search(problem, max_bytes=eps, without_uniform=True)
        except InfeasibleError:
            break
        assert r.uniform is not None
        value = peak_bytes(r.plan) if r.per_stage else r.uniform.peak_bytes
        found.append((value, r.plan_ns, "per-stage" if r.per_stage else "uniform"))
        gaps[value, r.plan_ns] = r.gap_ns
        eps = value - 1
    want = non_dominated(found)
    assert [(p.value, p.step_ns, p.kind) for p in got.points] == want[::-1]  # fastest first
    # each point's proven gap is its own search's (PerStageResult.gap_ns), within the 2 ns of
    # rounding of a proof (the page and the JSON's gap_s show it per point)
    assert [p.gap_ns for p in got.points] == [gaps[p.value, p.step_ns] for p in got.points]
    assert all(p.gap_ns is not None and 0 <= p.gap_ns <= 2 for p in got.points)
    # 7 points (12 when every communicator was 32 channels × 12 MiB without set-up: the pp 2
    # interleaved √n plan and its per-stage plan, 1,374,800,896 and 1,370,606,592 B then, 11.6
    # and 15.8 MB under dp 2's full recomputation; a pp 2 layout holds PAIR − RING = 96 MiB
    # = 100,663,296 B more communicators than a dp 2 one, so both are dominated; 10 before the
    # model-parallel ring, below)
    assert len(want) == 7
    # every dp 2 layout holds three rings in the node (the dp ring, the distributed optimizer's
    # gradient-statistics ring over both GPUs, the world group's ring of Megatron-LM's
    # barriers): 3 × RING = 1,452 MiB = 1,522,532,352 B beside each figure, 300 MiB more than
    # the three 384 MiB communicators counted before; and NVLink SHARP's (model/terms/
    # nvls_memory.py): the dp ring of 2 in the node 2 MiB of credits (NCCL's tuner runs a 2-GPU
    # all-reduce of an H100 node as a ring, model/nccl_search.py: no buffers; 16 × 2 × (128 KiB ×
    # 8) × 2 = 64 MiB more were counted before), the two one-float rings (run as rings, no
    # buffers) 2 MiB each: 6 MiB
    comm = 3 * RING + (2 + 2 * 2) * 2**20
    assert comm == 1_528_823_808
    # tp 2 with sequence parallelism: the output layer's all-gather buffer on the last stage,
    # 2·s·h = 2 × 8,192 × 256 = 4,194,304 B (model.terms.persistent_buffers), in both phases
    gather = 2 * 8192 * 256
    # the recomputed layer's working set holds Transformer Engine's FP32 softmax statistics
    # (softmax_lse) [a/tp, s] = 4 B × 2 heads × 8,192 = 65,536 B
    lse = 4 * 2 * 8192
    # tp 2 holds a fourth ring, the model-parallel group (tp·pp = 2 ranks, a create_group of its
    # own; one-float all-reduces, 2 MiB of NVLS credits): its uniform full recomputation, 32.80
    # ms, is larger than dp 2's, 15.75 ms (the tp ring holds the dp ring's 2 MiB of NVLS); 32.65
    # ms while its tp 2 all-reduces read the NVLS curve (NCCL runs a 2-GPU all-reduce of an H100
    # node as a ring, model/nccl_search.py: the curve ÷ 480/370). Megatron-Core's own
    # optimizer-step passes (model.step_passes.step_pass_bytes: the clip's scale +8, the master
    # re-read +4, 38 → 50 B an element): +12 B × its 2,637,056 elements / 2.97 TB/s = 10,655 ns,
    # 32,789,426 → 32,800,081 ns
    # Transformer Engine's placeholder weight gradients (model/terms/dummy_wgrads.py), one per
    # distinct weight shape: at tp 2 QKV [384, 256], proj [256, 128], FC1 [688, 256], FC2
    # [256, 344] and the output layer [512, 256], 2 × 526,336 = 1,052,672 B; at tp 1 [768, 256],
    # [256, 256], [1,376, 256], [256, 688] and [1,024, 256], 2 × 1,052,672 = 2,105,344 B
    dummy2 = 2 * (384 * 256 + 256 * 128 + 688 * 256 + 256 * 344 + 512 * 256)
    dummy1 = 2 * (768 * 256 + 256 * 256 + 1376 * 256 + 256 * 688 + 1024 * 256)
    assert (dummy2, dummy1) == (1_052_672, 2_105_344)
    tp2_full = 105_007_616 + lse + gather + comm + RING + 2 * 2**20 + dummy2
    assert tp2_full == 2_148_751_872 > 178_330_624 + 2 * lse + comm + dummy1 == 1_709_390_848
    one = tiny_case(6, 1)
    tp2 = one.evaluate(one.layout.with_(tp=2, zero_stage=1, recompute="full"))
    assert int(tp2.peak.total_bytes) == tp2_full and tp2.step_s * 1e9 == pytest.approx(
        32_800_081, abs=2
    )
    # tp 1 over dp 2, full: the recomputed layer's statistics at 4 heads, 2·lse; its optimizer
    # step zeroes the distributed optimizer's whole FP32 gradient buffer, not the shard
    # (model.terms.optimizer_time.whole_buffer_zeroing_bytes): 4 B × 5,270,784 / 2 more at
    # 2.97 TB/s, 3,549 ns (15,734,081 ns before); Megatron-Core's own optimizer-step passes,
    # +12 B × 5,270,784 / 2 owned elements / 2.97 TB/s = 10,648 ns (15,737,631 → 15,748,279 ns)
    assert 4 * 5_270_784 / 2 / 2.97e12 * 1e9 == pytest.approx(3_549.4, abs=0.1)
    assert 12 * 5_270_784 / 2 / 2.97e12 * 1e9 == pytest.approx(10_648.0, abs=0.1)
    assert want[0] == (178_330_624 + 2 * lse + comm + dummy1, 15_748_279, "uniform")
    assert [k for _, _, k in want[1:-1]] == ["per-stage"] * 5
    # tp 1 (4 heads a rank: 2·lse a layer), six layers kept whole; the whole gradient buffer
    # zeroed as above, 3,550 ns (11,981,336 ns before); the step's own passes as above,
    # 10,648 ns (11,984,886 ns before)
    assert want[-1] == (526_195_712 + 6 * 2 * lse + comm + dummy1, 11_995_534, "uniform")
    assert got.points[-1].uniform_ns == 15_748_279
    # non-dominated: step time up, value down, strictly
    values = [p.value for p in got.points]
    steps = [p.step_ns for p in got.points]
    assert steps == sorted(set(steps)) and values == sorted(set(values), reverse=True)
    # the uniform frontier: never faster at the same axis value; each point's uniform step time
    # is the uniform frontier's at its own value
    uniform = [(a.peak_bytes, a.objective) for a in frontier(problem, "memory").points]
    for value, step in uniform:
        assert staircase([(p.value, p.step_ns) for p in got.points], value) <= step
    for p in got.points:
        assert p.uniform_ns == staircase(uniform, p.value)
        assert all(s.total_bytes <= p.value for s in p.estimate.stages)
    check_per_stage_points(got, lambda p: p.value)


RING = (24 * 12 + (32 * 3 + 2) * 2) * 2**20
"""One NCCL ring communicator inside an H100 node (:func:`model.terms.comm_memory.group_channels`:
24 collective channels × 12 MiB) with its channels' set-up, pow2Up(24) = 32 channels × 3 + 2
allocations of 2 MiB: 288 + 196 = 484 MiB = 507,510,784 B."""
PAIR = (32 * 12 + (32 * 3 + 2) * 2) * 2**20
"""The pipeline's one neighbour inside the node: 32 channels per NVLink peer × 12 MiB
(:func:`model.terms.comm_memory.p2p_channels_per_peer`) and the pp communicator's set-up of 32:
384 + 196 = 580 MiB = 608,174,080 B."""
BUDGET = 160e6 + 3 * RING
"""The tiny model's budget: 160 MB of tensors beside three rings."""


def test_gpus_frontier_per_job_by_hand():
    """tp 1 and 160 MB + three rings (1,682,532,352 B) per GPU, jobs of 1, 2, 3, 4, 6 and
    8 GPUs: the frontier against GPU count is the non-dominated set of each job's own per-stage
    search, and never slower than the uniform frontier at any count.

    NCCL's communicators (:func:`model.terms.comm_memory.comm_memory_term`, every group inside
    one 8-GPU H100 node): a dp ring holds RING on every GPU; a pipeline stage holds PAIR for its
    one neighbour at pp 2; the distributed optimizer's gradient-statistics group over every GPU
    holds RING on each of more than one, and the world group of Megatron-LM's barriers RING more;
    at pp 2 the model-parallel group Megatron-LM's train_step all-reduces over (tp·pp = 2 ranks,
    model/terms/comm_groups.py ``megatron_rings``) RING more. So a dp-only layout holds 3·RING
    on each GPU, a pp 2 one PAIR + 3·RING; 1 GPU holds none.

    By hand, the tiny model (h 256, SwiGLU 688, V 1,024, s 8,192, b 1, Megatron-Core profile):
    a layer holds 791,040 parameters (5,270,784 in all with the embedding, output layer and final
    norm); a layer kept whole is 67,502,080 B (with its attention's FP32 softmax statistics
    4·a·s = 4 × 4 × 8,192 = 131,072 B), a fully recomputed one keeps its 4,194,304 B input
    and recomputing it materialises 63,307,776 B; one layer's backward working set
    (:mod:`model.backward_working`) is 26,738,688 B; the last stage's output layer holds
    5·s·V = 41,943,040 B, released before any layer's backward; the loss 16,777,216 B.

    * 1 GPU: 5,270,784 × 18 + 6 × 67,502,080 + 41,943,040 + 16,777,216 = 558,606,848 B (the
      loss's phase, 16,777,216 B, beats the layers' backward phase 26,738,688 − 41,943,040 < 0),
      no communicator: fits without recomputing.
    * 2 GPUs: the least any layout needs is pp 2 under full recomputation, 3 + 3 layers, whose
      first stage (2 micro-batches in flight) holds 162,647,040 B + PAIR + 3·RING > the budget (the
      4 + 2 plan that once fitted now holds over 185.1 MB on its
      first stage: the backward working set sits on its recompute transient); so no plan.
    * 8 GPUs: dp 8 (ZeRO-1) with every layer recomputed fits; 3, 4 and 6 GPUs hold no plan.
    """
    problem = tiny_problem((1, 2, 3, 4, 6, 8), BUDGET)
    got = per_stage_frontier(problem, "gpus")
    assert got.status == "optimal"
    found = []
    for job in problem.jobs:
        try:
            r = per_stage_search(replace(problem, jobs=(job,)), without_uniform=True)
        except InfeasibleError:
            assert job.num_gpus in (2, 3, 4, 6)
            continue
        found.append((job.num_gpus, r.plan_ns, "per-stage" if r.per_stage else "uniform"))
    want = non_dominated(found)
    assert [(p.value, p.step_ns, p.kind) for p in got.points] == want[::-1]  # fastest first
    assert {v for v, _, _ in found} == {1, 8}
    one = next(p for p in got.points if p.value == 1)
    assert (one.estimate.layout.recompute, one.estimate.stages[0].communicator_bytes) == ("none", 0)
    # + Transformer Engine's placeholder weight gradients at tp 1 (model/terms/dummy_wgrads.py):
    # [768, 256], [256, 256], [1,376, 256], [256, 688] and the output layer [1,024, 256] in BF16,
    # 2 × 1,052,672 = 2,105,344 B; a first stage of pp 2 the four layer shapes, 1,581,056 B
    assert int(one.estimate.stages[0].total_bytes) == 558_606_848 + 2_105_344 == 560_712_192
    two = tiny_case(6, 2)
    full = two.evaluate(two.layout.with_(zero_stage=1, recompute="full"))
    # the recomputed layer's FP32 softmax statistics 4·a·s = 131,072 B in its transient; this
    # case runs with NVLS (the default): its three one-float rings' credits, 3 × 2 MiB
    comm = PAIR + 3 * RING + 3 * 2 * 2**20
    layers = 2 * (768 * 256 + 256 * 256 + 1376 * 256 + 256 * 688)
    assert layers == 1_581_056
    assert int(full.stages[0].total_bytes) == 162_515_968 + 131_072 + comm + layers > BUDGET
    uniform = [(a.job.num_gpus, a.objective) for a in frontier(problem, "gpus").points]
    for value, step in uniform:
        assert staircase([(p.value, p.step_ns) for p in got.points], value) <= step
    for p in got.points:
        assert p.uniform_ns == staircase(uniform, p.value)
    cap = int(problem.jobs[0].case.device.usable_bytes(True) * (1 - problem.constraints.headroom))
    check_per_stage_points(got, lambda p: cap)


def wide_vocab_problem(gpus: tuple[int, ...], budget: float):
    """The 6-layer tiny model with a vocabulary of 8,192 (its output layer's FP32 logits and
    loss outweigh a layer), tp 1, pp 2, Megatron-Core ZeRO-1, 1F1B, ``budget`` bytes per GPU."""
    arch = llama_like(6, 256, 4, 688, 8192)
    case = Case.of(model=ModelSpec(name="tiny", source="test", arch=arch), pp=1, seq_len=8192,
                   global_batch_size=8, micro_batch_size=1, device="H100-SXM")  # fmt: skip
    headroom = 1 - budget / case.device.usable_bytes(True)
    jobs = tuple(Job(case, g, f"{g} GPUs") for g in gpus)
    space = SearchSpace(num_gpus=gpus[0], max_micro_batch_size=1, tp=(1,), pp=(2,),
                        zero_stages=(1,), schedules=(Schedule.ONE_F_ONE_B,),
                        virtual_stages=(1,))  # fmt: skip
    return Problem(jobs=jobs, space=space, constraints=Constraints(headroom=headroom))


def test_gpus_frontier_with_a_job_only_per_stage_plans_fit():
    """2 and 4 GPUs at pp 2, 470 MB + a pp 2 stage's communicators (PAIR + 3·RING: the pipeline
    pair, the model-parallel group's ring, gradient statistics and world) per GPU: no uniform
    layout fits on either count, and a per-stage split fits on 2 GPUs — the frontier's one
    point, by hand. pp is held at 2: a dp 2 layout holds PAIR = 580 MiB fewer communicator
    bytes than a pp 2 one, more than the split saves over dp 2 (it fits at 2,053,446,656 B,
    under the split's 2,597,934,592), so with dp free the split would not be the only fit.

    The model (h 256, SwiGLU 688, V 8,192, s 8,192, b 1): a layer holds 791,040 parameters, the
    embedding and the output layer V·h = 2,097,152 each, the final norm 256; ZeRO-1 over dp 1
    keeps 2 + 4 + 12 = 18 B per parameter. A layer kept whole holds 67,502,080 B (131,072 B of it
    the attention's FP32 softmax statistics, 4·a·s with a = 4), a recomputed
    one its 2·s·h = 4,194,304 B input (recomputing it materialises the 63,176,704 B a whole layer
    frees, so no more), one layer's backward working set is 26,738,688 B; the output layer holds
    its FP32 logits 4·s·V = 268,435,456 B and its norm's and projection's inputs 2 × 2·s·h, and
    the loss 2·s·V = 134,217,728 B beside them (the backward phase, after the output layer's
    tensors are released, is smaller).

    * Uniform on 2 GPUs: pp 2 splits 3 + 3, so the last stage holds three layers' state with the
      output layer's: (3 × 791,040 + 2,097,152 + 256) × 18 = 80,469,504 B, with the output layer's
      276,824,064 B and the loss's 134,217,728 B already 491,511,296 B > 470 MB, whatever it
      recomputes; dp 2 holds the whole model's state ((6 × 791,040 + 2 × 2,097,152 + 256) ×
      (2 + 4 + 12/2) = 107,289,600 B) and the same output layer and loss: more. 4 GPUs: nothing.
    * Per stage on 2 GPUs: 5 + 1 layers, 3 and 1 recomputed. The first stage: (5 × 791,040 +
      2,097,152) × 18 = 108,942,336 B of state; 2 micro-batches in flight of 3 × 4,194,304 + 2 ×
      67,502,080 = 147,587,072 B each, and the backward working set: 430,855,168 B. The last:
      (791,040 + 2,097,152 + 256) × 18 = 51,992,064 B of state, its layer's input, the output
      layer and the loss: 467,228,160 B. Both under 470 MB.

    Each stage also holds Transformer Engine's placeholder weight gradients for the whole run
    (model/terms/dummy_wgrads.py, BF16, one per distinct weight shape): the layers' QKV [768,
    256], proj [256, 256], FC1 [1,376, 256] and FC2 [256, 688], 1,581,056 B, and on the last
    stage the output layer's [8,192, 256], 4,194,304 B more: 5,775,360 B. The budget holds them
    beside the 470 MB (at 470 MB alone the 5 + 1 split's last stage, 473,003,520 B, no longer
    fits, and the search answers 6 + 0 with 4 of 6 recomputed).
    """
    # + NVLink SHARP's credits on the pp 2 stage's three one-float rings (model-parallel,
    # gradient statistics, world; 2 ranks in the node, run as rings so no buffers), 3 × 2 MiB
    nvls = 3 * 2 * 2**20
    layers = 2 * (768 * 256 + 256 * 256 + 1376 * 256 + 256 * 688)
    dummies = layers + 2 * 8192 * 256
    assert (layers, dummies) == (1_581_056, 5_775_360)
    budget = 470e6 + PAIR + 3 * RING + nvls + dummies
    problem = wide_vocab_problem((2, 4), budget)
    with pytest.raises(InfeasibleError):
        frontier(problem, "gpus")  # no uniform layout on any count
    got = per_stage_frontier(problem, "gpus")
    assert got.status == "optimal"
    (point,) = got.points
    lay = point.estimate.layout
    assert (point.value, point.kind, point.uniform_ns) == (2, "per-stage", None)
    assert (lay.pp, lay.stage_layers, lay.recompute_layers) == (2, (5, 1), (3, 1))
    layer, vh, norm = 791_040, 8192 * 256, 256
    s_h, s_v = 8192 * 256, 8192 * 8192
    whole, kept, work = 67_371_008 + 4 * 4 * 8192, 2 * s_h, 26_738_688
    output, loss = 4 * s_v + 2 * 2 * s_h, 2 * s_v
    assert (3 * layer + vh + norm) * 18 + output + loss == 491_511_296 > 470e6
    first = (5 * layer + vh) * 18 + 2 * (3 * kept + 2 * whole) + work
    last = (layer + vh + norm) * 18 + kept + output + loss
    assert (first, last) == (430_855_168, 467_228_160)
    comm = PAIR + 3 * RING + nvls
    assert [int(st.total_bytes) for st in point.estimate.stages] == [first + comm + layers,
                                                                    last + comm + dummies]  # fmt: skip
    r = per_stage_search(replace(problem, jobs=problem.jobs[:1]), without_uniform=True)
    assert (r.per_stage, r.plan_ns) == (True, point.step_ns)
    cap = int(problem.jobs[0].case.device.usable_bytes(True) * (1 - problem.constraints.headroom))
    check_per_stage_points(got, lambda p: cap)


def test_price_frontier_is_the_gpu_frontier_in_cents():
    """One accelerator at $2.5 per GPU-hour: the price axis orders the jobs as GPU counts do,
    each value G × 250 cents per hour (1 and 2 GPUs hold plans at the budget, 4 none: see
    above)."""
    problem = tiny_problem((1, 2, 4), BUDGET, price=2.5)
    by_price = per_stage_frontier(problem, "price")
    calls: list[tuple[int, int]] = []  # progress(searches, points) after every value
    by_gpus = per_stage_frontier(problem, "gpus", progress=lambda n, p: calls.append((n, p)))
    assert [(p.value, p.step_ns) for p in by_price.points] == [
        (p.value * 250, p.step_ns) for p in by_gpus.points
    ]
    assert [n for n, _ in calls] == list(range(1, by_gpus.searches + 1))  # a search per value
    assert calls[-1][1] == len(by_gpus.points)


def test_nothing_fits_is_infeasible_on_every_axis():
    """1 GPU at 160 MB per GPU holds no plan, uniform or per stage."""
    problem = tiny_problem((1,), 160e6, price=2.5)
    for against in ("gpus", "price", "memory"):
        with pytest.raises(InfeasibleError, match="memory: no layout fits 0.16 GB") as err:
            per_stage_frontier(problem, against)
        assert err.value.explanation[-1].startswith("per_stage: no split of the 1 base layout")


def test_time_limit_spent_returns_what_it_has_not_a_proof():
    """A limit already past: the first search still runs (2 GPUs at 160 MB: nothing fits), the
    second job (4 GPUs) is not searched, so no point and no proof that none exists (not
    InfeasibleError: before, no search ran at all)."""
    problem = tiny_problem((2, 4), 160e6)
    spent = per_stage_frontier(problem, "gpus", time_limit_s=1e-9)
    assert (spent.status, spent.points, spent.stopped) == ("feasible", (), "time")
    assert spent.searches == 1
    with pytest.raises(InfeasibleError):  # the one job searched, nothing fits: proven
        per_stage_frontier(tiny_problem((2,), 160e6), "gpus", time_limit_s=1e-9)


def test_a_limit_spent_on_the_tables_still_gives_the_first_point(monkeypatch):
    """The limit already past before the first per-stage search (the tables took it: Llama 3
    70B on 256..1,024 H100s with ``--time-limit 2`` printed 0 points, no search run): the first
    search runs, given at least :data:`optimizer.search.SOLVE_FLOOR_S` (as the layout search's
    CP-SAT), so the frontier has a point (against memory it stops there: 1 search, not proven)."""
    from trainplan.optimizer import per_stage_frontier as frontier_module
    from trainplan.optimizer.search import SOLVE_FLOOR_S

    given: list[float | None] = []
    real = frontier_module.per_stage_search

    def spy(problem, top_shapes, time_limit_s, workers, **kw):  # type: ignore[no-untyped-def]
        given.append(time_limit_s)
        return real(problem, top_shapes, time_limit_s, workers, **kw)

    monkeypatch.setattr(frontier_module, "per_stage_search", spy)
    # against memory the ε sweep stops after its first point; against GPUs the one job is the
    # whole frontier (proven or not as the floor sufficed on this machine: not asserted)
    for against, stopped in (("memory", "time"), ("gpus", None)):
        given.clear()
        spent = per_stage_frontier(tiny_problem((2,)), against, time_limit_s=1e-9)
        assert (spent.stopped, spent.searches, len(spent.points)) == (stopped, 1, 1)
        assert spent.status == "feasible" or against == "gpus"
        assert len(given) == 1 and given[0] == SOLVE_FLOOR_S


def test_a_budget_of_searches_cuts_the_same_points_on_every_run():
    """``max_searches`` 3 against memory on 2 GPUs: the first three ε of the full frontier,
    each search run to its proof, so two runs give the same points, each proven; the frontier
    is ``feasible``, stopped by ``searches`` (the full one goes on: 7 points)."""
    problem = tiny_problem((2,))
    full = per_stage_frontier(problem, "memory")
    assert (full.status, full.stopped, len(full.points)) == ("optimal", None, 7)
    runs = [per_stage_frontier(problem, "memory", max_searches=3) for _ in range(2)]
    for cut in runs:
        assert (cut.status, cut.stopped, cut.searches) == ("feasible", "searches", 3)
        assert all(p.proven for p in cut.points)
    first, second = ([(p.value, p.step_ns, p.kind) for p in r.points] for r in runs)
    assert first == second
    # the ε sweep's first three points: the full frontier's three fastest
    assert first == [(p.value, p.step_ns, p.kind) for p in full.points[:3]]
    # a budget the frontier does not reach changes nothing
    whole = per_stage_frontier(problem, "memory", max_searches=64)
    assert (whole.status, whole.stopped) == ("optimal", None)
    assert [(p.value, p.step_ns) for p in whole.points] == [
        (p.value, p.step_ns) for p in full.points
    ]


def test_a_point_of_a_search_cut_short_says_it_is_not_proven(monkeypatch):
    """A per-stage search stopped by the wall clock (status ``feasible``) leaves a point that
    says it is not proven; the others stay proven."""
    import trainplan.optimizer.per_stage_frontier as psf

    calls: list[int] = []

    def second_cut(*args, **kw):  # type: ignore[no-untyped-def]
        r = per_stage_search(*args, **kw)
        calls.append(1)
        return replace(r, status="feasible") if len(calls) == 2 else r

    monkeypatch.setattr(psf, "per_stage_search", second_cut)
    got = per_stage_frontier(tiny_problem((2,)), "memory", max_searches=3)
    assert [p.proven for p in got.points] == [True, False, True]
    assert got.status == "feasible"


@settings(max_examples=300, deadline=None)
@given(hst.lists(hst.tuples(hst.integers(1, 40), hst.integers(1, 40)), max_size=30))
def test_no_kept_point_is_dominated_by_another(pairs):
    """Property of the frontier's one filter (optimizer.per_stage_frontier.non_dominated): no
    point it keeps is dominated by another point given (at most its value and faster, or as
    fast with less value); every point given is matched or dominated by a kept one; the kept
    points run fastest first with the value falling."""
    from types import SimpleNamespace

    from trainplan.optimizer.per_stage_frontier import non_dominated as keep

    points = [SimpleNamespace(step_ns=t, value=v) for t, v in pairs]
    kept = keep(points)

    def dominates(a, b):  # type: ignore[no-untyped-def]
        return (a.value <= b.value and a.step_ns <= b.step_ns) and (
            a.value < b.value or a.step_ns < b.step_ns
        )

    assert not any(dominates(a, b) for a in points for b in kept)
    assert all(
        any(dominates(k, p) or (k.step_ns, k.value) == (p.step_ns, p.value) for k in kept)
        for p in points
    )
    assert [k.step_ns for k in kept] == sorted({k.step_ns for k in kept})
    assert [k.value for k in kept] == sorted({k.value for k in kept}, reverse=True)


# --- what users see ---------------------------------------------------------------------------


def test_both_sides_bound_one_figure_under_fsdp2():
    """Against memory, the uniform side bounds a layout's peak (allocated + communicators,
    :attr:`optimizer.tables.CostTables.peak_ceil`) by ε and its fit figure by the capacity; the
    per-stage side the same two (:func:`optimizer.stage_tables.stage_within`). Under FSDP2 the
    two figures differ by the copy-in stream's pool, ``(2 + 1/D)·w·U`` (:func:`model.terms.peak.
    stream_pool_term`, ``foreach_all_gather`` in ``_fsdp_collectives.py``): the 4-layer tiny
    model's unit is one layer, 4·h² + 3·h·f + 2·h = 4·256² + 3·256·688 + 2·256 = 791,040
    weights, 2 × 2 B × 791,040 + 2 B × 791,040 / 2 (the next unit's copy-in buffer, D = dp 2) =
    3,955,200 B. At ε = the uniform 2 + 2 split's own peak, the uniform side admits it, and so
    do the per-stage tables: stage 0 holds its 2 layers with none recomputed (its fit figure,
    3,955,200 B above ε, is not held to ε)."""
    from trainplan.model.frameworks import Framework
    from trainplan.model.layout import Recompute
    from trainplan.model.pipeline import Schedule
    from trainplan.optimizer.per_stage import uniform_within
    from trainplan.optimizer.search import prepare
    from trainplan.optimizer.stage_tables import build_stage_tables

    case = tiny_case(4, 2)
    lay = case.layout.with_(framework="fsdp2", zero_stage=3, dp=2)
    stages = case.evaluate(lay).stages
    assert 4 * 256**2 + 3 * 256 * 688 + 2 * 256 == 791_040
    for st in stages:
        assert st.stream_pool_bytes == 2 * 2 * 791_040 + 2 * 791_040 // 2 == 3_955_200
        assert st.reserved_total_bytes - st.total_bytes == 3_955_200
    space = SearchSpace(num_gpus=4, tp=(1,), pp=(2,), micro_batch_size=(1,), zero_stages=(3,),
                        recomputes=(Recompute.NONE,), schedules=(Schedule.ONE_F_ONE_B,),
                        frameworks=(Framework.FSDP2,))  # fmt: skip
    problem = Problem(jobs=(Job(case, 4, "4 GPUs"),), space=space)
    prepared = prepare(problem)
    tables = prepared[0]
    (s,) = [i for i, sh in enumerate(tables.shapes) if sh.dp == 2]
    eps = int(tables.peak_ceil[s, 0, 0])
    assert eps - max(st.total_bytes for st in stages) in range(0, 3)  # each term rounded up
    got = uniform_within(problem, prepared, eps)
    assert got.best.estimate.layout.dp == 2
    per_stage = build_stage_tables(case, lay, max_bytes=eps)
    rows = [{o.layers: o.recomputed for o in row} for row in per_stage.options]
    assert rows[0][2] == 0 and rows[1][2] == 0  # the uniform split, nothing recomputed
    assert stages[0].reserved_total_bytes > eps  # the fit figure is above ε
