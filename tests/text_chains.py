"""Text-only chains for the text-model tests: records in ProcessBench's published layout (no image anywhere), ingested
and built by the same commands a user runs."""

import json
import random

from stepcritic.cli import main as stepcritic


def sums(n_questions: int = 12, seed: int = 0) -> list[dict]:
    """ProcessBench records: per question a right chain and one wrong at its last step (so every step is labelled)."""
    rng = random.Random(seed)
    out = []
    for q in range(n_questions):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        for ok in (True, False):
            said = a + b if ok else a + b + rng.choice((1, 2, 3))
            out.append({"id": f"sum-{q}-{'ok' if ok else 'bad'}", "problem": f"What is {a} + {b}?",
                        "steps": [f"We add {a} and {b}.", f"The sum is {said}."],
                        "final_answer_correct": ok, "label": -1 if ok else 1})
    return out


def ingest_and_build(records: list[dict], root, kinds, test_fraction: float = 0.25) -> tuple[str, dict]:
    """`stepcritic data ingest --format processbench` then `data build` of each kind: (chains dir, {kind: dir})."""
    source = root / "processbench.json"
    source.write_text(json.dumps(records))
    chains = str(root / "chains")
    assert stepcritic(["data", "ingest", "--format", "processbench", "--input", str(source), "--out", chains]) == 0
    built = {}
    for kind in kinds:
        built[kind] = str(root / kind)
        assert stepcritic(["data", "build", "--chains", chains, "--kind", kind, "--out", built[kind],
                           "--test-fraction", str(test_fraction)]) == 0
    return chains, built
