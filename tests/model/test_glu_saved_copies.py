"""What the gated activations keep beyond the paper's rows under the megatron and deepspeed
profiles, derived by hand from the frameworks' code.

* megatron, a clamped GLU (gpt-oss): Megatron-LM d98e8a64dd ``fusions/fused_bias_geglu.py``
  ``weighted_bias_quick_geglu_impl``: ``input.chunk(2, -1)`` → two views of FC1's output
  ``[k·S, 2·f_e]``, each ``clamp`` saves its input (``clamp_backward`` reads ``self``), so
  FC1's whole output stays; ``torch.cat`` of the clamped halves is a new ``[k·S, 2·f_e]``
  that ``WeightedQuickGeGLUFunction`` saves. Two ``2·β·k·S·f_e`` tensors, the paper counts one.
  Under ``moe_act`` the checkpoint runs the activation without autograd and keeps FC1's output
  (its input): the copy is not kept, and is live again in the layer's backward.
* deepspeed, SwiGLU: Megatron-DeepSpeed 4efb479d ``ParallelMLP`` ``swiglu``: ``F.silu(x[0])``
  keeps ``x[0]`` (a view holding FC1's whole ``[S, 2f/tp]`` output), ``* x[1]`` keeps SiLU's
  output ``[S, f/tp]`` and ``x[1]``, ``dense_4h_to_h`` keeps the product ``[S, f/tp]``:
  ``4·β·S·f/tp``, one ``β·S·f/tp`` more than the paper's three.
* deepspeed, GQA: Megatron-DeepSpeed 6acc370a ``ParallelAttention.forward`` ``repeat_kv``
  copies K and V to ``a/tp`` heads, which FlashAttention keeps: ``2·β·S·(a − g)·d/tp`` more.
"""

from trainplan.model.activation_rows import CLAMPED_GLU_COPY, REPEATED_KV
from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import Framework
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model


def _layer(model, framework, moe, tp=1, ep=1, seq=4096, modules=("core_attn",)):
    arch = get_model(model).model.arch
    training = TrainingSpec(seq_len=seq, global_batch_size=8, recompute_modules=modules)
    ctx = activation_context(training, 1, 1, tp, tp > 1, CpKind.RING, ep, 1, framework)
    return kind_activations(arch, moe, ctx)


def test_megatron_clamped_glu_keeps_fc1_output_and_the_copy():
    # gpt-oss-20b, s 4,096, b 1, tp 1, ep 8: k = 4 routed copies of S = 4,096 tokens,
    # f_e = 2,880: the copy is 2·2·4·4,096·2,880 = 188,743,680 B, the same as the activation
    # input the paper counts.
    layer = _layer("gpt-oss-20b", Framework.MEGATRON, True, ep=8)
    terms = dict(layer.terms)
    assert terms[CLAMPED_GLU_COPY] == 2 * 2 * 4 * 4096 * 2880 == 188_743_680
    assert terms["routed expert SwiGLU input (gate, up)"] == 188_743_680
    # 24 MoE layers: 24 × 188,743,680 = 4,529,848,320 B more kept per micro-batch
    assert 24 * terms[CLAMPED_GLU_COPY] == 4_529_848_320
    textbook = dict(_layer("gpt-oss-20b", Framework.TEXTBOOK, True, ep=8).terms)
    assert CLAMPED_GLU_COPY not in textbook  # the paper's one activation input


def test_moe_act_keeps_fc1_output_only():
    # moe_act: the checkpoint keeps its input (FC1's output, the paper's row) and drops the
    # down projection's input 2·4·4,096·2,880 = 94,371,840 and the copy 188,743,680; core_attn
    # drops the fused attention's FP32 softmax statistics, 4·64 heads·4,096 = 1,048,576
    full = _layer("gpt-oss-20b", Framework.MEGATRON, True, ep=8)
    sel = _layer("gpt-oss-20b", Framework.MEGATRON, True, ep=8, modules=("core_attn", "moe_act"))
    assert full.full_bytes - sel.selective_bytes == 94_371_840 + 188_743_680 + 1_048_576


def test_megatron_without_a_clamp_keeps_one_input():
    terms = dict(_layer("mixtral-8x7b", Framework.MEGATRON, True, ep=8).terms)
    assert CLAMPED_GLU_COPY not in terms


def test_deepspeed_swiglu_keeps_silu_output():
    # Llama 3 70B, s 8,192, b 1, tp 4 (no sequence parallelism needed for the tp rows):
    # SiLU's output 2·8,192·28,672/4 = 117,440,512 B beside the paper's 3 × that.
    terms = dict(_layer("llama3-70b", Framework.DEEPSPEED, False, tp=4, seq=8192).terms)
    silu = terms["MLP SiLU output (eager SwiGLU)"]
    assert silu == 2 * 8192 * 28672 // 4 == 117_440_512
    assert terms["MLP SwiGLU input (gate, up)"] + terms["MLP down projection input"] == 3 * silu


def test_deepspeed_experts_keep_silu_output():
    # Mixtral 8x7B experts (DeepSpeed's MoE copies ParallelMLP): k = 2 copies of S = 4,096
    # tokens, f_e = 14,336, tp 1: 2·2·4,096·14,336 = 234,881,024 B
    terms = dict(_layer("mixtral-8x7b", Framework.DEEPSPEED, True).terms)
    assert terms["routed expert SiLU output (eager SwiGLU)"] == 2 * 2 * 4096 * 14336


def test_deepspeed_gqa_keeps_repeated_k_and_v():
    # Llama 3 405B, s 8,192, b 1, tp 8: a = 128, g = 8, d = 128:
    # 2·2·8,192·(128 − 8)·128/8 = 62,914,560 B a layer
    terms = dict(_layer("llama3-405b", Framework.DEEPSPEED, False, tp=8, seq=8192).terms)
    assert terms[REPEATED_KV] == 2 * 2 * 8192 * 120 * 128 // 8 == 62_914_560
    assert REPEATED_KV not in dict(_layer("llama3-405b", Framework.MEGATRON, False, tp=8).terms)
