"""The V placement of ZB-V and DualPipeV: rank r holds model chunks r and 2·pp − 1 − r (Qi et al.
2024 §6; torchtitan ``torchtitan/distributed/pipeline_parallel.py`` ``stage_ids_this_rank``,
``style="v"``: ``zip(range(pp_size), range(num_stages - 1, pp_size - 1, -1))``), checked by hand
on a split that 2·pp does not divide, through the split, the parameter and the activation terms."""

from __future__ import annotations

from trainplan.model.layout import Layout
from trainplan.model.params import count_params, layer_params, stage_params
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import chunk_ranks, default_chunk_sizes, stage_chunks, stage_layers
from trainplan.model.terms.activation_fields import stage_layer_counts
from trainplan.model.terms.activations import stage_activations

ARCH = Architecture(num_layers=10, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
                    vocab_size=16)  # fmt: skip


def test_uneven_v_split_by_hand():
    # 10 layers in 2·3 = 6 chunks: 2 each is 12, the end chunks give one back first (1, 2, 2, 2,
    # 2, 1): chunks [0] [1 2] [3 4] [5 6] [7 8] [9]. V: rank 0 chunks 0 and 5, rank 1 chunks 1
    # and 4, rank 2 chunks 2 and 3; the loop placement (interleaved) rank r chunks r and r + 3.
    assert default_chunk_sizes(10, 3, 2) == (1, 2, 2, 2, 2, 1)
    assert chunk_ranks(3, 2, "zb-v") == (0, 1, 2, 2, 1, 0)
    v = ((0, 9), (1, 2, 7, 8), (3, 4, 5, 6))
    assert stage_layers(ARCH, 3, 2, True, None, "zb-v") == v
    assert stage_layers(ARCH, 3, 2, True, None, "dualpipev") == v
    assert stage_layers(ARCH, 3, 2, True, None, "interleaved") == (
        (0, 5, 6),
        (1, 2, 7, 8),
        (3, 4, 9),
    )
    assert stage_chunks(ARCH, 3, 2, True, 0, None, "zb-v") == ((0,), (9,))
    assert stage_layer_counts(ARCH, 3, 2, True, None, "zb-v") == ((2, 0), (4, 0), (4, 0))


def test_v_rank_zero_holds_the_embedding_the_output_layer_and_the_mtp_blocks():
    mtp = Architecture(num_layers=10, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
                       vocab_size=16, mtp_layers=1)  # fmt: skip
    assert stage_layers(mtp, 3, 2, True, None, "zb-v")[0] == (0, 9, 10)  # MTP block 10
    counts = count_params(ARCH)
    layer = layer_params(ARCH, 0).dense
    ranks = stage_params(ARCH, 3, 2, None, True, None, "zb-v")
    # rank 0: two layers, the embedding, the final norm and the (untied) output layer
    end = counts.embedding + counts.final_norm + counts.output
    assert [r.dense for r in ranks] == [2 * layer + end, 4 * layer, 4 * layer]


def test_v_activations_follow_the_split():
    t = TrainingSpec(seq_len=4, global_batch_size=6, flash_attention=True)
    lay = Layout(pp=3, virtual_stages=2, schedule="zb-v", framework="textbook", recompute="none")
    per = [stage_activations(ARCH, layers, i, lay, t) for i, layers in
           enumerate(stage_layers(ARCH, 3, 2, True, None, "zb-v"))]  # fmt: skip
    one = per[0].per_microbatch_bytes / 2  # a layer's bytes: rank 0 holds two
    assert per[1].per_microbatch_bytes == per[2].per_microbatch_bytes == 4 * one
    assert per[0].embedding_bytes > 0 and per[2].embedding_bytes == 0  # the output layer on rank 0
