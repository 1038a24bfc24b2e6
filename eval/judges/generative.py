"""What every judge that answers prompts with text shares (local VLMs, OpenAI-compatible APIs, vLLM).

A backend implements only `generate(prompts) -> list[Reply]`. This class turns chains into prompts for
the chosen mode, reads the replies back into Critiques (unreadable output becomes `valid=False` with the
raw text kept, never an exception), runs LookBack when asked and answers the listwise ShiftCheck
question. Modes:

- `critique` (default): the step-by-step JSON critique of `data_prep.prompts.critique_messages`.
- `verifier`: MiCEval's single-label tasks (`task=...`), one prompt per step the task applies to.
  Label tasks with a right/wrong reading (correctness, relevance, informativeness) also give verdicts;
  the labels themselves are kept in `Critique.extra["labels"]`.
- `score`: one 0-10 rating of the whole chain, stored as `chain_score` in [0, 1]; no step verdicts.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import string
from dataclasses import dataclass

from stepcritic.eval.judges.base import Critique, Judge

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")
MODES = ("critique", "verifier", "score")
STRATEGIES = ("direct", "lookback")
SCORE_SCALE = 10.0
# verifier task -> the labels that mean "this step is fine"; the task's other labels mean "not fine".
# Tasks missing here (step type, error kinds) classify rather than judge, so they give no verdict.
VERDICT_LABELS = {
    "description_correctness": {"correct"},
    "description_relevance": {"both"},
    "logic_correctness": {"correct"},
    "logic_relevance": {"relevant"},
    "informativeness": {"informative"},
    "chain_correctness": {"correct"},
}


@dataclass
class Prompt:
    messages: list  # chat messages; images are `{"type": "image"}` placeholders, filled from `images` in order
    images: list    # PIL images


@dataclass
class Reply:
    text: str | None = None
    error: str | None = None  # set when no answer came back (the request failed)


# ----------------------------------------------------------------------------- templates and images

@functools.lru_cache(maxsize=None)
def _template(name: str):
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return env.get_template(name)


def template_source(name: str) -> str:
    with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as f:
        return f.read()


def render(name: str, **variables) -> str:
    return _template(name).render(**variables).strip()




def image_prompt(text: str, image) -> Prompt:
    return Prompt([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}], [image])


def chain_prompt(messages: list, chain: dict) -> Prompt:
    """A prompt from `data_prep.prompts` messages: every image placeholder shows the chain's image."""
    n_images = sum(1 for m in messages if isinstance(m["content"], list)
                   for part in m["content"] if part.get("type") == "image")
    return Prompt(messages, [chain["image"]] * n_images)


def with_appended_text(prompt: Prompt, text: str) -> Prompt:
    """The same prompt with `text` added to the end of its last message."""
    messages = copy.deepcopy(prompt.messages)
    last = messages[-1]
    if isinstance(last["content"], str):
        last["content"] += text
    else:
        last["content"].append({"type": "text", "text": text})
    return Prompt(messages, prompt.images)


def step_texts(chain: dict) -> list[str]:
    return [s["text"] for s in chain["steps"]]


# ----------------------------------------------------------------------------- reading replies

def parse_score(text: str | None, scale: float = SCORE_SCALE) -> float | None:
    """The first number in the reply, as a fraction of `scale`; None when missing or out of range."""
    match = re.search(r"-?\d+(?:\.\d+)?", text or "")
    if not match:
        return None
    value = float(match.group())
    return value / scale if 0 <= value <= scale else None


def parse_letter(text: str | None, n_options: int) -> int | None:
    """Index of the option letter the reply names ("B", "Answer: b", "(c)", "**C**.", "D is best"), or None."""
    letters = string.ascii_uppercase[:n_options]
    cleaned = (text or "").strip()
    bare = cleaned.strip(" .:()[]*`'\"").upper()
    if len(bare) == 1:
        return letters.index(bare) if bare in letters else None
    named = [m.group(1).upper() for pattern in (r"(?i)\banswer\s*[:\-]?\s*\(?([a-z])\b", r"\(([A-Za-z])\)")
             for m in re.finditer(pattern, cleaned)]
    # then any standalone capital, except the article in "A careful look shows C"
    named += [m.group(1) for m in re.finditer(r"\b([A-Z])\b", cleaned)
              if not (m.group(1) == "A" and re.match(r"\s+[a-z]", cleaned[m.end():]))]
    return next((letters.index(letter) for letter in named if letter in letters), None)


def parse_label(text: str | None, labels: tuple) -> str | None:
    """The label the reply names: the earliest mention of an allowed label (any case, `_`/`-`/space alike),
    or for two-label tasks a yes/no-style first word (yes/true/correct -> first label)."""
    text = (text or "").strip()
    found = []
    for label in labels:
        pattern = r"(?<![a-z_])" + r"[_\s-]?".join(map(re.escape, label.split("_"))) + r"(?![a-z_])"
        match = re.search(pattern, text, re.I)
        if match:
            found.append((match.start(), label))
    if found:
        return min(found)[1]
    if len(labels) == 2 and text:
        from stepcritic.data_prep.critique import to_bool

        verdict = to_bool(re.split(r"[\s,.;:]", text, maxsplit=1)[0])
        if verdict is not None:
            return labels[0] if verdict else labels[1]
    return None


def critique_from_reply(chain: dict, reply: Reply) -> Critique:
    from stepcritic.data_prep.critique import parse_critique

    n = len(chain["steps"])
    if reply.error:
        return Critique(chain["chain_id"], [None] * n, raw=reply.text, valid=False, error=reply.error)
    parsed = parse_critique(reply.text, n)
    judged = [v for v in parsed.verdicts if v is not None]
    return Critique(chain["chain_id"], parsed.verdicts, explanations=parsed.explanations,
                    answer_correct=parsed.answer_correct,
                    # share of steps judged correct: lets a critic rank the chains of a group
                    chain_score=sum(judged) / len(judged) if judged else None,
                    raw=reply.text, valid=parsed.valid, error=parsed.error)


# ----------------------------------------------------------------------------- the judge

class GenerativeJudge(Judge):
    """Base of the text-generating judges. Subclasses implement `generate` (and may add options)."""

    OPTIONS = {"mode": str, "strategy": str, "task": str, "template": str, "max_tokens": int,
               "temperature": float, "batch_size": int, "max_questions": int}

    def __init__(self, spec: str, target: str | None = None, mode: str = "critique", strategy: str = "direct",
                 task: str = "logic_correctness", template: str | None = None, max_tokens: int = 512,
                 temperature: float = 0.0, batch_size: int = 8, max_questions: int = 3, **options):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}")
        if strategy == "lookback" and mode != "critique":
            raise ValueError("strategy=lookback needs mode=critique")
        if mode == "verifier":
            from stepcritic.data_prep.prompts import VERIFIER_TASKS

            if task not in VERIFIER_TASKS:
                raise ValueError(f"unknown verifier task {task!r}; expected one of {list(VERIFIER_TASKS)}")
        super().__init__(spec, target=target, mode=mode, strategy=strategy, task=task, template=template,
                         max_tokens=max_tokens, temperature=temperature, batch_size=batch_size,
                         max_questions=max_questions, **options)
        self.target, self.mode, self.strategy, self.task = target, mode, strategy, task
        self.template, self.max_tokens, self.temperature = template, max_tokens, temperature
        self.batch_size, self.max_questions = batch_size, max_questions

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        raise NotImplementedError

    # -------------------------------------------------------------- fingerprint

    def fingerprint_extra(self) -> dict:
        """Hashes of the prompt templates in use: editing a template invalidates the cache."""
        from stepcritic.data_prep.prompts import DEFAULT_TEMPLATES, template_hash
        from stepcritic.eval.judges.lookback import TEMPLATES as LOOKBACK_TEMPLATES

        own = ["listwise.j2"] + (["score.j2"] if self.mode == "score" else [])
        own += LOOKBACK_TEMPLATES if self.strategy == "lookback" else []
        extra = {name: hashlib.sha256(template_source(name).encode()).hexdigest()[:16] for name in own}
        if self.mode != "score":
            extra["prompt_template"] = template_hash(self.template or DEFAULT_TEMPLATES[self.mode])
        return extra

    # -------------------------------------------------------------- prompts

    def critique_prompt(self, chain: dict) -> Prompt:
        from stepcritic.data_prep.prompts import critique_messages

        return chain_prompt(critique_messages(chain, self.template), chain)

    def verifier_steps(self, chain: dict) -> list[int | None]:
        """Which steps to ask about: MiCEval asks a task only where it applies (description tasks on
        description steps, error kinds on erroneous steps...), which `verifier_target` encodes."""
        from stepcritic.data_prep.prompts import CHAIN_LEVEL_TASKS, verifier_target

        if self.task in CHAIN_LEVEL_TASKS:
            return [None]
        return [i for i in range(len(chain["steps"])) if verifier_target(self.task, chain, i) is not None]

    def prompts_for(self, chain: dict) -> list[Prompt]:
        if self.mode == "critique":
            return [self.critique_prompt(chain)]
        if self.mode == "score":
            text = render("score.j2", question=chain["question"], steps=step_texts(chain),
                          final_answer=chain.get("final_answer") or "")
            return [image_prompt(text, chain["image"])]
        from stepcritic.data_prep.prompts import verifier_messages

        return [chain_prompt(verifier_messages(self.task, chain, i, self.template), chain)
                for i in self.verifier_steps(chain)]

    # -------------------------------------------------------------- judging

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        if self.strategy == "lookback":
            from stepcritic.eval.judges.lookback import lookback_critiques

            return lookback_critiques(self, chains)
        per_chain = [self.prompts_for(c) for c in chains]
        replies = iter(self.generate([p for prompts in per_chain for p in prompts]))
        read = {"critique": self._read_critique, "verifier": self._read_verifier, "score": self._read_score}[self.mode]
        return [read(chain, [next(replies) for _ in prompts]) for chain, prompts in zip(chains, per_chain)]

    def _read_critique(self, chain: dict, replies: list[Reply]) -> Critique:
        return critique_from_reply(chain, replies[0])

    def _read_score(self, chain: dict, replies: list[Reply]) -> Critique:
        (reply,) = replies
        score = None if reply.error else parse_score(reply.text)
        error = reply.error or (None if score is not None else f"no score between 0 and {SCORE_SCALE:g} found")
        return Critique(chain["chain_id"], [None] * len(chain["steps"]), chain_score=score, raw=reply.text,
                        valid=score is not None, error=error)

    def _read_verifier(self, chain: dict, replies: list[Reply]) -> Critique:
        from stepcritic.data_prep.prompts import VERIFIER_TASKS

        labels_allowed, good = VERIFIER_TASKS[self.task], VERDICT_LABELS.get(self.task)
        asked = self.verifier_steps(chain)
        got = [None if r.error else parse_label(r.text, labels_allowed) for r in replies]
        n_invalid = sum(label is None for label in got)
        verdicts, step_labels, chain_score = [None] * len(chain["steps"]), [None] * len(chain["steps"]), None
        for step_index, label in zip(asked, got):
            verdict = None if label is None or good is None else label in good
            if step_index is None:
                chain_score = None if verdict is None else float(verdict)
            else:
                verdicts[step_index], step_labels[step_index] = verdict, label
        errors = [r.error for r in replies if r.error]
        return Critique(chain["chain_id"], verdicts, chain_score=chain_score,
                        raw=json.dumps([r.text for r in replies], ensure_ascii=False), valid=n_invalid == 0,
                        error=errors[0] if errors else (f"{n_invalid} of {len(got)} labels unreadable" if n_invalid else None),
                        extra={"task": self.task, "labels": step_labels if asked != [None] else got})

    def pick_best(self, chains: list[dict]) -> int | None:
        """Listwise choice: show all chains, lettered, and ask which one is best (None if unreadable)."""
        if not 1 <= len(chains) <= 26:
            raise ValueError(f"pick_best takes 1 to 26 chains, got {len(chains)}")
        candidates = [{"letter": letter, "steps": step_texts(c), "final_answer": c.get("final_answer") or ""}
                      for letter, c in zip(string.ascii_uppercase, chains)]
        text = render("listwise.j2", question=chains[0]["question"], candidates=candidates)
        (reply,) = self.generate([image_prompt(text, chains[0]["image"])])
        return None if reply.error else parse_letter(reply.text, len(chains))
