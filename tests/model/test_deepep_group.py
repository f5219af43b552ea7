"""DeepEP's buffer under Megatron-Core spans the expert tensor- and expert-parallel group, etp·ep
ranks (Megatron-LM d98e8a64dd ``moe/token_dispatcher.py`` ``MoEFlexTokenDispatcher.__init__``:
``_DeepepManager(group=self.tp_ep_group, ...)``; ``moe/fused_a2a.py`` ``get_buffer`` sizes the
``Buffer`` by ``group.size()``): model.dispatch_buffers.deepep_group_ranks."""

import json

from tests.cli_runs import refusal, trainplan
from trainplan.model.dispatch_buffers import dispatch_buffer_bytes
from trainplan.model.moe_run import MoERun

ARGS = ["evaluate", "--model", "deepseek-v3", "--gpu", "H100-SXM", "--pp", "16", "--dp", "16",
        "--micro-batch", "1", "--global-batch", "4096", "--recompute", "full",
        "--set", "moe_dispatcher=deepep", "--json"]  # fmt: skip


def _buffer(*degrees: str) -> int:
    out = trainplan(*ARGS, *degrees)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["memory"]["dispatch_buffer_bytes"]


def test_the_buffer_of_16_ranks_at_ep_8_etp_2():
    """h 7,168: the 16-rank buffer (DeepEP config 16: 36 NVL send, 288 receive chunks...) spans
    two nodes: 377,673,984 NVLink bytes, the 33,554,432-byte workspace and 91,887,744 RDMA
    bytes, which NVSHMEM maps as one 512 MiB granule beside 24·1 + 1 = 25 IBGDA queue pairs of
    721,163 B (model.nvshmem_heap): 377,673,984 + 33,554,432 + 536,870,912 + 18,029,075 =
    966,128,403 B; ep 8 with etp 1 keeps the 8-rank one within a node, 335,709,824 +
    33,554,432 = 369,264,256 B (no RDMA part, no NVSHMEM)."""
    deepep = MoERun(dispatcher="deepep")
    across = 377_673_984 + 33_554_432 + 536_870_912 + 18_029_075
    assert dispatch_buffer_bytes(deepep, 7168, 16) == across == 966_128_403
    assert dispatch_buffer_bytes(deepep, 7168, 8) == 335_709_824 + 33_554_432 == 369_264_256
    assert _buffer("--tp", "2", "--ep", "8", "--etp", "2") == 966_128_403
    assert _buffer("--tp", "2", "--ep", "8", "--etp", "1") == 369_264_256


def test_a_group_deepep_has_no_config_for_is_refused():
    """ep 32 × etp 8 = 256 ranks: DeepEP has no config for 256 (ep 32 alone has one)."""
    line = refusal(trainplan(
        "evaluate", "--model", "deepseek-v3", "--pp", "16", "--dp", "32", "--tp", "8",
        "--ep", "32", "--etp", "8", "--set", "moe_dispatcher=deepep",
    ))  # fmt: skip
    assert "ep: 32 × etp 8 = 256 ranks has no DeepEP config for moe_dispatcher 'deepep'" in line
