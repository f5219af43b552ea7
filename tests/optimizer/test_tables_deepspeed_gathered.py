"""The search's tables read DeepSpeed ZeRO-3's gathered weights from the same walk as the
evaluator (model/terms/deepspeed_turn.py zero3_turn_gathered over columns): Llama 3 8B on 8
H100s at s 2,048. The term takes the most of the walks without, under full and under √n
recomputation (tests/model/test_deepspeed_gathered.py); √n's (6 layers a chunk) decides both:
layer 2's backward holds 1,512,046,592 elements with only 5 chunks' inputs freed, so
2·1,512,046,592 − 5·16,777,216 = 2,940,207,104 bytes at b 1 and, a layer's input then
2·16,777,216 bytes, 2·1,512,046,592 − 5·33,554,432 = 2,856,321,024 at b 2 (above the turn's
2·1,078,984,704 = 2,157,969,408 and its own walk's 2·1,137,704,960 − 33,554,432)."""

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
            table = tables.state_ceil[s, 0, 0]
            assert abs(math.ceil(st.state.backward_bytes + comm) - table) <= BYTE_TOLERANCE
            if shape.tp == 1 and shape.cp == 1:
                seen[shape.micro_batch_size] = st.state.gathered_bytes
    assert seen == {1: 2 * 1_512_046_592 - 5 * 16_777_216, 2: 2 * 1_512_046_592 - 5 * 33_554_432}
    assert seen == {1: 2_940_207_104, 2: 2_856_321_024}
