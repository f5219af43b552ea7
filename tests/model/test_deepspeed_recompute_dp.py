"""DeepSpeed ZeRO-3's dp time and gathered weights read the walk of the layout's own recompute
mode (model/terms/traffic.py deepspeed_walk → model/deepspeed_fetches.py recompute_walk), in the
evaluator and in the search's tables alike (keyed by ZeRO stage and recompute mode).

The launches, counted from the coordinator's walk (DeepSpeed 38327e07
``partitioned_param_coordinator.py``; tests/model/test_deepspeed_recompute_walk.py walks the
trace) over Llama 3 8B at tp 1, a later micro-batch of a step that accumulates, each launch
charged to the layer whose fetch issued it (prefetches run ahead):

* the forward, either way: 3 before layer 0 (the root's and the embedding's prefetches), 4 at
  layer 0, 3 at each of layers 1 to 29, 1 at layer 30 (layer 31 is prefetched by then):
  3 + 4 + 29·3 + 1 = 95;
* the backward without recomputation: 3 at each of layers 31 down to 2 (layers 1 and 0 and
  the embedding prefetched by then): 30·3 = 90, so 95 + 90 = 185;
* the backward under full recomputation (each layer's forward again, then its backward;
  the recomputed forward's releases keep the weights for the backward, which frees them one by
  one, so each prefetch finds room for one weight): 4 at each of layers 31 down to 3, 3 at
  layer 2: 29·4 + 3 = 119, so 95 + 119 = 214.

The step's first micro-batch (from nothing gathered) takes two more: 187 and 216. The dp term
reads the mean launches a gathering pass over the step's m micro-batches, two passes a
micro-batch: (first + (m − 1)·later) / 2m.
"""

from __future__ import annotations

from trainplan.model.layout import Layout
from trainplan.model.terms import dp_time
from trainplan.optimizer.case import Case

CASE = Case.of("llama3-8b", "H100-SXM", seq_len=2048, global_batch_size=64)


def _dp_term_launches(monkeypatch, recompute: str) -> tuple[tuple[float, float], float]:
    """(the gather calls the evaluator's dp term reads, the exposed dp seconds) of Llama 3 8B on
    8 H100s, dp 8, b 1 (m = 64 / 8 = 8), DeepSpeed ZeRO-3 under ``recompute``."""
    seen = []
    real = dp_time.deepspeed_gather_calls

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(dp_time, "deepspeed_gather_calls", spy)
    layout = Layout(dp=8, framework="deepspeed", zero_stage=3, recompute=recompute)
    est = CASE.evaluate(layout)
    assert len(set(seen)) == 1
    assert est.time_terms is not None
    return seen[0], est.time_terms.exposed_dp_s


def test_dp_term_reads_214_launches_under_full_recomputation(monkeypatch):
    m = 8
    plain, plain_s = _dp_term_launches(monkeypatch, "none")
    full, full_s = _dp_term_launches(monkeypatch, "full")
    assert plain == ((187 + (m - 1) * 185) / (2 * m), 1.0)  # 3 + 4 + 29·3 + 1 + 30·3 = 185
    assert full == ((216 + (m - 1) * 214) / (2 * m), 1.0)  # 95 + 29·4 + 3 = 214
    assert full == (107.125, 1.0)
    # 29 more launches a micro-batch, each its NCCL latency: the full layout's dp time grows
    assert full_s > plain_s
    # selective: flash attention, so Megatron-DeepSpeed checkpoints no core attention (its own
    # layer, model.recompute_modules.profile_recompute_modules): the walk without recomputation
    assert _dp_term_launches(monkeypatch, "selective")[0] == plain


def test_gathered_weights_per_mode_in_the_evaluator():
    """The walks' envelopes (tests/model/test_deepspeed_gathered.py) at b 1, a layer's input
    2,048·4,096·2 = 16,777,216 bytes: none and full, layer 2's backward 2·1,512,046,592 −
    29·16,777,216; √n, its 6-layer chunks free 5 inputs there: 2·1,512,046,592 − 5·16,777,216.
    """
    got = {
        r: CASE.evaluate(Layout(dp=8, framework="deepspeed", zero_stage=3, recompute=r))
        .stages[0]
        .state.gathered_bytes
        for r in ("none", "full", "sqrt")
    }
    assert got == {
        "none": 2 * 1_512_046_592 - 29 * 16_777_216,
        "full": 2 * 1_512_046_592 - 29 * 16_777_216,
        "sqrt": 2 * 1_512_046_592 - 5 * 16_777_216,
    }
