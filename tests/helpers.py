"""What several test modules share: small hand-made chains (no ../shared, no synthetic generator needed), records in
the benchmarks' layouts, the judges the eval tests drive, golden-file checks and the README walk."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex

from PIL import Image, ImageDraw

from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS, verifier_target
from stepcritic.data_prep.schema import validate_chain
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.generative import GenerativeJudge, Reply


def png(color=(255, 0, 0), size=64, shape="circle") -> bytes:
    im = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(im)
    box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
    (d.ellipse if shape == "circle" else d.rectangle)(box, fill=color)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def step(text, correct=True, type="description", **kw):
    s = {"text": text, "type": type, "correct": correct}
    if type in ("description", "both"):
        s.setdefault("description_correctness", "correct" if correct else "unsupported")
        s.setdefault("description_relevance", "both")
        if not correct:
            s.setdefault("description_errors", ["attribute"])
    if type in ("reasoning", "both"):
        s.setdefault("logic_correct", correct)
        s.setdefault("logic_relevant", True)
        s.setdefault("informative", True)
        if not correct:
            s.setdefault("logic_error", "inter")
    if not correct:
        s.setdefault("explanations", [f"'{text}' does not match the image."])
    s.update(kw)
    return s


def chain(chain_id="c0", color=(255, 0, 0), question="What colour is the shape?", steps=None,
          answer="red", answer_correct=True, group_id=None, category="perception", **kw):
    steps = steps if steps is not None else [
        step("The image shows one circle."),
        step("The circle is red.", correct=answer_correct),
        step("So the answer is red.", correct=answer_correct, type="reasoning"),
    ]
    rec = {
        "chain_id": chain_id, "question": question, "image": {"bytes": png(color), "path": None},
        "steps": steps, "final_answer": answer, "reference_answer": "red", "answer_correct": answer_correct,
        "source": "fixture", "generator": "hand", "category": category, "meta": {},
    }
    if group_id:
        rec["group_id"] = group_id
    rec.update(kw)
    return rec


def chains(n=6):
    """n chains in n//2 groups, each group one correct and one incorrect chain."""
    out = []
    for g in range(n // 2):
        color = [(255, 0, 0), (0, 0, 255), (0, 160, 0)][g % 3]
        out.append(chain(f"g{g}-ok", color=color, group_id=f"g{g}"))
        out.append(chain(f"g{g}-bad", color=color, group_id=f"g{g}", answer="blue", answer_correct=False))
    return out


def two_category_chains():
    """`chains(8)`, its last four chains in the "reasoning" category and its first with a reasoning tree."""
    chains_ = chains(8)
    for c in chains_[4:]:
        c["category"] = "reasoning"
    for step_, premises in zip(chains_[0]["steps"], ([], [], [0, 1])):  # one chain with a reasoning tree: RPTS applies
        step_["premises"] = premises
    return [validate_chain(c) for c in chains_]


def critique_section(gold, preds, matcher, matches=None, dev=None) -> dict:
    """The critique section `stepcritic eval` computes for one judge, from its gold and prediction records (the
    explanation matches made by `matcher` unless given; `dev`: the questions that choose the sweep's threshold)."""
    from stepcritic.eval import results
    from stepcritic.eval.tasks.critique import section as critique

    if matches is None:
        matches = results.explanation_matches(gold, preds, matcher)
    return critique(results.JudgeData(gold, preds, [], matcher, matches, settings={"dev": dev}))


def label_stats(chains) -> dict:
    """`synth.LabelStats` of a list of chains: what `data synth` writes to stats.json."""
    from stepcritic.data_prep.synth import LabelStats

    totals = LabelStats()
    for c in chains:
        totals.add(c)
    return totals.result()


def reasoning_chain(n_steps=4, chain_id="r0"):
    steps = [step(f"Step {i} follows.", type="reasoning") for i in range(n_steps)]
    return validate_chain(chain(chain_id, steps=steps))


def gold_labels(task: str, chain: dict) -> list:
    """The human label per step (the chain-level task: a one-item list), None where the task does not apply."""
    if task in CHAIN_LEVEL_TASKS:
        return [verifier_target(task, chain, None)]
    return [verifier_target(task, chain, i) for i in range(len(chain["steps"]))]


# ----------------------------------------------------------------------------- records as the benchmarks write them

def write_jsonl(path, records) -> str:
    """`records` one a line at `path`: a dict as JSON, a string as it is."""
    with open(path, "w") as f:
        for r in records:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")
    return str(path)


def miceval_record(idx, image="dataset/image/vqav2/images/a.png", question="Is the ball red?", informative="No",
                   relevance="Both", correctness="Fully correct", cot="Yes"):
    return {
        "idx": idx, "image": image, "question": question, "answer": "yes", "type": "description",
        "steps": {
            "1": {"step_idx": 1, "step": "The image shows a red ball.", "type_label": "Description",
                  "description_relevance_label": relevance, "description_correctness_label": correctness,
                  **({"description_error_label": ["Attribute false"]} if correctness != "Fully correct" else {})},
            "2": {"step_idx": 2, "step": "So the ball is red.", "type_label": "Reasoning",
                  "logic_relevant_label": "Relevant", "logic_correctness_label": "Correct",
                  "informativeness_label": informative},
        },
        "cot_fully_correct": cot, "logic_fully_correct": "Yes", "description_fully_correct": "Yes",
        "prediction_correct": "True", "answering_model": "gpt-4o", "cot_answer": "...",
    }


def visco_record(i, labels=(True, False, True), image=None):
    b64 = base64.b64encode(image or png((0, 0, 255))).decode()
    return {
        "id": i, "question": "How many circles?", "image": b64, "label": "2",
        "response": {"reasoning": [f"Step {k} text." for k in range(len(labels))], "answer": "3"},
        "answer_correctness": False, "reasoning_correctness": list(labels),
        "reasoning_critic": [["", "", ""] if ok else ["There are two circles.", "Only two.", "Miscounted."]
                             for ok in labels],
        "meta_data": {"critic_superskill": "Perception", "critic_skill": "counting",
                      "src_dataset": "toy", "src_model": "m"},
    }


def ingest_fixture(tmp_path, fmt, name) -> str:
    """`stepcritic data ingest --format FMT` of tests/fixtures/FMT/NAME, bad records skipped; the chains folder."""
    from stepcritic.cli import main as stepcritic

    out = str(tmp_path / fmt)
    assert stepcritic(["data", "ingest", "--format", fmt, "--input", f"tests/fixtures/{fmt}/{name}", "--out", out,
                       "--on-error", "skip"]) == 0
    return out


# answer texts in each source's style, their steps as the source annotates them (hand-made)
# MiCEval: one chain of thought, its sentences the annotated steps
MICEVAL_STYLE = [
    ["The image shows two zebras standing close together.",
     "The background includes a man-made fence and a feeding trough.",
     "They are likely in a zoo."],
    ["There is a red bus on the left side of the street.", "The bus has 2 decks.", "So the answer is yes!"],
    ["Is the man holding anything?", "He holds a blue umbrella in his right hand.",
     "Therefore, the umbrella is blue."],
]
# VISCO: a short `reasoning` paragraph split into sentences with nltk's sent_tokenize
VISCO_STYLE = [
    ["The bar for 2019 reaches 3.5 on the y-axis.", "The bar for 2020 reaches 4.0.",
     "The increase is 4.0 - 3.5 = 0.5."],
    ["The sign reads \"STOP.\"", "A stop sign is red and octagonal.", "Hence the shape is an octagon."],
    ["The left image shows 3 apples (all green).", "The right image shows 2 apples.", "In total there are 5."],
]
# VisualProcessBench: paragraphs of a response, which may hold line breaks, formulas and lists
VISUALPROCESSBENCH_STYLE = [
    ["To find the area of the shaded region, we subtract the circle from the square.",
     "The square has side 4, so its area is:\n$$A_s = 4^2 = 16$$",
     "The circle has radius 2:\n- its area is $\\pi r^2 = 4\\pi$\n- about 12.57",
     "So the shaded area is $16 - 4\\pi \\approx 3.43$."],
    ["From the graph, the function crosses the x-axis at x = -1 and x = 3.", "The answer is B."],
]


# ----------------------------------------------------------------------------- judges

class CountingJudge(Judge):
    """Flags the last step of every chain; counts what it is asked. `fail_after` is not an option, so
    setting it does not change the fingerprint: it simulates a crash of the very same judge."""

    kind = "test-counting"
    needs_images = False
    batch_size = 2

    def __init__(self, spec, **options):
        super().__init__(spec, **options)
        self.judged, self.picks, self.fail_after = [], 0, None

    def judge_batch(self, chains):
        if self.fail_after is not None and len(self.judged) + len(chains) > self.fail_after:
            raise ConnectionError("endpoint went away")
        self.judged += [c["chain_id"] for c in chains]
        return [Critique(c["chain_id"], [True] * (len(c["steps"]) - 1) + [False], answer_correct=False)
                for c in chains]

    def pick_best(self, chains):
        self.picks += 1
        return len(chains) - 1


class ShortestWins(Judge):
    """Scores each response by its shortness, and gives step scores that rise along the chain."""

    kind = "test-shortest"
    needs_images = False

    def judge_batch(self, chains):
        return [Critique(c["chain_id"], [True] * len(c["steps"]),
                         p_incorrect=[1.0 / (2 + i) for i in range(len(c["steps"]))],
                         chain_score=-sum(len(s["text"]) for s in c["steps"])) for c in chains]


class CannedVerifier(GenerativeJudge):
    """A verifier judge whose replies come from a list, in order."""

    kind = "canned"
    needs_images = False

    def __init__(self, spec, replies, **options):
        super().__init__(spec, mode="verifier", **options)
        self.replies = list(replies)

    def generate(self, prompts):
        out, self.replies = self.replies[:len(prompts)], self.replies[len(prompts):]
        return [Reply(text=t) for t in out]


class GullibleCorrector(GenerativeJudge):
    """Believes the review of the final answer: told it is wrong, it answers the question's reference answer, or "none
    of these" when the answer already was the reference; told anything else, it keeps the answer. So its PCR is the
    share of wrong answers the critique calls wrong and its NCR the share of right answers it calls wrong."""

    kind = "test-gullible-corrector"
    needs_images = False
    # reference answers set by the test: by question, or by `chain_key` where one question has several images
    REFERENCES: dict = {}
    asked: list = []

    @staticmethod
    def chain_key(question: str, steps: list[str], final_answer: str) -> tuple:
        return question, tuple(steps), final_answer

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            text = " ".join(p["text"] for m in prompt.messages for p in m["content"] if p["type"] == "text")
            type(self).asked.append(text)
            question = re.search(r"(?m)^Question: (.*)$", text).group(1)
            final = re.search(r"(?m)^Final answer: (.*)$", text).group(1)
            review = re.search(r"(?m)^Review of the final answer: (.*)$", text).group(1)
            answer = final
            if review.startswith("incorrect"):
                steps = re.findall(r"(?m)^Step \d+: (.*)$", text)
                reference = self.REFERENCES.get(self.chain_key(question, steps, final)) or self.REFERENCES[question]
                answer = "none of these" if final == reference else reference
            replies.append(Reply(text=f"Let me see.\nAnswer: {answer}"))
        return replies


# ----------------------------------------------------------------------------- golden files

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
UPDATE_GOLDEN = os.environ.get("STEPCRITIC_UPDATE_GOLDEN") == "1"


def as_text(messages) -> str:
    """Chat messages as the golden files hold them: a `<<role>>` line, then each text part, an image as `<image>`."""
    lines = []
    for message in messages:
        lines.append(f"<<{message['role']}>>")
        lines += ["<image>" if part["type"] == "image" else part["text"] for part in message["content"]]
    return "\n".join(lines) + "\n"


def check_golden(name: str, text: str) -> None:
    """`text` equals tests/golden/NAME.txt; with STEPCRITIC_UPDATE_GOLDEN=1 it is written there first."""
    path = os.path.join(GOLDEN_DIR, f"{name}.txt")
    if UPDATE_GOLDEN:
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    assert os.path.exists(path), f"missing golden file {path}; run with STEPCRITIC_UPDATE_GOLDEN=1"
    with open(path, encoding="utf-8") as f:
        assert text == f.read(), f"rendering of {name} changed; rerun with STEPCRITIC_UPDATE_GOLDEN=1 to regenerate"


# the offline CPU recipes every training test starts from
RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "tiny")


def built_dataset(tmp_path_factory, kind: str, n_chains: int = 8) -> str:
    """A training dataset of `kind` built from `chains(n_chains)` with a quarter of the groups held out."""
    from stepcritic.data_prep.build import build_dataset

    out = str(tmp_path_factory.mktemp("data") / kind)
    build_dataset(chains(n_chains), kind, out, test_fraction=0.25, seed=0)
    return out


def ingest_and_build_every_kind(root, jsonl) -> tuple[str, dict]:
    """`stepcritic data ingest --format jsonl` of `jsonl`, then `data build` of every kind with a quarter of the
    groups held out, by the CLI as the README runs them: (the chains folder, {kind: built folder})."""
    from stepcritic.cli import main as stepcritic
    from stepcritic.data_prep import contract

    chains = str(root / "chains")
    assert stepcritic(["data", "ingest", "--format", "jsonl", "--input", str(jsonl), "--out", chains]) == 0
    built = {}
    for kind in contract.KIND_NAMES:
        built[kind] = str(root / kind)
        assert stepcritic(["data", "build", "--chains", chains, "--kind", kind, "--out", built[kind],
                           "--test-fraction", "0.25"]) == 0
    return chains, built


def cached_critiques(out) -> dict:
    """The critiques `stepcritic eval --out OUT` cached for its one judge, by chain id."""
    from stepcritic.eval.cache import JsonlLog

    [path] = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(os.path.join(out, "cache"))
              if "critiques.jsonl" in files]
    return JsonlLog(path, "chain_id").load()


def train_tiny(root, recipe: str, kind: str, steps: int = 2) -> str:
    """A tiny critic trained `steps` steps by `recipes/tiny/RECIPE.yaml` on `kind` rows built from `chains(8)`, on one
    torch thread; its folder (`prm:DIR`, `reward:DIR`)."""
    import torch

    from stepcritic.data_prep.build import build_dataset
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    build_dataset(chains(8), kind, str(root / "data"), test_fraction=0.25, seed=0)
    config = parse_recipe(os.path.join(RECIPES, f"{recipe}.yaml"), dict(
        dataset_path=str(root / "data"), output_dir=str(root / "run"), max_steps=steps, per_device_train_batch_size=2,
        logging_steps=1, report_to="none", save_strategy="no"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(config)
    finally:
        torch.set_num_threads(threads)
    return str(root / "run")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def walk(path: str) -> list[tuple[str, str, object]]:
    """A page's ```bash commands and ```python blocks in reading order: ("bash", where, argv) for every command
    (continuation lines joined, comments dropped, `&&` chains split, `$(...)` replaced by a word, leading VAR=value
    assignments and `/usr/bin/time -v` removed) and ("python", where, source) for every Python block."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    out = []
    for block in re.finditer(r"^```(bash|python)\n(.*?)^```", page, flags=re.S | re.M):
        start = page[:block.start()].count("\n") + 2
        where = f"{os.path.relpath(path, REPO)}:{start}"
        if block.group(1) == "python":
            out.append(("python", where, block.group(2)))
            continue
        logical, first = "", None
        for offset, line in enumerate(block.group(2).splitlines()):
            first = start + offset if not logical else first
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            logical += line
            text = re.sub(r"\$\([^)]*\)", "WORD", logical)
            logical = ""
            words = shlex.split(text, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                argv, words = words[:cut], words[cut + 1:]
                while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
                    argv = argv[1:]
                if argv[:2] == ["/usr/bin/time", "-v"]:
                    argv = argv[2:]
                if argv:
                    out.append(("bash", f"{os.path.relpath(path, REPO)}:{first}", argv))
    return out


def shell_commands(path: str) -> list[tuple[str, list[str]]]:
    """(where, argv) for every command of a page's ```bash blocks (`walk`'s rules)."""
    return [(where, argv) for kind, where, argv in walk(path) if kind == "bash"]
