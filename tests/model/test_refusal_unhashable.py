"""``model.legality.refusal`` is cached (``functools.lru_cache``): a caller passing a list or a
numpy array raised ``TypeError: unhashable type`` from the cache instead of the refusal. Values
are made hashable at its boundary (``model.hash_once.hashable``), and any still unhashable is
answered by the uncached rules."""

from __future__ import annotations

import numpy as np

from trainplan.model.legality import Setting, first_broken, refusal
from trainplan.model.specs import TrainingSpec
from trainplan.scenarios.catalogue import get_model

SETTING = Setting(get_model("llama3-8b").model, TrainingSpec(seq_len=4096, global_batch_size=1024))
SPLIT = {"pp": 4, "virtual_stages": 1, "uneven_stages": True, "framework": "megatron"}
WRONG = "stage_layers: 7+8+8+7 = 30 layers, not num_layers = 32"
"""Llama 3 8B has 32 layers (its config.json's num_hidden_layers): 7+8+8+7 sums to 30."""


class _UnhashableInt(int):
    """An int that refuses to be hashed, as an array-like value of a caller's could."""

    __hash__ = None  # type: ignore[assignment]


def test_a_list_or_an_array_gets_the_refusal_not_a_type_error():
    assert refusal(SETTING, **SPLIT, stage_layers=(7, 8, 8, 7)) == WRONG
    assert refusal(SETTING, **SPLIT, stage_layers=[7, 8, 8, 7]) == WRONG
    assert refusal(SETTING, **SPLIT, stage_layers=np.array([7, 8, 8, 7])) == WRONG
    assert refusal(SETTING, **SPLIT, stage_layers=[8, 8, 8, 8]) == ""
    # a 0-d array is its scalar: DeepSpeed's pipeline engine takes ZeRO-0/1 only
    deepspeed = refusal(SETTING, framework="deepspeed", zero_stage=np.array(2), pp=np.array(4))
    assert deepspeed == refusal(SETTING, framework="deepspeed", zero_stage=2, pp=4)
    assert deepspeed.startswith("zero_stage: 2 with `framework` deepspeed needs pp = 1")


def test_a_value_that_stays_unhashable_is_answered_by_the_uncached_rules():
    values = {"framework": "deepspeed", "zero_stage": 2, "pp": _UnhashableInt(4)}
    assert refusal(SETTING, **values) == first_broken(SETTING, values, cached=False)
    assert refusal(SETTING, **values).startswith("zero_stage: 2 with `framework` deepspeed")
