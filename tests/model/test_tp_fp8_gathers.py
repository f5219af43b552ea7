"""Transformer Engine's sequence-parallel all-gathers move FP8 under the per-tensor recipes
(:func:`model.fp8_gathers.tp_gather_bytes`): the column-parallel linears' input in forward and
again in backward, the row-parallel linears' output gradient in backward; the reduce-scatters
stay BF16. Sources: TE 1.8 (7d576ed2) ``layernorm_linear.py`` ``_LayerNormLinear.forward``
(``ln_out`` as ``torch.uint8`` before ``gather_along_first_dim``), ``base.py``
``grad_output_preprocess`` (``cast_to_fp8`` then the gather); TE 2.9+ ``distributed.py``
``_all_gather_fp8`` (the ``uint8`` data gathered). Every figure derived by hand below."""

from __future__ import annotations

import pytest

from trainplan.api import Case
from trainplan.model.comm_layers import recomputed_sends, tp_bytes
from trainplan.model.fp8_gathers import tp_gather_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.layer_time import _tp_collectives
from trainplan.model.layout import Recompute
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, TpOverlap, layer_compute
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import repeated_tp
from trainplan.model.roofline import Collective, LinkTime, collective_time
from trainplan.model.specs import Architecture, TrainingSpec


def test_fp8_gathers_are_transformer_engines_per_tensor_recipes():
    """1 B under delayed and tensorwise (current) scaling where the linears are TE's
    (``megatron``; ``deepspeed``'s FP8 layer is TE's ``TransformerLayer``); β elsewhere: BF16,
    MXFP8 and blockwise (not modelled as FP8 gathers), torchao under ``fsdp2``, the textbook."""
    assert tp_gather_bytes("megatron", "fp8", "delayed", 2) == 1
    assert tp_gather_bytes("megatron", "fp8", "tensorwise", 2) == 1
    assert tp_gather_bytes("megatron", "fp8", None, 2) == 1  # Megatron-Core's default: delayed
    assert tp_gather_bytes("deepspeed", "fp8", "delayed", 2) == 1
    assert tp_gather_bytes("megatron", "bf16", None, 2) == 2
    assert tp_gather_bytes("megatron", "fp8", "mxfp8", 2) == 2
    assert tp_gather_bytes("megatron", "fp8", "blockwise", 2) == 2
    assert tp_gather_bytes("fsdp2", "fp8", "tensorwise", 2) == 2
    assert tp_gather_bytes("textbook", "fp8", "delayed", 2) == 2


def test_async_layer_waits_for_half_the_gathered_bytes_under_fp8():
    """One layer, tp 4, s 2048, b 1, h 1024, sequence parallel, Megatron-Core's async overlap on
    a link so slow (1 GB/s) that every collective outlasts its GEMM. one = 3/4·2·2048·1024 B;
    an FP8 gather sends one/2. Per half: forward AG (waits) + RS (waits); backward AG of the
    output gradient (waits), re-gather of the input (beside the input-gradient GEMM), RS of the
    input gradient (beside the weight-gradient GEMM): total 2·(3·ag + 2·rs), exposed that less
    what the two GEMMs cover (NCCL's SM share 0 here)."""
    arch = Architecture(num_layers=1, hidden_size=1024, num_attention_heads=8,
                        ffn_hidden_size=4096, vocab_size=32000)  # fmt: skip
    x = LayerShape(arch, False, 2048, 1, 4, sequence_parallel=True)
    p = deployed_params("MI300X")  # no bus-bandwidth curve: latency + bytes / rate
    link = LinkTime(1e9, True)
    fp8 = Clock(1e15, 3e12, p, tp_link=link, tp_comm_overlap=TpOverlap.ASYNC, tp_gather_bytes=1)
    bf16 = Clock(1e15, 3e12, p, tp_link=link, tp_comm_overlap=TpOverlap.ASYNC)
    ops = layer_compute(x, Clock(1e15, 3e12, p))
    again = repeated_tp(x, (), False)
    one = 3 / 4 * 2 * 2048 * 1024
    ag8 = collective_time(Collective.ALL_GATHER, 4, one / 2, 1e9, True, p)
    ag16 = collective_time(Collective.ALL_GATHER, 4, one, 1e9, True, p)
    rs = collective_time(Collective.REDUCE_SCATTER, 4, one, 1e9, True, p)
    halves = (("attn_in", "attn_out"), ("mlp_in", "mlp_out"))
    covered = sum(ops.role(col, "dgrad") + ops.role(col, "wgrad") for col, _ in halves)
    for clock, ag in ((fp8, ag8), (bf16, ag16)):
        total, exposed = _tp_collectives(x, ops, clock, again)[:2]
        assert total == pytest.approx(2 * (3 * ag + 2 * rs))
        assert exposed == pytest.approx(total - covered)
    # the saving: 6 gathers a layer of 3/4·2048·1024 B fewer each, at 1 GB/s ≈ 9.44 ms
    saved = _tp_collectives(x, ops, bf16, again)[0] - _tp_collectives(x, ops, fp8, again)[0]
    assert saved == pytest.approx(6 * one / 2 / (1e9 * p.scaleup_efficiency))


def test_traffic_counts_each_fp8_gather_at_half_a_unit():
    """tp_bytes of one layer, tp 4, s 2048, b 2, h 12288 (GPT-3 175B), m 1, sequence parallel:
    one = 3/4·2·4096·12288 = 75,497,472 B. BF16: 2 halves × (4 + 1 re-gather) = 10·one, the
    re-gathers (2·one) hidden. FP8 gathers: 2 × (3 gathers × ½ + 2 scatters) = 7·one, one hidden.
    Selective recomputation of Megatron-Core's ``mlp`` re-runs the MLP's gather and scatter:
    + ½ + 1 unit."""
    arch = Architecture(num_layers=96, hidden_size=12288, num_attention_heads=96,
                        ffn_hidden_size=49152, vocab_size=50257)  # fmt: skip
    t = TrainingSpec(seq_len=2048, global_batch_size=1)
    one = 75_497_472
    none = recomputed_sends(arch, Framework.MEGATRON, Recompute.NONE, t)
    args = (arch, 1, 0, False, False, 4, 1, 1, 2, 1, 2048, 2, True, True)
    assert tp_bytes(*args, none) == (10 * one, 2 * one)
    assert tp_bytes(*args, none, gather_bytes=1) == (7 * one, one)
    mlp = TrainingSpec(seq_len=2048, global_batch_size=1, recompute_modules=("mlp",))
    again = recomputed_sends(arch, Framework.MEGATRON, Recompute.SELECTIVE, mlp)
    assert (again.tp[0], again.tp_gathers[0]) == ((2, 2), 1)
    assert tp_bytes(*args, again, gather_bytes=1) == (7 * one + one // 2 + one, one)


def test_gpt3_175b_validation_layout_sends_fp8_gathers():
    """NeMo 24.07's GPT-3 175B row (dp 16, tp 4, pp 8, v 6, b 2, s 2048, 512 GPUs): the busiest
    stage's 12 layers, m = 2048/(16·2) = 64. FP8 saves 3 of each layer's 10 units of
    one = 75,497,472 B a micro-batch (its 6 gathers at ½): 3·one·12·64 = 173,946,175,488 B a
    step, and halves the hidden re-gathers (2·one·12·64 = 115,964,116,992 B → half)."""
    base = {"model": "gpt3-175b", "dp": 16, "tp": 4, "pp": 8, "schedule": "interleaved",
            "virtual_stages": 6, "num_gpus": 512, "micro_batch_size": 2,
            "global_batch_size": 2048, "seq_len": 2048}  # fmt: skip
    rows = {}
    for precision in ("fp8", "bf16"):
        e = Case.of(**base, precision=precision).evaluate()
        rows[precision] = next(r.traffic for r in e.traffic if r.traffic.axis == "tp")
    one = 75_497_472
    assert rows["bf16"].bytes_per_step - rows["fp8"].bytes_per_step == 3 * one * 12 * 64
    assert rows["bf16"].hidden_bytes == 2 * one * 12 * 64 == 2 * rows["fp8"].hidden_bytes
    assert rows["fp8"].collective == "all-gather (fp8) + reduce-scatter"
    assert rows["bf16"].collective == "all-gather + reduce-scatter"
