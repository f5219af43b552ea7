"""The search's tables read DeepSpeed ZeRO-3's gathered weights from the same walk as the
evaluator (model/terms/deepspeed_turn.py zero3_turn_gathered over columns), each recompute mode
its own walk (tables keyed by ZeRO stage and recompute mode): Llama 3 8B on 8 H100s at s 2,048,
a layer's input 2,048·4,096·2 = 16,777,216 bytes at b 1, 33,554,432 at b 2
(tests/model/test_deepspeed_gathered.py writes the walks' envelopes out).

* none (and selective: flash attention, so Megatron-DeepSpeed checkpoints no core attention):
  the envelope (0, 1,078,984,704), (2, 1,095,761,920), (29, 1,512,046,592); b 1: layer 2's
  backward 2·1,512,046,592 − 29·16,777,216 = 2,537,553,920; b 2: the turn 2·1,078,984,704 =
  2,157,969,408 (layer 2's backward 3,024,093,184 − 29·33,554,432 = 2,051,014,656 below).
* full: the turn 16,777,216 elements fewer, 2·1,062,207,488 = 2,124,414,976; b 1: layer 2's
  backward 2,537,553,920 again; b 2: layer 29's forward 2·1,095,761,920 − 2·33,554,432 =
  2,124,414,976 (the turn the same).
* √n (6 layers a chunk): layer 2's backward with only 5 chunks' inputs freed:
  2·1,512,046,592 − 5·16,777,216 = 2,940,207,104 at b 1, 2·1,512,046,592 − 5·33,554,432 =
  2,856,321,024 at b 2. Before the tables were keyed by recompute mode every mode read this,
  402,653,184 bytes over at b 1 for the layouts without recomputation."""

from __future__ import annotations

import math

from trainplan.model.frameworks import Framework
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import BYTE_TOLERANCE
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables


def test_tables_read_the_walk_at_the_peak():
    case = Case.of("llama3-8b", "H100-SXM", seq_len=2048, global_batch_size=64)
    space = SearchSpace(
        num_gpus=8, max_micro_batch_size=2, frameworks=(Framework.DEEPSPEED,), zero_stages=(3,)
    )
    tables = build_tables(Problem(jobs=(Job(case, 8, "llama3-8b"),), space=space))
    seen = {}
    for s, shape in enumerate(tables.shapes):
        for r, recompute in enumerate(tables.recomputes):
            if not tables.legal[s, 0, r]:
                continue
            est = case.evaluate(shape.layout(3, recompute))
            st = est.stages[0]
            comm = st.communicator_bytes + st.persistent_buffers_bytes
            table = tables.state_ceil[s, 0, r, 0]
            assert abs(math.ceil(st.state.backward_bytes + comm) - table) <= BYTE_TOLERANCE
            if shape.tp == 1 and shape.cp == 1:
                seen[shape.micro_batch_size, str(recompute)] = st.state.gathered_bytes
    assert seen == {
        (1, "none"): 2 * 1_512_046_592 - 29 * 16_777_216,
        (1, "selective"): 2 * 1_512_046_592 - 29 * 16_777_216,
        (1, "full"): 2 * 1_512_046_592 - 29 * 16_777_216,
        (1, "sqrt"): 2 * 1_512_046_592 - 5 * 16_777_216,
        (2, "none"): 2 * 1_078_984_704,
        (2, "selective"): 2 * 1_078_984_704,
        (2, "full"): 2 * 1_095_761_920 - 2 * 33_554_432,
        (2, "sqrt"): 2 * 1_512_046_592 - 5 * 33_554_432,
    }
    assert seen[1, "none"] == 2_537_553_920 and seen[2, "full"] == 2_124_414_976
    assert seen[1, "sqrt"] - seen[1, "none"] == 402_653_184
