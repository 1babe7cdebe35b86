"""A PyTorch MoE policy learning moerl's `sort` task with GRPO (python/WORKERS.md, "Bring your
own model"): `policy.py` (the torch.nn model), `grpo.py` (the loss), and the three workers
moerl runs (`rollout.py`, `trainer.py`, `reward.py`) under `moerl up --config
configs/torch-moe.yaml`; `python -m moerl.examples.torch_moe --standalone` runs the same policy
and loop in one plain PyTorch process, without moerl."""
