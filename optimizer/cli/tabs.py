"""The other four tabs of the original tool: pipeline, mfu, ckpt, rlhf."""
