"""The CPU's own norm kernels (named differences from CUDA's), and mixed-precision AdamW model
state per parameter against ``model.memory.model_state``."""

from fractions import Fraction

import pytest

pytest.importorskip("torch")

from tests.fidelity import cases as C  # noqa: E402
from tests.fidelity import harness as H  # noqa: E402
from trainplan.model.layout import Layout  # noqa: E402
from trainplan.model.memory import model_state  # noqa: E402
from trainplan.model.specs import TrainingSpec  # noqa: E402


@pytest.mark.parametrize(("kind", "norm_kind"), [("gpt", "layernorm"), ("llama", "rmsnorm")])
def test_cpu_norm_kernels_differ_by_named_terms(kind, norm_kind):
    dims = C.harness_args(kind, C.GRID[0])[1]
    measured = C.measure(kind, C.GRID[0], "none", True, norm="aten").kept
    predicted = C.predict_layer(kind, C.GRID[0], True, "pytorch").full_bytes
    delta = H.cpu_norm_delta(norm_kind, dims.s * dims.b, dims.h)
    assert measured == predicted + 2 * sum(delta.values())  # two norms per layer


def test_dropout_mask_is_one_byte_with_native_dropout():
    import torch

    x = torch.zeros(4, 8, dtype=H.BF16, requires_grad=True)
    rec = H.SavedBytes()
    with rec.hooks():
        out = H.dropout(x, 0.1, "mask")
        assert rec.by_name() == {"mask": 4 * 8}  # bool, as the CUDA kernel keeps
        del out
        out = torch.nn.functional.dropout(x, 0.1)
        H.claim("F.dropout mask")
        assert rec.by_name() == {"F.dropout mask": 2 * 4 * 8}  # the CPU's: a bf16 mask
        assert out.shape == x.shape


@pytest.mark.parametrize(("fp32_accumulation", "per_param"), [(False, 16), (True, 18)])
def test_model_state_bytes_per_parameter(fp32_accumulation, per_param):
    params, by_name = C.measure_state(fp32_accumulation)
    by_name = dict(by_name)  # the measurement is cached: do not change it
    counters = by_name.pop("AdamW step counters")
    assert counters == 4 * C.STATE_TENSORS
    training = TrainingSpec(
        seq_len=1, global_batch_size=1, gradient_bytes=4 if fp32_accumulation else 2
    )
    want = model_state(Fraction(params), Fraction(0), Layout(), training, 0)
    assert sum(by_name.values()) == want.total_bytes == per_param * params
    assert by_name["bf16 weights"] == want.weights_bytes
    grads = by_name.get(
        "fp32 gradient accumulation buffer" if fp32_accumulation else "bf16 gradients"
    )
    assert grads == want.gradients_bytes
    assert (
        sum(v for n, v in by_name.items() if "AdamW" in n or "master" in n) == want.optimizer_bytes
    )
