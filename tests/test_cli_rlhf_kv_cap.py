"""``rlhf-plan``'s explanation when the rollout engine fits no GPU and the model's KV heads
stopped the engine's tp (optimizer/rlhf/explain.py ``tp_cap``'s KV-heads branch), each call its
own process (:mod:`tests.cli_runs`), text and ``--json``.

The model: a Llama-shaped config.json, 96 layers, h 12,288, 96 heads of 128, 12 KV heads,
SwiGLU f 49,152, V 128,256 untied. Per layer 2·12,288² (q, o) + 2·12,288·1,536 (k, v) +
3·12,288·49,152 + 2·12,288 (norms) = 2,151,702,528; 96 layers 206,563,442,688, the embedding and
output layer 2 × 1,576,009,728 and the final norm 12,288: 209,715,474,432 parameters. On 16
H100s (NVLink domain 8) the engine may take tp 1, 2 or 4, but not 8: vLLM needs tp and the KV heads
to divide one another (model/rollout.py ``kv_heads_per_gpu``), and 8 does not divide 12. At tp 4
each GPU holds 2 B × 209,715,474,432 / 4 = 104,857,737,216 B plus the norms whole on every rank
((2 × 96 + 1) × 12,288 = 2,371,584 elements, 3/4 of them × 2 B = 3,557,376 B more):
104,861,294,592 B = 104.86 GB, above the 83.21 GB usable."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runs import run_many

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 12288,
    "intermediate_size": 49152, "num_attention_heads": 96, "num_key_value_heads": 12,
    "num_hidden_layers": 96, "vocab_size": 128256, "tie_word_embeddings": False,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}  # fmt: skip

ROLLOUT = (
    "rollout: no pool size and parallelism fits a GPU's 83.21 GB on its own (an engine replica "
    "is searched at tp up to 4, the model's KV heads (rollout tp: 8 does not divide the 12 KV "
    "heads), pp 1 and no expert parallelism; at tp 4 the policy's BF16 weights alone are "
    "104.86 GB a GPU)"
)


def test_kv_heads_cap_the_engine_tp(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    base = ["rlhf-plan", "--algorithm", "grpo", "--model", str(tmp_path / "config.json")]
    done = run_many({"text": [*base, "--gpus", "16"], "json": [*base, "--gpus", "16", "--json"]})
    text, js = done["text"], done["json"]
    assert (text.returncode, text.stdout) == (1, "")
    assert text.stderr.splitlines()[:2] == ["No placement fits:", f"  - {ROLLOUT}"]
    assert js.returncode == 1, js.stderr
    answer = json.loads(js.stdout)
    assert answer["status"] == "infeasible"
    assert answer["explanation"][0] == ROLLOUT
