"""torchtitan's eager MoE experts and gpt-oss's sink rescale reach the one activation term under
``fsdp2`` with ``compile`` false (:mod:`model.eager_moe`, read by :func:`model.eager_saved.
eager_rows`); with ``compile`` true the paper's rows stand."""

from trainplan.model.activations import kind_activations
from trainplan.model.arch_parts import MoESpec
from trainplan.model.context_parallel import CpKind
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model


def _ctx(seq_len: int, compile: bool, tp: int = 1, ep: int = 1):
    t = TrainingSpec(seq_len=seq_len, global_batch_size=16, compile=compile)
    return activation_context(t, 1, 1, tp, tp > 1, CpKind.RING, ep=ep, framework="fsdp2")


def test_gpt_oss_20b_layer_eager_minus_compiled_by_hand():
    """gpt-oss-20b (h 2,880, a 64, g 8, d 64, k 4, f 2,880), T = 4,096 tokens, bf16, tp 1.
    model/eager_saved.py eager_rows: two RMSNorms' FP32 copies 4·T·h and rstd 4·T; K and V
    repeated from 8 to 64 heads 2·2·T·56·64 (the kernel's log-sum-exp 4·64·T is kept compiled
    too: Inductor never recomputes SDPA).
    torchtitan b5bcd76c6 gpt_oss/model.py apply_attention_sink_rescale: the kernel output
    2·T·64·64 beside wo's input, the BF16 scale 2·T·64 and sigmoid's FP32 output 4·T·64.
    gpt_oss/moe.py GptOssGroupedExperts.forward + swiglu: seven 2·R·f where the paper has three
    (h_RG 2, the down projection input 1): the clamped gate, the sigmoid output, the clamped
    linear half and out_glu, R = 4·T; the two biases' repeat_interleave indices 8·R each."""
    arch = get_model("gpt-oss-20b").model.arch
    T, h, R, f = 4096, 2880, 4 * 4096, 2880
    eager = kind_activations(arch, True, _ctx(T, False, ep=2))
    compiled = kind_activations(arch, True, _ctx(T, True, ep=2))
    norms = 2 * (4 * T * h + 4 * T)
    kv = 2 * 2 * T * 56 * 64
    sinks = 2 * T * 64 * 64 + 2 * T * 64 + 4 * T * 64
    experts = 4 * 2 * R * f + 16 * R
    assert sinks == 35_127_296 and experts == 377_749_504
    assert eager.full_bytes - compiled.full_bytes == norms + kv + sinks + experts
    terms = dict(eager.terms)
    routed = [n for n in terms if n.startswith("routed expert") and "clamped SwiGLU" in n]
    assert len(routed) == 4 and all(terms[n] == 2 * R * f for n in routed)
    assert "routed expert SiLU output (eager SwiGLU)" not in terms


def test_generic_grouped_experts_keep_silus_output_routed_and_shared():
    """torchtitan b5bcd76c6 common/moe.py GroupedExperts.forward (F.silu(mm(x, w1)) * mm(x, w3))
    and the shared FeedForward (common/feed_forward.py): SiLU's output 2·R·f routed, R = k·T,
    and 2·T·f_s shared, beyond the paper's rows. A MoE layer of k 2, f 64, one shared expert of
    96, T = 32, tp 2 (rows of the experts' hidden dimension ÷ 2): 2·64·64/2 + 2·32·96/2."""
    arch = Architecture(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_kv_heads=4,
        ffn_hidden_size=128,
        vocab_size=128,
        mlp="swiglu",
        norm="rmsnorm",
        moe=MoESpec(
            num_experts=4,
            experts_per_token=2,
            expert_ffn_hidden_size=64,
            num_shared_experts=1,
            shared_expert_ffn_hidden_size=96,
        ),
    )
    eager = dict(kind_activations(arch, True, _ctx(32, False, tp=2)).terms)
    compiled = dict(kind_activations(arch, True, _ctx(32, True, tp=2)).terms)
    assert eager["routed expert SiLU output (eager SwiGLU)"] == 2 * 64 * 64 / 2 == 4096
    assert eager["shared expert SiLU output (eager SwiGLU)"] == 2 * 32 * 96 / 2 == 3072
    assert not any("SiLU output" in n for n in compiled)
    # MHA: no repeated K and V; no sinks
    assert not any("repeated" in n or "sink" in n for n in eager)


def test_pytorch_convention_counts_silus_output_once():
    """The ``pytorch`` convention lists SiLU's output already (activation_rows._swiglu_or_gelu);
    gpt-oss's four clamped-SwiGLU rows take its place: 7 in all."""
    arch = get_model("gpt-oss-20b").model.arch
    t = TrainingSpec(seq_len=4096, global_batch_size=16, activation_convention="pytorch")
    ctx = activation_context(t, 1, 1, 1, False, CpKind.RING, ep=2, framework="fsdp2")
    terms = dict(kind_activations(arch, True, ctx).terms)
    R, f = 4 * 4096, 2880
    per_rf = sum(
        v
        for n, v in terms.items()
        if n.startswith("routed expert") and ("SwiGLU" in n or "down projection" in n)
    )
    assert per_rf == 7 * 2 * R * f
