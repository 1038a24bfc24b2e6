"""Where a judge's step scores fail on synthetic chains: step AUROC per claim template, and wrong premises.

    python -m stepcritic.experiments.step_breakdown --chains CHAINS_DIR --predictions EVAL_DIR/predictions.jsonl

The report's "kind of step" groups templates (a count step is one shape's count, two shapes' counts or a colour's);
this splits them by the synthetic generator's template (`meta.step_templates`) and, for descriptions, by relevance
(a true statement about an object the question does not ask about is an incorrect step). The second table takes the
incorrect steps whose premise (`premises`, any source's field) is itself incorrect: a judge that flags them only when
it flagged the premise checks each step against its own reading of the steps before, not against the picture.
A step is flagged when its P(incorrect) is 0.5 or more, the judge's own verdict for the `prm:` and `step-check:` judges.
"""

from __future__ import annotations

import argparse
import collections
import json


def judged(predictions: str, judge: str | None) -> dict:
    """{chain_id: p_incorrect per step} of one judge from an eval folder's predictions.jsonl."""
    by_judge = collections.defaultdict(dict)
    with open(predictions) as f:
        for line in f:
            row = json.loads(line)
            by_judge[row["judge"]][row["chain_id"]] = row.get("p_incorrect")
    if judge is None and len(by_judge) != 1:
        raise SystemExit(f"{predictions}: {len(by_judge)} judges; name one with --judge: {sorted(by_judge)}")
    name = judge or next(iter(by_judge))
    if name not in by_judge:
        raise SystemExit(f"{predictions}: no judge {name!r}; it has {sorted(by_judge)}")
    return by_judge[name]


def breakdown(chains, scores: dict) -> tuple[dict, collections.Counter]:
    """({group: (gold incorrect flags, p_incorrect)}, Counter of (premise flagged, step flagged)) over wrong steps
    with a wrong premise. Chains without scores (not judged, or no step scores) are skipped."""
    groups = collections.defaultdict(lambda: ([], []))
    premised = collections.Counter()
    for chain in chains:
        p = scores.get(chain["chain_id"])
        steps = chain["steps"]
        if not p or len(p) != len(steps):
            continue
        meta = json.loads(chain.get("meta") or "{}")
        templates = meta.get("step_templates") or ["-"] * len(steps)
        for i, (step, template) in enumerate(zip(steps, templates)):
            relevance = step.get("description_relevance")
            group = template if relevance in (None, "both") else f"{template} ({relevance})"
            groups[group][0].append(not step["correct"])
            groups[group][1].append(p[i])
            wrong_premises = [j for j in step.get("premises") or [] if j < i and not steps[j]["correct"]]
            if not step["correct"] and wrong_premises:
                premised[(any(p[j] >= 0.5 for j in wrong_premises), p[i] >= 0.5)] += 1
    return dict(groups), premised


def auroc(wrong: list, p: list) -> float | None:
    """The report's step AUROC of a group (None with one class only)."""
    from stepcritic.eval.metrics import step_auroc

    return step_auroc([not w for w in wrong], [1.0 - x for x in p])


def tables(groups: dict, premised: collections.Counter) -> list[str]:
    lines = ["| template | steps | incorrect | flagged | step AUROC |", "|---|---|---|---|---|"]
    for group in sorted(groups, key=lambda g: (-len(groups[g][0]), g)):
        wrong, p = groups[group]
        score = auroc(wrong, p)
        lines.append(f"| {group} | {len(wrong)} | {sum(wrong)} | {sum(x >= 0.5 for x in p)} | "
                     f"{'-' if score is None else f'{score:.3f}'} |")
    lines += ["", "| incorrect steps on an incorrect premise | premise flagged | premise not flagged |",
              "|---|---|---|"]
    for flagged in (True, False):
        lines.append(f"| step {'flagged' if flagged else 'not flagged'} | {premised[(True, flagged)]} | "
                     f"{premised[(False, flagged)]} |")
    return lines


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m stepcritic.experiments.step_breakdown",
                                               description=__doc__.splitlines()[0])
    parser.add_argument("--chains", required=True, help="the chains folder the judge was evaluated on")
    parser.add_argument("--predictions", required=True, help="predictions.jsonl of `stepcritic eval --out`")
    parser.add_argument("--judge", help="the judge's name in predictions.jsonl (needed when it holds several)")
    return parser


def main(args: argparse.Namespace) -> int:
    from stepcritic.data_prep.schema import load_chains

    scores = judged(args.predictions, args.judge)
    groups, premised = breakdown(load_chains(args.chains, decode_images=False), scores)
    print("\n".join(tables(groups, premised)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
