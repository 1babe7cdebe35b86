"""The reward (`reward.worker: python:moerl.examples.torch_moe.reward:score`): the sort task's
verifier, in Python."""

from moerl.examples.torch_moe.policy import sort_reward
from moerl.worker import Sample


def score(sample: Sample) -> float:
    return sort_reward(sample.prompt, sample.tokens)
