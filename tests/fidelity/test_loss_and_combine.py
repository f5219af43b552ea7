"""Two working sets measured on CPU with the harness's saved-tensor hooks against the cost model:

* the output layer and loss on the last stage — the final RMSNorm, the output projection and
  ``F.cross_entropy`` on an fp32 copy of the BF16 logits (torchtitan's
  ``components/loss.py`` ``cross_entropy_loss``; Megatron-LM's unfused
  ``_VocabParallelCrossEntropy`` keeps its fp32 softmax the same way): what backward keeps is
  :func:`model.end_stage_bytes.embedding_bytes`' ``2·β·S·h + 4·S·V`` plus the pytorch convention's
  norm statistics and int64 targets; the BF16 logits themselves are not kept (a transient,
  ``2·S·V``, that the model does not count: docs/memory-mechanisms.md);
* a MoE layer's weighted combine — torchtitan's ``token_dispatcher.py`` ``combine`` multiplies
  an fp32 copy of the routed outputs by the scores and keeps it (4 B per element), while a
  weighted activation (Megatron-Core's ``weighted_bias_swiglu_impl``) keeps the fp32 weights
  and the combine's un-permute keeps nothing."""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

from tests.fidelity import harness as H  # noqa: E402
from trainplan.model.end_stage_bytes import embedding_bytes  # noqa: E402
from trainplan.model.specs import Architecture  # noqa: E402

F = torch.nn.functional


@pytest.mark.parametrize(("s", "b", "h", "vocab"), [(64, 2, 32, 256), (128, 1, 64, 1000)])
def test_output_layer_and_unfused_loss_keep_fp32_logits(s, b, h, vocab):
    torch.manual_seed(0)
    norm = H.Norm(h, "rmsnorm", "final norm", "gpu")
    head = torch.nn.Linear(h, vocab, bias=False, dtype=H.BF16)
    x = torch.randn(b, s, h, dtype=H.BF16, requires_grad=True)
    labels = torch.randint(0, vocab, (b * s,))
    rec = H.SavedBytes(exclude=H._exclude(torch.nn.ModuleList([norm, head])))
    with rec.hooks():
        y = norm(x)
        logits = head(H.tag(y, "output projection input"))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels)
        H.claim("fp32 log-softmax")
        kept = rec.current
        loss.backward()
    S = s * b
    arch = Architecture(num_layers=1, hidden_size=h, num_attention_heads=2,
                        ffn_hidden_size=4 * h, vocab_size=vocab)  # fmt: skip
    model = embedding_bytes(arch, False, True, Fraction(S), 1, False, 2, vocab)
    assert model == 2 * 2 * S * h + 4 * S * vocab
    stats = 4 * S  # the final RMSNorm's fp32 rstd (the pytorch convention's term)
    nll = 8 * S + 4  # nll_loss keeps the int64 targets and its fp32 total weight
    assert kept == model + stats + nll
    assert rec.peak >= kept


def test_torchtitan_combine_keeps_an_fp32_copy_of_the_routed_outputs():
    """k·S routed rows of h: ``routed.to(float32) * scores`` (torchtitan's combine) keeps the
    fp32 copy, 4·k·S·h, and the fp32 scores, 4·k·S: the ``fsdp2`` profile's "routed expert
    outputs for the combine" at 4 B per element (Megatron-Core weights inside the activation
    and keeps none of them)."""
    k, S, h = 2, 64, 32
    torch.manual_seed(0)
    routed = torch.randn(k * S, h, dtype=H.BF16, requires_grad=True)
    scores = torch.rand(k * S, 1, dtype=torch.float32, requires_grad=True)
    rec = H.SavedBytes()
    with rec.hooks():
        weighted = (routed.to(torch.float32) * scores).to(H.BF16)
        assert rec.current == 4 * k * S * h + 4 * k * S
        del weighted
    from trainplan.model.activations import ActivationContext, layer_activations
    from trainplan.model.specs import MoESpec

    arch = Architecture(num_layers=1, hidden_size=h, num_attention_heads=2, num_kv_heads=2,
                        ffn_hidden_size=3 * h, vocab_size=64, norm="rmsnorm", mlp="swiglu",
                        position_embedding="rope",
                        moe=MoESpec(num_experts=4, experts_per_token=k, expert_ffn_hidden_size=h))  # fmt: skip
    ctx = ActivationContext(seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
                            flash_attention=True, combine_output_bytes=4)  # fmt: skip
    terms = dict(layer_activations(arch, 0, ctx).terms)
    assert terms["routed expert outputs for the combine"] == 4 * k * S * h
