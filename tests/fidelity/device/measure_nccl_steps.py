"""Where a one-rank NCCL process group's device memory goes, step by step (free memory from
``torch.cuda.mem_get_info`` less the caching allocator's reserved bytes after each step).

    python -m tests.fidelity.device.measure_nccl_steps --out "$OUT/nccl_steps.json"
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist


def _outside() -> int:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    steps: list[tuple[str, int]] = []
    torch.zeros(1, device="cuda")
    steps.append(("cuda context", _outside()))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    steps.append(("init_process_group (device_id bound)", _outside()))
    t = torch.ones(1024, device="cuda")
    for i in range(3):
        g = dist.new_group([0])
        steps.append((f"group {i}: new_group", _outside()))
        dist.all_reduce(t, group=g)
        steps.append((f"group {i}: first all_reduce", _outside()))
        dist.all_reduce(t, group=g)
        steps.append((f"group {i}: second all_reduce", _outside()))
        dist.all_gather_into_tensor(torch.empty(1024, device="cuda"), t, group=g)
        steps.append((f"group {i}: all_gather", _outside()))
    dist.all_reduce(t)
    steps.append(("default group: first all_reduce", _outside()))
    deltas = [(steps[i][0], steps[i][1] - (steps[i - 1][1] if i else 0)) for i in range(len(steps))]
    out = {
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "torch": torch.__version__,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_NCCL"))},
        "outside_allocator_bytes_after": steps,
        "delta_bytes": deltas,
    }
    print(json.dumps(out, indent=1))
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
