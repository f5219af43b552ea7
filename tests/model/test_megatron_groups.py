"""Megatron-LM's process groups beyond the layout's axes that hold an NCCL communicator
(model/terms/comm_groups.py megatron_rings, moe_metrics_ring, expert_dp_stride; Megatron-LM
d98e8a64dd), derived by hand on the layouts of search answers.

Sizes as model/terms/comm_memory.py counts them: 12 MiB a connection, (set-up channels × 3 + 2)
× 2 MiB of set-up. A ring in an H100 node: 24 channels, 288 + 196 = 484 MiB; across nodes at 4
or 8 ranks a node: 16 channels, 192 + 100 = 292 MiB; one rank a node: 4 channels, 48 + 28 =
76 MiB; ring connections added to a communicator that exists already: channels × 12 MiB.
NVLink SHARP (model/terms/nvls_memory.py; NCCL src/transport/nvls.cc): a ring of r ranks in an
H100 node also holds 2 MiB of credits, and where NCCL's tuner runs its all-reduce as NVLS (6 to
8 ranks; at 2 to 5 its ring is faster, model/nccl_search.py) 16 × 2 × (128 KiB × 8) × r = 32·r
MiB of buffers (8: 258; 4 and 2: the credits alone, 2); a ring across nodes with ≥ 2 ranks a
node 2 MiB; one rank a node none."""

from __future__ import annotations

from dataclasses import replace

import trainplan
from trainplan.model.estimate import evaluate
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.model.terms.comm_memory import group_channels, strided_group_channels
from trainplan.optimizer.case import links_for
from trainplan.topology.accelerators import get_accelerator

MIB = 2**20
H100 = nvlink_node("H100-SXM", 450e9)
MOE = Architecture(
    num_layers=8, hidden_size=256, num_attention_heads=8, num_kv_heads=4,
    ffn_hidden_size=512, vocab_size=1000, mlp="swiglu", norm="rmsnorm",
    moe=MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=256),
)  # fmt: skip
TRAINING = TrainingSpec(seq_len=512, global_batch_size=64)
CLUSTER = ClusterLinks(nvlink_domain=8, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)


def _comm(layout: Layout, training: TrainingSpec = TRAINING) -> list[int]:
    model = ModelSpec(name="m", arch=MOE)
    est = evaluate(model, training, layout, get_accelerator("H100-SXM"), links_for(layout, CLUSTER))
    return [int(s.communicator_bytes) // MIB for s in est.stages]


def test_the_model_parallel_group_at_every_zero_stage():
    """``search --per-stage --model llama3-70b --gpus 64``'s layout, dp 4 × tp 4 × pp 4, ZeRO-1,
    stage 0: the tp ring in a node 484; the dp ring, 4 ranks at stride 4 (2 a
    node on 2 nodes: 2 → 4 → 8 channels) 96 + 52 = 148; the one pipeline neighbour, pp stride
    16 (one rank a node: 4 channels) 48 + 28 = 76; the distributed optimizer's gradient
    statistics over all 64 (8 a node on 8 nodes) 292; the world ring 292: 1,292 MiB, the
    1.35 GB printed before. Megatron-LM's ``train_step`` (training.py) all-reduces
    ``update_successful`` and the grad norm over the model-parallel group after every optimizer
    step: ranks {0-3, 16-19, 32-35, 48-51}, 4 a node on 4 nodes, 16 channels, 292 MiB: 1,584.
    Under ZeRO-0 it is the Float16 optimizer's gradient-statistics group as well, counted once:
    484 + 148 + 76 + 292 (world) + 292 = 1,292. NVLS: the tp ring (4 in a node, its all-reduces
    rings) 2, the dp, gradient-statistics, world and model-parallel rings (≥ 2 ranks a node) 2
    each: + 10 (ZeRO-0: 8; 138 and 136 while the tp ring counted NVLS's 128 MiB of buffers)."""
    one = dict(model="llama3-70b", num_gpus=64, gpu="H100-SXM", dp=4, tp=4, pp=4)
    run = dict(micro_batch_size=1, global_batch_size=2048, recompute="none")
    zero1 = trainplan.evaluate(**one, **run, zero_stage=1)
    zero0 = trainplan.evaluate(**one, **run, zero_stage=0)
    hand1, hand0 = 484 + 148 + 76 + 292 + 292 + 292 + 10, 484 + 148 + 76 + 292 + 292 + 8
    assert int(zero1.stages[0].communicator_bytes) == hand1 * MIB
    assert int(zero0.stages[0].communicator_bytes) == hand0 * MIB
    # Placed as a tp block at each pp stride, not spread over the span (8 nodes × 2: 8 channels)
    assert strided_group_channels(1, 4, 16, 4, 8, False, 50e9, H100) == 16
    assert group_channels(16, 64, 8, 64, False, 50e9, H100) == 8


def test_megatron_moe_groups_deepseek_v3():
    """``search --model deepseek-v3 --gpus 2048``'s layout, dp 128 × pp 16, ep 8, ZeRO-1, an end
    stage (``MoEAlltoAllTokenDispatcher.preprocess``'s tp·ep group, the MoE metrics ring, the
    expert dp ring on its own stride). Before: the ep all-to-all's 7 NVLink peers × 32 channels ×
    12 MiB = 2,688 and its set-up 196; the dp ring (128 ranks, 8 a node on 16 nodes) 292; the
    expert dp ring on the dense dp placement 292; the pipeline neighbour 76; the MTP pair 76;
    gradient statistics 292; world 292: 4,204 MiB (4.41 GB). Now:

    * the expert dp group, 16 ranks at stride etp·ep = 8, one a node on 16 nodes: 76 (−216);
    * the model-parallel group (pp 16 ranks at stride 128, one a node): 76;
    * the expert tp·ep group of the token counts' all-gather, the 8 ep ranks in a node: 484;
    * the tp·dp·cp group of the expert bias's token counts (DeepSeek-V3's bias balancing),
      the 128 dp ranks, 8 a node on 16 nodes: 292;
    * the MoE metrics' all-reduce on the pp communicator: its 4 ring channels, 48.

    4,204 − 216 + 76 + 484 + 292 + 48 = 4,888 MiB. Under DeepEP the ep peers go (its own
    buffers) and the tp·ep ring stays: 4,888 − 2,884 = 2,004. NVLS: the tp·ep ring in a node
    2 MiB of credits (its all-gather of token counts, a few KiB, runs as a ring: NCCL's tuner
    gives NVLS the Simple protocol only, src/graph/tuning.cc, so the buffers, set up on the first
    NVLS collective, never are), the dp, tp·dp·cp, gradient-statistics and world rings (8 a node)
    2 each: + 10 (+ 266 with the tp·ep ring's 256 MiB of buffers)."""
    one = dict(model="deepseek-v3", num_gpus=2048, gpu="H100-SXM", dp=128, pp=16, ep=8)
    run = dict(micro_batch_size=1, global_batch_size=15360, recompute="full")
    est = trainplan.evaluate(**one, **run)
    assert int(est.stages[0].communicator_bytes) == (4888 + 10) * MIB == (4204 + 684 + 10) * MIB
    deepep = trainplan.evaluate(**one, **run, moe_dispatcher="deepep")
    assert int(deepep.stages[0].communicator_bytes) == (4888 - 2688 - 196 + 10) * MIB


def test_the_expert_dp_group_on_its_own_span():
    """32 GPUs, 8 a node: tp 2 × dp 16, ep 8 with etp 1 (``parallel_state.py``
    ``initialize_model_parallel``'s expert data-parallel group). The expert dp group,
    tp·dp/(etp·ep) = 4 ranks at stride etp·ep = 8, one a node on 4 nodes: 76 MiB, where the
    dense dp group's placement (16 ranks at stride 2, 4 a node on 4 nodes: 292) counted it
    before. The rest: tp {0, 1} 484; dp 292; the ep all-to-all's 7 NVLink peers 2,688 + 196;
    the expert tp·ep group {0-7} 484; the tp·cp group of the auxiliary loss's token counts
    (tp 2 × cp 1, apart from the tp group) 484; the model-parallel group (tp 2 × pp 1) 484;
    gradient statistics and world, 8 a node on 4 nodes, 292 each: 5,772 MiB. With etp = tp
    = 2 and ep 4 the expert dp group is 4 ranks at stride tp·ep = 8 too: 76. NVLS: the tp ring
    (2 in a node, its all-reduces rings: NVLS's 102 GB/s of bus bandwidth against the ring's
    360) 2 of credits (66 with NVLS's buffers); the tp·cp, model-parallel and tp·ep rings run
    one-float or token-count all-reduces and all-gathers only, which NCCL runs as rings, so
    2 MiB of credits each; the dp, gradient-statistics and world rings across nodes 2 each:
    + 14."""
    hand = 484 + 292 + 2688 + 196 + 76 + 484 + 484 + 484 + 292 + 292 + 2 + 3 * 2 + 3 * 2
    assert _comm(Layout(tp=2, dp=16, ep=8, etp=1)) == [hand] == [5772 + 14]
    assert strided_group_channels(8, 4, 0, 1, 8, False, 50e9, H100) == 4  # 48 + 28 = 76
    assert group_channels(16, 32, 8, 32, False, 50e9, H100) == 16  # the dense dp's: 192 + 100
    # etp = tp = 2, ep 4: the ep peers (3 × 32 × 12 = 1,152 + 196), the expert tp ring (484)
    # and tp·ep {0-7} (484); NVLS 2 × 2 (tp, expert tp: 2 ranks, rings), 3 × 2 (tp·cp,
    # model-parallel, tp·ep: credits) + 3 × 2 (across nodes)
    hand4 = 484 + 292 + 1152 + 196 + 76 + 484 + 484 + 484 + 484 + 292 + 292 + 2 * 2 + 6 + 6
    assert _comm(Layout(tp=2, dp=16, ep=4)) == [hand4]


def test_the_pipeline_group_holds_the_moe_metrics_ring():
    """32 GPUs, dp 8 × pp 4 (a node a stage), ep 8: MoEMetricsTracker's all-reduce over the pp
    group every step (moe_logging.py ``_sync_metrics``). Each stage: the dp ring 484, the ep
    peers 2,688 + 196, the expert tp·ep group 484, the model-parallel group (pp 4 ranks, one a
    node: 76), gradient statistics and world (8 a node on 4 nodes) 292 each. Under 1f1b the pp
    communicator sets up 4 channels (28) and reaches one neighbour at the ends, two in the middle
    (4 channels × 12 = 48 each), plus the ring's 4 connections, 48. Under the interleaved
    schedule's lone sends each neighbour pair is a two-rank communicator, 76 each, two a stage;
    the ring then makes the pp group's own: 76. NVLS: the dp ring in a node 258; the tp·ep ring
    in a node (token counts' all-gather, run as a ring: no buffers set up), gradient statistics
    and world 2 each (the pp rings, one rank a node: none): 264 (520 with the tp·ep buffers)."""
    rest = 484 + 2688 + 196 + 484 + 76 + 292 + 292 + 258 + 3 * 2
    ends, middle = rest + 48 + 28 + 48, rest + 96 + 28 + 48
    assert _comm(Layout(dp=8, pp=4, ep=8)) == [ends, middle, middle, ends]
    lone = Layout(dp=8, pp=4, ep=8, virtual_stages=2, schedule="interleaved")
    assert _comm(lone) == [rest + 2 * 76 + 76] * 4
    deepep = replace(TRAINING, moe_run=MoERun(dispatcher=Dispatcher.DEEPEP))
    assert _comm(Layout(dp=8, pp=4, ep=8), deepep)[0] == ends - 2688 - 196
