"""The process groups a framework runs collectives on beyond the layout's tp, dp, cp, ep and pp
groups, each one more NCCL communicator of :func:`model.terms.comm_memory.comm_memory_term`:
Megatron-Core's, DeepSpeed's and torchtitan's gradient-statistics groups
(:func:`grad_stats_rings`), the world group of their barriers (:func:`world_ring`) and the
groups the loss and token count are reduced over (:func:`data_rings`), and Megatron-LM's
model-parallel and MoE groups (:func:`megatron_rings`, :func:`moe_metrics_ring`); and the
rings that the pp and ep groups' own communicators connect (:func:`group_rings`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.xp import maximum, where

__all__ = [
    "grad_stats_rings",
    "world_ring",
    "data_rings",
    "own_group",
    "megatron_rings",
    "expert_dp_stride",
    "placed_rings",
    "moe_metrics_ring",
    "group_rings",
    "expert_tp_ring",
]


def grad_stats_rings(c: Context, f: Fields) -> Any:
    """Rings of the process groups Megatron-Core's optimizer reduces its gradient statistics
    over (the grad norm for ``--clip-grad``, 1.0 by default, and the zero count: ``clip_grads.py``
    ``get_grad_norm_fp32`` / ``count_zeros_fp32`` all-reduce over
    ``optimizer.get_grad_stats_parallel_group()``), groups of their own that no other collective
    uses (``megatron/core/optimizer/__init__.py``, ``_get_megatron_optimizer_based_on_param_groups``):

    * the distributed optimizer (ZeRO-1): the intra-instance group
      (``parallel_state.py`` ``_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP``: the tp-ep-pp groups
      of one optimizer instance, with the default single instance every GPU), one ring where
      the job has more than one GPU; none with ``grad_stats_group`` ``world`` (before
      Megatron-LM 8c1e094afe, and Apex's DistributedFusedAdam: the default group, whose ring
      :func:`world_ring` counts; :attr:`model.timing.CostOptions.grad_stats_group`);
    * without it (ZeRO-0, ``Float16OptimizerWithFloat16Params``): the model-parallel group
      (``_MODEL_PARALLEL_GROUP``, tp·pp ranks: the ring :func:`megatron_rings` counts at
      every stage), and the experts' the expert tp·ep·pp group
      (``get_expert_tensor_model_pipeline_parallel_group``): one ring where it has more than
      one rank (``ChainedOptimizer.get_grad_norm`` reduces over each).

    Under ``deepspeed`` (DeepSpeed edaa72212, Megatron-DeepSpeed 4efb479d), the groups of its own
    beside Megatron-DeepSpeed's tp group: ZeRO's grad norm all-reduces over the model-parallel
    group every step (``stage_1_and_2.py`` ``_model_parallel_all_reduce``; ``stage3.py`` likewise),
    Megatron-DeepSpeed's ``_MODEL_PARALLEL_GROUP`` (a ``new_group`` of its own) or under the
    pipeline engine the grid's ``ds_model_proc_group``: one ring where tp·pp > 1; the pipeline
    engine (pp > 1) broadcasts the loss over the pipe group (``pipe/engine.py``
    ``_aggregate_total_loss``): one more; and with tp > 1 it partitions the activations it sends
    over the slice group (``pipe_partitioned``/``grad_partitioned``, on by default,
    ``PartitionedTensor(..., group=grid.get_slice_parallel_group())``): one more.

    Under ``fsdp2`` none: torchtitan's norm all-reduces run on the pp and ep groups, whose
    communicators the pipeline's sends and the all-to-all already make; :func:`group_rings`
    gives those communicators their ring. The dense norm reduces over the FSDP and tp groups,
    whose rings are counted already.

    Counted as a ring like every collective group here (a one-float all-reduce; NCCL may
    connect its tree instead, not modelled)."""
    if Framework(f.framework) is Framework.DEEPSPEED:
        pipe = where(f.pp > 1, 1, 0)
        return where(f.tp * f.pp > 1, 1, 0) + pipe + pipe * where(f.tp > 1, 1, 0)
    arch = c.model.arch
    moe = arch is not None and arch.moe is not None
    if Framework(f.framework) is not Framework.MEGATRON:
        return 0
    world = f.tp * f.pp * f.shard_degree
    experts = 0
    if moe:
        experts = where(f.expert_tp * f.ep * f.pp > 1, 1, 0)
    own = c.options.grad_stats_group == "intra_dist_opt_instance"
    return where(f.zero_stage >= 1, where((world > 1) & own, 1, 0), experts)


def world_ring(f: Fields) -> Any:
    """Whether the framework runs a collective on the default (world) process group, whose
    communicator is then one more ring: ``torch.distributed.barrier()`` under NCCL all-reduces a
    one-element tensor on the group's device (PyTorch ``ProcessGroupNCCL.cpp``
    ``ProcessGroupNCCL::barrier``: ``allreduce(barrierTensor)``), which creates the group's
    communicator. Megatron-LM calls it on every rank before training (``training.py``
    ``print_datetime``, ``pretrain``; ``initialize.py`` ``_compile_dependencies``; at
    d98e8a64dd); DeepSpeed in ZeRO-3's optimizer set-up (``stage3.py``
    ``_setup_for_real_optimizer``, ``_create_fp16_partitions_with_defragmentation``) and in
    every ``save_checkpoint`` (``engine.py``; at edaa72212); torchtitan after the first step
    (``trainer.py`` ``Trainer.train``: ``dist_utils.set_pg_timeouts`` when ``self.step -
    loaded_step == 1``, which runs ``torch.distributed.barrier(device_ids=...)`` on the default
    group before lowering every group's timeout, ``torchtitan/distributed/utils.py``; at
    b5bcd76c6), so from the second step on. Counted as a ring, as
    the gradient-statistics groups' one-float all-reduce is (:func:`grad_stats_rings`); the
    groups of the layout are separate communicators (``new_group``), so this one is beside
    them. Where the job has one GPU, none."""
    if Framework(f.framework) not in (Framework.MEGATRON, Framework.DEEPSPEED, Framework.FSDP2):
        return False
    return f.tp * f.pp * f.shard_degree > 1


def data_rings(f: Fields) -> tuple[tuple[Any, Any], ...]:
    """``(present, ranks)`` of each group the framework reduces its loss or token count over
    beside the gradient group, each a ring of its own placed as the dp axis:

    * ``fsdp2`` (torchtitan b5bcd76c6): ``parallel_dims.py`` ``build_mesh`` unflattens the world
      mesh into ``("pp", "batch", "cp", "tp")`` apart from the FSDP mesh and flattens
      ``["batch", "cp"]`` into ``loss_mesh``; PyTorch's DeviceMesh (``device_mesh.py``
      ``_init_one_process_group``, ``_create_flatten_mesh``) gives each dimension and each
      flattened mesh a ``new_group`` of its own, so a communicator of its own, unless it spans
      the whole world, where it is the default group (the world ring, :func:`world_ring`).
      ``trainer.py`` ``train_step`` all-reduces ``global_valid_tokens`` over "batch" (dp ranks)
      every step where dp > 1, and ``loss_is_finite`` and, on log steps (step 1 on), the logged
      losses over "loss" (dp·cp ranks) where dp·cp > 1, on every stage.
    * ``deepspeed`` with Ulysses (cp > 1; Megatron-DeepSpeed 4efb479d
      ``megatron/core/parallel_state.py`` ``initialize_model_parallel``): ``_DATA_PARALLEL_GROUP``
      (dp ranks) is a ``new_group`` apart from ZeRO's dp·sp group
      (``_SEQUENCE_DATA_PARALLEL_GROUP``, DeepSpeed ``utils/groups.py``
      ``_get_sequence_data_parallel_group``); ``pretrain_gpt.py`` ``loss_func`` reduces the loss
      over it every micro-batch (``megatron/utils.py``
      ``average_losses_across_data_parallel_group``). Without Ulysses they are one group.

    One-float all-reduces, counted as rings as :func:`grad_stats_rings` are."""
    fw = Framework(f.framework)
    if fw is Framework.FSDP2:
        batch = (f.dp > 1) & own_group(f, f.dp)
        loss = (f.shard_degree > 1) & own_group(f, f.shard_degree)
        return (batch, f.dp), (loss, f.shard_degree)
    if fw is Framework.DEEPSPEED:
        return ((((f.cp > 1) & (f.dp > 1)), f.dp),)
    return ()


def own_group(f: Fields, ranks: Any) -> Any:
    """Whether a group of ``ranks`` ranks is a communicator of its own, apart from the world
    group's (:func:`world_ring`). Under ``fsdp2`` torchtitan builds every group as a DeviceMesh
    dimension (``parallel_dims.py`` ``build_mesh``: unflattens of the world mesh, and the
    flattened "loss" mesh), and PyTorch's DeviceMesh hands a dimension whose ranks are the whole
    world, without a backend override, the default group itself (PyTorch f4b98f1f8d
    ``torch/distributed/device_mesh.py`` ``_init_one_process_group``: ``if sub_layout.numel() ==
    get_world_size() and backend_override == (None, None)`` returns ``default_group``'s name), so
    its collectives run on the default group's one communicator: a world-sized group adds no
    communicator — a ring's connections are the world ring's, and a point-to-point group's
    peers join the world's communicator, whose channels' set-up is counted once. Megatron-LM's
    and DeepSpeed's groups are each a ``new_group`` of their own (own communicators, whatever
    their size): True.

    >>> from types import SimpleNamespace as F
    >>> own_group(F(framework="fsdp2", tp=1, pp=1, shard_degree=8), 8)
    False
    >>> own_group(F(framework="fsdp2", tp=2, pp=1, shard_degree=4), 4)
    True
    >>> own_group(F(framework="megatron", tp=1, pp=1, shard_degree=8), 8)
    True
    """
    if Framework(f.framework) is not Framework.FSDP2:
        return True
    return ranks < f.tp * f.pp * f.shard_degree


def _stride(f: Fields, axis: str, degree: Any) -> Any:
    """Rank stride of ``axis``'s groups: their span over their size (the topology's
    :func:`topology.placement.axis_span`)."""
    return f.link(axis).span // maximum(degree, 1)


def megatron_rings(c: Context, f: Fields) -> tuple[tuple[Any, Any, Any, tuple[str, str]], ...]:
    """``(present, (stride, size), (stride, size), (inner axis, outer axis))`` of each process
    group of its own (``parallel_state.py`` ``initialize_model_parallel``, ``create_group``)
    that Megatron-LM (d98e8a64dd) runs a collective on every step beyond the layout's groups:
    its ranks are ``size`` ranks at ``stride`` of the first pair times those of the second, on
    the outer axis's link (the inner's where the outer has one rank). Each is one ring.

    * the model-parallel group (``_MODEL_PARALLEL_GROUP``, 'tp-gtp_remat-pp': a tp block at
      each pp stride) where tp·pp > 1, at every ZeRO stage: ``training.py`` ``train_step``
      all-reduces ``update_successful`` and the grad norm over ``pg_collection.mp`` after every
      optimizer step (``training/utils/common_utils.py``
      ``logical_and_across_model_parallel_group``, ``reduce_max_stat_across_model_parallel_group``);
      ZeRO-0's optimizer reduces its statistics over it too
      (:func:`grad_stats_rings`), the same communicator;
    * with experts, the expert tp·ep group (``_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP``, 'tp-ep'
      of the expert rank generator, apart from the ep group the all-to-all runs on) where
      etp·ep > 1: ``MoEAlltoAllTokenDispatcher.preprocess`` (``moe/token_dispatcher.py``)
      all-gathers the token counts over ``tp_ep_group`` every MoE layer; the flex dispatcher
      (DeepEP) builds its buffer over the same group, whose ``Buffer.__init__`` all-gathers the
      handles on it (DeepEP ``deep_ep/buffers/legacy.py``);
    * with experts, the tp·cp group (``_TENSOR_AND_CONTEXT_PARALLEL_GROUP``, 'tp-cp') where
      tp·cp > 1: the auxiliary loss the ``megatron`` profile runs with
      (:data:`model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES`) all-reduces the token counts
      over it every MoE layer (``router.py`` ``_apply_aux_loss``, ``_apply_seq_aux_loss`` →
      ``moe_utils.py`` ``get_tokens_per_expert_and_token_count``);
    * with experts whose router bias balances the load (:attr:`model.arch_parts.MoESpec.
      bias_balancing`, ``--moe-router-enable-expert-bias``), the tp·dp·cp group
      (``_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP``, 'tp-gtp_remat-dp-cp') where it has more than
      one rank: ``finalize_model_grads.py`` ``_update_router_expert_bias`` →
      ``moe_utils.py`` ``get_updated_expert_bias`` all-reduces the token counts over it every
      step. (A global auxiliary loss, ``router.py`` ``_apply_global_aux_loss``, would use it
      too; the profile does not run one.)"""
    if Framework(f.framework) is not Framework.MEGATRON:
        return ()
    tp = (_stride(f, "tp", f.tp), f.tp)
    rings = [((f.tp * f.pp > 1), tp, (_stride(f, "pp", f.pp), f.pp), ("tp", "pp"))]
    moe = c.model.arch.moe if c.model.arch is not None else None
    if moe is not None:
        etp = (tp[0], f.expert_tp)
        rings.append((f.expert_tp * f.ep > 1, etp, (_stride(f, "ep", f.ep), f.ep), ("tp", "ep")))
        rings.append((f.tp * f.cp > 1, tp, (_stride(f, "cp", f.cp), f.cp), ("tp", "cp")))
        if moe.bias_balancing:
            dp = (_stride(f, "dp", f.shard_degree), f.shard_degree)
            rings.append((f.tp * f.shard_degree > 1, tp, dp, ("tp", "dp")))
    return tuple(rings)


def expert_dp_stride(f: Fields) -> Any:
    """Rank stride of the expert data-parallel group (``expert_shard_degree`` ranks), as the
    topology places it (:func:`topology.placement.axis_links`' ``edp`` link: the ranks of the
    tp·cp·dp block that share an expert tp rank and an ep rank, Megatron-Core's expert rank
    generator's etp-ep-edp-pp order)."""
    return _stride(f, "edp", f.expert_shard_degree)


def moe_metrics_ring(c: Context, f: Fields) -> Any:
    """Whether Megatron-LM all-reduces over the pp group every step, a ring on a group that
    otherwise carries point-to-point sends: with experts and pp > 1, ``training.py``
    ``training_log`` → ``moe_logging.py`` ``MoEMetricsTracker.report`` → ``_sync_metrics``
    all-reduces each tracked load-balancing loss over ``pg_collection.pp`` (the auxiliary loss
    the ``megatron`` profile runs with, :func:`megatron_rings`)."""
    arch = c.model.arch
    if Framework(f.framework) is not Framework.MEGATRON or arch is None or arch.moe is None:
        return False
    return f.pp > 1


def group_rings(c: Context, f: Fields) -> tuple[Any, Any]:
    """Whether the pp group's and the ep group's communicators connect a ring beside their
    point-to-point peers: an all-reduce on a group whose sends or all-to-all make its
    communicator already. One process group is one NCCL communicator per device, whatever runs
    on it (PyTorch ``ProcessGroupNCCL`` ``getKeyFromDevice``), so the ring and its channels'
    set-up belong to that communicator, placed as the group lies.

    * pp: Megatron-LM's MoE metrics (:func:`moe_metrics_ring`); torchtitan (b5bcd76c6,
      ``torchtitan/distributed/utils.py`` ``clip_grad_norm_``, ``_clip_grad_norm_with_ep``)
      all-reduces the grad norm over ``pp_mesh.get_group()`` where pp > 1, the group its
      ``PipelineStage`` sends on (``pipeline_parallel.py``: ``group=pp_mesh.get_group("pp")``).
    * ep: under ``fsdp2`` on a MoE model with ep > 1, ``ep_grads_total_norm.full_tensor()``
      all-reduces the experts' norm over the "ep" mesh dimension, the group the token
      dispatcher's all-to-all runs on (``models/common/token_dispatcher.py``:
      ``all_to_all_single(..., self.ep_mesh)``)."""
    arch = c.model.arch
    fsdp2 = Framework(f.framework) is Framework.FSDP2
    moe = arch is not None and arch.moe is not None
    pp = (f.pp > 1) if fsdp2 else moe_metrics_ring(c, f)
    return pp, ((f.ep > 1) if fsdp2 and moe else False)


def expert_tp_ring(f: Fields) -> Any:
    """Whether the routed experts' tensor-parallel group is a communicator of its own: where
    ``expert_tp`` > 1, except under ``fsdp2``: torchtitan (b5bcd76c6) has no expert
    tensor-parallel degree (``config/configs.py`` ``ParallelismConfig``: no such field); at
    ep = 1 the experts are split over the dense mesh's "tp" dimension, the tp group's
    communicator, and at ep > 1 its sparse mesh ``("pp", "dp_replicate", "efsdp", "ep")``
    (``parallel_dims.py`` ``build_mesh``) has no tp dimension."""
    return (f.expert_tp > 1) & (Framework(f.framework) is not Framework.FSDP2)


def placed_rings(c: Context, f: Fields) -> tuple[tuple[Any, Any, Any, tuple[str, str]], ...]:
    """:func:`megatron_rings` and, with experts under any framework, the expert data-parallel
    group (``expert_shard_degree`` ranks at :func:`expert_dp_stride`, on its own ``edp`` link):
    as Megatron-Core's expert rank generator, DeepSpeed's ``_create_expert_and_data_parallel``
    (``utils/groups.py`` at edaa72212: ``range(i, pp_stride, ep)``) and torchtitan's sparse
    mesh (``efsdp`` outside ``ep``) lay it (:func:`topology.placement.axis_links`), not the
    dense dp group's placement. Under ``fsdp2`` only where ep > 1: at ep = 1 torchtitan shards
    the experts over the dense FSDP mesh (``distributed/fsdp.py``: "When EP = 1: all params use
    the same FSDP mesh") and gives the "efsdp" dimension the fake backend (``parallel_dims.py``
    ``_mesh_exist``)."""
    arch = c.model.arch
    if arch is None or arch.moe is None:
        return megatron_rings(c, f)
    own = (f.ep > 1) | (Framework(f.framework) is not Framework.FSDP2)
    edp = ((f.expert_shard_degree > 1) & own, (expert_dp_stride(f), f.expert_shard_degree), (0, 1))
    return ((*edp, ("edp", "edp")), *megatron_rings(c, f))
