"""The search's tables (the cost model over arrays, float64; issue 10) against the exact
evaluator, on thousands of random candidates (:data:`SAMPLE` a case) across dense, GQA, MoE and MLA models, every
schedule, recompute mode, framework profile and context-parallel flavour: bytes to the byte after rounding up, time to the
nanosecond (:data:`optimizer.search.BYTE_TOLERANCE`, :data:`optimizer.search.NS_TOLERANCE`:
float64 sums in another order), fit verdicts exactly."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.context_parallel import CpKind
from trainplan.model.estimate import evaluation_context, objective_ns
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Recompute
from trainplan.model.moe_run import Dispatcher, EpOverlap, MoERun
from trainplan.model.offload import Offload
from trainplan.model.op_time import TP_OVERLAP_FRAMEWORKS, TpOverlap
from trainplan.model.packing import Documents
from trainplan.model.pipeline import SPLIT_BACKWARD, Schedule
from trainplan.model.precision import optimizer_state_bytes
from trainplan.model.rlhf.phases import value_head_model
from trainplan.model.schedule_support import SCHEDULE_SUPPORT
from trainplan.optimizer.case import Case
from trainplan.optimizer.columns import ShapeColumns
from trainplan.optimizer.job_rows import _memory, _with_communicators, fit_columns
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import BYTE_TOLERANCE, NS_TOLERANCE
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables, job_shapes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

VALUE_HEAD_QWEN = value_head_model(get_model("qwen2.5-7b").model, "megatron")
VALUE_HEAD_GPT = value_head_model(get_model("megatron-1.7b").model, "megatron")
FRAMEWORKS = ["megatron", "deepspeed", "fsdp2", "textbook"]
CP_KINDS = ["ring", "all-gather", "ulysses", "a2a+p2p"]
CP = {"cp": (1, 2, 4), "cp_kinds": tuple(CpKind(k) for k in CP_KINDS)}
DEEPEP = MoERun(dispatcher=Dispatcher.DEEPEP, node_limit=4)
CASES = [
    # (id, model, GPUs, GPU, the search space beyond b ≤ 2 and v 2–4 under every framework, the
    # case's recipe): dense GPT with dropout and learned positions, GQA + SwiGLU, MoE with ep,
    # MLA + MoE with dense first layers
    ("megatron-1.7b", "megatron-1.7b", 16, "A100-80GB", {}, {"global_batch_size": 64, "seq_len": 2048}),
    ("llama3-8b", "llama3-8b", 16, "H100-SXM", {}, {"global_batch_size": 32, "seq_len": 4096}),
    ("mixtral-8x7b", "mixtral-8x7b", 16, "H100-SXM", {"ep": (1, 2, 4)},
     {"global_batch_size": 32, "seq_len": 4096}),
    ("deepseek-v3", "deepseek-v3", 64, "H800", {"ep": (8, 16), **CP},
     {"global_batch_size": 64, "seq_len": 4096}),
    ("llama3-70b", "llama3-70b", 32, "H100-SXM", CP, {"global_batch_size": 64, "seq_len": 8192}),
    # recipes (issue 11 item 1): FP8 caches, FP8-saved inputs, FP8 GEMM time; BF16 moments;
    # Megatron-Core's recompute modules (the time of what each re-runs, model.recompute_ops)
    ("llama3-8b-fp8", "llama3-8b", 16, "H100-SXM", {},
     {"global_batch_size": 32, "seq_len": 4096, "precision": "fp8",
      "recompute_modules": ("mlp", "layernorm")}),
    ("deepseek-v3-fp8", "deepseek-v3", 64, "H800", {"ep": (8, 16)},
     {"global_batch_size": 64, "seq_len": 4096, "precision": "fp8",
      "optimizer_bytes": optimizer_state_bytes("bf16", True), "gradient_bytes": 4,
      "recompute_modules": ("layernorm", "mla_up_proj", "moe_act", "moe")}),
    # offload (issue 11 item 2): host bytes, the CPU step and the host-link transfers in t2
    ("llama3-8b-offload", "llama3-8b", 16, "H100-SXM", {},
     {"global_batch_size": 32, "seq_len": 4096, "offload": Offload(optimizer=1)}),
    # activation offload (issue 11 item 2): the offloaded tensors off the per-layer figures, the
    # two-layer GPU buffer, the exposed copy time in t1 (a slow 4 GB/s link so that some of it
    # is exposed); MoE expert modules on Mixtral
    ("llama3-8b-actoff", "llama3-8b", 16,
     replace(get_accelerator("H100-SXM"), host_link_bytes_per_s=4e9), {},
     {"global_batch_size": 32, "seq_len": 4096,
      "offload": Offload(activations=("core_attn", "attn_proj"))}),
    ("mixtral-8x7b-actoff", "mixtral-8x7b", 16, "H100-SXM", {"ep": (1, 2, 4)},
     {"global_batch_size": 32, "seq_len": 4096,
      "offload": Offload(activations=("mlp_norm", "expert_fc1", "moe_act"))}),
    # issue 11: per-layer attention spans (Gemma 3's 5 local : 1 global, GeGLU, post-norms,
    # QK-norm, tied embeddings; Llama 4's chunks, shared expert; gpt-oss's windows, sinks and
    # biases without FlashAttention), DeepSeek-V3's MTP block (above), padded vocabularies
    # (Megatron's 128·tp, and an explicit --pad-vocab 64 with Qwen2.5's q/k/v biases)
    ("gemma3-27b", "gemma3-27b", 16, "H100-SXM", {}, {"global_batch_size": 32, "seq_len": 8192}),
    ("llama4-scout", "llama4-scout", 32, "H100-SXM", {"ep": (1, 2)},
     {"global_batch_size": 32, "seq_len": 16384}),
    ("gpt-oss-20b", "gpt-oss-20b", 16, "H100-SXM", {"ep": (1, 4)},
     {"global_batch_size": 32, "seq_len": 2048, "flash_attention": False}),
    # each layer's span on the clock (model.core_spans): gpt-oss's 128-key bands under cuDNN's
    # fused kernel on Blackwell (the windowed curve), mixed with its global layers
    ("gpt-oss-20b-bands", "gpt-oss-20b", 16, "B200", {"ep": (1, 4)},
     {"global_batch_size": 32, "seq_len": 4096}),
    ("qwen2.5-7b", "qwen2.5-7b", 16, "H100-SXM", {},
     {"global_batch_size": 32, "seq_len": 4096, "vocab_multiple": 64}),
    # an RLHF critic's network (model.value_head): the [h → 1] head with its bias in place of
    # the LM head, whole on every tp rank, no all-gather buffer; and a tied one (GPT's
    # embedding stays, no copy on the last stage)
    ("qwen2.5-7b-value-head", VALUE_HEAD_QWEN, 16, "H100-SXM", {},
     {"global_batch_size": 32, "seq_len": 4096}),
    ("megatron-1.7b-value-head", VALUE_HEAD_GPT, 16, "A100-80GB", {},
     {"global_batch_size": 64, "seq_len": 2048}),
    # MLA over packed documents under megatron (model.mla_thd: the padded value and the kernel's
    # padded output, score rows read by the evaluator and the tables alike), with Transformer
    # Engine's placeholder weight gradients over dense, MoE (routed and shared experts) and MTP
    # layers (model.terms.dummy_wgrads)
    ("deepseek-v3-packed", "deepseek-v3", 64, "H800", {"ep": (8, 16)},
     {"global_batch_size": 64, "seq_len": 4096, "documents": Documents.histogram([(1024, 1)])}),
    # MoE as it runs (model.moe_run): DeepEP's de-duplicated dispatch with node-limited routing
    # (once per rank in one node at ep 8; ep 16 spans two H800 nodes: once per remote node, then
    # once per rank over NVLink, model.moe_dispatch) and its resident buffers; padding to a capacity factor with
    # imbalance and Megatron-Core's combined-1F1B overlap (legal under megatron only, with
    # interleaving when pp > 1 and without full recomputation: the rest is masked)
    ("deepseek-v3-deepep", "deepseek-v3", 64, "H800", {"ep": (8, 16)},
     {"global_batch_size": 64, "seq_len": 4096, "moe_run": DEEPEP}),
    # HybridEP (megatron only, the rest masked): the same once-per-rank and once-per-domain sends, its
    # buffers sized by the tokens a rank and the group's domains (model.dispatch_buffers)
    ("deepseek-v3-hybridep", "deepseek-v3", 64, "H800", {"ep": (8, 16)},
     {"global_batch_size": 64, "seq_len": 4096, "moe_run": MoERun(dispatcher=Dispatcher.HYBRIDEP)}),
    ("mixtral-8x7b-overlap", "mixtral-8x7b", 16, "H100-SXM", {"ep": (2, 4)},
     {"global_batch_size": 32, "seq_len": 4096,
      "moe_run": MoERun(ep_overlap=EpOverlap.COMBINED_1F1B,
                        capacity_factor=Fraction(5, 4), pad_to_capacity=True,
                        imbalance=Fraction(6, 5))}),
    # Transformer Engine's userbuffers (tp_comm_overlap full, model.terms.userbuffers): held
    # with the communicators in both phases under megatron at tp > 1 (fsdp2 and deepspeed
    # refuse full: model.op_time.TP_OVERLAP_FRAMEWORKS)
    ("llama3-70b-userbuffers", "llama3-70b", 32, "H100-SXM", {},
     {"global_batch_size": 64, "seq_len": 8192, "tp_comm_overlap": "full"}),
    # FP8 primary weights (Megatron-Core's --fp8-param-gather, megatron only): the linear
    # weights all-gathered over dp at a byte (model.fp8_gathers), ZeRO-1 and Megatron-FSDP
    ("llama3-8b-fp8-params", "llama3-8b", 16, "H100-SXM", {},
     {"global_batch_size": 32, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "tensorwise",
      "fp8_param_gather": True}),
    # a MoE model's FP8 weight gathers: torchao's under fsdp2 leaves the routed experts in BF16
    ("mixtral-8x7b-fp8-params", "mixtral-8x7b", 16, "H100-SXM", {"ep": (1, 2)},
     {"global_batch_size": 32, "seq_len": 4096, "precision": "fp8", "fp8_recipe": "tensorwise",
      "fp8_param_gather": True}),
]  # fmt: skip


SAMPLE = 120
"""Candidates drawn a case (24 cases: 2,880 in all, every one evaluated exactly): 400 a case
took CI a tenth of its time, 200 still over a minute of CI's 20."""


def _problem(name, model, gpus, gpu, space, options):
    """The search problem of one case: ``gpus`` GPUs of ``gpu``, b ≤ 2, v 2–4, every framework."""
    case = Case.of(model, gpu, **options)
    full = options.get("tp_comm_overlap") == "full"
    frameworks = [f for f in FRAMEWORKS if not full or f in TP_OVERLAP_FRAMEWORKS[TpOverlap.FULL]]
    if options.get("fp8_param_gather"):  # model.fp8_gather_rules.check_fp8_param_gather
        frameworks = ["megatron", "fsdp2"]  # FP8 primary weights; torchao's FP8 all-gather
    space = SearchSpace(num_gpus=gpus, max_micro_batch_size=2, virtual_stages=(2, 3, 4),
                        frameworks=tuple(Framework(f) for f in frameworks), **space)  # fmt: skip
    return Problem(jobs=(Job(case, gpus, name),), space=space)


@pytest.mark.parametrize(
    ("model", "base", "gpus", "gpu", "space", "options"), CASES, ids=[c[0] for c in CASES]
)
def test_tables_equal_the_exact_evaluation(model, base, gpus, gpu, space, options):
    problem = _problem(model, base, gpus, gpu, space, options)
    tables = build_tables(problem)
    rng = random.Random(hash(model) % 1000)
    candidates = [
        (s, z, r)
        for s in range(len(tables.shapes))
        for z in range(len(tables.zero_stages))
        for r in range(len(tables.recomputes))
        if tables.legal[s, z, r]
    ]
    sample = rng.sample(candidates, min(SAMPLE, len(candidates)))
    schedules = {str(tables.shapes[s].schedule) for s, _, _ in sample}
    assert {"1f1b", "interleaved"} <= schedules or model.startswith(("deepseek-v3", "llama4-scout"))
    if "cp_kinds" in space:  # every CP flavour is drawn
        assert {
            str(tables.shapes[s].cp_kind) for s, _, _ in sample if tables.shapes[s].cp > 1
        } == set(CP_KINDS)
    held = 0
    for s, z, r in sample:
        job = tables.jobs[tables.job_of[s]]
        lay = tables.shapes[s].layout(tables.zero_stages[z], tables.recomputes[r])
        est = job.case.evaluate(lay)
        where = f"{lay}"
        for st in est.stages:
            i = st.stage
            acts = st.activations.total_bytes if st.activations else 0
            # the tables hold NCCL's buffers and the output layer's all-gather buffer in both
            # phases
            comm = st.communicator_bytes + st.persistent_buffers_bytes
            assert (
                abs(math.ceil(st.state.backward_bytes + comm) - tables.state_ceil[s, z, r, i])
                <= BYTE_TOLERANCE
            ), where
            assert (
                abs(math.ceil(st.state.optimizer_step_bytes + comm) - tables.step_ceil[s, z, r, i])
                <= BYTE_TOLERANCE
            ), where
            assert abs(math.ceil(acts) - tables.act_ceil[s, r, i]) <= BYTE_TOLERANCE, where
        t1, t2 = objective_ns(est.time_terms)
        assert abs(t1 - tables.t1_at(s, z, r)) <= NS_TOLERANCE, (where, t1, tables.t1_at(s, z, r))
        assert abs(t2 - tables.t2_ns[s, z, r]) <= NS_TOLERANCE, (where, t2, tables.t2_ns[s, z, r])
        # the search's rule: the reserved bytes with the communicators fit too (the caching
        # allocator's retries are not charged: model.terms.peak.fit_bytes)
        reserved_fits = all(st.reserved_total_bytes <= est.capacity_bytes for st in est.stages)
        assert bool(tables.fits[s, z, r]) == (est.fits and reserved_fits), where
        assert tables.capacity[s] == est.capacity_bytes
        held += sum(st.userbuffer_bytes for st in est.stages)
    # the userbuffers case's sample holds them (megatron at tp > 1); the others none
    assert (held > 0) == ("tp_comm_overlap" in options), held


def test_every_framework_and_schedule_is_drawn():
    problem = _problem(*CASES[1])
    tables = build_tables(problem)
    assert {s.framework.value for s in tables.shapes} == set(FRAMEWORKS)
    # the split-backward schedules under the frameworks that run them (model.schedule_support)
    drawn = {(str(s.schedule), s.framework.value) for s in tables.shapes}
    assert {name for name, _ in drawn} >= {"1f1b", "interleaved", "gpipe", "zb-v", "dualpipe"}
    split = [(name, fw) for name, fw in drawn if Schedule(name) in SPLIT_BACKWARD]
    assert split and all(Framework(fw) in SCHEDULE_SUPPORT[name] for name, fw in split)


@pytest.mark.parametrize("retries_ok", [False, True])
def test_the_tables_fit_figure_is_the_evaluators(retries_ok):
    """The tables' fit figure (:func:`optimizer.job_rows.fit_columns`) and the evaluator's
    (:attr:`StageMemory.reserved_total_bytes`, with retries allowed :attr:`StageMemory.total_bytes`)
    are one sum, :func:`model.terms.peak.fit_total`: equal stage by stage, to float64's rounding,
    on every framework's candidates — FSDP2's with side-stream pools above 0 among them."""
    problem = _problem(*CASES[1])
    job = problem.jobs[0]
    shapes = job_shapes(problem, 1)[0][1]
    zs, rs = problem.space.zero_stages, tuple(Recompute(r) for r in ("none", "full"))
    c = evaluation_context(*(getattr(job.case, k) for k in
                             ("model", "training", "device", "options", "vocab_multiple")))  # fmt: skip
    table = ShapeColumns(shapes, job.case.training.global_batch_size, job.case.links,
                         job.case.fabric)  # fmt: skip
    P = max(s.pp for s in shapes)
    mem = _with_communicators(_memory(c, table, zs, rs, P), c, table, zs, P)
    fit = fit_columns(mem, retries_ok)
    rng = random.Random(24)
    picks = [(n, z, r) for n in range(len(shapes)) for z in range(len(zs)) for r in range(2)
             if mem["legal"][n, z, r]]  # fmt: skip
    pools = 0
    for n, z, r in rng.sample(picks, 120):
        est = job.case.evaluate(shapes[n].layout(zs[z], rs[r]))
        for st in est.stages:
            want = st.total_bytes if retries_ok else st.reserved_total_bytes
            assert fit[n, z, r, st.stage] == pytest.approx(float(want), rel=1e-12)
            pools += st.stream_pool_bytes > 0
    assert pools  # the sampled FSDP2 candidates' pools are in the figure
