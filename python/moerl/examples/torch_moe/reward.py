"""The reward (`reward.worker: python:moerl.examples.torch_moe.reward:score`): the sort task's
verifier, in Python (from task.py, which does not import torch)."""

from moerl.examples.torch_moe.task import sort_reward
from moerl.worker import Sample


def score(sample: Sample) -> float:
    return sort_reward(sample.prompt, sample.tokens)
