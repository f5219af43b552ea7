"""The [S, E] tensors Megatron-Core's router saves for backward under the megatron profile
(model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES), derived by hand from Megatron-LM
d98e8a64dd router.py TopKRouter.routing and Transformer Engine d0067d0da pytorch/router.py:
FusedTopkScoreFunction saves the routing map (1 B) and an FP32 intermediate (4 B);
FusedComputeScoresForMoEAuxLoss one more FP32 intermediate (4 B)."""

from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import Framework
from trainplan.model.moe_working_set import MEGATRON_ROUTER_SCORE_BYTES
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

ROW = "router probabilities (fp32)"


def _row(framework: Framework) -> int:
    arch = get_model("deepseek-v3").model.arch
    training = TrainingSpec(seq_len=4096, global_batch_size=8)
    ctx = activation_context(training, 1, 1, 2, True, CpKind.RING, 8, 1, framework)
    return dict(kind_activations(arch, True, ctx).terms)[ROW]


def test_megatron_router_keeps_map_and_two_fp32_intermediates():
    # DeepSeek-V3, s 4,096, b 1, tp 2 with sequence parallelism: S = 2,048 tokens routed on
    # the shard, E = 256 experts; 1 + 4 + 4 = 9 B per element.
    assert MEGATRON_ROUTER_SCORE_BYTES == 1 + 4 + 4
    assert _row(Framework.MEGATRON) == 9 * 2048 * 256 == 4_718_592


def test_other_profiles_keep_one_fp32_copy():
    assert _row(Framework.TEXTBOOK) == 4 * 2048 * 256 == 2_097_152
