"""Context-parallel flavours (issue 11 item 4): traffic, memory and legal degrees of the ring,
the all-gather, DeepSpeed-Ulysses and their hybrid, each value derived by hand below.

Sources: Ring Attention (Liu et al. 2023, arXiv 2310.01889); Llama 3 (Dubey et al. 2024, arXiv
2407.21783) §3.3.2 for the all-gather with 2·cp load-balanced chunks; DeepSpeed-Ulysses (Jacobs
et al. 2023, arXiv 2309.14509) §3, "4Nh/P" per layer forward; Transformer Engine's
``context_parallel.py`` (``AttnFuncWithCPAndKVP2P``, ``AttnFuncWithCPAndKVAllGather``,
``AttnFuncWithCPAndQKVOA2A``) for what each flavour sends in backward, keeps and buffers, and for
the all-to-all's head rule; Megatron-Core ``--cp-comm-type`` and
``--hierarchical-context-parallel-sizes``.

The worked case, Llama 3 8B (a = 32 query heads, g = 8 KV heads, d = 128, L = 32) at
s = 32,768 on cp = 8, tp 1, b 1, one micro-batch, β = 2 B:

* S = s/cp·b = 4,096 tokens on a rank;
* Q = β·S·a·d = 2·4096·4096 = 32 MiB; K + V = β·S·2·g·d = 2·4096·2048 = 16 MiB; O = 32 MiB.
"""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from trainplan.model.activation_rows import PRE_A2A_OUTPUT
from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.attention_core import attention_core_step
from trainplan.model.backward_working import backward_working_bytes
from trainplan.model.context_parallel import (
    CpKind,
    attention_dims,
    cp_degrees,
    cp_layer_bytes,
    cp_phase_bytes,
    cp_transient_bytes,
    templated_dkv_sends,
    templated_merge_bytes,
    templated_method_code,
    templated_transient_bytes,
    torch_rotate_method,
)
from trainplan.model.cp_outputs import gather_backward_buffers
from trainplan.model.cp_rules import check_cp_framework
from trainplan.model.errors import LayoutError
from trainplan.model.op_time import Clock
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds
from trainplan.model.templated_time import templated_collectives
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

MiB = 2**20
LLAMA8B = {
    "model": "llama3-8b",
    "device": "H100-SXM",
    "dp": 1,
    "tp": 1,
    "pp": 1,
    "cp": 8,
    "seq_len": 32768,
    "global_batch_size": 1,
    "micro_batch_size": 1,
}
LAYERS = 32


def _evaluate(**changes):
    return Case.of(**{**LLAMA8B, **changes}).evaluate()


def _cp_row(est):
    return next(r.traffic for r in est.traffic if r.traffic.axis == "cp")


def test_chunk_sizes_of_the_worked_case():
    arch = get_model("llama3-8b").model.arch
    assert attention_dims(arch) == (32 * 128, 2 * 8 * 128, 32 * 128)
    S = 32768 // 8
    q, kv, o = (2 * S * n for n in attention_dims(arch))
    assert (q, kv, o) == (32 * MiB, 16 * MiB, 32 * MiB)


@pytest.mark.parametrize(
    ("kind", "extra", "per_layer_mib", "recomputed_mib"),
    [
        # ring: cp − 1 = 7 hops of K + V (16 MiB) forward, twice that in backward (K/V and
        # dK/dV): 7·16·3 = 336 MiB; selective recomputation re-runs the core: 7·16·4 = 448 MiB
        ("ring", {}, 336, 448),
        # all-gather: forward all-gathers K/V, sending (cp−1)/cp of the 8·16 MiB gathered =
        # 7·16; backward re-gathers K/V and reduce-scatters dK/dV (TE): 3 × 112 = 336, 448
        ("all-gather", {}, 336, 448),
        # Ulysses: each all-to-all sends (cp−1)/cp = 7/8 of its tensor. Forward Q, K, V in and
        # O out: 32 + 16 + 32 = 80 MiB; backward O and dO in, dQ, dK, dV out: 32·2 + 32 + 16 =
        # 112 MiB; 7/8·(80 + 112) = 168 MiB; recomputed: 7/8·(2·80 + 112) = 238 MiB
        ("ulysses", {}, 168, 238),
        # hybrid, Ulysses over u = 2 inside, ring over r = 4 across: the ring's chunk after the
        # all-to-all is 2·S tokens of g/2 heads, still 16 MiB: 3·16·3 + ½·192 = 144 + 96 = 240;
        # recomputed 3·16·4 + ½·272 = 192 + 136 = 328
        ("a2a+p2p", {"cp_a2a": 2}, 240, 328),
    ],
)
def test_cp_traffic_per_flavour(kind, extra, per_layer_mib, recomputed_mib):
    """Bytes per step = per-layer bytes × 32 layers × 1 micro-batch."""
    est = _evaluate(cp_kind=kind, **extra)
    assert _cp_row(est).bytes_per_step == per_layer_mib * MiB * LAYERS
    recomputed = _evaluate(cp_kind=kind, recompute="selective", **extra)
    assert _cp_row(recomputed).bytes_per_step == recomputed_mib * MiB * LAYERS


def test_ulysses_forward_is_the_papers_4nh_over_p():
    """Jacobs et al. §3: the forward all-to-alls of an MHA layer move an aggregate 3Nh (Q, K, V)
    and Nh (O), ``4Nh/P`` per link. Per GPU our forward share is (P−1)/P of the local 4·(N/P)·h
    elements: GPT-style MHA (h = a·d = 8), N = 64 tokens, P = 4, tp 1, β = 1 (elements):
    ¾·4·16·8 = 384. The forward is the whole with backward and recomputation taken out:
    fwd+bwd+recomputed − fwd+bwd."""
    from trainplan.model.specs import Architecture

    mha = Architecture(
        num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
    )
    S = Fraction(64, 4)
    forward = cp_layer_bytes(mha, 1, 4, 1, S, 1, True) - cp_layer_bytes(mha, 1, 4, 1, S, 1, False)
    assert forward == Fraction(3, 4) * 4 * S * 8 == 384


@pytest.mark.parametrize(
    ("kind", "extra", "phases_mib", "added_mib"),
    [
        # ring: TE's forward keeps each K/V chunk (local copy + 7 received = 8 × 16) and, on
        # the last rank, the 8 steps' whole-length partial outputs and the merged one (9 × 32)
        # with their FP32 log-sum-exp rows (9 × 4·4,096·32 B = 9 × 0.5 MiB): 128 + 292.5 =
        # 420.5; backward the [K/V, dK/dV] double buffer and dQ, 4·16 + 32 = 96, inside the
        # 144 MiB headroom: the forward adds 420.5 − 256 = 164.5
        ("ring", {}, (Fraction(841, 2), 96), Fraction(329, 2)),
        # all-gather: forward the gathered K/V and its reordered copy, 2·8·16 = 256 (above the
        # reordered 128 beside out, out_f16, two half outputs and their rows, 224.5); backward
        # Q + (3.5·8 − ½)·KV = 32 + 27.5·16 = 472, 472 − 144 = 328 beyond the working set
        ("all-gather", {}, (256, 472), 328),
        # Ulysses: forward max(2·(32 + 16), 32 + 16 + 2·32) = 112; backward O + Q + 2·(Q + KV)
        # = 32 + 32 + 96 = 160, 160 − 144 = 16 beyond the working set
        ("ulysses", {}, (112, 160), 16),
        # hybrid: the ring over 4 (4·16 + 5·(32 + 0.5) = 226.5 forward, 96 backward) and the
        # all-to-all (112, 160), the larger per phase: (226.5, 160); 160 − 144 = 16 and
        # 226.5 − 256 < 0: 16
        ("a2a+p2p", {"cp_a2a": 2}, (Fraction(453, 2), 160), 16),
    ],
)
def test_cp_buffers_per_flavour(kind, extra, phases_mib, added_mib):
    """Llama 3 8B at cp 8, tp 1, s 32,768: S = 4,096 tokens a rank, Q = O = n = 32 MiB (n the
    layer's output gradient), K + V = 16 MiB. Each phase's buffers sit where they are live
    (model.terms.cp_phases): the forward's at the forward's attention core, beside the kept
    layers; the backward's at the backward's attention-core step, n + O + Q + KV = 112 MiB
    (cuDNN: no workspace), under the working set's largest step, the SwiGLU's n + 2·f = 32 +
    2·112 = 256 MiB (f = 2·4,096·14,336 B): 144 MiB of headroom. What the buffers add to the
    layer's backward phase is max(backward − 144, forward − 256, 0). Before: max(forward,
    backward) beside the 256 MiB working set (ring 420.5, all-gather 256, Ulysses 96, hybrid
    226.5 MiB)."""
    est = _evaluate(cp_kind=kind, **extra)
    acts = est.stages[0].activations
    r, u = cp_degrees(CpKind(kind), 8, extra.get("cp_a2a"))
    arch = get_model("llama3-8b").model.arch
    phases = cp_phase_bytes(arch, r, u, kind == "all-gather", 1, 4096, 2)
    assert phases == tuple(x * MiB for x in phases_mib)
    assert acts.backward_working_bytes == 256 * MiB
    assert acts.cp_transient_bytes == added_mib * MiB
    # the loss's working set runs before any layer's backward: the peak takes the larger of the
    # loss phase and the layer's (buffers and working set, less the output layer's released
    # bytes)
    layer = acts.cp_transient_bytes + acts.backward_working_bytes - acts.output_layer_freed_bytes
    assert acts.total_bytes == (
        acts.layers_bytes + acts.embedding_bytes + max(layer, acts.loss_transient_bytes)
    )


@pytest.mark.parametrize(
    ("kind", "buffers_mib"),
    [
        # all-gather rotater: the gathered K/V of the 8 ranks (8·64) and this step's concatenated
        # K/V (64); FP32 dQ 2·32, dK/dV after _partial_update 2·64, their cat 2·64 and the
        # all-to-all receive buffer of the previous rank's 2·64: 15·64 + 64 = 1,024 MiB
        ("pytorch-allgather", 1024),
        # all-to-all rotater: the received K/V, the concatenated one and the next's receive
        # buffer (3·64) in place of the gathered 9·64: 9·64 + 64 = 640 MiB
        ("pytorch-alltoall", 640),
    ],
)
def test_pytorch_context_parallel_buffers_by_hand(kind, buffers_mib):
    """_attention.py's _templated_ring_attention_backward on Llama 3 8B at cp 8, 4,096 local
    tokens: the K/V SDPA sees are the 8 K/V heads repeated to 32 (torchtitan's repeat_kv),
    2·32·128·4,096·2 B = 64 MiB; the query 32·128·4,096·2 B = 32 MiB."""
    acts = _evaluate(cp_kind=kind, framework="fsdp2").stages[0].activations
    # both phases counted at the backward's attention-core step, n + O + Q + the repeated dK,
    # dV (4·16 MiB: SDPA returns them for the 32 heads it saw) = 32 + 32 + 32 + 64 = 160 MiB
    # (eager: the repeated K, V are kept rows, none rebuilt), under the SwiGLU's 256 MiB step:
    # the buffers add what passes its 96 MiB headroom (144 with the grouped 16 MiB dK, dV)
    assert acts.backward_working_bytes == 256 * MiB
    assert acts.cp_transient_bytes == (buffers_mib - 96) * MiB
    arch = get_model("llama3-8b").model.arch
    assert templated_transient_bytes(arch, 8, templated_method_code(CpKind(kind)), 1, 4096, 2) == (
        buffers_mib * MiB
    )
    assert templated_transient_bytes(arch, 1, 1, 1, 4096, 2) == 0  # cp 1: no exchange


def test_all_gather_keeps_each_query_chunks_output():
    """TE's all-gather saves the attention outputs of its two query chunks for backward, beside
    the merged output the projection keeps: one more [S, a·d] = 32 MiB per layer, 32 layers,
    one micro-batch in flight = 1 GiB; selective recomputation recomputes it with the core."""
    ring, gather = _evaluate(cp_kind="ring"), _evaluate(cp_kind="all-gather")
    extra = gather.stages[0].activations.layers_bytes - ring.stages[0].activations.layers_bytes
    assert extra == 32 * MiB * LAYERS == 2**30
    ring_sel = _evaluate(cp_kind="ring", recompute="selective").stages[0].activations
    gather_sel = _evaluate(cp_kind="all-gather", recompute="selective").stages[0].activations
    assert gather_sel.layers_bytes == ring_sel.layers_bytes


@pytest.mark.parametrize("kind", ["ulysses", "a2a+p2p"])
def test_head_all_to_all_keeps_the_output_twice(kind):
    """TE's AttnFuncWithCPAndQKVOA2A.forward saves out_part, the kernel's output [b, s, a/cp, d],
    and returns the new tensor flash_attn_a2a_communicate builds, which the output projection
    saves; AttnFuncWithCPAndKVP2P with cp_size_a2a > 1 (a2a+p2p) does the same. Both hold
    2·4,096·32·128 B = 32 MiB each on Llama 3 8B at cp 8 (4,096 local tokens, tp 1): one more
    32 MiB per layer than the ring, 32 layers, one micro-batch in flight = 1 GiB. Under
    selective recomputation Megatron-Core checkpoints the attention core with its all-to-all
    inside, so only the returned copy stays: the ring's bytes."""
    ring = _evaluate(cp_kind="ring").stages[0].activations
    other = _evaluate(cp_kind=kind, cp_a2a=2 if kind == "a2a+p2p" else None).stages[0].activations
    assert other.layers_bytes - ring.layers_bytes == 32 * MiB * LAYERS == 2**30
    ring_sel = _evaluate(cp_kind="ring", recompute="selective").stages[0].activations
    sel = (
        _evaluate(cp_kind=kind, cp_a2a=2 if kind == "a2a+p2p" else None, recompute="selective")
        .stages[0]
        .activations
    )
    assert sel.layers_bytes == ring_sel.layers_bytes


def test_ulysses_repro_keeps_the_missing_output():
    """Llama 3 8B, s 81,920, cp 4, tp 2 with sequence parallelism, b 1: S = 20,480 tokens; the
    core's output before the all-to-all back is [S, a·d/tp] = 20,480·(32/2)·128·2 B =
    83,886,080 B a layer beyond the ring's rows (2,684,354,560 B over 32 layers)."""
    arch = get_model("llama3-8b").model.arch
    ctx = {"seq_len": 81920, "cp": 4, "micro_batch_size": 1, "tp": 2,
           "sequence_parallel": True, "flash_attention": True}  # fmt: skip
    ring = kind_activations(arch, False, ActivationContext(**ctx, cp_kind=CpKind.RING))
    uly = kind_activations(arch, False, ActivationContext(**ctx, cp_kind=CpKind.ULYSSES))
    assert uly.full_bytes - ring.full_bytes == 20480 * 16 * 128 * 2 == 83_886_080
    assert dict(uly.terms)[PRE_A2A_OUTPUT] == 83_886_080
    assert PRE_A2A_OUTPUT in uly.score_names
    assert uly.selective_bytes == ring.selective_bytes
    assert 32 * 83_886_080 == 2_684_354_560


def test_the_flavours_compute_the_same():
    """The load-balanced split gives every flavour the same attention FLOPs: the compute time is
    one. Under the single time model step times differ only by the exposed cp traffic (one
    overlap fraction, 0.5): ring = all-gather (same bytes), Ulysses less (168 MiB per layer
    against 336). Under the roofline clock the mechanisms differ: the ring's K/V chunks hide
    under the attention core, the all-gather waits (Llama 3 §3.3.2), so all-gather ≥ ring; and
    the kernels differ: Ulysses runs one causal call on the whole 32K sequence, the ring one
    causal call on its 4K chunk and seven unmasked 4K × 2K calls, the all-gather one causal
    call on the 4K chunk (model.attention_rates.ring_fractions), so their compute ranks so."""
    single = {
        k: _evaluate(cp_kind=k, time_model="single") for k in ("ring", "all-gather", "ulysses")
    }
    assert len({e.compute_s for e in single.values()}) == 1
    assert single["ring"].step_s == single["all-gather"].step_s
    assert single["ulysses"].step_s < single["ring"].step_s
    roof = {k: _evaluate(cp_kind=k) for k in ("ring", "all-gather", "ulysses")}
    assert roof["ulysses"].compute_s < roof["ring"].compute_s < roof["all-gather"].compute_s
    assert roof["all-gather"].step_s > roof["ring"].step_s
    rows = {k: _cp_row(e) for k, e in roof.items()}
    assert rows["ulysses"].bytes_per_step * 2 == rows["ring"].bytes_per_step


def test_no_buffers_and_no_traffic_without_cp():
    est = _evaluate(cp=1, dp=8, global_batch_size=8)
    assert est.stages[0].activations.cp_transient_bytes == 0
    assert _cp_row(est).bytes_per_step == 0
    assert cp_transient_bytes(get_model("llama3-8b").model.arch, 1, 1, False, 1, 4096, 2) == 0


def test_degrees_of_each_flavour():
    assert cp_degrees(CpKind.RING, 16) == cp_degrees(CpKind.ALL_GATHER, 16) == (16, 1)
    assert cp_degrees(CpKind.ULYSSES, 16) == (1, 16)
    assert cp_degrees(CpKind("hybrid"), 16, 4) == (4, 4)
    assert CpKind("all_gather") is CpKind.ALL_GATHER and CpKind("P2P") is CpKind.RING


# ------------------------------------------------------------------------------ legal degrees


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Llama 3 405B's published 128K layout (tp 8, cp 16): g/tp = 8/8 = 1 KV head per rank,
        # which 16 ranks cannot split: Ulysses is refused, the ring and the all-gather are not
        (
            {"model": "llama3-405b", "tp": 8, "cp": 16, "seq_len": 131072, "cp_kind": "ulysses"},
            "cp: ulysses splits the heads over 16 ranks, which does not divide num_kv_heads / tp = 8 / 8 = 1",
        ),
        # Llama 3 8B, tp 1, cp 16: a/tp = 32 splits, g/tp = 8 does not
        (
            {"cp": 16, "cp_kind": "ulysses"},
            "cp: ulysses splits the heads over 16 ranks, which does not divide num_kv_heads / tp = 8 / 1 = 8",
        ),
        # the hybrid's inner all-to-all over 16 of cp 32 ranks: the same rule with u = 16
        (
            {"cp": 32, "cp_kind": "a2a+p2p", "cp_a2a": 16},
            "cp: a2a+p2p splits the heads over 16 ranks, which does not divide num_kv_heads / tp = 8 / 1 = 8",
        ),
        # every flavour splits the sequence into 2·cp chunks: 8200 = 16·512 + 8
        ({"seq_len": 8200, "cp_kind": "ulysses"}, "cp: seq_len 8,200 is not divisible by 2 × cp = 16"),
        ({"cp": 1, "dp": 8, "global_batch_size": 8, "cp_kind": "all-gather"}, "cp_kind: all-gather needs cp > 1"),
        ({"cp_kind": "a2a+p2p"}, "cp_a2a: cp_kind a2a+p2p needs the inner all-to-all degree"),
        ({"cp_kind": "a2a+p2p", "cp_a2a": 8}, "cp_a2a: 8 must divide cp = 8 and lie strictly between 1 and cp"),
        ({"cp_kind": "a2a+p2p", "cp_a2a": 3}, "cp_a2a: 3 must divide cp = 8"),
        ({"cp_kind": "ring", "cp_a2a": 2}, "cp_a2a: 2 is the inner all-to-all degree of cp_kind a2a+p2p, not of ring"),
        ({"cp_kind": "tree"}, "cp_kind: 'tree' is not one of ring, all-gather, ulysses, ulysses-kv-repeat, a2a+p2p"),
    ],
)  # fmt: skip
def test_illegal_cp_flavours_are_refused_naming_the_rule(changes, message):
    with pytest.raises(LayoutError) as err:
        _evaluate(**changes)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_legal_ulysses_degrees():
    """cp divides a/tp = 32 and g/tp = 8 at tp 1: cp 2, 4, 8 split Llama 3 8B's heads."""
    for cp in (2, 4, 8):
        _evaluate(cp=cp, cp_kind="ulysses")
    _evaluate(cp=8, cp_kind="a2a+p2p", cp_a2a=4)  # u = 4 divides 8 KV heads


# ------------------------------------------------------------------------------ command line


@pytest.mark.parametrize("kind", ["pytorch-allgather", "pytorch-alltoall"])
def test_pytorch_context_parallel_traffic_counts_the_fp32_dkv_sends(kind):
    """PyTorch's ring attention (``_templated_ring_attention_backward``) exchanges the K/V SDPA
    sees: torchtitan repeats Llama 3 8B's 8 K/V heads to its 32 query heads before SDPA, so a
    rank's K/V is 4·16 = 64 MiB (the ring's grouped 16 MiB × ``templated_kv_repeat`` 4). It
    sends K/V (r − 1)·64 MiB forward and again in backward, and after each of its r = 8 SDPA
    calls the FP32 dK/dV, 2·64 MiB: 448 + 448 + 8·128 = 1,920 MiB per layer against the ring's
    336; full recomputation sends the forward's K/V once more: 2,368 MiB. The same sends the
    step time waits for (``templated_dkv_sends``)."""
    est = _evaluate(cp_kind=kind, framework="fsdp2")
    assert _cp_row(est).bytes_per_step == 1920 * MiB * LAYERS
    full = _evaluate(cp_kind=kind, framework="fsdp2", recompute="full")
    assert _cp_row(full).bytes_per_step == 2368 * MiB * LAYERS
    assert templated_dkv_sends(16 * MiB, 8) == (8, 32 * MiB)


def test_pytorch_context_parallel_is_its_own_flavour_under_fsdp2_only():
    """torchtitan's CP is PyTorch's context_parallel (its rotate methods); Megatron-Core runs
    Transformer Engine's and refuses it with one line."""
    assert torch_rotate_method(CpKind("pytorch-allgather")) == "allgather"
    assert torch_rotate_method(CpKind("pytorch-alltoall")) == "alltoall"
    assert torch_rotate_method(CpKind.ALL_GATHER) == torch_rotate_method(CpKind.RING) == ""
    check_cp_framework(CpKind.PYTORCH_ALLGATHER, 4, "fsdp2", None)
    with pytest.raises(LayoutError, match="cp_kind: pytorch-allgather is PyTorch's"):
        check_cp_framework(CpKind.PYTORCH_ALLGATHER, 4, "megatron", None)


def test_pytorch_ring_attention_merge_bytes_by_hand():
    """_attention.py at cp 4 (the last rank: every step after the first on the whole query),
    Llama 3 8B's 32,768 local tokens: O = Q = 32,768·4,096·2 B, K + V = 32,768·2,048·2 B.
    Forward: 3·O + 3·19·O + 3·O + 3·2·KV; backward 2·Q + 2·KV + 4·5·Q + (5 + 3·6.5)·KV
    + 4·4·KV + 3·2·KV + 3·Q + 3·KV."""
    o = q = 32768 * 4096 * 2
    kv = 32768 * 2048 * 2
    forward, backward = templated_merge_bytes(q, kv, o, 4)
    assert forward == 3 * o + 3 * 19 * o + 3 * o + 3 * 2 * kv
    assert (
        backward
        == 2 * q + 2 * kv + 4 * 5 * q + (5 + 3 * 6.5) * kv + 16 * kv + 6 * kv + 3 * q + 3 * kv
    )


def test_pytorch_ring_attention_overlap_by_hand():
    """The all-gather rotater's gather hides under the first of r SDPA calls; the backward's
    dK/dV (FP32, 2·KV) go to the next rank after every call, the last one waited for."""
    p = RooflineParams(gemm_efficiency=0.7)
    link = LinkTime(450e9, True)
    c = Clock(989e12, 3.35e12, p, cp_link=link, cp_ring=4, cp_templated="allgather")
    kv = 128e6
    gather = collective_seconds(Collective.ALL_GATHER, 4, 3 * kv, link, p)
    dkv = collective_seconds(Collective.SEND_RECV, 2, 2 * kv, link, p)
    core = (4 * gather - 1e-3, 0.4)  # a forward call 0.25 ms shorter than the gather
    total, exposed, forward = templated_collectives(kv, 4, core, c, recomputed=True)
    assert total == pytest.approx(3 * gather + 4 * dkv)
    assert forward == pytest.approx(0.25e-3)  # the forward's own gather, not the recomputed one
    assert exposed == pytest.approx(
        2 * 0.25e-3 + max(0.0, gather - 0.1) + 3 * max(0.0, dkv - 0.1) + dkv
    )


def test_ring_forward_keeps_every_partial_output_until_the_merge():
    """Transformer Engine ``AttnFuncWithCPAndKVP2P.forward``: on the last rank of a causal ring
    every step's ``out_per_step`` is whole-length and stays in its list until the final
    correction loop has merged them into ``out``, while the ``p2p_comm_buffers`` still hold every
    K/V chunk. Llama 3 8B, s 131,072, cp 8, tp 2: S = 16,384 tokens, O = 2·16,384·4,096/2 =
    67,108,864 B, K + V = 2·16,384·2,048/2 = 33,554,432 B, the FP32 log-sum-exp rows
    4·16,384·32/2 = 1,048,576 B per step: 8·33,554,432 + 9·(67,108,864 + 1,048,576) =
    881,852,416 B (the outputs 0.61 GB of it) against the backward's 4·KV = 134.2 MB."""
    arch = get_model("llama3-8b").model.arch
    got = cp_transient_bytes(arch, 8, 1, False, 2, 16384, 2)
    assert got == 8 * 33_554_432 + 9 * (67_108_864 + 1_048_576) == 881_852_416


def test_ring_backward_holds_the_dq_accumulator_beside_the_double_buffer():
    """Transformer Engine ``AttnFuncWithCPAndKVP2P.backward`` (d0067d0da, BF16 attention): before
    its loop ``dq_buffer = torch.empty_like(q)`` (Q) and ``p2p_comm_buffers``, two
    ``torch.empty((2, *kv.shape))`` ([K/V, dK/dV] sent and received: 4·KV); every step's
    ``dq_`` is added into ``dq_buffer`` and its ``dk_``, ``dv_`` into the received buffer's
    dK/dV, so at the last (diagonal) step the step's own dQ, dK, dV (Q + KV, the attention
    call's gradients the layer's working set counts) sit beside 4·KV + Q. Megatron's 7.5B
    (MHA: a = 32, h = 4,096) at s 16,384, cp 2, tp 1, b 1: S = 8,192 tokens, Q = O =
    2·8,192·4,096 = 64 MiB, K + V = 128 MiB, the FP32 log-sum-exp rows 4·8,192·32 = 1 MiB.
    Backward 4·128 + 64 = 576 MiB; the forward holds 2·128 + 3·(64 + 1) = 451 MiB. Before the
    dQ accumulator was counted the ring's buffers were max(451, 4·128) = 512 MiB: 64 MiB short.
    (A grouped-query model's forward is the larger: Llama 3 8B above, 4·KV + Q = 96 MiB against
    420.5, each counted in its own phase.)"""
    arch = get_model("megatron-7.5b").model.arch
    assert cp_transient_bytes(arch, 2, 1, False, 1, 8192, 2) == 576 * MiB
    assert 2 * 128 + 3 * (64 + 1) == 451 < 576
    est = _evaluate(model="megatron-7.5b", cp=2, seq_len=16384, cp_kind="ring")
    # at the backward's attention-core step, n + O + Q + KV = 64 + 64 + 64 + 128 = 320 MiB,
    # which is the working set's largest (the GeLU MLP's steps: n + f = 64 + 256): no headroom,
    # the buffers add 576 MiB whole (the forward's 451 − 320 = 131 less)
    acts = est.stages[0].activations
    assert acts.backward_working_bytes == 320 * MiB
    assert acts.cp_transient_bytes == 576 * MiB
    # the hybrid at cp 4 (S = 4,096: Q = 32 MiB, K + V = 64 MiB), a ring over r = 2 groups of
    # u = 2 all-to-all ranks (2·S tokens of a/2 heads after the all-to-all: the same bytes):
    # backward 4·64 + 32 = 288 MiB above its forward, 2·64 + 3·(32 + 0.5) = 225.5, and the
    # all-to-all's 2·(32 + 64) = 192
    assert cp_transient_bytes(arch, 2, 2, False, 1, 4096, 2) == 4 * 64 * MiB + 32 * MiB


def test_ulysses_backward_buffers_sit_at_the_attention_core_step():
    """Transformer Engine's AttnFuncWithCPAndQKVOA2A.backward at its largest moment, the
    all-to-all of dQ, dK, dV back (flash_attn_a2a_communicate, before_attn False), on the repro
    layout (Llama 3 8B, s 81,920, cp 4, tp 2 with SP, b 1: S = 20,480; Q = O = 2·S·4,096/2 =
    83,886,080 B, K + V = 2·S·2·1,024/2 = 41,943,040 B; the layer's output gradient n = 2·S·4,096/2
    = 83,886,080 B). Live beyond the layer's saved rows: n; dout as the function received it (O)
    and after its own all-to-all (O, the local ``dout`` until return); dQ, dK, dV (Q + KV), their
    send copies in ``a2a_inputs`` (Q + KV) and receive buffers (Q + KV); one reordered
    ``contiguous`` copy at a time (at most Q): n + 2·O + 3·(Q + KV) + Q = 713,031,680 B. The
    attention-core step (n + O + Q + KV, cuDNN: no workspace) plus the backward's buffers
    (O + Q + 2·(Q + KV) = 419,430,400 B) is that count exactly. The layer's working set, its
    largest step the SwiGLU's backward (n, the down projection's dgrad f = 2·S·14,336/2 =
    293,601,280 B and the SwiGLU's input gradient 2·f, less the down projection's input f,
    released: n + 2·f = 671,088,640 B), lies 377,487,360 B above the core step, so the buffers
    add 419,430,400 − 377,487,360 = 41,943,040 B to it (before: the all-to-all's 2·(Q + KV) =
    251,658,240 B beside the whole working set). The forward's all-to-all of O back holds the
    caller's Q, K, V before the all-to-all (Q + KV), the send copy and the receive buffer (2·O):
    293,601,280 B, above the all-to-all of Q, K, V in, 2·(Q + KV) = 251,658,240 B."""
    arch = get_model("llama3-8b").model.arch
    ctx = ActivationContext(seq_len=81920, cp=4, micro_batch_size=1, tp=2,
                            sequence_parallel=True, flash_attention=True, cp_kind="ulysses")  # fmt: skip
    q = o = n = 83_886_080
    kv = 41_943_040
    te_backward = n + 2 * o + 3 * (q + kv) + q
    assert te_backward == 713_031_680
    forward, backward = cp_phase_bytes(arch, 1, 4, False, 2, 20480, 2)
    assert (
        (forward, backward) == (q + kv + 2 * o, o + q + 2 * (q + kv)) == (293_601_280, 419_430_400)
    )
    core = attention_core_step(ctx, arch, "cudnn")
    assert core == n + o + q + kv and core + backward == te_backward
    work = backward_working_bytes(arch, False, ctx, "megatron", "cudnn")
    f = 293_601_280
    assert work == n + f + 2 * f - f == 671_088_640
    assert te_backward - work == 41_943_040
    est = Case.of(model="llama3-8b", device="H100-SXM", dp=1, tp=2, pp=1, cp=4, seq_len=81920,
                  global_batch_size=1, micro_batch_size=1, cp_kind="ulysses").evaluate()  # fmt: skip
    assert est.stages[0].activations.cp_transient_bytes == 41_943_040


@pytest.mark.parametrize("kind", ["ring", "ulysses", "a2a+p2p"])
def test_fsdp2_runs_pytorchs_context_parallel_only(kind):
    """torchtitan (the fsdp2 profile) wraps every attention module in PyTorch's _ContextParallel
    (torchtitan/distributed/context_parallel.py apply_cp_to_attention_module) with the rotate
    method allgather or alltoall: Transformer Engine's ring, Ulysses and hybrid are refused at
    cp > 1 in one line; PyTorch's two, verl's Ulysses and Llama 3's all-gather (the published
    Llama 3 recipes, whose stack the profile stands for) run; cp 1 has no flavour to refuse."""
    with pytest.raises(LayoutError, match=re.escape(f"cp_kind: {kind} does not run under fsdp2")):
        check_cp_framework(CpKind(kind), 2, "fsdp2", None)
    check_cp_framework(CpKind(kind), 1, "fsdp2", None)
    for ok in ("pytorch-allgather", "pytorch-alltoall", "ulysses-kv-repeat", "all-gather"):
        check_cp_framework(CpKind(ok), 2, "fsdp2", None)
    check_cp_framework(CpKind(kind), 2, "megatron", None)


def test_all_gather_backward_buffers_by_hand():
    """Transformer Engine d0067d0da ``AttnFuncWithCPAndKVAllGather.backward`` (Megatron-Core's
    ``--cp-comm-type all_gather``, here ``--cp-kind all-gather``), BF16, ``sbhd``, causal, on
    Llama 3 8B at cp 8, S = 4,096 tokens a rank (Q = 32 MiB, this rank's K + V = 16 MiB, one
    half-chunk of K + V 8 MiB), at the ``index_select`` that reorders dK after the loop:

    * ``dq = torch.empty(ctx.q_shape)``: 32 MiB;
    * ``dk``, ``dv = torch.zeros`` over the gathered length cp·s: 8·16 = 128 MiB;
    * ``k_ag``, ``v_ag`` after ``torch.index_select`` (the gathered tensors they replace freed,
      the reordered ones referenced until return): 128 MiB;
    * ``dq_per_step`` (two halves of Q) 32 MiB, and ``dk_per_step``, ``dv_per_step`` over the
      ``kv_seq_range_per_step`` of the two local chunks, rank + 1 and 2·cp − rank half-chunks:
      17 halves on every rank, 136 MiB (the lists keep them until return);
    * the reordered dK, ``torch.index_select(dk, …)``: 64 MiB.

    520 MiB in all, 2·Q + (3.5·r + ½)·KV; the attention-core step counts one call's dQ, dK, dV
    (48 MiB): 472 beyond it, where the model counted 2·r·KV = 256 MiB."""
    arch = get_model("llama3-8b").model.arch
    total = 32 + 128 + 128 + 32 + 17 * 8 + 64
    assert total == 2 * 32 + (Fraction(7, 2) * 8 + Fraction(1, 2)) * 16 == 520
    assert gather_backward_buffers(8, 32 * MiB, 16 * MiB) == (total - 32 - 16) * MiB
    assert cp_phase_bytes(arch, 8, 1, True, 1, 4096, 2)[1] == 472 * MiB
    # the reduce-scatter after it holds less: 2·Q + (3·r + 1)·KV = 64 + 25·16 = 464 MiB
    assert 2 * 32 + 25 * 16 < total
