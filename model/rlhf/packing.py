"""How a framework packs one rank's rollouts into micro-batches at a token cap (the dynamic
batch: verl ``use_dynamic_bsz`` with ``ppo_max_token_len_per_gpu`` / ``log_prob_max_token_len_per_gpu``,
OpenRLHF ``--train.max_tokens_per_gpu``, NeMo-RL ``train_mb_tokens`` / ``logprob_mb_tokens``), and
so how many tokens the fullest micro-batch holds — what the update's and the log-prob forwards'
memory that grows with a micro-batch's tokens (logits, activations, the forward working set) is
sized at. The step's token count, and so its time, is the same under either rule.

Two mechanisms (:class:`Packing`):

* ``balanced`` — verl: ``rearrange_micro_batches`` (``verl/utils/seqlen_balancing.py``, verl
  b178a3cd5; the same rule at 0d04d640) takes k = ⌈rank's tokens / cap⌉ micro-batches and spreads
  the rollouts over them with Karmarkar–Karp (``get_seqlen_balanced_partitions`` →
  ``karmarkar_karp``, ``equal_size=False``), balancing an estimated work per rollout
  (``calculate_workload``: 24,576·L + L² at b178a3cd5; the token count L at 0d04d640). It asserts
  only ``max_token_len >= max_seq_len``: no micro-batch is held to the cap. Used by the Megatron
  actor (``megatron_actor.forward_backward_batch``) and the FSDP actor (``dp_actor`` via
  ``prepare_dynamic_batch``) for the old log-probs, the reference and the update.
* ``first-fit`` — OpenRLHF: ``get_minimum_num_micro_batch_size`` (first fit at the cap) sets the
  count, then Karmarkar–Karp on the lengths (``openrlhf/utils/seqlen_balancing.py``,
  ``replay_buffer.py``, OpenRLHF 3c3be6234); NeMo-RL: every packer of ``nemo_rl/data/packing/algorithms.py`` (NVIDIA-NeMo/RL
  f4b1bdc3: ``FirstFitPacker._pack_implementation``, first-fit decreasing / shuffle, and
  ``ModifiedFirstFitDecreasingPacker``) places a rollout only in a bin with room, bins of at most
  ``bin_capacity``. A micro-batch holds at most the cap (or one
  rollout longer than it).

The fullest micro-batch (:func:`peak_tokens`), rollouts padded to a multiple of tp:

* every rollout of the mean length L — first-fit: ⌊cap / L⌋ whole rollouts (at least one);
  balanced: Karmarkar–Karp of n equal items into k = ⌈n·L / cap⌉ parts gives parts of ⌊n/k⌋ or
  ⌈n/k⌉ items, and ⌈n/k⌉ ≤ ⌈cap / L⌉ for every n (n/k ≤ cap/L), with equality once a rank holds a
  few dozen rollouts (256 rollouts of 5,120 at cap 16,384: k 80, 4 rollouts, 20,480 tokens) —
  ⌈cap / L⌉ whole rollouts are counted.
* lengths that vary (``max_completion_tokens`` above the mean) — first-fit: the cap, or the
  longest rollout where longer; balanced: the cap plus the longest rollout. Argument: the mean per
  micro-batch, rank tokens / ⌈rank tokens / cap⌉, is at most the cap; Karmarkar–Karp's merge of two
  partial partitions (largest with smallest) leaves a spread no larger than the larger of theirs,
  so the final spread is at most the largest single item: balancing tokens, the fullest part holds
  at most the mean plus the longest rollout. Balancing verl's workload instead (convex in L) is not
  covered by that argument; verl's own ``karmarkar_karp`` on one rank's lengths (uniform, two-length,
  10 % long, 10 % short and exponential spreads; caps 4,096 and 16,384) gave fullest parts of
  1.01–1.16 × the cap, all below the cap plus the longest rollout, which is an upper bound, not
  the typical figure (about the cap + 10 % there).

**OpenRLHF's scoring forwards** (:func:`split_peak_tokens`) do not use the update's packing.
``RemoteExperienceMaker.split_rollout_samples`` (``openrlhf/trainer/ppo_utils/
experience_maker.py``, OpenRLHF 3c3be6234), with ``--train.dynamic_batch_enable``, cuts the
step's rollouts (all of them, not one rank's) into the micro-batches that the actor's old
log-probs, the reference, the critic and the reward model each run one forward over
(``make_experience``; ``RayActorGroup.async_run_method_batch`` hands each rank a run of them):
k = ``get_minimum_num_micro_batch_size`` (first fit at ``--rollout.max_tokens_per_gpu``, which
defaults to the update's cap) rounded *down* to a multiple of the actor's dp
(``effective_actor_num``: its GPUs ÷ ring ÷ tp), at least dp, then Karmarkar–Karp on the lengths
(``get_seqlen_balanced_partitions``, ``equal_size=False``). The rounding down is what breaks the
cap: 16,384 rollouts of 5,120 at the cap 16,384 and dp 64 — first fit 5,462 micro-batches of 3
(15,360 tokens), rounded to 5,440, so 22 of them hold 4 rollouts, 20,480 tokens. Every rollout of
the mean length L: with f = ⌊cap / L⌋ (at least 1), k = ⌈n / f⌉ and m = max(dp, ⌊k / dp⌋·dp),
Karmarkar–Karp of n equal items into m parts gives parts of ⌊n/m⌋ or ⌈n/m⌉, so the fullest holds
⌈n/m⌉·L (OpenRLHF's own functions, run on equal lengths for n up to 16,384, gave these figures
in every case tried). Lengths that vary: first fit makes at least ⌈n·L / max(cap, longest)⌉
micro-batches, so m is at least that rounded as above, and the fullest part holds at most the
mean n·L / m plus the longest rollout (the spread argument above); OpenRLHF's functions on the
spreads above stayed within it (up to 0.91 × the bound). The cap is multiplied by ring × tp
there; the ``deepspeed`` profile runs tp 1 and no ring attention (:func:`split_peak_tokens`).
"""

from __future__ import annotations

from enum import StrEnum

from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework

__all__ = [
    "Packing",
    "DEFAULT_PACKING",
    "SPLIT_SOURCE",
    "packing_of",
    "peak_tokens",
    "split_peak_tokens",
]

SPLIT_SOURCE = (
    "OpenRLHF RemoteExperienceMaker.split_rollout_samples (experience_maker.py, 3c3be6234): the "
    "step's rollouts in get_minimum_num_micro_batch_size (first fit at the cap) micro-batches, "
    "rounded down to a multiple of the actor's dp, balanced by get_seqlen_balanced_partitions; "
    "each scoring role runs one forward per micro-batch"
)
"""The source of the scoring micro-batch under OpenRLHF (:func:`split_peak_tokens`)."""


class Packing(StrEnum):
    """How rollouts are packed into micro-batches at the token cap (module docstring)."""

    BALANCED = "balanced"
    FIRST_FIT = "first-fit"


DEFAULT_PACKING = {
    Framework.MEGATRON: Packing.BALANCED,
    Framework.FSDP2: Packing.BALANCED,
    Framework.DEEPSPEED: Packing.FIRST_FIT,
}
"""Each RLHF framework profile's packing: ``megatron`` and ``fsdp2`` are verl's Megatron and FSDP
workers (balanced), ``deepspeed`` is OpenRLHF's (first-fit)."""


def packing_of(value: Packing | str | None, framework: Framework) -> Packing:
    """``value`` as a :class:`Packing`; None: ``framework``'s (:data:`DEFAULT_PACKING`).

    >>> packing_of(None, Framework.DEEPSPEED), packing_of("balanced", Framework.DEEPSPEED)
    (<Packing.FIRST_FIT: 'first-fit'>, <Packing.BALANCED: 'balanced'>)
    """
    if value is None:
        return DEFAULT_PACKING.get(framework, Packing.BALANCED)
    try:
        return Packing(str(value).strip().lower())
    except ValueError:
        raise InputError(
            f"packing: {value!r} is not one of balanced (verl's rearrange_micro_batches), "
            "first-fit (OpenRLHF, NeMo-RL: micro-batches of at most the token cap)"
        ) from None


def peak_tokens(packing: Packing, cap: int, seq_len: int, longest: int | None, tp: int = 1) -> int:
    """Tokens of the fullest micro-batch at token cap ``cap``: rollouts of mean length ``seq_len``
    and, when lengths vary, the longest ``longest`` tokens (None: all equal), each padded to a
    multiple of ``tp`` (module docstring).

    >>> peak_tokens(Packing.BALANCED, 16384, 5120, None), peak_tokens(Packing.FIRST_FIT, 16384, 5120, None)
    (20480, 15360)
    >>> peak_tokens(Packing.BALANCED, 16384, 5120, 9216), peak_tokens(Packing.FIRST_FIT, 16384, 5120, 9216)
    (25600, 16384)
    """
    pad = -(-seq_len // tp) * tp
    if longest is None or longest == seq_len:
        whole = -(-cap // seq_len) if packing is Packing.BALANCED else max(1, cap // seq_len)
        return whole * pad
    if packing is Packing.BALANCED:
        return -(-(cap + longest) // tp) * tp
    return -(-max(cap, longest) // tp) * tp


def split_peak_tokens(
    rollouts: int, cap: int, seq_len: int, longest: int | None, dp: int, tp: int = 1
) -> int:
    """Tokens of the fullest scoring micro-batch under OpenRLHF's ``split_rollout_samples``
    (module docstring): the step's ``rollouts`` of mean length ``seq_len`` (the longest
    ``longest``; None: all equal), each padded to a multiple of ``tp``, at the cap ``cap`` and
    the actor's data-parallel size ``dp``.

    OpenRLHF multiplies the cap by ``ring_attn_size × ds_tensor_parallel_size``
    (``get_minimum_num_micro_batch_size``) and takes ``effective_actor_num`` = the actor's GPUs ÷
    ring ÷ tp. The ``deepspeed`` profile can express neither for a role: a training or scoring
    tp above 1 is refused (:func:`model.rlhf.roles.check_training_tp`) and a role has no ring
    attention degree (:class:`model.rlhf.roles.RoleOption`: dp, tp, pp). Both factors are 1 here,
    so ``cap`` is the cap as given and ``dp`` the actor's GPUs.

    16,384 rollouts of 5,120 at the cap 16,384, dp 64: first fit ⌈16,384 / 3⌉ = 5,462, rounded
    down to 85 × 64 = 5,440 micro-batches, the fullest ⌈16,384 / 5,440⌉ = 4 rollouts; at dp 1
    no rounding, 3. 64 rollouts at dp 8: ⌈64 / 3⌉ = 22 → 16, 4 rollouts.

    >>> split_peak_tokens(16384, 16384, 5120, None, 64), split_peak_tokens(16384, 16384, 5120, None, 1)
    (20480, 15360)
    >>> split_peak_tokens(64, 16384, 5120, None, 8)
    20480

    Lengths that vary, 16,384 rollouts of mean 5,120 up to 9,216 at dp 64: at least
    ⌈83,886,080 / 16,384⌉ = 5,120 micro-batches (80 × 64, no rounding), the mean 16,384 + the
    longest 9,216.

    >>> split_peak_tokens(16384, 16384, 5120, 9216, 64)
    25600
    """
    pad = -(-seq_len // tp) * tp
    if longest is None or longest == seq_len:
        count = -(-rollouts // max(1, cap // seq_len))
        parts = max(dp, count // dp * dp)
        return -(-rollouts // parts) * pad
    total = rollouts * pad
    count = -(-total // max(cap, longest))
    parts = max(dp, count // dp * dp)
    return -(-total // parts) + -(-longest // tp) * tp
