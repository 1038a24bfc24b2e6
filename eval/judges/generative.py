"""What every judge that answers prompts with text shares (local VLMs, OpenAI-compatible APIs, vLLM).

A backend implements only `generate(prompts) -> list[Reply]`. This class turns chains into prompts for
the chosen mode, reads the replies back into Critiques (unreadable output becomes `valid=False` with the
raw text kept, never an exception; a prompt that got no answer at all marks its chain `failed`, which is no
judgment), runs LookBack when asked and answers the listwise ShiftCheck question. Modes:

- `critique` (default): the step-by-step JSON critique of `data_prep.prompts.critique_messages`.
- `verifier`: MiCEval's single-label tasks (`task=...`), one prompt per step the task applies to.
  Label tasks with a right/wrong reading (correctness, relevance, informativeness) also give verdicts;
  the labels themselves are kept in `Critique.extra["labels"]`, with the number of replies and of
  unreadable ones (`n_outputs`, `n_invalid`: MiCEval's invalid rate is per output). `strict=true` reads
  labels as MiCEval does: a reply that is not exactly one label is invalid (`critique.parse_label`).
  `stepcritic eval --tasks verifier` asks any generative judge all nine tasks through `verifier(task)`, a copy
  of the judge in this mode.
- `score`: one 0-10 rating of the whole chain, stored as `chain_score` in [0, 1]; no step verdicts.
- `step-score`: MiCEval's per-step scoring evaluator ("Step, w/o MiCEval", Sec. 6.2 and App. D.2): each step rated
  0-10 given the question, the image and the steps before it; the rating / 10 is the step's score, a step under 0.5
  is flagged, and the chain's score is the mean of its steps' (MiCEval leaves that aggregation unstated).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterable, Iterator

from stepcritic.data_prep.critique import SCORE_SCALE, parse_label, parse_letter, parse_score
from stepcritic.data_prep.prompts import (
    CHAIN_LEVEL_TASKS,
    DEFAULT_TEMPLATES,
    VERIFIER_TASKS,
    critique_messages,
    listwise_messages,
    load_template,
    score_messages,
    step_score_messages,
    template_hash,
    verifier_messages,
    verifier_target,
)
from stepcritic.eval.judges.base import Critique, Judge, RequestFailed
from stepcritic.eval.judges.lookback import TEMPLATES as LOOKBACK_TEMPLATES
from stepcritic.eval.judges.lookback import lookback_critiques
from stepcritic.eval.judges.prompting import Prompt, Reply, chain_prompt, critique_from_reply

MODES = ("critique", "verifier", "score", "step-score")
STRATEGIES = ("direct", "lookback")
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


# ----------------------------------------------------------------------------- the judge

class GenerativeJudge(Judge):
    """Base of the text-generating judges. Subclasses implement `generate` (and may add options)."""

    OPTIONS = {"mode": str, "strategy": str, "task": str, "template": str, "max_tokens": int,
               "temperature": float, "batch_size": int, "max_questions": int, "strict": bool, "notes": str}

    def __init__(self, spec: str, target: str | None = None, mode: str = "critique", strategy: str = "direct",
                 task: str = "logic_correctness", template: str | None = None, max_tokens: int = 512,
                 temperature: float = 0.0, batch_size: int = 8, max_questions: int = 3, strict: bool = False,
                 notes: bool | str = False, **options):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}")
        if strategy == "lookback" and mode != "critique":
            raise ValueError("strategy=lookback needs mode=critique")
        if mode == "verifier":
            if task not in VERIFIER_TASKS:
                raise ValueError(f"unknown verifier task {task!r}; expected one of {list(VERIFIER_TASKS)}")
        if strict:  # only when set, so the fingerprints (cache keys) of lenient judges stay as they were
            options["strict"] = True
        # notes=true|check: the critique prompt that asks what the image shows about each step, in that style
        # (`data build --critique-notes [STYLE]`); true is the original style, so its cache keys stay as they were
        notes = {"true": True, "false": False, "rewrite": True}.get(str(notes).lower(), notes)
        if notes not in (False, True, "check"):
            raise ValueError(f"notes={notes!r}: choose true (the step as the image has it), check (questions that "
                             "check it, answered) or false")
        if notes:
            if mode != "critique":
                raise ValueError("notes=true asks for critiques that say what the image shows: it needs mode=critique")
            options["notes"] = notes
        super().__init__(spec, target=target, mode=mode, strategy=strategy, task=task, template=template,
                         max_tokens=max_tokens, temperature=temperature, batch_size=batch_size,
                         max_questions=max_questions, **options)
        self.strict, self.notes = strict, notes
        self.target, self.mode, self.strategy, self.task = target, mode, strategy, task
        self.template, self.max_tokens, self.temperature = template, max_tokens, temperature
        self.batch_size, self.max_questions = batch_size, max_questions

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    @classmethod
    def option_choices(cls) -> dict[str, tuple]:
        return {"mode": MODES, "strategy": STRATEGIES, "task": tuple(VERIFIER_TASKS)}

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        raise NotImplementedError

    def generate_stream(self, prompts: Iterable[Prompt]) -> Iterator[tuple[int, Reply]]:
        """`(index, reply)` for every prompt, as each is answered, for callers that save every answer before asking
        for the next one (the corrector, the explanation matcher: `eval/asking.py`). `prompts` is read lazily. This
        default answers `batch_size` prompts at a time with `generate`, so a killed run loses at most one batch; the
        OpenAI-compatible judge keeps its pool full and loses at most `concurrency`."""
        prompts = iter(prompts)
        start = 0
        while batch := list(itertools.islice(prompts, max(1, self.batch_size))):
            for offset, reply in enumerate(self.generate(batch)):
                yield start + offset, reply
            start += len(batch)

    # -------------------------------------------------------------- fingerprint

    def fingerprint_extra(self) -> dict:
        """Hashes of the prompt templates in use: editing a template invalidates the cache."""
        own = ["listwise"] + ({"score": ["score"], "step-score": ["step_score"]}.get(self.mode, []))
        own += LOOKBACK_TEMPLATES if self.strategy == "lookback" else []
        # keyed by file name, as when these templates lived in eval/: existing caches keep their fingerprints
        extra = {f"{name}.j2": template_hash(name) for name in own}
        if self.mode not in ("score", "step-score"):
            extra["prompt_template"] = template_hash(self.template or DEFAULT_TEMPLATES[self.mode])
        return extra

    # -------------------------------------------------------------- prompts

    @property
    def prompt_template(self):
        """The critique or verifier template, loaded once: looking a template up by name lists the packaged
        templates folder, about 1 ms that would otherwise be spent on every prompt."""
        if getattr(self, "_prompt_template", None) is None:
            self._prompt_template = load_template(self.template or DEFAULT_TEMPLATES[self.mode])
        return self._prompt_template

    def critique_prompt(self, chain: dict) -> Prompt:
        return chain_prompt(critique_messages(chain, self.prompt_template, self.notes), chain)

    def verifier_steps(self, chain: dict) -> list[int | None]:
        """Which steps to ask about: MiCEval asks a task only where it applies (description tasks on
        description steps, error kinds on erroneous steps...), which `verifier_target` encodes."""
        if self.task in CHAIN_LEVEL_TASKS:
            return [None]
        return [i for i in range(len(chain["steps"])) if verifier_target(self.task, chain, i) is not None]

    def prompts_for(self, chain: dict) -> list[Prompt]:
        if self.mode == "critique":
            return [self.critique_prompt(chain)]
        if self.mode == "score":
            return [chain_prompt(score_messages(chain), chain)]
        if self.mode == "step-score":
            return [chain_prompt(step_score_messages(chain, i), chain) for i in range(len(chain["steps"]))]

        return [chain_prompt(verifier_messages(self.task, chain, i, self.prompt_template), chain)
                for i in self.verifier_steps(chain)]

    # -------------------------------------------------------------- judging

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        if self.strategy == "lookback":
            return lookback_critiques(self, chains)
        per_chain = [self.prompts_for(c) for c in chains]
        replies = iter(self.generate([p for prompts in per_chain for p in prompts]))
        return [self.read_replies(chain, [next(replies) for _ in prompts]) for chain, prompts in zip(chains, per_chain)]

    def read_replies(self, chain: dict, replies: list[Reply]) -> Critique:
        """One chain's Critique from the replies to its `prompts_for(chain)`, in the same order."""
        read = {"critique": self._read_critique, "verifier": self._read_verifier, "score": self._read_score,
                "step-score": self._read_step_scores}[self.mode]
        critique = read(chain, replies)
        # one unanswered prompt of several (a step's score, a verifier question) leaves the chain unjudged too
        critique.failed = any(r.error for r in replies)
        return critique

    def _read_critique(self, chain: dict, replies: list[Reply]) -> Critique:
        return critique_from_reply(chain, replies[0])

    def _read_score(self, chain: dict, replies: list[Reply]) -> Critique:
        (reply,) = replies
        score = None if reply.error else parse_score(reply.text)
        error = reply.error or (None if score is not None else f"no score between 0 and {SCORE_SCALE:g} found")
        return Critique(chain["chain_id"], [None] * len(chain["steps"]), chain_score=score, raw=reply.text,
                        valid=score is not None, error=error, extra={"scope": "chain"})

    def _read_step_scores(self, chain: dict, replies: list[Reply]) -> Critique:
        scores = [None if r.error else parse_score(r.text) for r in replies]
        n_invalid = sum(score is None for score in scores)
        known = [score for score in scores if score is not None]
        errors = [r.error for r in replies if r.error]
        return Critique(chain["chain_id"], [None if s is None else s >= 0.5 for s in scores],
                        p_incorrect=[None if s is None else 1.0 - s for s in scores],
                        chain_score=sum(known) / len(known) if known else None,
                        raw=json.dumps([r.text for r in replies], ensure_ascii=False), valid=n_invalid == 0,
                        error=errors[0] if errors else (
                            f"{n_invalid} of {len(scores)} step scores unreadable" if n_invalid else None),
                        extra={"step_scores": scores, "n_outputs": len(scores), "n_invalid": n_invalid})

    def _read_verifier(self, chain: dict, replies: list[Reply]) -> Critique:
        labels_allowed, good = VERIFIER_TASKS[self.task], VERDICT_LABELS.get(self.task)
        asked = self.verifier_steps(chain)
        got = [None if r.error else parse_label(r.text, labels_allowed, strict=self.strict) for r in replies]
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
                        error=errors[0] if errors
                        else (f"{n_invalid} of {len(got)} labels unreadable" if n_invalid else None),
                        extra={"task": self.task, "labels": step_labels if asked != [None] else got,
                               "n_outputs": len(got), "n_invalid": n_invalid,
                               **({"scope": "chain"} if asked == [None] else {})})

    def verifier(self, task: str) -> "GenerativeJudge":
        """This judge asking MiCEval's verifier prompt for `task` (mode=verifier, strategy=direct). A critique
        template does not carry over (a verifier template given with mode=verifier does). A shallow copy: what a
        backend holds from its start (a client, a pool) is shared; one that loads a model on first use shares it
        too (`HFJudge`, `VLLMJudge`), so nine tasks load it once."""
        if task not in VERIFIER_TASKS:
            raise ValueError(f"unknown verifier task {task!r}; expected one of {list(VERIFIER_TASKS)}")
        judge = copy.copy(self)
        template = self.template if self.mode == "verifier" else None
        judge.mode, judge.task, judge.strategy, judge.template = "verifier", task, "direct", template
        judge.options = {**self.options, "mode": "verifier", "task": task, "strategy": "direct", "template": template}
        judge.spec = f"{self.spec} [verifier {task}]"
        judge._prompt_template = None
        return judge

    def pick_best(self, chains: list[dict]) -> int | None:
        """Listwise choice: show all chains, lettered, and ask which one is best (None if unreadable; `RequestFailed`
        when no answer came back)."""
        if not 1 <= len(chains) <= 26:
            raise ValueError(f"pick_best takes 1 to 26 chains, got {len(chains)}")
        (reply,) = self.generate([chain_prompt(listwise_messages(chains), chains[0])])
        if reply.error:
            raise RequestFailed(reply.error)
        return parse_letter(reply.text, len(chains))
