"""True step labels for chains about the synthetic scenes, read off the scene the generator rendered.

    python -m stepcritic.experiments.scene_check --chains CHAINS_DIR --out LABELLED_DIR

For the embedded default only, and only to measure: a policy's sampled chains (`stepcritic generate`) carry no step
label, and the rollout labels of `stepcritic data label` are judged against these. Nothing here feeds a labeller, a
policy's training set or a search: the output is a copy of the chains whose steps' `correct` is the checker's verdict,
for `stepcritic eval --chains` and for a PRM trained on true labels, kept apart from the rollout-labelled folders.

A step is read as one of the generator's claim templates (`data_prep/synth.py`) and checked against the scene in the
chain's `meta.scene` and the question, by the generator's own rules: a description is right when the scene has it
and it is about what the question asks (a true statement about another object is irrelevant, so incorrect); a total,
a comparison or an answer is right when its value is the true one (a step that follows a wrong premise is wrong too);
a step that repeats an earlier one word for word is uninformative, so incorrect. A step that matches no template, or
names an object by its shape alone where the scene has several of that shape, gets no label (None) and is counted,
never guessed.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter

from stepcritic.data_prep.render import AXES, CELL_NAMES, COLOUR_NAMES, PLURALS, SHAPES

CELLS = tuple(name for row in CELL_NAMES for name in row)
SINGULAR = {plural: shape for shape, plural in PLURALS.items()}
_C = "|".join(COLOUR_NAMES)
_S = "|".join(SHAPES)
_NOUN = rf"(?:(?:{_C}) shapes?|{'|'.join(SHAPES + tuple(PLURALS.values()))})"
_REF = rf"(?:(?:{_C}) )?(?:{_S})"
_REL = "|".join(w for words in AXES.values() for w in words)
TEMPLATES = [
    ("colour", re.compile(rf"The ({_S}) is ({_C})\.")),
    ("position", re.compile(rf"The ({_REF}) is at the ({'|'.join(CELLS)})\.")),
    ("counted_comparison", re.compile(rf"There (?:is|are) (\d+) ({_C}) shapes? and (\d+) ({_C}) shapes?, so there "
                                      rf"are more ({_C}) shapes than ({_C}) shapes\.")),
    ("count_pair", re.compile(rf"There (?:is|are) (\d+) ({_NOUN}) and (\d+) ({_NOUN})\.")),
    ("count", re.compile(rf"There (?:is|are) (\d+) ({_NOUN})\.")),
    ("kinds", re.compile(rf"The image contains ((?:an? (?:{_S})(?:, | and )?)+)\.")),
    ("relation", re.compile(rf"The ({_REF}) is ({_REL}) the ({_REF})\.")),
    ("bigger", re.compile(rf"The ({_REF}) is bigger than the ({_REF})\.")),
    ("total", re.compile(r"Together that makes (\d+)\.")),
    ("more", re.compile(rf"So there are more ({_C}) shapes than ({_C}) shapes\.")),
    ("answer", re.compile(r"So the answer is (\S+?)\.")),
]
QUESTIONS = [
    ("colour", re.compile(rf"What colour is the ({_S})\?")),
    ("sum", re.compile(r"How many (\w+) and (\w+) are there altogether\?")),
    ("count", re.compile(r"How many (\w+) are there\?")),
    ("compare", re.compile(rf"Are there more ({_C}) shapes than ({_C}) shapes\?")),
    ("existence", re.compile(rf"Is there an? ({_S}) in the image\?")),
    ("size", re.compile(rf"Is the ({_REF}) bigger than the ({_REF})\?")),
    ("relation", re.compile(rf"Is the ({_REF}) ({_REL}) the ({_REF})\?")),
]


class Ambiguous(Exception):
    """A step names an object the scene does not single out (its shape alone, several of that shape)."""


class Scene:
    def __init__(self, items: list[dict], question: str, reference: str):
        self.items = items
        self.reference = reference
        self.involved = self._involved(question)

    def find(self, ref: str) -> dict | None:
        """The item a step names: "the red circle" (None when absent), or "the circle" (Ambiguous with several)."""
        words = ref.split()
        if len(words) == 2:
            return next((it for it in self.items if it["colour"] == words[0] and it["shape"] == words[1]), None)
        found = [it for it in self.items if it["shape"] == words[0]]
        if len(found) > 1:
            raise Ambiguous(ref)
        return found[0] if found else None

    def counted(self, noun: str) -> list[dict]:
        """The items a count counts: "circles", "red shapes"."""
        words = noun.split()
        if len(words) == 2:
            return [it for it in self.items if it["colour"] == words[0]]
        shape = SINGULAR.get(noun, noun)
        return [it for it in self.items if it["shape"] == shape]

    def _involved(self, question: str) -> list[dict] | None:
        """The items the question is about (the generator's `Question.involved`), None for a question it never asks."""
        for kind, pattern in QUESTIONS:
            m = pattern.fullmatch(question.strip())
            if not m:
                continue
            if kind in ("colour", "existence"):
                return [it for it in self.items if it["shape"] == m.group(1)]
            if kind in ("count", "sum"):
                return [it for g in m.groups() for it in self.counted(g)]
            if kind == "compare":
                return [it for it in self.items if it["colour"] in m.groups()]
            refs = (m.group(1), m.group(len(m.groups())))
            return [it for it in (self.find(r) for r in refs) if it is not None]
        return None

    def relevant(self, items) -> bool:
        return self.involved is None or any(it in self.involved for it in items if it is not None)


def _ahead(a: dict, b: dict, words: str) -> bool:
    if words == "to the left of":
        return a["col"] < b["col"]
    if words == "to the right of":
        return a["col"] > b["col"]
    if words == "above":
        return a["row"] < b["row"]
    return a["row"] > b["row"]


def check_step(text: str, scene: Scene) -> tuple[str | None, bool | None]:
    """(template, whether the step is right) for one step; (None, None) when no template reads it, (template, None)
    when it names an object the scene does not single out."""
    text = text.strip()
    for template, pattern in TEMPLATES:
        m = pattern.fullmatch(text)
        if not m:
            continue
        try:
            return template, _verdict(template, m.groups(), scene)
        except Ambiguous:
            return template, None
    return None, None


def _verdict(template: str, g: tuple, scene: Scene) -> bool:
    if template == "colour":
        item = scene.find(g[0])
        return item is not None and item["colour"] == g[1] and scene.relevant([item])
    if template == "position":
        item = scene.find(g[0])
        return item is not None and item["cell"] == g[1] and scene.relevant([item])
    if template == "count":
        counted = scene.counted(g[1])
        return int(g[0]) == len(counted) and _count_relevant(g[1], scene)
    if template == "count_pair":
        return all(int(n) == len(scene.counted(noun)) and _count_relevant(noun, scene)
                   for n, noun in ((g[0], g[1]), (g[2], g[3])))
    if template == "kinds":
        said = set(re.findall(rf"an? ({_S})", g[0]))
        return said == {it["shape"] for it in scene.items}
    if template == "relation":
        a, b = scene.find(g[0]), scene.find(g[2])
        return a is not None and b is not None and _ahead(a, b, g[1]) and scene.relevant([a, b])
    if template == "bigger":
        a, b = scene.find(g[0]), scene.find(g[1])
        return (a is not None and b is not None and a["size"] == "big" and b["size"] == "small"
                and scene.relevant([a, b]))
    if template == "total":
        return g[0] == scene.reference  # only a sum question's chain totals: its answer is the total
    if template == "more":
        return _more(scene, g[0], g[1])
    if template == "counted_comparison":
        a, c1, b, c2, more, fewer = g
        counts_right = int(a) == len(scene.counted(f"{c1} shapes")) and int(b) == len(scene.counted(f"{c2} shapes"))
        return counts_right and _more(scene, more, fewer) and _count_relevant(f"{c1} shapes", scene)
    return g[0] == scene.reference  # answer


def _more(scene: Scene, more: str, fewer: str) -> bool:
    return len(scene.counted(f"{more} shapes")) > len(scene.counted(f"{fewer} shapes"))


def _count_relevant(noun: str, scene: Scene) -> bool:
    counted = scene.counted(noun)
    if not counted:  # nothing of the kind in the scene: relevant when the question asks about the kind
        return scene.involved is None or not scene.involved or any(
            noun.split()[0] in (it["colour"], it["shape"], PLURALS[it["shape"]]) for it in scene.involved)
    return scene.relevant(counted)


def check_chain(chain: dict) -> tuple[list[str | None], list[bool | None]]:
    """(template per step, verdict per step) of a chain whose `meta` holds the generator's scene."""
    meta = chain["meta"] if isinstance(chain["meta"], dict) else json.loads(chain["meta"] or "{}")
    scene = Scene(meta["scene"], chain["question"], chain["reference_answer"])
    templates, verdicts, said = [], [], []
    for step in chain["steps"]:
        template, ok = check_step(step["text"], scene)
        if ok is not None and step["text"].strip() in said:  # a verbatim repeat adds nothing: uninformative
            ok = False
        said.append(step["text"].strip())
        templates.append(template)
        verdicts.append(ok)
    return templates, verdicts


def labelled(chains, counts: Counter):
    """The chains with the checker's verdicts as their steps' `correct`; a chain with any unchecked step is left out
    (counted), so that every step judged has a true label."""
    from stepcritic.data_prep import schema

    for chain in chains:
        templates, verdicts = check_chain(chain)
        counts["chains"] += 1
        counts["steps"] += len(verdicts)
        counts["steps_unparsed"] += sum(t is None for t in templates)
        counts["steps_ambiguous"] += sum(t is not None and v is None for t, v in zip(templates, verdicts))
        if any(v is None for v in verdicts):
            counts["chains_left_out"] += 1
            continue
        counts["chains_kept"] += 1
        counts["steps_kept"] += len(verdicts)
        counts["steps_incorrect"] += sum(not v for v in verdicts)
        meta = schema.chain_meta(chain)
        meta["step_templates"] = templates
        meta["checker"] = "stepcritic.experiments.scene_check"
        steps = [{"text": s["text"], "correct": v} for s, v in zip(chain["steps"], verdicts)]
        yield schema.validate_chain({**{k: chain.get(k) for k in schema.CHAIN_FIELDS}, "steps": steps,
                                     "chain_correct": all(verdicts) and bool(chain.get("answer_correct")),
                                     "meta": meta}, where=chain["chain_id"])


def write_checked(chains_path: str, out_dir: str) -> dict:
    """Save the checked chains of `chains_path` at `out_dir`; returns the counts (also in its stats.json)."""
    import os

    from stepcritic.data_prep import outputs, schema

    chains = schema.load_chains(chains_path, decode_images=False)
    counts: Counter = Counter()
    with outputs.staged(out_dir, True) as target:
        schema.save_chains(labelled((chains[i] for i in range(len(chains))), counts), target)
        with open(os.path.join(target, schema.CHAINS_STATS_FILE), "w") as f:
            json.dump({"checker": "stepcritic.experiments.scene_check", "input": chains_path, **counts}, f, indent=2)
    return dict(counts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m stepcritic.experiments.scene_check", description=__doc__.split("\n")[0])
    p.add_argument("--chains", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    print(json.dumps(write_checked(args.chains, args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
