"""torchtitan's gradient clipping opens rings on groups that otherwise connect point to point
(model/terms/comm_memory.py grad_stats_rings; torchtitan b5bcd76c6
``torchtitan/distributed/utils.py``): ``clip_grad_norm_`` all-reduces the norm over the pp mesh's
group where pp > 1, and ``_clip_grad_norm_with_ep`` reduces the experts' norm over the ep group
(``ep_grads_total_norm.full_tensor()``). Each ring is NCCL's 32 channels × 12 MiB."""

import pytest

import trainplan

CONNECTION = 12 * 2**20


@pytest.mark.parametrize(
    ("model", "degrees", "connections"),
    [
        # the FSDP ring (32) alone: no pipeline, no experts
        ("llama3-8b", {"num_gpus": 16, "dp": 16, "pp": 1}, 32),
        # the FSDP ring over 8 GPUs (32), the pp group's ring for the norm (32) and the one
        # neighbouring stage on the other node, 4 channels of a 50 GB/s NIC (4)
        ("llama3-8b", {"num_gpus": 16, "dp": 8, "pp": 2}, 32 + 32 + 4),
        # ep 1: the FSDP ring (32) and the experts' own FSDP ring over the same 8 GPUs (32)
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 1}, 32 + 32),
        # ep 8: the FSDP ring (32), the all-to-all's 7 NVLink peers × 32 channels (224), the
        # experts' FSDP group of one rank (none) and the ep group's ring for the norm (32)
        ("mixtral-8x7b", {"num_gpus": 8, "dp": 8, "ep": 8}, 32 + 7 * 32 + 32),
    ],
)
def test_fsdp2_communicators(model, degrees, connections):
    e = trainplan.evaluate(model=model, framework="fsdp2", **degrees)
    assert e.peak.communicator_bytes == connections * CONNECTION
