"""DeepSpeed ZeRO-3's fetch coordinator walked over one micro-batch's module trace: the
all-gather launches it makes and the elements it gathers.

DeepSpeed 38327e07 ``deepspeed/runtime/zero/partitioned_param_coordinator.py``, read line by
line (:func:`walk` repeats it over ints):

* ``fetch_sub_module`` (:285–418) runs before every hooked module's forward and backward,
  parameter-less containers included (``parameter_offload.py`` ``_register_deepspeed_module``
  hooks every module; ``pre_sub_module_forward_function`` / ``pre_sub_module_backward_function``).
  (1) The module's own parameters still ``NOT_AVAILABLE`` go out in one ``__all_gather_params``
  (:300–315). (2) The module's own trace entries not yet popped (``__most_recent_step_id_param_
  fetched_for`` below the step) are popped off ``__param_queue`` (:355–362). (3) The prefetch
  (:380–413): ``max_params_to_prefetch = min(max_live − n_available, prefetch_bucket_sz)``; it
  pops entries while ``numel_prefetching`` is below that, each popped parameter's
  ``most_recent`` raised to its entry's step, those ``NOT_AVAILABLE`` (once each) added with
  their ``ds_numel``; one more ``__all_gather_params`` where any was added. So a prefetch takes
  whole parameters until it reaches ``min(room, bucket)``, and takes none where ``n_available``
  is at ``max_live`` or above.
* ``__all_gather_params_`` (:473–504) raises ``n_available`` by the gathered ``ds_numel`` at
  launch and makes one ``all_gather_coalesced`` of them (one more only for hpZ secondary
  tensors, not set by default); ``partition_parameters.py`` ``all_gather_coalesced`` (:1200–1322)
  launches one ``all_gather_into_tensor`` for a single parameter (:1246) and one per dtype for
  several (:1314–1322, ``_all_gather_dtype``): one NCCL launch per call here (one dtype).
* ``release_sub_module`` (:422–440) after the module's forward and after its backward
  (``post_sub_module_backward_function``, which runs only where an input requires grad,
  ``parameter_offload.py`` ``_post_backward_module_hook`` :401–442) drops the module from each
  parameter's ``ds_active_sub_modules`` and frees the parameters ``__params_to_release`` names
  that are ``AVAILABLE`` and held by no other active module (``__release_param`` :515–520,
  ``n_available`` down by ``ds_numel``).
* ``__params_to_release(module, step)`` (:522–554): the module's parameters that do not persist,
  less those whose ``most_recent`` lies beyond the step (a later use the prefetcher popped while
  the parameter was gathered), less those of the modules from the step on, scanned until
  ``max_reuse_distance`` elements have passed (each module's ``ds_numel`` sums, persistent ones
  too; the module that crosses the distance still counted). It is ``functools.lru_cache``-d on
  (module, step): the set computed at a step's first release is used at that step in every
  later micro-batch (``cache``).
* ``reset_step`` (:228–264), at the root module's forward (``_start_of_forward_hook``), refills
  the queue and clears ``most_recent``; ``n_available`` and what is gathered carry over to the
  next micro-batch; the optimizer step's ``release_and_reset_all`` (:444–457, ``stage3.py``
  ``step``) frees everything and sets ``n_available`` to 0.

Pure functions over ints; the trace is :class:`Trace` (built by
:func:`model.deepspeed_fetches.step_fetches` from Megatron-DeepSpeed's modules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Trace", "State", "walk", "walk_held"]

NEVER = -(10**10)
"""``__most_recent_step_id_param_fetched_for``'s default, ``int(-1e10)`` (:102)."""


@dataclass(frozen=True)
class Trace:
    """One micro-batch's hooked-module events, forward then backward.

    ``sizes[p]``: parameter ``p``'s ``ds_numel``, elements on one GPU; ``groups[p]``: 0 the dense
    parameters' dp group, 1 the routed experts'; ``events``: ``(fetch, module, parameters)`` in
    order, ``fetch`` True for ``fetch_sub_module`` (a trace step), False for
    ``release_sub_module`` (only where the module has parameters); ``unheld``: per event, the
    transformer layers (under recomputation the checkpointed chunks) whose saved activations
    are not live then (those not yet run in the forward, those whose backward has run), empty
    where not recorded."""

    sizes: tuple[int, ...]
    groups: tuple[int, ...]
    events: tuple[tuple[bool, int, tuple[int, ...]], ...]
    unheld: tuple[int, ...] = ()


@dataclass(frozen=True)
class State:
    """What one micro-batch leaves to the next: the parameters gathered, each parameter's
    active modules (``ds_active_sub_modules``) and ``n_available`` (elements)."""

    gathered: frozenset[int] = frozenset()
    active: tuple[tuple[int, frozenset[int]], ...] = ()
    available: int = 0


def walk(
    trace: Trace,
    state: State,
    cache: dict[tuple[int, int], frozenset[int]] | None,
    bucket: int,
    live: int,
    reuse: int,
    persist: int,
) -> tuple[tuple[int, int], tuple[int, int], State]:
    """((dense, experts') all-gather launches, (dense, experts') elements gathered, the state
    left) of one micro-batch over ``trace`` from ``state``, the trace complete (the steady
    state), as the module docstring reads the coordinator. ``bucket``, ``live``, ``reuse``,
    ``persist``: ``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters``,
    ``stage3_max_reuse_distance``, ``stage3_param_persistence_threshold``, elements.
    ``cache``: the release sets by (module, step), filled where empty (None: none kept).

    Two weights of 30 and 30 elements, a bucket of 40 and room for 100: the first module's
    fetch gathers its own weight (1 call) and prefetches the second (1 call); both freed.

    >>> t = Trace((30, 30), (0, 0), ((True, 0, (0,)), (False, 0, (0,)),
    ...     (True, 1, (1,)), (False, 1, (1,))))
    >>> walk(t, State(), None, 40, 100, 0, 0)[:2]
    ((2, 0), (60, 0))
    """
    run, left = _walked(trace, state, cache, (bucket, live, reuse, persist))
    return (run.calls[0], run.calls[1]), (run.elements[0], run.elements[1]), left


def walk_held(
    trace: Trace, state: State, cache: dict[tuple[int, int], frozenset[int]] | None, limits: Any
) -> tuple[tuple[int, ...], State]:
    """(``n_available`` after each event of ``trace``, the state left): the elements on one GPU
    held gathered, whole, at each moment of :func:`walk` (``limits``: its ``(bucket, live,
    reuse, persist)``, elements). The gathered buffer
    is allocated when the all-gather is launched (DeepSpeed 38327e07 ``partition_parameters.py``
    ``all_gather_coalesced`` :1254 and :1331, ``torch.empty`` of the whole buffer before the
    collective) and freed at ``__release_param``, so ``n_available`` (:484, :515–520), in-flight
    prefetches included, is what the gathered parameters occupy; a fetch only raises it and a
    release only lowers it, so the value after each event is the moment's most.

    The doctest's walk: 30 gathered and 30 prefetched, then each freed.

    >>> t = Trace((30, 30), (0, 0), ((True, 0, (0,)), (False, 0, (0,)),
    ...     (True, 1, (1,)), (False, 1, (1,))))
    >>> walk_held(t, State(), None, (40, 100, 0, 0))[0]
    (60, 30, 30, 0)
    """
    run, left = _walked(trace, state, cache, tuple(limits))
    return tuple(run.held), left


def _walked(
    trace: Trace,
    state: State,
    cache: dict[tuple[int, int], frozenset[int]] | None,
    limits: tuple[int, int, int, int],
) -> tuple[_Run, State]:
    """The walk of :func:`walk` and :func:`walk_held`: the finished run and the state left."""
    run = _Run(trace, state, cache, limits)
    for fetch, module, params in trace.events:
        if fetch:
            run.fetch(module, params)
        else:
            run.free(module, params)
        run.held.append(run.available)
    left = State(
        frozenset(run.gathered),
        tuple(sorted((p, frozenset(m)) for p, m in run.active.items() if m)),
        run.available,
    )
    return run, left


class _Run:
    """One micro-batch's walk in progress (private to :func:`walk`): the coordinator's
    bookkeeping as ints."""

    def __init__(
        self,
        trace: Trace,
        state: State,
        cache: dict[tuple[int, int], frozenset[int]] | None,
        limits: tuple[int, int, int, int],
    ) -> None:
        self.sizes, self.groups, self.cache = trace.sizes, trace.groups, cache
        self.bucket, self.live, self.reuse, self.persist = limits
        fetches = [params for fetch, _, params in trace.events if fetch]
        self.queue = [(p, s) for s, params in enumerate(fetches) for p in sorted(params)]
        self.ends = [0]  # elements of the modules before each step (``__submodule_order``)
        self.uses: dict[int, list[int]] = {}  # each parameter's steps
        for s, params in enumerate(fetches):
            self.ends.append(self.ends[-1] + sum(self.sizes[p] for p in params))
            for p in params:
                self.uses.setdefault(p, []).append(s)
        self.gathered, self.available = set(state.gathered), state.available
        self.active = {p: set(mods) for p, mods in state.active}
        self.recent: dict[int, int] = {}  # ``__most_recent_step_id_param_fetched_for``
        self.calls, self.elements = [0, 0], [0, 0]
        self.head = self.step = 0
        self.held: list[int] = []  # ``n_available`` after each event

    def gather(self, params: list[int]) -> None:
        """``__all_gather_params``: one launch for each group among ``params``."""
        for g in sorted({self.groups[p] for p in params}):
            self.calls[g] += 1
        for p in params:
            self.gathered.add(p)
            self.elements[self.groups[p]] += self.sizes[p]
            self.available += self.sizes[p]

    def fetch(self, module: int, params: tuple[int, ...]) -> None:
        """``fetch_sub_module``: own gather, own entries popped, the prefetch (:285–418)."""
        own = [p for p in params if p not in self.gathered and self.sizes[p] > self.persist]
        if own:
            self.gather(own)
        for p in params:
            self.active.setdefault(p, set()).add(module)
        for _ in range(sum(1 for p in params if self.recent.get(p, NEVER) < self.step)):
            p, at = self.queue[self.head]
            self.head, self.recent[p] = self.head + 1, at
        if self.bucket > 0:
            room, numel, chosen = min(self.live - self.available, self.bucket), 0, []
            while self.head < len(self.queue) and numel < room:
                p, at = self.queue[self.head]
                self.head += 1
                if p not in self.gathered and self.sizes[p] > self.persist and p not in chosen:
                    chosen.append(p)
                    numel += self.sizes[p]
                self.recent[p] = max(self.recent.get(p, NEVER), at)
            if chosen:
                self.gather(chosen)
        self.step += 1

    def free(self, module: int, params: tuple[int, ...]) -> None:
        """``release_sub_module`` with ``__params_to_release``'s set, cached (:422–554)."""
        key = (module, self.step)
        freed = self.cache.get(key) if self.cache is not None else None
        if freed is None:
            freed = frozenset(p for p in params if self.frees(p))
            if self.cache is not None:
                self.cache[key] = freed
        for p in params:
            self.active.setdefault(p, set()).discard(module)
            if p in freed and p in self.gathered and not self.active[p]:
                self.gathered.discard(p)
                self.available -= self.sizes[p]

    def frees(self, p: int) -> bool:
        """Whether ``__params_to_release`` names ``p`` at this step: not persistent, no later use
        popped while gathered, no use within ``reuse`` elements from this step on."""
        if self.sizes[p] <= self.persist or self.recent.get(p, NEVER) > self.step:
            return False
        later = [k for k in self.uses[p] if k >= self.step]
        return not later or self.ends[later[0]] - self.ends[self.step] >= self.reuse
