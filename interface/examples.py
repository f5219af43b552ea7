"""The 20 worked examples, runnable by name.

Data: ``scenarios/examples.toml`` (each example with its source). Each example opens
one tab with its parameters; parameters given by the caller override the example's.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from trainplan import scenarios
from trainplan.model.errors import ScenarioError
from trainplan.model.units import close_names, shown_text
from trainplan.scenarios.catalogue import known_spelling

__all__ = [
    "examples",
    "get_example",
    "example_name",
    "example_params",
    "replaced",
    "run_example",
    "own_refusal",
    "EXAMPLE_FRAMEWORK",
]

EXAMPLE_FRAMEWORK = "textbook"
"""The profile the planner examples run under (docs/concepts/conventions.md "Two kinds of figures"): the
textbook steady-state accounting their figures are stated in, so they come out exactly;
``--framework`` overrides."""


@cache
def examples() -> dict[str, dict[str, Any]]:
    """Every example by name, in file order."""
    return {e["name"]: e for e in scenarios.data("examples")["example"]}


LIST = "trainplan example --list"
"""The command that lists the examples by name, with what each shows."""


def get_example(name: str, parameter: str = "example") -> dict[str, Any]:
    """One example's table, ``name`` read as :func:`example_name` reads it (any case or
    separator). ``parameter``: how the caller's reader gave the name (the command line's
    ``NAME`` argument; ``example``, the page's link key), the refusal's head.

    Raises
    ------
    ScenarioError
        For an unknown name (:func:`example_name`).
    """
    return examples()[example_name(name, parameter)]


def example_name(name: str, parameter: str = "example") -> str:
    """The example's name that ``name`` is, typed in any case or with other separators
    (``FSDP-70B-64`` → ``fsdp-70b-64``), read by the rule a model's name is read by
    (:func:`scenarios.catalogue.known_spelling`). ``parameter``: the refusal's head, as for
    :func:`get_example`.

    Raises
    ------
    ScenarioError
        For an unknown name: the parameter, the name, up to three close names
        (:func:`model.units.close_names`) and the command that lists them all.

    Examples
    --------
    >>> example_name("FSDP-70B-64"), example_name("one_gpu_70B")
    ('fsdp-70b-64', 'one-gpu-70b')
    >>> for name in ("llama3-405", "nope"):
    ...     try:
    ...         example_name(name, "NAME")
    ...     except ScenarioError as err:
    ...         print(err)
    NAME: 'llama3-405' is not an example; did you mean llama3-405b, llama3-405b-128k, palm-540b? \
(trainplan example --list lists them all)
    NAME: 'nope' is not an example; trainplan example --list lists them
    """
    table = examples()
    known = known_spelling(name, table)
    if known in table:
        return known
    close = close_names(name, list(table))
    hint = f"did you mean {', '.join(close)}? ({LIST} lists them all)" if close else None
    hint = hint or f"{LIST} lists them"
    raise ScenarioError(f"{parameter}: {shown_text(name)} is not an example; {hint}")


def example_params(
    name: str, overrides: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any]]:
    """(tab, flat parameters) of an example with ``overrides`` applied (None values ignored). A
    planner example given a GPU count (``num_gpus``) without ``dp`` drops its own dp, so dp is
    the count ÷ (tp·pp·cp) as evaluate derives it; the example's own values that the given ones
    replace are dropped (:func:`_giving_way`: a model's size replacing the example's).

    >>> _, params = example_params("one-gpu-70b", {"num_gpus": 8})
    >>> params["num_gpus"], "dp" in params, example_params("one-gpu-70b")[1]["dp"]
    (8, False, 1)
    >>> _, params = example_params("ppo-70b", {"model": "qwen2.5-7b"})
    >>> "policy_params" in params, "reward_params" in params, params["algorithm"]
    (False, False, 'ppo')
    """
    tab, params, _ = _merged(name, overrides)
    return tab, params


def replaced(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The example's own values that ``overrides`` replace without giving them (by parameter
    name, as the example's table writes them): what :func:`example_params` drops so the tab does
    not refuse them beside the user's — named in the headline and the JSON's ``replaced`` so the
    figures' change is never silent.

    >>> replaced("ppo-70b", {"model": "qwen2.5-7b"})
    {'policy_params': 70000000000.0, 'reward_params': 70000000000.0}
    >>> replaced("one-gpu-70b", {"num_gpus": 8}), replaced("one-gpu-70b", {"dp": 2})
    ({'dp': 1}, {})
    """
    return _merged(name, overrides)[2]


def _merged(
    name: str, overrides: dict[str, Any] | None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(tab, flat parameters, the example's own values dropped for the given ones) of
    :func:`example_params`."""
    name = example_name(name)
    ex = examples()[name]
    tab = ex["tab"]
    if tab == "planner":
        # the figures as stated: the textbook steady-state accounting, by name, with the
        # training options a published run states (its `recipe`, which may name its framework)
        params: dict[str, Any] = {"framework": EXAMPLE_FRAMEWORK}
        params.update({k: ex[k] for k in ("params", "model", "gpu") if k in ex})
        params.update(ex.get("recipe", {}))
        layout = dict(ex.get("layout", {}))
        for key in ("seq_len", "global_batch_size"):
            if key in layout:
                params[key] = layout.pop(key)
        params.update(layout)
    else:
        params = dict(ex[tab])
    given = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
    dropped: dict[str, Any] = {}
    if tab == "planner" and "num_gpus" in given and "dp" not in given and "dp" in params:
        # a GPU count without dp sets dp as evaluate does (interface.inputs._dp_from_gpus:
        # num_gpus ÷ tp·pp·cp), not against the example's own dp
        dropped["dp"] = params.pop("dp")
    for key in _giving_way(tab, params, given, name):
        if key in params:
            dropped[key] = params.pop(key)
    params.update(given)
    return tab, params, dropped


def _giving_way(
    tab: str, own: dict[str, Any], given: dict[str, Any], name: str = "NAME"
) -> list[str]:
    """The example's own parameters (``own``) that the user's (``given``) replace, which the tab
    would otherwise refuse beside them — the example's values are defaults, and only a value the
    user gave is refused as not applying:

    * a ``model``: a planner example's ``params``; an RLHF example's textbook-only sizes
      (:data:`interface.rlhf.report.SEED_ONLY`: ``policy_params``, ``reward_params``, …), which
      the faithful accounting takes from the model;
    * a ``global_batch_tokens``: the example's ``global_batch_size`` (the batch in sequences);
    * on the RLHF tab, another ``algorithm`` or ``reward``: what that step has no use for
      (:func:`model.rlhf.shares.not_applicable`: a rule-based reward's or DPO's
      ``reward_params``, DPO's ``reward`` and rollout MFU).

    >>> _giving_way("rlhf", {"algorithm": "grpo", "reward_params": 70e9}, {"reward": "rule"})
    ['reward_params']

    Raises
    ------
    InputError
        A ``model`` on an RLHF example whose algorithm places no roles (DPO's, textbook only:
        :func:`model.rlhf.spec.placed_algorithm`), naming how example ``name`` takes the
        policy's size instead.
    """
    out = []
    if "model" in given and tab == "planner":
        out.append("params")
    if "global_batch_tokens" in given and "global_batch_size" not in given:
        out.append("global_batch_size")  # both given: refused (batch_inputs)
    if tab != "rlhf":
        return out
    from trainplan.interface.rlhf.report import SEED_ONLY
    from trainplan.model.errors import InputError
    from trainplan.model.rlhf.shares import not_applicable

    merged = {**own, **given}
    if "model" in given:
        out += SEED_ONLY
        # the example's algorithm is what it shows: it does not give way to the model
        if "algorithm" not in given:
            from trainplan.model.rlhf.spec import placed_algorithm

            instead = (
                "its textbook accounting takes the policy's size: trainplan example "
                f"{name} --set policy_params=SIZE (e.g. 70B)"
            )
            try:
                placed_algorithm(merged["algorithm"], instead)
            except InputError as err:
                raise InputError(
                    f"model: {shown_text(given['model'])} does not apply to example {name}: {err}"
                ) from None
    try:  # with every option's own rule on, only the algorithm's and the reward's remain
        unused = not_applicable(
            merged["algorithm"], merged.get("reward"), rollout_engine=True, logits_buffer=True
        )
    except InputError:  # an algorithm or reward not offered: the tab refuses it as given
        return out
    return [*out, *(k for k in unused if k not in given and k in own)]


def run_example(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run an example; the JSON object of its tab's command, with ``example``, ``says`` (what it
    shows as published) and, where ``overrides`` change it, ``changed`` (the values given, which
    the figures are for) and ``replaced`` (the example's own values they replaced,
    :func:`replaced`) added."""
    name = example_name(name)
    tab, params, dropped = _merged(name, overrides)
    if tab == "planner":
        from trainplan.interface.commands import evaluate_json

        out = evaluate_json(params)
    else:
        from trainplan.interface.tab_requests import TAB_REQUESTS, tab_request
        from trainplan.interface.tabs import TAB_REPORTS

        out = TAB_REPORTS[tab](tab_request(TAB_REQUESTS[tab], params, f"example {name}: "))
    ex = get_example(name)
    head = {"example": name, "tab": tab, "says": ex["says"], "source": ex.get("source", "")}
    if ex.get("note") and not overrides:
        head["note"] = ex["note"]
    changed = {k: v for k, v in (overrides or {}).items() if v is not None and v != ()}
    if changed:  # ``says`` is the example as published; the figures are for these values
        head["changed"] = changed
    if dropped:  # the example's own values these replaced (:func:`replaced`)
        head["replaced"] = dropped
    if tab == "planner":
        head["framework"] = params["framework"]
    return {**head, **out}


_HEAD = re.compile(r"^([a-z][a-z0-9_]*): ")
"""A one-line refusal's head parameter (``zero_stage: 1 is not a stage of …``)."""


def own_refusal(name: str, overrides: dict[str, Any] | None, message: str) -> str:
    """A refusal of example ``name`` run with ``overrides`` (by parameter name) as its user reads
    it: where its head parameter is one the example gives and ``overrides`` does not (the
    example's ``zero_stage`` 1 under a given ``framework`` fsdp2), the line says the value is the
    example's own and how to replace it, instead of naming a flag the user never typed;
    any other ``message`` unchanged.

    >>> print(own_refusal("deepseek-v3-ep64", {"framework": "fsdp2"},
    ...     "zero_stage: 1 is not a stage of `framework` fsdp2"))
    example deepseek-v3-ep64: its own zero_stage 1 is not a stage of `framework` fsdp2; give `zero_stage` to replace it
    >>> own_refusal("deepseek-v3-ep64", {"zero_stage": 2}, "zero_stage: 2 is bad")
    'zero_stage: 2 is bad'
    """
    head = _HEAD.match(message)
    if head is None:
        return message
    key = head.group(1)
    given = {k for k, v in (overrides or {}).items() if v is not None and v != ()}
    try:
        own = example_params(name)[1]
    except ScenarioError:
        return message
    if key not in own or key in given:
        return message
    rest = message[head.end() :]
    return f"example {name}: its own {key} {rest}; give `{key}` to replace it"
