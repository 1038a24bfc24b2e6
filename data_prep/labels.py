"""Step labels beyond true/false: neutral steps and soft (Monte-Carlo) scores, and how each stage treats them.

Two step fields of the canonical schema carry them; `correct` stays the boolean every stage reads:

- `rating`: a three-way label as VisualProcessBench (`process_correctness`) and PRM800K write it: 1 correct,
  -1 incorrect, 0 neutral (a step that is neither wrong nor progress). A neutral step keeps `correct: null`, so
  it is never silently counted as right or wrong; `data build --neutral` decides per build what it becomes.
- `soft_label`: a score in [0, 1], typically the share of Monte-Carlo continuations from the step that reach the
  right answer (Math-Shepherd, VisualPRM400K). Validation turns it into `correct` when no boolean is given:
  correct when the score is above `SOFT_THRESHOLD` (`data ingest --soft-threshold`); the score stays on the step,
  and `data build --kind prm-sft --step-targets soft` trains on it.

Standard library only: the command line imports the choices below for its `--help`.
"""

from __future__ import annotations

from collections import Counter

# 1 / 0 / -1 -> the step's `correct`; 0 (neutral) has no boolean of its own
RATINGS = {1: True, 0: None, -1: False}

# Correct when the score is above 0, i.e. when at least one sampled continuation from the step reached the right
# answer: the "hard estimation" of Math-Shepherd, and the threshold InternVL's own script uses to turn VisualPRM400K
# into `+`/`-` labels (`--mc-threshold 0.0`), so by default the booleans are those the sets were published with.
# Higher thresholds trade recall of real errors for fewer false "incorrect" labels on steps the policy rarely
# finishes.
SOFT_THRESHOLD = 0.0

# What `data build --neutral` makes of a neutral step: skip it (default: no target where the kind can leave one
# step out, the chain skipped where it cannot), or count it as correct or incorrect.
NEUTRAL_POLICIES = ("skip", "correct", "incorrect")

# What a prm-sft row's `step_targets` holds: "hard" 1.0 / 0.0 from `correct`, or "soft" the step's `soft_label`
# where it has one (the PRM loss then uses cross-entropy against that probability).
STEP_TARGETS = ("hard", "soft")


VERDICT_NAMES = {True: "correct", False: "incorrect", None: "unlabelled"}


def is_neutral(step: dict) -> bool:
    """A step rated neutral whose verdict was left open (after `resolve_neutral` it has one)."""
    return step.get("rating") == 0 and step.get("correct") is None


def soft_correct(score: float, threshold: float = SOFT_THRESHOLD) -> bool:
    return score > threshold


def resolve_neutral(chain: dict, policy: str) -> dict:
    """The chain with its neutral steps' verdicts set by `policy` ("skip" leaves them open).

    `chain_correct` is re-derived from the steps when it was open: a chain whose only unlabelled steps were
    neutral gets a verdict under "correct" / "incorrect", as it would have had with those labels.
    """
    if policy == "skip" or not any(is_neutral(s) for s in chain["steps"]):
        return chain
    verdict = policy == "correct"
    steps = [dict(s, correct=verdict) if is_neutral(s) else s for s in chain["steps"]]
    out = dict(chain, steps=steps)
    if out.get("chain_correct") is None:
        verdicts = [s["correct"] for s in steps]
        out["chain_correct"] = False if False in verdicts else (None if None in verdicts else True)
    return out


def step_targets(chain: dict, targets: str) -> list[float | None]:
    """One prm-sft training target per step: P(correct) as 1.0 / 0.0, the soft label, or None (no loss)."""
    out: list[float | None] = []
    for s in chain["steps"]:
        if targets == "soft" and s.get("soft_label") is not None:
            out.append(float(s["soft_label"]))
        else:
            out.append(None if s["correct"] is None else float(s["correct"]))
    return out


def label_notes(chain: dict) -> Counter:
    """What ingest counts about one kept chain beyond the booleans: neutral and soft-labelled steps, and images
    beyond the first (`extra_images`)."""
    notes: Counter = Counter()
    for s in chain["steps"]:
        notes["neutral_steps"] += is_neutral(s)
        if s.get("soft_label") is not None:
            notes["soft_labelled_steps"] += 1
            notes[f"soft_labelled_{VERDICT_NAMES[s['correct']]}"] += 1
    if chain.get("extra_images"):
        notes["multi_image_chains"] += 1
        notes["extra_images"] += len(chain["extra_images"])
    return notes
