"""DeepSpeed ZeRO-3's fetch walk with activation recomputation (model/deepspeed_trace.py
module_trace, model/deepspeed_fetches.py step_fetches / gathered_envelope,
model/terms/deepspeed_turn.py zero3_gathered_bytes).

Read from the code (DeepSpeed 38327e07, Megatron-DeepSpeed 4efb479d):

* ``parameter_offload.py`` ``_register_deepspeed_module`` hooks every module: the pre-forward
  hook runs ``fetch_sub_module`` and the forward hook ``release_sub_module`` whatever the grad
  mode; ``PreBackwardFunctionForModule`` on each output runs ``fetch_sub_module`` when autograd
  reaches it, ``PostBackwardFunctionModule`` on each input that requires grad runs
  ``release_sub_module`` after the module's backward.
* ``transformer.py`` ``ParallelTransformer._checkpointed_forward``: ``--checkpoint-activations``
  runs the layers in chunks of ``checkpoint_num_layers`` (default 1) through
  ``tensor_parallel.checkpoint`` (DeepSpeed's ``checkpointing.checkpoint`` where configured).
* ``activation_checkpointing/checkpointing.py`` ``CheckpointFunction``: ``forward`` runs the
  chunk under ``torch.no_grad`` (hooks fire); ``backward`` runs it again under
  ``torch.enable_grad`` (every pre-forward fetch and post-forward release again), then
  ``torch.autograd.backward`` over the recomputed outputs (the chunk's backward hooks).
* ``partitioned_param_coordinator.py``: ``record_module`` records every ``fetch_sub_module``
  of the recorded micro-batch in order (the recomputed forward's included); ``trace_prologue``
  keeps the trace ``COMPLETE`` while each step's module matches the recorded one.
"""

from __future__ import annotations

from trainplan.model.deepspeed_fetches import gathered_envelope, step_fetches
from trainplan.model.deepspeed_trace import module_trace, segments
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

# Llama 3 8B at tp 1: QKV 4,096·(4,096 + 2·1,024) = 25,165,824, output projection 16,777,216,
# gate-up 2·4,096·14,336 = 117,440,512, down 58,720,256; norms (4,096) persist
QKV, PROJ, FC1, FC2, NORM = 25_165_824, 16_777_216, 117_440_512, 58_720_256, 4_096


def _count(trace, start: int, end: int) -> tuple[int, int]:
    """(fetches, releases) among ``trace.events[start:end]``."""
    part = trace.events[start:end]
    return sum(1 for f, _, _ in part if f), sum(1 for f, _, _ in part if not f)


def test_llama3_8b_tp1_full_recompute_calls_per_pass():
    """The hooked calls per pass, counted by hand (Megatron-DeepSpeed GPTModel, RoPE, RMSNorm,
    no linear bias):

    * forward, 328 fetches: root, language_model, embedding, word_embeddings,
      embedding_dropout, rotary_pos_emb, encoder (7); each of 32 layers 10 (the layer,
      input_layernorm, self_attention, query_key_value, core_attention_flash, dense,
      post_attention_layernorm, mlp, dense_h_to_4h, dense_4h_to_h): 320; final_layernorm (1).
      Releases where a module has parameters: root (the output weight, external), the word
      embeddings, 6 a layer (2 norms, 4 linears), the final norm: 1 + 1 + 192 + 1 = 195.
    * recomputed forwards (full recomputation, one layer a chunk): 32 · 10 = 320 fetches,
      32 · 6 = 192 releases.
    * backward: the forward's less rotary_pos_emb (cos and sin need no grad): 327 fetches;
      releases only where an input requires grad (not the root's, nor the word embeddings'
      token ids): 192 + 1 = 193.

    So 975 fetches a micro-batch (655 without recomputation) and 580 releases (388)."""
    arch = get_model("llama3-8b").model.arch
    plain = module_trace(arch, 1, 1, 1, 32, 0)
    full = module_trace(arch, 1, 1, 1, 32, 0, 1)
    forward = 328 + 195
    assert _count(full, 0, forward) == (328, 195) == _count(plain, 0, forward)
    assert _count(plain, forward, len(plain.events)) == (327, 193)
    assert _count(full, forward, len(full.events)) == (320 + 327, 192 + 193)
    assert _count(full, 0, len(full.events)) == (975, 580)


def test_llama3_8b_last_layer_backward_is_its_recomputed_forward_then_its_backward():
    """The backward's first events (sizes of each module's first parameter, 0 none): the root's,
    language_model's, encoder's and final_layernorm's pre-backward (the final norm's
    post-backward releases it); then ``CheckpointFunction.backward`` of layer 31: its forward
    again, each module's fetch and (with parameters) its release in forward order; then
    ``torch.autograd.backward`` over it: the layer, the MLP box, down, gate-up, the second
    norm, the attention box, the output projection, core attention, QKV, the first norm, each
    linear's and norm's release right after its fetch (autograd reaches a linear's output, then
    its input)."""
    arch = get_model("llama3-8b").model.arch
    t = module_trace(arch, 1, 1, 1, 32, 0, 1)

    def size(params):
        return t.sizes[params[0]] if params else 0

    head = t.sizes[0]
    rerun = [
        ("F", 0), ("F", NORM), ("R", NORM), ("F", 0), ("F", QKV), ("R", QKV), ("F", 0),
        ("F", PROJ), ("R", PROJ), ("F", NORM), ("R", NORM), ("F", 0), ("F", FC1), ("R", FC1),
        ("F", FC2), ("R", FC2),
    ]  # fmt: skip
    back = [
        ("F", 0), ("F", 0), ("F", FC2), ("R", FC2), ("F", FC1), ("R", FC1), ("F", NORM),
        ("R", NORM), ("F", 0), ("F", PROJ), ("R", PROJ), ("F", 0), ("F", QKV), ("R", QKV),
        ("F", NORM), ("R", NORM),
    ]  # fmt: skip
    top = [("F", head), ("F", 0), ("F", 0), ("F", NORM), ("R", NORM)]
    want = top + rerun + back
    got = [("F" if f else "R", size(p)) for f, _, p in t.events[523 : 523 + len(want)]]
    assert got == want


def test_llama3_8b_tp1_full_recompute_launches_and_elements():
    """The coordinator's walk over the trace (a later micro-batch of a step that accumulates).
    Without recomputation: 185 launches (three a layer in each pass: [QKV, projection, gate-up],
    [down] and the next's, as each prefetch fills to 5e7 or to the 1e9 cap). Under full
    recomputation the forward is the same; the prefetcher has each layer's weights gathered
    before its recomputed forward reaches them, and the recomputed forward's releases keep them
    for the backward right after (well inside the 1e9 reuse distance), which frees them one by
    one, each prefetch's room one weight (four launches a layer): 214 in all. The elements
    gathered are the same, 14,047,772,672: each weight once in the forward and once for its
    recomputation and backward together, as it is once in the forward and once in the backward
    without recomputation."""
    arch = get_model("llama3-8b").model.arch
    _, plain, _ = step_fetches(arch, 1, 1, 1, 32, 0, True)
    _, full, _ = step_fetches(arch, 1, 1, 1, 32, 0, True, segment=1)
    assert plain == (185, 0, 14_047_772_672, 0)
    assert full == (214, 0, 14_047_772_672, 0)
    # Chen's √32 → 6-layer chunks: 6 · 218,103,808 elements outrun the 1e9 reuse distance inside
    # a chunk, so part of it is gathered a third time for its backward
    assert segments(32, 6)[-2:] == ((24, 30), (30, 32))
    assert step_fetches(arch, 1, 1, 1, 32, 0, True, segment=6)[1] == (249, 0, 17_529_044_992, 0)
    # selective recomputation's core attention (no parameters) adds a fetch, no launch here
    assert step_fetches(arch, 1, 1, 1, 32, 0, True, core=True)[1] == plain


def test_llama3_8b_tp4_full_recompute_holds_more_at_the_turn():
    """tp 4: QKV 6,291,456, projection 4,194,304, gate-up 29,360,128, down 14,680,064 (a layer
    54,525,952); the output weight 128,256·4,096 ÷ 4 = 131,334,144. At the turn (``k`` 0):

    * without recomputation, in layer 31's backward: the output weight and layers 16 to 31
      whole (the forward's releases kept them: their backward lies within 1e9 elements),
      131,334,144 + 16·54,525,952 = 1,003,749,376;
    * under full recomputation, at layer 31's recomputed forward's end: the output weight,
      layer 31 less its down (freed after its backward), layers 16 to 30 whole, layer 15's
      QKV, projection and gate-up (prefetched): 131,334,144 + 2·39,845,888 + 15·54,525,952 =
      1,028,915,200.

    The memory term reads the walk of the layout's own mode (the state tabulated per ZeRO stage
    and recompute mode): dp 8 × tp 4, b 1, s 8,192 (a layer's input 8,192·4,096·2 ÷ 4 =
    16,777,216 bytes): under full recomputation the turn 2·1,028,915,200 = 2,057,830,400
    bytes, k 16's 2·1,120,403,456 − 16·16,777,216 = 1,972,371,456 less; without recomputation
    (and selective: flash attention, no core checkpoint) the turn 2·1,003,749,376 =
    2,007,498,752. √n recomputation's walk (6 layers a chunk) holds the same 1,120,403,456 with
    only 3 chunks' inputs freed: 2·1,120,403,456 − 3·16,777,216 = 2,190,475,264. (While the
    term took the most of the walks, every mode read that: 182,976,512 bytes over without
    recomputation.)"""
    arch = get_model("llama3-8b").model.arch
    layer, head, three = 54_525_952, 131_334_144, 6_291_456 + 4_194_304 + 29_360_128
    assert head + 16 * layer == 1_003_749_376
    assert head + 2 * three + 15 * layer == 1_028_915_200
    assert gathered_envelope(arch, 4, 4, 1, 32, 0) == ((0, 1_003_749_376), (16, 1_120_403_456))
    assert gathered_envelope(arch, 4, 4, 1, 32, 0, 1) == ((0, 1_028_915_200), (16, 1_120_403_456))
    assert gathered_envelope(arch, 4, 4, 1, 32, 0, 6) == ((0, 1_028_915_200), (3, 1_120_403_456))
    want = {
        "none": 2 * 1_003_749_376,
        "selective": 2 * 1_003_749_376,
        "full": 2 * 1_028_915_200,
        "sqrt": 2 * 1_120_403_456 - 3 * 16_777_216,
    }
    for recompute, gathered in want.items():
        lay = Layout.of(framework="deepspeed", zero_stage=3, dp=8, tp=4, recompute=recompute)
        st = Case.of("llama3-8b", "H100-SXM", lay).evaluate().stages[0]
        assert st.state.gathered_bytes == gathered, recompute
    assert (want["full"], want["sqrt"]) == (2_057_830_400, 2_190_475_264)


def test_chunked_unheld_counts_chunks():
    """Under Chen's chunks a chunk keeps one layer's input, so the layers not live count by
    chunk: 32 layers in 6-layer chunks are 6 chunks; in layer 2's backward (chunk 0) the 5
    later chunks are freed; in the forward of layer 29 (chunk 4) one chunk is not yet run."""
    arch = get_model("llama3-8b").model.arch
    env = gathered_envelope(arch, 1, 1, 1, 32, 0, 6)
    assert env == ((0, 1_062_207_488), (1, 1_137_704_960), (5, 1_512_046_592))
