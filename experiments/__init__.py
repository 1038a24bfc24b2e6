"""Experiments, not tests and not benchmarks: each asks what the tiny critic or its base can learn, and prints what
it measured; docs/tiny-critic.md states what they found, with the numbers.

    python -m stepcritic.experiments.perception_probe          can the tiny critic read its images?
    python -m stepcritic.experiments.base_probe --model DIR    what a tiny base answers about its scenes
    python -m stepcritic.experiments.lookup_probe              which look-ups a fresh language model learns, how fast
"""
