"""A tensor-parallel Llama layer under torchtitan's plan, measured through PyTorch DTensor on a
gloo group of CPU ranks, against the ``fsdp2`` profile's per-layer count, byte for byte.

torchtitan's norms run on the sequence shard (``SequenceParallel``), then each block's input is
all-gathered to ``Replicate`` before the column-parallel projections (``PrepareModuleInput``),
and autograd keeps that gathered tensor: the QKV and FC1 inputs are whole on every tp rank. The
``megatron`` profile (Korthikanti et al. 2022, Megatron-Core's linear keeps the shard) counts
them ÷ tp; the difference is exactly ``(1 − 1/tp)`` of those two tensors."""

from __future__ import annotations

from fractions import Fraction

import pytest

pytest.importorskip("torch")

from tests.fidelity import cases as C  # noqa: E402
from tests.fidelity.harness import Dims  # noqa: E402
from tests.fidelity.tp_dtensor import measure_tp_layers  # noqa: E402
from trainplan.model.activations import ActivationContext, layer_activations  # noqa: E402
from trainplan.model.layout import Layout  # noqa: E402
from trainplan.model.specs import TrainingSpec  # noqa: E402
from trainplan.model.terms.activations import stage_activations  # noqa: E402

# (tp, dims, flash): heads and KV heads divisible by tp; SDPA and eager softmax
CASES = (
    (2, Dims(s=64, b=2, h=64, heads=4, kv_heads=2), True),
    (2, Dims(s=32, b=1, h=64, heads=4, kv_heads=4), False),
    (2, Dims(s=128, b=1, h=128, heads=8, kv_heads=2), True),
    (4, Dims(s=64, b=1, h=64, heads=4, kv_heads=4), True),
)


def _predict(tp: int, dims: Dims, flash: bool, gathered: bool):
    ctx = ActivationContext(
        seq_len=dims.s, cp=1, micro_batch_size=dims.b, tp=tp, sequence_parallel=True,
        flash_attention=flash, convention="pytorch", gathered_block_inputs=gathered,
    )  # fmt: skip
    return layer_activations(C.architecture("llama", dims), 0, ctx)


@pytest.fixture(scope="module")
def measured() -> dict[int, list[list[dict[str, int]]]]:
    out = {}
    for tp in sorted({c[0] for c in CASES}):
        mine = [(d, f) for t, d, f in CASES if t == tp]
        out[tp] = measure_tp_layers(mine, tp)
    return out


IDS = [f"tp{t}-{d.label()}-{'sdpa' if f else 'eager'}".replace(" ", ",") for t, d, f in CASES]


@pytest.mark.parametrize(("tp", "dims", "flash"), CASES, ids=IDS)
@pytest.mark.slow
def test_torchtitan_tp_layer_matches_the_fsdp2_count(measured, tp, dims, flash):
    index = [(d, f) for t, d, f in CASES if t == tp].index((dims, flash))
    ranks = measured[tp][index]
    want = {n: b for n, b in _predict(tp, dims, flash, True).terms if b}
    for got in ranks:  # every rank keeps the same bytes, term by term
        assert {n: Fraction(b) for n, b in got.items()} == want
    # the evaluator's fsdp2 layout reads the same count (compiled: the measured block's norms
    # and activation are single operators, not torchtitan's eager RMSNorm, model.eager_saved)
    t = TrainingSpec(seq_len=dims.s, global_batch_size=dims.b, flash_attention=flash,
                     activation_convention="pytorch", compile=True)  # fmt: skip
    lay = Layout(tp=tp, micro_batch_size=dims.b, framework="fsdp2", zero_stage=3)
    st = stage_activations(C.architecture("llama", dims), (0,), 0, lay, t)
    assert st.per_microbatch_bytes == sum(ranks[0].values())
    # Megatron's count keeps 1/tp of the two gathered inputs
    megatron = _predict(tp, dims, flash, False).full_bytes
    S, h = dims.s * dims.b, dims.h
    assert sum(ranks[0].values()) - megatron == 2 * 2 * S * h * Fraction(tp - 1, tp)
