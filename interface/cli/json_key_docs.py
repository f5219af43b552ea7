"""What each key of ``trainplan evaluate --json``'s object means, in one line each (the JSON
reference page, :mod:`interface.cli.reference`, prints them; ``tests/test_docs.py`` holds every key
of the evaluate object to this table), and the per-stage search's proof keys (listed under its
table). Units: bytes, seconds, 0–1 fractions.
"""

from __future__ import annotations

from trainplan.model.params import ACTIVE_COUNTS

__all__ = ["KEY_DOCS"]

KEY_DOCS: dict[str, str] = {
    "num_gpus": "G = dp·tp·pp·cp, the GPUs of the layout.",
    "model": "The model: its catalogue name (or the config file's), its parameter counts and source.",
    "model.name": "Catalogue name, or the config file's path, or `params` for a declared size.",
    "model.num_params": "Parameters, exact (the MTP modules included).",
    "model.num_active_params": "Parameters a token passes through: " + ACTIVE_COUNTS + ".",
    "model.padded_vocab_size": "Vocabulary rows after the framework's padding for tp.",
    "model.mtp_layers": "Multi-token-prediction blocks after the last decoder layer (DeepSeek-V3: "
    "1), on the output layer's stage; not in layout.stage_layers.",
    "model.source": "Where the model's dimensions come from.",
    "gpu": "The accelerator: name, memory, dense BF16 peak, source.",
    "gpu.name": "Accelerator name as in `trainplan gpus` (a file's `name` under `--gpu PATH.toml`).",
    "gpu.memory_bytes": "Memory as the vendor states it, in bytes.",
    "gpu.peak_flops_per_s": "Dense BF16 peak, FLOP/s.",
    "gpu.source": "Where the figures come from: the vendor's datasheet, or a file's `source`.",
    "gpu.file": "Where the part's figures were read: the file of `--gpu PATH.toml`, or the web "
    "API's accelerator object; null for a part of the accelerator table.",
    "gpu.part": "The catalogue part whose per-part rates (calibrated efficiencies, SM count, "
    "published kernel and collective curves) stand for this one: itself, or a file's `like` "
    "or `base`.",
    "layout": "The layout evaluated, every default filled in.",
    "layout.dp": "Data-parallel degree.",
    "layout.tp": "Tensor-parallel degree.",
    "layout.pp": "Pipeline-parallel degree (stages).",
    "layout.cp": "Context-parallel degree.",
    "layout.optimizer": "The optimizer whose state and step are counted: adam, adam-8bit, adafactor, lion, muon, soap.",
    "layout.document_lengths": "Packed documents, [[length, count], …]; null: one document per sequence.",
    "layout.cp_kind": "How cp ranks exchange attention's inputs: ring, all-gather, ulysses, ulysses-kv-repeat, a2a+p2p.",
    "layout.cp_a2a": "Inner all-to-all degree of the a2a+p2p hybrid; null otherwise.",
    "layout.ep": "Expert-parallel degree (carved from dp·cp).",
    "layout.etp": "Expert tensor-parallel degree (routed experts over etp·ep ranks); tp without "
    "routed experts (--etp takes it back: a dense model's etp = tp is accepted and means none).",
    "layout.framework": "Framework profile: megatron, deepspeed, fsdp2 or textbook.",
    "layout.zero_stage": "ZeRO stage under the framework's mechanism (0–3).",
    "layout.recompute": "Activation recomputation: none, selective, sqrt or full.",
    "layout.recompute_layers": "Fully recomputed layers per stage (per chunk when interleaved); null without.",
    "layout.micro_batch_size": "b, sequences per micro-batch.",
    "layout.global_batch_size": "B, sequences per step.",
    "layout.num_microbatches": "m = B/(b·dp).",
    "layout.schedule": "Pipeline schedule: gpipe, 1f1b or interleaved.",
    "layout.virtual_stages": "v, model chunks per pipeline stage (interleaved).",
    "layout.seq_len": "s, tokens per sequence.",
    "layout.sequence_parallel": "Megatron's sequence parallelism (on by default when tp > 1).",
    "layout.tp_block_inputs": "With sequence parallelism, what tensor parallelism keeps of each "
    "block's all-gathered input: `gathered` (whole on every tp rank, torchtitan's plan, fsdp2's "
    "default) or `sharded` (the sequence shard); null without sequence parallelism.",
    "layout.flash_attention": "FlashAttention (no stored score matrix; causal FLOPs).",
    "layout.activation_convention": "paper (Korthikanti et al.) or pytorch (what PyTorch's kernels keep).",
    "layout.memory_efficient_norm": "Norms keep their output instead of their input.",
    "layout.elementwise": "How the norms, rotary embedding, MLP activation and residual adds run, in "
    "time and in activations: eager (fsdp2 without torch.compile), compiled (fsdp2 with it) or fused.",
    "layout.pipeline_frees_stage_tensors": "fsdp2, pp > 1: the pipeline frees stage inputs and "
    "outputs (Llama 3 §3.3.2); null elsewhere.",
    "layout.pipeline_keeps_outputs": "fsdp2, pp > 1: the last stage keeps every micro-batch's logits until the "
    "next step (torchtitan before 2025-10-22); null elsewhere.",
    "layout.precision": "bf16 or fp8 (linear GEMMs and the inputs they save).",
    "layout.fp8_recipe": "FP8 scaling recipe: delayed, tensorwise, blockwise, mxfp8 (null: bf16, or fp8 at "
    "the framework's default: tensorwise under fsdp2, delayed elsewhere).",
    "layout.gradient_bytes": "Bytes per gradient element (2 bf16, 4 fp32).",
    "layout.optimizer_bytes_per_param": "Optimizer-state bytes per parameter (12: FP32 master + two moments).",
    "layout.stage_layers": "Decoder layers per pipeline stage, the MTP blocks apart "
    "(--stage-layers takes them back).",
    "layout.chunk_layers": "Layers per model chunk in model order (--stage-layers takes them too).",
    "layout.rank_order": "Rank order, inner to outer (Megatron-LM's default tp-cp-ep-dp-pp).",
    "layout.moe": "How the MoE layers route and dispatch (null for a dense model or the default dropless, balanced all-to-all).",
    "layout.moe.moe_capacity_factor": "Expert capacity factor C (tokens per expert E·C); null: dropless.",
    "layout.moe.moe_pad_to_capacity": "Expert inputs padded to capacity (Megatron-Core --moe-pad-expert-input-to-capacity).",
    "layout.moe.moe_imbalance": "The busiest expert-parallel rank's routed rows ÷ the mean (1: balanced).",
    "layout.moe.moe_node_limit": "Node-limited routing: the most nodes a token's experts may span (null: no limit).",
    "layout.moe.moe_dispatcher": "Token dispatcher: alltoall, deepep or hybridep "
    "(both send a token once per destination rank, once per remote NVLink domain).",
    "layout.moe.moe_ep_overlap": "Megatron-Core's expert all-to-all overlap: none, "
    "moe_shared_expert_overlap or overlap_moe_expert_parallel_comm.",
    "layout.offload_activations": "Modules whose activations go to the host (Megatron-Core names).",
    "layout.recompute_modules": "What selective recomputation recomputes (Megatron-Core's "
    "--recompute-modules names; core_attn by default); null unless megatron or textbook with "
    "recompute selective.",
    "layout.fp8_param_gather": "FP8 weight all-gather (Megatron-Core --fp8-param-gather; under "
    "fsdp2 torchtitan's enable_fsdp_float8_all_gather); null unless megatron or fsdp2 with fp8.",
    "layout.fsdp_double_buffer": "Megatron-FSDP's persistent two-unit pools (--fsdp-double-buffer); "
    "null unless megatron with ZeRO-3.",
    "layout.cross_entropy_fusion_impl": "The loss Megatron-Core runs: none (unfused), native "
    "(its fused kernels) or te (Transformer Engine's); null unless megatron.",
    "layout.flat_parameters": "Whether the run is PyTorch FSDP1 (FullyShardedDataParallel, flat "
    "parameters: its copies around the collectives); null unless fsdp2 with pp 1.",
    "layout.sac_saves_scaled_mm": "Whether torchtitan's op-level save list keeps the FP8 GEMM "
    "outputs (aten._scaled_mm); null unless fsdp2 with fp8 and recompute selective.",
    "layout.deepspeed_overlap_comm": "DeepSpeed's zero_optimization.overlap_comm; null unless deepspeed ZeRO-1/2.",
    "layout.bias_dropout_fusion": "Whether Megatron-DeepSpeed's TorchScript bias-dropout-add "
    "runs (its residual masks counted); null unless deepspeed.",
    "layout.seq_parallel_communication_data_type": "DeepSpeed's seq_parallel_communication_"
    "data_type (fp32 or bf16); null unless deepspeed with cp > 1 (Ulysses).",
    "layout.distributed_optimizer": "megatron ZeRO-1's implementation: mcore_distributed_optim "
    "or distributed_fused_adam (Apex's, under NeMo); null unless megatron with ZeRO ≥ 1.",
    "layout.muon_tp_mode": "Muon under Megatron: duplicated (whole matrices gathered, its default) or blockwise (tp blocks).",
    "layout.fp8_activation_storage": "How FP8 training stores activations: linear_inputs "
    "(Transformer Engine) or deepseek_v3 (E5M6 attention output, FP8 SwiGLU inputs); null under bf16.",
    "memory": "Bytes per GPU on the busiest pipeline stage, each line its own key.",
    "memory.busiest_stage": "The stage whose peak is highest (counted from 0).",
    "memory.weights_bytes": "Weights held on the GPU.",
    "memory.gradients_bytes": "Gradients held on the GPU.",
    "memory.optimizer_bytes": "Optimizer state held on the GPU.",
    "memory.model_state_bytes": "Weights + gradients + optimizer state.",
    "memory.zero3_gathered_bytes": "What ZeRO-3 / FSDP holds gathered: the unit being computed and "
    "the prefetched one(s), for each chunk computed at once (two under textbook dualpipe and "
    "dualpipev); Megatron-FSDP also the embedding and output layer, whole.",
    "memory.zero3_gathered_what": "What zero3_gathered_bytes holds, in words (the report's line); "
    "null where nothing is gathered.",
    "memory.weight_cache_bytes": "FP8 copies of the linear weights (precision fp8).",
    "memory.dispatch_buffer_bytes": "The dispatcher's resident buffers (moe_dispatcher deepep or hybridep).",
    "memory.host_bytes": "Offloaded state on the host, per GPU.",
    "memory.host_bytes_per_node": "Offloaded state on the host, per node.",
    "memory.host_capacity_bytes": "Host memory per GPU available to offload.",
    "memory.host_fits": "Whether the host holds what is offloaded (null without offload).",
    "memory.activations_bytes": "What the transformer layers keep for backward over the "
    "micro-batches in flight (checkpoints included; under zb-v and dualpipev with fsdp2 also "
    "the layers' output gradients kept for the pending weight passes).",
    "memory.embedding_activations_bytes": "Embedding and output-layer activations (FP32 logits on the last stage).",
    "memory.recompute_transient_bytes": "What the layer (full) or segment (√n) being recomputed "
    "holds at the peak, less its checkpoint, counted once.",
    "memory.loss_transient_bytes": "Last stage: what the loss holds for one micro-batch beyond "
    "the kept FP32 softmax (BF16 logits, FP32 copy, backward's gradients, as the framework's "
    "default loss holds them), less the layers' backward phase it does not coincide with (the "
    "recompute transient, the context-parallel buffers and the backward working set, less the "
    "output layer's released bytes).",
    "memory.backward_working_bytes": "The transients one layer's backward holds at its largest "
    "step (output and input gradients, re-gathered inputs, the attention kernel's dQ/dK/dV and "
    "workspace, FP8 copies of the output gradient, deepspeed's weight gradient) less the layer's "
    "saved tensors released by then (none under zb-v and dualpipev, whose input-gradient pass "
    "keeps the graph; there the loss's stage adds the logits' gradient kept for the weight "
    "pass); under deepspeed with pp > 1 and tp > 1 plus the stage output and its gradient the "
    "pipeline engine rebuilds whole for the stage's backward; 0 under textbook.",
    "memory.output_layer_freed_bytes": "Stage with the loss: one micro-batch's output-layer "
    "activations (with the kept FP32 logits), released before any layer's backward; the layers' "
    "backward phase holds that much less (0 elsewhere, under zb-v and dualpipev, and under "
    "textbook).",
    "memory.moe_forward_transient_bytes": "What one MoE layer's forward holds beside its saved "
    "tensors (the routed tokens' copies alive through the experts and the combine; DeepSpeed's "
    "FP32 combine), on top of the recompute transient where backward replays the forward (under "
    "overlap_moe_expert_parallel_comm, on top of another micro-batch's layers' backward phase), "
    "less the larger of the layers' backward phase and the loss working set.",
    "memory.batch_load_transient_bytes": "deepspeed with pp > 1, first and last stage: what "
    "building one micro-batch's causal mask holds (FP32 ones and their lower triangle, 8·s² B, "
    "one micro-batch fewer held then; on the first stage at least the mask's clone held through "
    "the forward, s² B), less the larger of the layers' backward phase, the loss working set "
    "and the MoE forward working set; 0 elsewhere.",
    "memory.construction_bytes": "DeepSpeed ZeRO-3: what each GPU holds while the model is built "
    "without deepspeed.zero.Init (its whole tensor- and pipeline-parallel part in BF16, before "
    "partitioning); 0 where construction holds no more than the step. Not in total_bytes.",
    "memory.pipeline_output_bytes": "Stage outputs kept after the send (0 when deallocated); fsdp2: also the receive buffers.",
    "memory.cp_transient_bytes": (
        "What the context-parallel buffers add to one layer's backward phase beyond its backward "
        "working set: the backward's at the attention-core step beyond the working set's headroom "
        "above it, or the forward's beyond the working set, the larger."
    ),
    "memory.activation_offload_buffer_bytes": "Offloaded activations kept on the GPU: one layer's, the group never offloaded.",
    "memory.activation_offload_host_bytes": "Offloaded activations on the host.",
    "memory.buffers_bytes": "Live in forward/backward only: unsharded gradients before reduction, communication buckets.",
    "memory.optimizer_step_bytes": "What the optimizer step adds to the model state (no activations then).",
    "memory.persistent_buffers_bytes": "Persistent buffers: allocated once, held for the whole run in both phases: the "
    '"mpu" all-gather buffer (tp > 1 with sequence parallelism: megatron\'s output layer on the last stage, '
    "deepspeed's layers on every stage), DeepSpeed's pipeline receive buffers (pp > 1) and the fp32 logits its "
    "pipeline engine keeps on the last stage (two micro-batches', pp > 1), and, under megatron, "
    "Transformer Engine's extra cuBLAS workspaces (3 x 32 MiB + 1 KiB with tp_comm_overlap full, 4 x with MoE layers) "
    "and its placeholder weight gradients (one tensor in the weights' dtype per distinct linear-weight shape of the "
    "stage's layers and, on the last stage, the output layer; none in a forward-only RLHF role). "
    "Called output_gather_bytes before.",
    "memory.communicator_bytes": "NCCL's buffers per process group, held for the whole run (0 under textbook), "
    "with Transformer Engine's userbuffers or async TP's symmetric memory (memory.userbuffer_bytes).",
    "memory.userbuffer_bytes": "Of communicator_bytes: Transformer Engine's userbuffers under tp_comm_overlap full "
    "(megatron, tp > 1), or PyTorch's symmetric-memory workspace under async-tp (fsdp2, tp > 1: "
    "2 x s·b/cp/tp x h x 2 B), outside the caching allocator for the whole run "
    "(the userbuffers' cuBLAS workspaces are in persistent_buffers_bytes).",
    "memory.allocated_bytes": "The tensors' peak (torch.cuda.max_memory_allocated): the total less the communicators.",
    "memory.stream_pool_bytes": (
        "Side streams' allocator pools, idle at the peak (fsdp2: two all-gather outputs; "
        "deepspeed ZeRO-3: a segment per record-setting reduce-scatter copy)."
    ),
    "memory.reserved_bytes": "What torch.cuda.max_memory_reserved counts at least: allocated_bytes plus stream_pool_bytes.",
    "memory.allocator_retries": "True when some stage's reserved_bytes and communicators exceed capacity_bytes: "
    "the allocator frees its cached blocks and retries (cudaFree, a device sync) at least once a step; not in the time.",
    "memory.reserved_over_bytes": "By how much the most reserved stage's reserved_bytes and communicators exceed "
    "capacity_bytes (0 when they do not).",
    "memory.fit_bytes": "The fit figure: the most any stage's GPU must find in capacity_bytes by the rule the "
    "search, the per-stage search and the frontier fit layouts by: allocated peak + side streams' pools + "
    "communicators (reserved_bytes + communicator_bytes of that stage); in a search or frontier answer run with "
    "allocator_retries_ok, without the pools (then total_bytes). A search keeps a layout only where it fits.",
    "memory.total_bytes": "The peak over the step's phases (forward/backward or the optimizer step).",
    "memory.peak_phase": "Where the peak is: forward-backward or optimizer-step.",
    "memory.steady_bytes": "The steady-state sum (model state + activations), without the phase peak.",
    "memory.capacity_bytes": "Usable capacity: HBM less the runtime reserve (textbook: the vendor's figure).",
    "memory.capacity_unit": "How the capacity is stated (GiB of HBM less reserve, or vendor GB).",
    "memory.runtime_reserve_bytes": "Driver, CUDA context, cuBLAS workspaces, fragmentation (--set memory_reserve_gib).",
    "memory.fits": "Whether total_bytes fits the capacity (and the host its share).",
    "memory.fits_covers": "What the verdict covers: everything, or model state only (a declared size).",
    "memory.overflow_bytes": "By how much it does not fit (0 when it fits).",
    "memory.activations_unavailable": "Why activations are not counted (a declared size without dimensions); null otherwise.",
    "zero_table": "Model state and DP traffic of each ZeRO stage of the framework, same layout.",
    "zero_table[].zero_stage": "ZeRO stage.",
    "zero_table[].model_state_bytes": "Model state per GPU at that stage.",
    "zero_table[].reduction": "Model state of the first row ÷ this row's.",
    "zero_table[].dp_bytes_per_step": "Data-parallel bytes sent per GPU per step at that stage.",
    "traffic": (
        "One row per parallel axis (dp; for a MoE model edp, the routed experts' share of the dp "
        "traffic on the expert data-parallel group; tp, cp, ep, pp), then one per axis Muon's "
        "optimizer step gathers over."
    ),
    "traffic[].axis": "The axis.",
    "traffic[].collective": "The collective the mechanism runs.",
    "traffic[].group_size": "Ranks in the axis's group.",
    "traffic[].bytes_per_step": "Ring bytes sent per GPU per step.",
    "traffic[].microbatch_bytes": "The part sent once per micro-batch (for one micro-batch).",
    "traffic[].link": "nvlink or scale-out (none for degree 1).",
    "traffic[].bandwidth_bytes_per_s": "The link's bandwidth per GPU per direction.",
    "traffic[].seconds": "Time if nothing overlapped it.",
    "traffic[].overlap": "How the axis overlaps compute (a fraction under the single model, the mechanism otherwise).",
    "traffic[].exposed_seconds": "Time left on the critical path.",
    "traffic[].optimizer_step": "Sent in the optimizer step (Muon's gathers): time in time.optimizer_s, not exposed_comm_s.",
    "pipeline": "The bubble both ways and the micro-batches held.",
    "pipeline.bubble_fraction": "(p − 1)/(v·m + p − 1): the idle share of the step.",
    "pipeline.bubble_ratio": "(p − 1)/(v·m): bubble over m × the slowest stage's micro-batch (compute + exposed tp, cp, ep).",
    "pipeline.microbatches_in_flight": "Micro-batches of activations held on the busiest stage.",
    "pipeline.megatron_split_flags": "megatron: the Megatron-LM flags that build this split "
    "(first/last stage counts, embedding/loss accounted, or the layout string), where its own "
    "L/pp split is not it; null otherwise.",
    "pipeline.stage_microbatch_s": "Roofline model, GPipe/1F1B/interleaved with pp > 1: each "
    "stage's forward and backward seconds of one micro-batch, its chunks summed (the embedding "
    "on the first, the output layer on the last): the passes the schedule's order runs, whose "
    "bubble is pipeline.bubble_fraction; empty otherwise.",
    "pipeline.stage_microbatch_s[].stage": "Pipeline stage, counted from 0.",
    "pipeline.stage_microbatch_s[].forward_s": "Its forward of one micro-batch, seconds.",
    "pipeline.stage_microbatch_s[].backward_s": "Its backward of one micro-batch (recomputation included), seconds.",
    "flops": "FLOPs per step (null for a declared size without dimensions).",
    "flops.model_flops": "Model FLOPs per step under the MFU convention.",
    "flops.hardware_flops": (
        "Hardware FLOPs per step: the model FLOPs plus the recomputed FLOPs the convention "
        "counts (under 6n the recomputed matmuls, not the attention cores)."
    ),
    "flops.pack_model_flops": "Packed documents: model FLOPs with each pack's s² attention.",
    "flops.convention": "MFU convention: 6n, 6n+attention or megatron.",
    "time": "Step time and utilisation, with the time model's figures.",
    "time.time_model": "roofline or single.",
    "time.compute_s": "m × the slowest stage's micro-batch (operations and exposed tp, cp, ep).",
    "time.bubble_s": "The pipeline bubble's time.",
    "time.exposed_comm_s": "Exposed communication (dp, pipeline messages).",
    "time.optimizer_s": "The optimizer step.",
    "time.offload_s": "Optimizer and parameter offload, exposed.",
    "time.grad_accumulation_s": "Gradient accumulation inside the backward passes (DeepSpeed's "
    "optimizers); under fsdp2 FSDP's copies around its all-gathers and reduce-scatters on the "
    "compute stream (the Step: line's 'FSDP copies').",
    "time.step_terms": "The step's terms in the order they add up to step_s, as the text report's "
    "Step: line prints them (compute, bubble, exposed comm always; optimizer step, offload and "
    "gradient accumulation where not zero; interface.render.step_terms).",
    "time.step_terms[].term": "The term's name (compute, bubble, exposed comm, optimizer step, "
    "offload, gradient accumulation or, under fsdp2, FSDP copies).",
    "time.step_terms[].s": "The term's time per step, seconds.",
    "time.activation_offload_s": "Activation offload left exposed.",
    "time.step_s": "Seconds per step.",
    "time.mfu": "Model FLOPs utilisation (0–1) under the convention.",
    "time.mfu_pack": "Packed documents: the MFU of a counter taking each pack for one sequence (s²).",
    "time.mfu_with_attention": "MFU counting attention FLOPs (6n+attention) beside a 6n figure.",
    "time.hfu": (
        "Hardware FLOPs utilisation (0–1): the MFU's model FLOPs plus the recomputed FLOPs "
        "its convention counts (under 6n the recomputed matmuls, not the attention cores)."
    ),
    "time.hfu_with_attention": "HFU under 6n+attention (≥ mfu_with_attention).",
    "time.tokens_per_s": "B·s / step_s.",
    "time.roofline": "The roofline model's efficiencies and latencies.",
    "time.roofline.gemm_efficiency": "e_GEMM, the GEMM efficiency for deep GEMMs.",
    "time.roofline.attention_efficiency": "FlashAttention core's share of peak (null without FlashAttention).",
    "time.roofline.hbm_efficiency": "Share of HBM bandwidth memory-bound kernels reach.",
    "time.roofline.attention_kernel": "Attention kernel whose published curves time the core (null: attention_efficiency).",
    "time.roofline.part": "The accelerator the per-operation tables are read for.",
    "time.roofline.nvls_allreduce_speedup": "NVLink SHARP all-reduce bus bandwidth over the ring's (1: none).",
    "time.roofline.busbw_curve": "Published all-reduce bus bandwidth by size, NVLink domain: [bytes, GB/s] (empty: none).",
    "time.roofline.busbw_curve_link_gbps": "NVLink GB/s per GPU of the curve's system (scaled to the link in use).",
    "time.roofline.clock_fraction": "Share of the rated peak the tensor cores sustain under the power limit.",
    "time.roofline.optimizer_hbm_efficiency": "HBM share the optimizer step streams at (STREAM triad; null: hbm_efficiency).",
    "time.roofline.scaleup_efficiency": "Share of NVLink bandwidth collectives reach.",
    "time.roofline.scaleout_efficiency": "Share of the NIC's bandwidth collectives reach.",
    "time.roofline.collective_base_latency_s": "NCCL's base latency per collective.",
    "time.roofline.scaleup_hop_latency_s": "Latency per ring step on NVLink.",
    "time.roofline.scaleout_hop_latency_s": "Latency per ring step over the network.",
    "time.roofline.scaleup_tree_hop_latency_s": "Latency per tree step on NVLink (a tree all-reduce).",
    "time.roofline.kernel_overhead_s": "Launch overhead per kernel.",
    "time.tp_comm_overlap": "Tensor-parallel overlap mechanism the layers run: none, async, full (userbuffers) or "
    "async-tp (torchtitan; none without sequence parallelism, which it needs to fuse anything).",
    "time.tp_comm_overlap_cfg": "Userbuffers configuration read under full: te, te-1, or a Megatron Bridge / NeMo "
    "launcher config name.",
    "time.grad_reduce_overlap": "Once-per-step DP traffic overlapped with compute.",
    "time.p2p_overlap": "Pipeline sends overlapped with compute where the interleaved schedule does.",
    "time.p2p_warmup_flush": "Interleaved warm-up/cool-down sends asynchronous too (--overlap-p2p-communication-warmup-flush).",
    "time.p2p_forward_send_wait": "Each interleaved forward send waited on after posting (Megatron-Core ≥ 0.18).",
    "time.nccl_sm_charge": "SMs of NCCL's channels (NVLS's or the ring's) charged to computation its collectives hide under.",
    "time.nccl_channel_setup": "NCCL's channel set-up allocations counted in the communicator bytes.",
    "time.nccl_nvls": "NCCL's NVLink SHARP on (its buffers counted, the all-reduce's speed-up credited).",
    "time.use_multi_rank_bucket_allreduce": "DeepSpeed ZeRO-1/2 all-reduce each gradient bucket (false: reduce per rank).",
    "time.lp_grads_set_to_none": "DeepSpeed BF16_Optimizer frees the BF16 gradients before each backward (2022-04 to 2025-03).",
    "time.grad_stats_group": "Megatron-Core's gradient-statistics group: intra_dist_opt_instance "
    "(its own communicator) or world (before 8c1e094afe; none more).",
    "time.grad_clip_scaling": "Megatron's clip scales the gradients every_step (today's) or only "
    "above_limit (before 3d87bfc1b7; charged as not running).",
    "time.loss_scaling": "Megatron's FP16 optimizer unscales the gradients every step (--fp16 with a loss scale).",
    "time.kernel_efficiency": "Single model: share of peak the kernels reach.",
    "time.attention_efficiency": "Single model: the FlashAttention core's share of peak.",
    "assumptions": "Every convention and default behind the figures, as sentences.",
    "notes": "What the figures leave out or bound, as sentences.",
    "defaults_used": "The inputs that took a default, with the value.",
    "stages": "With --per-stage (evaluate, search): one row per pipeline stage.",
    "stages[].stage": "The stage, counted from 0.",
    "stages[].stage_layers": "Transformer layers on the stage.",
    "stages[].stage_state_bytes": "Model state on one GPU of the stage.",
    "stages[].stage_activation_bytes": "Layer activations held at the stage's peak.",
    "stages[].stage_other_activation_bytes": "Embedding/output-layer activations, recompute and "
    "context-parallel transients, offload buffers, deepspeed's causal mask being built.",
    "stages[].stage_in_flight": "Micro-batches of activations the schedule holds on the stage.",
    "stages[].stage_total_bytes": "The stage's peak per GPU.",
    # search --per-stage (the JSON reference lists these under its table)
    "per_stage.status": "optimal (proven over per_stage.proof_scope) or feasible (a time limit "
    "stopped it, or a gap is left).",
    "per_stage.proof_scope": "What optimal is proven over, in words: the shapes searched; where "
    "the space holds interleaved shapes (pp > 1, v > 1), those only over splits whose chunks on a "
    "stage are equal, not the unequal chunks of --pipeline-model-parallel-layout (the per-stage "
    "frontier's proof_scope likewise).",
    "per_stage.shapes[].status": "optimal, feasible, infeasible (no split fits), no-gain (none "
    "beats the best so far) or not-searched (interleaved, L layers no multiple of v).",
    "per_stage.shapes[].note": 'Why a not-searched shape was not: "not searched (the search '
    'gives each stage v equal chunks, so a multiple of v layers each: L layers cannot split so)"; '
    "null otherwise.",
}
"""What each key of the evaluate object means (units: bytes, seconds, 0–1 fractions)."""
