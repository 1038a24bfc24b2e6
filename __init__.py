"""StepCritic: train and benchmark step-level critics for multimodal chains of thought.

Stages, in the only direction data flows: ``stepcritic.data_prep`` -> ``stepcritic.train`` -> ``stepcritic.eval``.
"""

__version__ = "0.1.0"
