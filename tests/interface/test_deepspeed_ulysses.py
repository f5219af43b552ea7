"""DeepSpeed-Ulysses under ``framework`` deepspeed on a grouped-query model: Megatron-DeepSpeed's
attention repeats K and V to every query head before DeepSpeed's all-to-all
(deepspeedai/Megatron-DeepSpeed 6acc370a ``megatron/model/transformer.py``
``ParallelAttention.forward``: ``repeat_kv`` by ``num_key_value_groups``, then ``dist_attn``), so
the all-to-all moves a heads of K and V, not g, and only a/tp must divide by cp
(model.context_parallel.kv_repeat, model.cp_rules.check_cp_kind)."""

from fractions import Fraction

import pytest

import trainplan
from trainplan.interface.scenario import build_problem
from trainplan.model.context_parallel import CpKind, cp_layer_bytes, cp_transient_bytes, kv_repeat
from trainplan.model.legality import Setting, refusal
from trainplan.model.specs import TrainingSpec
from trainplan.optimizer.search import search
from trainplan.scenarios.catalogue import get_model

LLAMA8 = get_model("llama3-8b").model  # a 32 query heads, g 8 K/V heads of d 128, h 4,096


def test_the_repeat_factor():
    arch = LLAMA8.arch
    assert kv_repeat(CpKind.ULYSSES, 4, 1, arch, "deepspeed") == 32 // 8 == 4
    assert kv_repeat(CpKind.ULYSSES, 4, 1, arch, "megatron") == 1  # TE's a2a moves g heads
    assert kv_repeat(CpKind.ULYSSES, 4, 1, arch) == 1  # the saved rows' reading: no framework
    assert kv_repeat(CpKind.ULYSSES, 1, 1, arch, "deepspeed") == 1  # no all-to-all at cp 1
    mla = get_model("deepseek-v3").model.arch
    assert kv_repeat(CpKind.ULYSSES, 4, 1, mla, "deepspeed") == 1  # its K and V have a heads


def test_cp_16_runs_under_deepspeed_not_under_megatron():
    """cp 16 does not divide Llama 3 8B's 8 K/V heads: Transformer Engine's all-to-all refuses
    it; DeepSpeed's all-to-all splits the 32 repeated heads, which 16 divides; cp 64 does not."""
    s = Setting(LLAMA8, TrainingSpec(seq_len=32768, global_batch_size=16))

    def why(cp, fw):
        return refusal(s, cp=cp, cp_kind="ulysses", cp_a2a=None, tp=1, sp=False, framework=fw)

    assert why(16, "deepspeed") == ""
    assert "num_kv_heads / tp = 8 / 1 = 8" in why(16, "megatron")
    assert why(64, "deepspeed").startswith(
        "cp: DeepSpeed-Ulysses splits the heads over 64 ranks, which does not divide "
        "num_attention_heads / tp = 32 / 1 = 32"
    )


def test_all_to_all_bytes_by_hand():
    """Llama 3 8B, s 32,768, cp 4, tp 1, β 2: S = 8,192 tokens a rank. Q = O = 2·8,192·4,096 =
    67,108,864 B; K + V = 2·8,192·2·8·128 = 33,554,432 B with 8 heads, 134,217,728 B repeated
    to 32. Forward Q + KV + O, backward Q + KV + 2·O, each × 3/4:
    3/4·(2·67,108,864 + 2·134,217,728 + 3·67,108,864) = 3/4·603,979,776 = 452,984,832 B a layer
    and micro-batch (301,989,888 B with 8 heads); × 32 layers × 8 micro-batches (B 16 over
    dp 2) = 115,964,116,992 B a step (77,309,411,328 B under Megatron-Core). DeepSpeed's
    all-to-all's buffers, 2·(Q + KV): 402,653,184 B (``te_a2a`` 0); Transformer Engine's
    backward, O + Q + 2·(Q + KV) with 8 heads: 2·67,108,864 + 201,326,592 = 335,544,320 B."""
    arch = LLAMA8.arch
    assert cp_layer_bytes(arch, 1, 4, 1, 8192, 2, False, 4) == 452_984_832
    assert cp_layer_bytes(arch, 1, 4, 1, 8192, 2, False, 1) == 301_989_888
    assert cp_transient_bytes(arch, 1, 4, False, 1, 8192, 2, 4, 0, 0) == 2 * (
        67_108_864 + 134_217_728
    )
    assert cp_transient_bytes(arch, 1, 4, False, 1, 8192, 2) == 335_544_320
    sent = {}
    for fw in ("deepspeed", "megatron"):
        e = trainplan.evaluate(
            model="llama3-8b", gpu="H200", dp=2, cp=4, cp_kind="ulysses", framework=fw,
            zero_stage=1, seq_len=32768, global_batch_size=16,
        )  # fmt: skip
        (row,) = [r for r in e.traffic if r.traffic.axis == "cp"]
        sent[fw] = row.traffic.bytes_per_step
    assert 452_984_832 * 32 * 8 == 115_964_116_992 and 301_989_888 * 32 * 8 == 77_309_411_328
    assert sent == {"deepspeed": 115_964_116_992, "megatron": 77_309_411_328}
    assert Fraction(sent["deepspeed"], sent["megatron"]) == Fraction(3, 2)


@pytest.mark.parametrize("cp", [4, 16])
def test_the_search_prices_the_repeated_heads_as_evaluate_does(cp):
    """The search's tables (the array terms) give the step evaluate gives, at cp 4 and at the
    cp 16 that only DeepSpeed's rule admits."""
    case = {
        "model": "llama3-8b", "gpus": str(2 * cp), "gpu": "H200", "seq_len": 32768,
        "global_batch": 16,
        "space": {"tp": [1], "pp": [1], "cp": [cp], "recompute": ["none"], "zero": [1],
                  "cp_kind": ["ulysses"], "framework": ["deepspeed"], "micro_batch": [1]},
    }  # fmt: skip
    best = search(build_problem({}, case)).best
    lay = best.estimate.layout
    assert (lay.framework, lay.cp, lay.cp_kind) == ("deepspeed", cp, CpKind.ULYSSES)
    e = trainplan.evaluate(
        model="llama3-8b", gpu="H200", dp=2, cp=cp, cp_kind="ulysses", framework="deepspeed",
        zero_stage=1, seq_len=32768, global_batch_size=16,
    )  # fmt: skip
    assert best.objective == round(e.step_s * 1e9)
    assert best.peak_bytes == e.peak.total_bytes


def test_ulysses_runs_without_tp_and_pp():
    """Megatron-DeepSpeed 4efb479d ``parallel_state.initialize_model_parallel`` asserts
    "DeepSpeed's sequence parallel does not work with tensor parallel or pipeline parallel": cp > 1
    with tp or pp > 1 is refused in one line."""
    s = Setting(LLAMA8, TrainingSpec(seq_len=32768, global_batch_size=16))
    for tp, pp in ((2, 1), (1, 2)):
        why = refusal(s, cp=4, cp_kind="ulysses", framework="deepspeed", tp=tp, pp=pp)
        assert why.startswith(
            f"cp: 4 with tp {tp} × pp {pp} does not run under framework deepspeed"
        )
    assert refusal(s, cp=4, cp_kind="ulysses", framework="deepspeed", tp=1, pp=1) == ""
    assert refusal(s, cp=4, cp_kind="ring", framework="megatron", tp=2, pp=2) == ""
