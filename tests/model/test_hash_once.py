"""model.hash_once: the classes that key the cost model's caches keep their hash after the first
call, and the value is the dataclass's own (so every dict and set keeps its order)."""

from __future__ import annotations

import dataclasses
import pickle

from trainplan.model.legality import Setting
from trainplan.model.moe_run import MoERun
from trainplan.model.specs import TrainingSpec
from trainplan.scenarios.catalogue import get_model


def _dataclass_hash(obj: object) -> int:
    """What ``@dataclass(frozen=True)`` generates: the hash of the tuple of the fields whose
    ``hash`` is True, or None with ``compare`` True, in order (CPython ``dataclasses._hash_fn``)."""
    return hash(
        tuple(
            getattr(obj, f.name)
            for f in dataclasses.fields(obj)  # type: ignore[arg-type]
            if (f.compare if f.hash is None else f.hash)
        )
    )


def test_the_hash_is_the_dataclass_hash_kept() -> None:
    """DeepSeek-V3 and its recipe in a Setting: each class's hash is the dataclass formula; the
    kept value is the one the first call returned; a replaced copy hashes afresh."""
    model = get_model("deepseek-v3").model
    training = TrainingSpec(seq_len=4096, global_batch_size=15360)
    setting = Setting(model, training, 2048)
    for obj in (model, training, setting, MoERun()):
        assert hash(obj) == _dataclass_hash(obj)
        assert hash(obj) == hash(obj)
        assert "_hash" not in {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    other = dataclasses.replace(setting, num_gpus=1024)
    assert other != setting and hash(other) == _dataclass_hash(other)
    assert {setting: 1}[Setting(model, training, 2048)] == 1


def test_pickling_leaves_the_kept_hash_out() -> None:
    """A pickled Setting carries its fields only: the copy equals it and hashes by the formula
    (another process hashes strings with another seed, so a kept value must not travel)."""
    setting = Setting(
        get_model("llama3-70b").model, TrainingSpec(seq_len=8192, global_batch_size=2048)
    )
    hash(setting)
    state = setting.__getstate__()  # type: ignore[attr-defined]
    assert len(state) == len(dataclasses.fields(setting))
    copy = pickle.loads(pickle.dumps(setting))
    assert copy == setting and hash(copy) == _dataclass_hash(setting)
