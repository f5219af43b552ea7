"""Hypothesis properties of ``evaluate()`` over legal layouts of small catalogue models
(megatron-1.7b: GPT layer with dropout; llama3-8b: GQA + SwiGLU; mixtral-8x7b: MoE) at small s:

* memory never rises with the ZeRO stage under ``textbook`` (the seed's steady state; real
  frameworks' peaks do rise, e.g. DeepSpeed ZeRO-3's buffers, so only the textbook promises it):
  on every stage its model state and its total, hence the busiest stage's total; the busiest
  stage's model state only against the same stage's (the busiest stage may change, see
  :func:`test_busiest_stage_changes_at_zero2_on_a_moe_pipeline`); the ZeRO table is monotone;
* per-layer activations checkpoint ≤ selective ≤ none; a stage's kept activations
  full ≤ selective ≤ none and √n ≤ none; totals with the transient full, √n ≤ none;
* traffic is zero on an axis of degree 1 (and positive on one of degree > 1), for every CP
  flavour;
* the total equals the sum of its parts;
* hfu ≥ mfu;
* evaluate is deterministic.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.errors import LayoutError
from trainplan.model.flops import MfuConvention
from trainplan.model.frameworks import Framework, check_framework_recompute, zero_stages_for
from trainplan.model.layout import Recompute
from trainplan.model.schedule_support import SCHEDULE_SUPPORT
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

MODELS = ("megatron-1.7b", "llama3-8b", "mixtral-8x7b")
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tp_choices(arch) -> list[int]:
    sizes = [arch.num_attention_heads, arch.kv_heads, arch.ffn_hidden_size]
    if arch.moe:
        sizes.append(arch.moe.expert_ffn_hidden_size)
    return [t for t in (1, 2, 4, 8) if all(n % t == 0 for n in sizes)]


def _runs(framework: str, mode: Recompute, pp: int = 1) -> bool:
    """Whether ``framework`` runs the recompute ``mode`` with ``pp`` stages (model.frameworks.
    check_framework_recompute: no sqrt under fsdp2, nor under deepspeed with pp > 1)."""
    try:
        check_framework_recompute(framework, mode.value, pp)
    except LayoutError:
        return False
    return True


@st.composite
def layouts(draw, models=MODELS, convention: str | None = None):
    """Flat build_case parameters of a legal layout."""
    name = draw(st.sampled_from(models))
    arch = get_model(name).model.arch
    tp = draw(st.sampled_from(_tp_choices(arch)))
    pp = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    cp = draw(st.sampled_from([1, 1, 2, 4]))
    # DeepSpeed runs a MoE model at tp 1 only (model.expert_groups.check_expert_groups)
    frameworks = [
        f.value for f in Framework if not (f.value == "deepspeed" and arch.moe and tp > 1)
    ]
    framework = draw(st.sampled_from(frameworks))
    cp_kind, cp_a2a = "ring", None
    if cp > 1:  # the flavours whose head rule the drawn tp allows (model.context_parallel)
        heads = (arch.num_attention_heads // tp, arch.kv_heads // tp)
        kinds = ["ring", "all-gather"] + (["ulysses"] if all(n % cp == 0 for n in heads) else [])
        kinds += ["a2a+p2p"] if cp == 4 and all(n % 2 == 0 for n in heads) else []
        if framework == "deepspeed":  # DeepSpeed-Ulysses only, at tp = pp = 1 (model.cp_rules)
            ok = tp == 1 and pp == 1 and arch.num_attention_heads % cp == 0
            kinds = ["ulysses"] if ok else []
        if framework == "fsdp2":  # PyTorch's flavours and Llama 3's all-gather (model.cp_rules)
            kinds = ["all-gather", "pytorch-allgather", "pytorch-alltoall"]
        if kinds:
            cp_kind = draw(st.sampled_from(kinds))
        else:
            cp = 1
        cp_a2a = 2 if cp_kind == "a2a+p2p" else None
    dp = draw(st.sampled_from([1, 2, 4]))
    ep = 1
    if arch.moe:
        ep = draw(
            st.sampled_from(
                [e for e in (1, 2, 4, 8) if arch.moe.num_experts % e == 0 and (dp * cp) % e == 0]
            )
        )
    # a schedule the framework runs (model.schedule_support; without a pipeline any name)
    runs = [s for s in ("gpipe", "1f1b") if pp == 1 or framework in SCHEDULE_SUPPORT[s]]
    if pp > 1 and framework in SCHEDULE_SUPPORT["interleaved"] and 2 * pp <= arch.num_layers:
        runs.append("interleaved")
    schedule = draw(st.sampled_from(runs))
    v = 1
    if schedule == "interleaved":  # v ≥ 2 (model.schedule_support: at v = 1 it is 1F1B)
        v = draw(st.sampled_from([v for v in range(2, 4) if pp * v <= arch.num_layers]))
        m = pp * draw(st.integers(1, 2))
    else:
        m = draw(st.integers(1, 6))
    b = draw(st.sampled_from([1, 2]))
    params = {
        "model": name,
        "device": draw(st.sampled_from(["H100-SXM", "A100-80GB"])),
        "dp": dp,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "cp_kind": cp_kind,
        "cp_a2a": cp_a2a,
        "ep": ep,
        "framework": framework,
        # the stages the framework runs (DeepSpeed's native MoE: not ZeRO-3,
        # model.moe_rules.check_deepspeed_moe)
        "zero_stage": draw(
            st.sampled_from(
                [
                    z
                    for z in zero_stages_for(Framework(framework), pp)
                    if not (framework == "deepspeed" and z == 3 and arch.moe)
                ]
            )
        ),
        "recompute": draw(st.sampled_from([r.value for r in Recompute if _runs(framework, r, pp)])),
        "micro_batch_size": b,
        "schedule": schedule,
        "virtual_stages": v,
        "seq_len": draw(st.sampled_from([128, 256, 512])),
        "global_batch_size": m * b * dp,
        "flash_attention": draw(st.booleans()),
        # off only where the framework runs it: Megatron-Core refuses a MoE model at tp > 1
        # without sequence parallelism (model.shape_rules, MoELayer.forward)
        "sequence_parallel": draw(
            st.sampled_from(
                [None] if arch.moe and framework == "megatron" and tp > 1 else [None, False]
            )
        ),
    }
    if convention:
        params["mfu_convention"] = convention
    return params


def _evaluate(params: dict, **changes):
    return Case.of(**{**params, **changes}).evaluate()


# Found by hypothesis: Mixtral 8x7B, dp 4, pp 3, ep 4 (see the regression test below); it drew
# interleaved at v = 1, b 2, s 512, refused now (model.schedule_support: at v = 1 it is 1F1B),
# and 1F1B's case is b 4, s 544.
_MIXTRAL_PP3_EP4 = {
    "model": "mixtral-8x7b",
    "device": "H100-SXM",
    "dp": 4,
    "tp": 1,
    "pp": 3,
    "cp": 1,
    "cp_kind": "ring",
    "cp_a2a": None,
    "ep": 4,
    "framework": "fsdp2",
    "zero_stage": 2,
    "recompute": "none",
    "micro_batch_size": 4,
    "schedule": "1f1b",
    "virtual_stages": 1,
    "seq_len": 544,
    "global_batch_size": 48,
    "flash_attention": False,
    "sequence_parallel": None,
}


@SETTINGS
@given(layouts())
@example(_MIXTRAL_PP3_EP4)
def test_memory_never_rises_with_zero_stage(params):
    """Each ZeRO stage shards a superset of the previous one's state (ZeRO-1 the optimizer
    state, ZeRO-2 also the gradients, ZeRO-3 also the weights; Rajbhandari et al. 2020, §5),
    and the activations do not depend on it, so on EVERY pipeline stage each part of the model
    state, the model state and the stage's total never rise. The busiest stage's total is the
    maximum of those totals, so it never rises either. The busiest stage's model state is NOT
    monotone: the busiest stage is the argmax of state + activations and may move to a stage
    with more state and fewer activations (see
    :func:`test_busiest_stage_changes_at_zero2_on_a_moe_pipeline`); what holds is that it is at
    most the same stage's model state one ZeRO stage lower, and that the most model state any
    stage holds never rises."""
    ests = [_evaluate(params, zero_stage=z, framework="textbook") for z in range(4)]
    for a, b in zip(ests, ests[1:], strict=False):
        assert b.total_bytes <= a.total_bytes
        assert b.peak.state.total_bytes <= a.stages[b.busiest].state.total_bytes
        assert max(s.state.total_bytes for s in b.stages) <= max(
            s.state.total_bytes for s in a.stages
        )
        for sa, sb in zip(a.stages, b.stages, strict=True):
            assert sb.state.weights_bytes <= sa.state.weights_bytes
            assert sb.state.gradients_bytes <= sa.state.gradients_bytes
            assert sb.state.optimizer_bytes <= sa.state.optimizer_bytes
            assert sb.state.total_bytes <= sa.state.total_bytes
            assert sb.total_bytes <= sa.total_bytes
    table = ests[0].zero_table
    assert [r.zero_stage for r in table] == [0, 1, 2, 3]
    states = [r.model_state_bytes for r in table]
    assert states == sorted(states, reverse=True)
    assert table[0].reduction == 1 and all(r.reduction >= 1 for r in table)
    dp = [r.dp_bytes_per_step for r in table]
    # ZeRO-2 reduce-scatters its 1/D gradients every micro-batch (m of them) and gathers the
    # weights once (ZeRO §5.2): (m + 1)/2 of the all-reduce's 2 bytes a 2-byte parameter; ZeRO-3
    # gathers for each micro-batch's forward and backward and reduce-scatters every micro-batch
    # (§7.2.2's 3Ψ at m = 1): 3m/2 of it
    m = ests[0].layout.num_microbatches(params["global_batch_size"])
    assert dp[0] == dp[1] and dp[2] == Fraction(m + 1, 2) * dp[0]
    assert dp[3] == Fraction(3 * m, 2) * dp[0]


def test_busiest_stage_changes_at_zero2_on_a_moe_pipeline():
    """Why the busiest stage's model state may rise with the ZeRO stage (the hypothesis case).

    Mixtral 8x7B under ``textbook``, dp 4, pp 3 (10/11/11 layers), ep 4. The dense parameters'
    gradients are sharded over D = dp·cp = 4, the experts' over their own data-parallel group,
    D_e = dp·cp/ep = 1 (:func:`model.layout.expert_shard_degree_of`), i.e. not at all: Megatron-LM
    ``megatron/core/distributed/distributed_data_parallel.py``
    ``DistributedDataParallel.__init__`` gives expert-parallel parameters their own buffers over
    the expert data-parallel group, and DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py``
    ``DeepSpeedZeroOptimizer._configure_moe_settings`` partitions a MoE parameter group over its
    expert data-parallel group. So ZeRO-2 saves each stage 3/4 of its dense parameters'
    2-byte gradients:

    * stage 0 (10 layers and the embedding): 550,912,000 dense parameters ->
      2 · 550,912,000 · 3/4 = 826,368,000 B;
    * stage 1 (11 layers): 461,824,000 -> 692,736,000 B.

    Stage 0 holds fewer layers but more activations (the first stage keeps the most
    micro-batches in flight: 1F1B's 3 of m = 3 against stage 1's 2), so at ZeRO-1 it is the
    busiest by only 79,348,080,640 - 79,262,875,648 = 85,204,992 B. ZeRO-2 takes 826,368,000 - 692,736,000 =
    133,632,000 B more from stage 0 than from stage 1, so stage 1 becomes the busiest, and its
    model state (64,548,622,336 B) is larger than stage 0's at ZeRO-1 (60,227,829,760 B), though
    every stage lost bytes and the busiest total fell."""
    z1, z2 = (_evaluate(_MIXTRAL_PP3_EP4, zero_stage=z, framework="textbook") for z in (1, 2))
    assert [s.num_layers for s in z1.stages] == [10, 11, 11]
    assert (z1.stages[0].dense_params, z1.stages[1].dense_params) == (550_912_000, 461_824_000)
    saved = [
        a.state.gradients_bytes - b.state.gradients_bytes
        for a, b in zip(z1.stages, z2.stages, strict=True)
    ]
    assert saved[:2] == [2 * 550_912_000 * 3 // 4, 2 * 461_824_000 * 3 // 4]
    assert saved[:2] == [826_368_000, 692_736_000]
    for a, b in zip(z1.stages, z2.stages, strict=True):
        assert a.activations.total_bytes == b.activations.total_bytes
        assert b.state.total_bytes < a.state.total_bytes and b.total_bytes < a.total_bytes
    assert (z1.busiest, z2.busiest) == (0, 1)
    assert [s.total_bytes for s in z1.stages[:2]] == [79_348_080_640, 79_262_875_648]
    assert [s.total_bytes for s in z2.stages[:2]] == [78_521_712_640, 78_570_139_648]
    assert z1.peak.state.total_bytes == 60_227_829_760
    assert z2.peak.state.total_bytes == 64_548_622_336
    assert z2.total_bytes < z1.total_bytes


@SETTINGS
@given(layouts(), st.integers(0, 3))
def test_per_layer_activations_checkpoint_le_selective_le_none(params, index):
    arch = get_model(params["model"]).model.arch
    sp = params["tp"] > 1 if params["sequence_parallel"] is None else False
    ctx = ActivationContext(
        seq_len=params["seq_len"],
        cp=params["cp"],
        cp_kind=params["cp_kind"],
        micro_batch_size=params["micro_batch_size"],
        tp=params["tp"],
        sequence_parallel=sp,
        flash_attention=params["flash_attention"],
    )
    acts = layer_activations(arch, index, ctx)
    assert 0 < acts.checkpoint_bytes <= acts.selective_bytes <= acts.full_bytes


@SETTINGS
@given(layouts())
def test_stage_activations_full_le_selective_le_none_and_sqrt_le_none(params):
    modes = [r for r in Recompute if _runs(params["framework"], r, params["pp"])]
    est = {r: _evaluate(params, recompute=r.value) for r in modes}
    for i in range(len(est[Recompute.NONE].stages)):
        kept = {r: e.stages[i].activations.layers_bytes for r, e in est.items()}
        total = {r: e.stages[i].activations.total_bytes for r, e in est.items()}
        assert kept[Recompute.FULL] <= kept[Recompute.SELECTIVE] <= kept[Recompute.NONE]
        if Recompute.SQRT in est:
            assert kept[Recompute.SQRT] <= kept[Recompute.NONE]
            assert kept[Recompute.SQRT] <= kept[Recompute.FULL]  # ceil(n/k) inputs, not n
            assert total[Recompute.SQRT] <= total[Recompute.NONE]
        assert total[Recompute.FULL] <= total[Recompute.NONE]
        assert total[Recompute.SELECTIVE] <= total[Recompute.NONE]
        assert est[Recompute.NONE].stages[i].activations.recompute_transient_bytes == 0
        # selective: one layer's recomputed tensors while its backward runs, at most what
        # every layer of the stage would keep without recomputation beyond selective's count
        sel = est[Recompute.SELECTIVE].stages[i].activations
        per_mb = {r: e.stages[i].activations.per_microbatch_bytes for r, e in est.items()}
        assert (
            0
            <= sel.recompute_transient_bytes
            <= per_mb[Recompute.NONE] - per_mb[Recompute.SELECTIVE]
        )


# The pinned example: Llama 3 8B at s = 512 with no recomputation and the default "6n"
# convention. Model FLOPs 6·N·tokens count the untied input embedding (V·h = 525 M parameters,
# a table lookup) at 6 FLOPs per token, which hardware_flops (matmuls + attention + logits) do not
# contain; attention (12·s·h·L per token) does not make up for it while s < V/(2L) ≈ 2004, so
# MFU 0.397 > HFU 0.377.
HFU_COUNTEREXAMPLE = {
    "model": "llama3-8b",
    "device": "H100-SXM",
    "dp": 8,
    "tp": 1,
    "pp": 1,
    "cp": 1,
    "ep": 1,
    "zero_stage": 1,
    "recompute": "none",
    "micro_batch_size": 1,
    "schedule": "1f1b",
    "virtual_stages": 1,
    "seq_len": 512,
    "global_batch_size": 8,
    "flash_attention": True,
    "sequence_parallel": None,
}


@SETTINGS
@example(HFU_COUNTEREXAMPLE)
@given(layouts())
def test_hfu_at_least_mfu(params):
    """HFU counts model FLOPs plus the recomputed FLOPs the convention counts (PaLM Appendix B),
    under every convention: under ``6n`` the recomputed matmuls, not the attention cores, which
    ``6n`` leaves out of the model FLOPs too; the ``6n+attention`` HFU beside it adds every
    recomputed FLOP. The pinned example (llama3-8b, s = 512) once had MFU > HFU when the
    embedding's 6N share was counted in MFU but not in HFU."""
    est = _evaluate(params)
    assert est.step_s is not None and est.step_s > 0
    assert est.hfu >= est.mfu > 0
    f = est.flops
    assert f.with_attention_hardware_flops == f.with_attention_model_flops + f.recomputed_flops
    if est.options.mfu_convention is MfuConvention.SIX_N:
        assert 0 <= f.hardware_flops - f.model_flops <= f.recomputed_flops
    else:
        assert f.hardware_flops == f.model_flops + f.recomputed_flops


@SETTINGS
@given(layouts(convention="megatron"))
def test_hfu_at_least_mfu_megatron_convention(params):
    """With term-by-term model FLOPs, hardware = model + recomputed exactly, so hfu ≥ mfu."""
    est = _evaluate(params)
    assert est.flops.hardware_flops == est.flops.model_flops + est.flops.recomputed_flops
    assert est.step_s is not None and est.hfu >= est.mfu > 0
    if params["recompute"] == "none":
        assert est.hfu == est.mfu


@SETTINGS
@given(layouts())
def test_ring_and_all_gather_send_the_same_and_the_all_gather_holds_more(params):
    """Ring Attention and Llama 3's all-gather move the same K/V bytes (cp − 1 chunks forward,
    twice that backward: Transformer Engine re-gathers K/V and reduce-scatters dK/dV); the
    ring hides its chunks under the attention core where the all-gather waits (Llama 3 §3.3.2),
    so the all-gather's micro-batches are never shorter (its whole step can be: a longer
    micro-batch hides more of the data-parallel reduction); its layers keep at least as much
    (each query chunk's output kept apart). Its peak need not be higher: the ring's last rank
    holds every step's whole-length partial output (``(r + 1)·O``) beside its K/V chunks while
    it merges them, the all-gather its gathered K/V and dK/dV (``2·r·KV``)."""
    if params["cp"] == 1 or params["framework"] in ("deepspeed", "fsdp2"):  # no TE ring there
        return
    ring = _evaluate(params, cp_kind="ring", cp_a2a=None)
    gather = _evaluate(params, cp_kind="all-gather", cp_a2a=None)
    rows = [{r.traffic.axis: r.traffic.bytes_per_step for r in e.traffic} for e in (ring, gather)]
    assert rows[0] == rows[1] and rows[0]["cp"] > 0
    assert ring.time_terms.compute_and_pipeline_s <= gather.time_terms.compute_and_pipeline_s
    for a, b in zip(ring.stages, gather.stages, strict=True):
        assert a.activations.layers_bytes <= b.activations.layers_bytes
