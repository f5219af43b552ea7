"""The split-backward schedules in the one cost model: evaluate()'s pipeline term is the
schedule's span of the stage's pass times (model.schedule_cost), its activations the schedule's
micro-batches in flight, DualPipe's state two copies, the V placement's output layer on rank 0,
and DualPipe's overlapped block hiding the expert all-to-all where the framework overlaps it."""

from __future__ import annotations

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.precision import optimizer_state_bytes
from trainplan.model.schedule_cost import pass_times, split_span
from trainplan.optimizer.case import Case

BASE = dict(model="llama3-8b", num_gpus=16, dp=4, pp=4, global_batch_size=64, seq_len=4096)


def _est(schedule: str, framework: str, **extra: object):  # type: ignore[no-untyped-def]
    return Case.of(**{**BASE, "schedule": schedule, "framework": framework, **extra}).evaluate()


def test_zb_h1_pipeline_term_is_its_closed_form() -> None:
    """ZB-H1 (the paper's schedule: the textbook profile), m = 64/(4·1) = 16, no
    recomputation: F = B = W = t_mb/3 and the pipeline section is m·t_mb + (pp − 1)·t_mb/3 —
    a third of 1F1B's bubble (pp − 1)·t_mb (Qi et al. 2024 Table 2)."""
    zb, one = _est("zb-h1", "textbook"), _est("1f1b", "textbook")
    tz, to = zb.time_terms, one.time_terms
    assert tz is not None and to is not None
    t_mb = tz.compute_and_pipeline_s  # the section, checked against the form below
    m = 16
    mb = (to.compute_and_pipeline_s - to.bubble_s - _pp_exposed(one)) / m
    f, b, w = pass_times(mb, mb, 1)
    expected = split_span("zb-h1", 4, m, f, b, w) + _pp_exposed(zb)
    assert t_mb == pytest.approx(expected, rel=1e-9)
    assert tz.bubble_s == pytest.approx(to.bubble_s / 3, rel=1e-9)


def _pp_exposed(est) -> float:  # type: ignore[no-untyped-def]
    row = next(r for r in est.traffic if r.traffic.axis == "pp")
    return row.exposed_seconds or 0.0


def test_in_flight_and_copies() -> None:
    """Held micro-batches per rank: ZB-H1 min(pp, m) = 4 on every rank (1F1B's last rank: 1);
    DualPipe pp + 1 = 5 and two copies of the model state (textbook profile)."""
    zb, one = _est("zb-h1", "textbook"), _est("1f1b", "textbook")
    assert [s.activations.microbatches_in_flight for s in zb.stages] == [4, 4, 4, 4]
    assert [s.activations.microbatches_in_flight for s in one.stages] == [4, 3, 2, 1]
    dual, flat = _est("dualpipe", "textbook"), _est("1f1b", "textbook")
    assert all(s.activations.microbatches_in_flight == 5 for s in dual.stages)
    own = [s.state.weights_bytes for s in flat.stages]
    # rank r holds stage r and the mirror stage pp − 1 − r (example_dualpipe.py)
    assert [s.state.weights_bytes for s in dual.stages] == [
        a + b for a, b in zip(own, own[::-1], strict=True)
    ]


def test_dualpipe_end_ranks_share_the_embedding_with_the_mtp_module() -> None:
    """DeepSeek-V3 (one MTP module) at pp 16: the last stage keeps a copy of the embedding for
    the MTP module under 1F1B (Megatron-Core builds it where ``mtp_process``); under DualPipe the
    end ranks hold the first stage too, whose embedding the MTP module shares physically (the
    report's §3.2.3): rank 15 = stage 15 + stage 0 − one 129,280 × 7,168 BF16 table."""
    lay = dict(model="deepseek-v3", num_gpus=2048, device="H800", dp=128, pp=16, ep=64,
               global_batch_size=15360, seq_len=4096, framework="textbook")  # fmt: skip
    one = Case.of(**{**lay, "schedule": "1f1b"}).evaluate().stages
    dual = Case.of(**{**lay, "schedule": "dualpipe"}).evaluate().stages
    table = 2 * 129_280 * 7_168
    w = [s.state.weights_bytes for s in one]
    assert dual[15].state.weights_bytes == w[15] + w[0] - table
    assert dual[0].state.weights_bytes == w[0] + w[15] - table
    assert dual[7].state.weights_bytes == w[7] + w[8]
    # activations: rank h from its end holds pp − h micro-batches of stage h and h + 1 of stage
    # pp − 1 − h (DualPipe.step's steps 1–4); stage 0 holds the 3 dense layers
    mb = [s.activations.per_microbatch_bytes for s in one]
    assert dual[0].activations.layers_bytes == 16 * mb[0] + 1 * mb[15]
    assert dual[15].activations.layers_bytes == 16 * mb[0] + 1 * mb[15]
    assert dual[1].activations.layers_bytes == 15 * mb[1] + 2 * mb[14]
    assert dual[7].activations.layers_bytes == 9 * mb[7] + 8 * mb[8] == 17 * mb[7]


def test_v_placement_puts_the_output_layer_on_rank_0() -> None:
    """ZB-V: the embedding and the output layer's activations both on rank 0, none on the last."""
    v = _est("zb-v", "fsdp2")
    assert (
        v.stages[0].activations.embedding_bytes
        > _est("1f1b", "fsdp2").stages[0].activations.embedding_bytes
    )
    assert v.stages[-1].activations.embedding_bytes == 0


def test_a_framework_without_the_schedule_is_refused() -> None:
    with pytest.raises(LayoutError, match="schedule: dualpipe does not run under framework fsdp2"):
        _est("dualpipe", "fsdp2")
    # every schedule, not only the split ones: Megatron-Core has no GPipe
    # (get_forward_backward_func), DeepSpeed no interleaving (TrainSchedule only)
    with pytest.raises(LayoutError, match="schedule: gpipe does not run under framework megatron"):
        _est("gpipe", "megatron")
    with pytest.raises(LayoutError, match="interleaved does not run under framework deepspeed"):
        _est("interleaved", "deepspeed", virtual_stages=2)
    assert _est("gpipe", "fsdp2").time_terms is not None  # torchtitan's GPipe
    # torchtitan _get_pipeline_metadata: a PipelineScheduleMulti (InterleavedZeroBubble,
    # Interleaved1F1B) "requires at least 2 stages per rank"; ZB-H1 has one
    with pytest.raises(LayoutError, match="schedule: zb-h1 does not run under framework fsdp2"):
        _est("zb-h1", "fsdp2")
    with pytest.raises(LayoutError, match="virtual_stages: 1 under schedule interleaved"):
        _est("interleaved", "fsdp2", virtual_stages=1)
    assert _est("interleaved", "fsdp2", virtual_stages=2).time_terms is not None
    # without a pipeline no schedule runs: the name is not refused
    Case.of(**{**BASE, "dp": 16, "pp": 1, "schedule": "gpipe", "framework": "megatron"})


def test_the_search_offers_a_schedule_only_under_a_framework_that_runs_it() -> None:
    """The search's shapes (optimizer.space._schedules): GPipe under fsdp2, none under megatron
    alone (legality's framework rule, written once in model.legality)."""
    from trainplan.model.frameworks import Framework
    from trainplan.model.pipeline import Schedule
    from trainplan.optimizer.space import SearchSpace, _schedules

    def offered(*frameworks: Framework) -> set[Schedule]:
        space = SearchSpace(num_gpus=16, frameworks=frameworks)
        return {s for s, _ in _schedules(space, 4)}

    assert Schedule.GPIPE not in offered(Framework.MEGATRON)
    assert Schedule.GPIPE in offered(Framework.MEGATRON, Framework.FSDP2)
    assert Schedule.INTERLEAVED not in offered(Framework.DEEPSPEED)


def test_a_dualpipe_rank_runs_its_stage_and_the_mirror_stage() -> None:
    """DualPipe's rank r runs stage r for one direction's m/2 micro-batches and stage pp − 1 − r
    for the other's (deepseek-ai/DualPipe examples/example_dualpipe.py: each rank builds
    ``full_modules[rank]`` and ``full_modules[pp_size - 1 - rank]``), so a chunk on the end ranks
    takes (8L + (8L + O))/2 and the slowest chunk is 8L + O/2, not the last stage's 8L + O.
    Llama 3 8B (32 layers) under the single model: L and O from 1F1B at pp 4 (8L + O) and pp 2
    (16L + O), per micro-batch."""
    base = dict(model="llama3-8b", num_gpus=16, global_batch_size=64, seq_len=4096)

    def per_microbatch(pp: int, dp: int, schedule: str) -> float:
        est = Case.of(**{**base, "pp": pp, "dp": dp, "schedule": schedule, "framework": "textbook"})
        terms = est.evaluate().time_terms
        assert terms is not None
        return terms.compute_s / (64 / dp)

    four, two = per_microbatch(4, 4, "1f1b"), per_microbatch(2, 8, "1f1b")
    layer = (two - four) / 8
    output = four - 8 * layer
    assert per_microbatch(4, 4, "dualpipe") == pytest.approx(8 * layer + output / 2, rel=1e-9)


def test_a_dualpipe_bubble_is_never_negative() -> None:
    """The timeline's pass-time ratios are rounded to a denominator of 64
    (model.schedule_cost.RATIO_DENOMINATOR), which left the search's DeepSeek-V3 winner
    (dp 512 × tp 2 × pp 2, ep 128, DualPipe, m 30) a span 1.0 ms shorter than its rank's own
    passes (12.6512 s against m·t_mb = 12.6522 s): a bubble of −1.0 ms. The span is at least
    the passes, so the bubble is 0 and the section is m·t_mb. That winner ran DeepEP over ep
    groups at stride 2 on 8-GPU NVLink domains, which DeepEP cannot build (model.flex_domains);
    the same pass times under the alltoall dispatcher keep the case."""
    est = Case.of(**{
        "model": "deepseek-v3", "device": "H800", "framework": "textbook",
        "global_batch_size": 15360, "seq_len": 4096, "dp": 512, "tp": 2, "pp": 2, "ep": 128,
        "zero_stage": 3, "micro_batch_size": 1, "recompute": "selective", "schedule": "dualpipe",
        "precision": "fp8", "fp8_recipe": "blockwise", "fp8_activation_storage": "deepseek_v3",
        "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"], "optimizer_bytes": optimizer_state_bytes("bf16", True),
        "gradient_bytes": 4, "moe_run": MoERun(dispatcher=Dispatcher.ALLTOALL),
    }).evaluate()  # fmt: skip
    terms = est.time_terms
    assert terms is not None
    assert terms.bubble_s == 0
    assert terms.busy_s == pytest.approx(12.6522, abs=1e-4)
