"""Prompt rendering shared by dataset building (training) and evaluation (judges).

Training rows and evaluation prompts must be byte-for-byte the same, so every prompt is produced here
from a Jinja2 template in `templates/` (or a user file with the same variables); so are the prompts only
judges ask (a 0-10 score, the listwise choice, LookBack's checks), so every template has one loader, one
hash and a golden snapshot. Messages follow TRL's
conversational vision format: every `content` is a list of parts, and a chain's images are `{"type": "image"}`
placeholders (one per image, in order) at the start of the first user turn; the images themselves travel separately
(the dataset's `images` column, or `trl.data_utils.prepare_multimodal_messages(messages, images)`). A text-only chain
(`schema.is_text_only`) gets no placeholder, and its templates are rendered with `text_only` set, so they ask about
the text alone (the variable is only passed when set: a user template without it still renders).

Step indices passed to these functions are 0-based (as in `chain["steps"]`); prompts show 1-based numbers.
"""

from __future__ import annotations

import functools
import hashlib
import os
import string
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from stepcritic.data_prep import answers, critique, schema

PRM_POSITIVE = "+"
PRM_NEGATIVE = "-"
PRM_NOTE_END = "\n"  # between a note and its judgement: "+"/"-" then stay one token of their own

VERIFIER_TASKS: dict[str, tuple[str, ...]] = {
    "step_type": schema.STEP_TYPES,
    "description_correctness": schema.DESCRIPTION_CORRECTNESS,
    "description_relevance": schema.DESCRIPTION_RELEVANCE,
    "description_error": schema.DESCRIPTION_ERRORS,
    "logic_correctness": ("correct", "incorrect"),
    "logic_relevance": ("relevant", "irrelevant"),
    "logic_error": schema.LOGIC_ERRORS,
    "informativeness": ("informative", "uninformative"),
    "chain_correctness": ("correct", "incorrect"),
}
CHAIN_LEVEL_TASKS = ("chain_correctness",)

DEFAULT_TEMPLATES = {"critique": "critique", "verifier": "verifier", "prm": "prm", "outcome": "outcome",
                     "policy": "policy"}

# Shown in the critique prompt so the requested format is exactly what `critique.parse_critique` reads.
CRITIQUE_FORMAT_EXAMPLE = critique.format_critique({
    "steps": [{"step": 1, "correct": True},
              {"step": 2, "correct": False, "explanation": "What is wrong with step 2."}],
    "answer_correct": False,
})
CRITIQUE_NOTES_FORMAT_EXAMPLE = critique.format_critique({
    "steps": [{"step": 1, "shows": "What the image shows about step 1.", "correct": True},
              {"step": 2, "shows": "What the image shows about step 2.", "correct": False,
               "explanation": "What is wrong with step 2."}],
    "answer_correct": False,
})
CRITIQUE_CHECK_NOTES_FORMAT_EXAMPLE = critique.format_critique({
    "steps": [{"step": 1, "says": "Step 1, copied.", "shows": "A question that checks step 1? The image's answer.",
               "correct": True},
              {"step": 2, "says": "Step 2, copied.", "shows": "A question that checks step 2? The image's answer.",
               "correct": False,
               "explanation": "What is wrong with step 2."}],
    "answer_correct": False,
})
CRITIQUE_NOTES_TEXT_FORMAT_EXAMPLE = critique.format_critique({
    "steps": [{"step": 1, "shows": "Step 1 as it should read.", "correct": True},
              {"step": 2, "shows": "Step 2 as it should read.", "correct": False,
               "explanation": "What is wrong with step 2."}],
    "answer_correct": False,
})


# ----------------------------------------------------------------------------- templates

@dataclass(frozen=True)
class PromptTemplate:
    """A loaded template: `name` (packaged name or file path), its `source` text and compiled form."""

    name: str
    source: str
    compiled: Any = field(repr=False, compare=False)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def render(self, **variables) -> str:
        return self.compiled.render(**variables).strip()


def _templates_dir():
    return resources.files("stepcritic.data_prep") / "templates"


def packaged_templates() -> list[str]:
    return sorted(p.name[:-3] for p in _templates_dir().iterdir() if p.name.endswith(".j2"))


def _compile(source: str, name: str):
    import jinja2

    # StrictUndefined: a typo in a user template fails loudly instead of rendering an empty string.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=False, autoescape=False)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"template {name}: syntax error on line {e.lineno}: {e.message}") from None


@functools.lru_cache(maxsize=None)
def _load_packaged(name: str) -> PromptTemplate:
    source = (_templates_dir() / f"{name}.j2").read_text(encoding="utf-8")
    return PromptTemplate(name, source, _compile(source, name))


@functools.lru_cache(maxsize=64)
def _load_source(path: str, source: str) -> PromptTemplate:
    """Compiled once per file content: judges render one template for thousands of chains."""
    return PromptTemplate(path, source, _compile(source, path))


def load_template(name_or_path: str | PromptTemplate) -> PromptTemplate:
    """A packaged template by name (`critique`, `verifier`, `prm`, `outcome`) or a Jinja2 file by path."""
    if isinstance(name_or_path, PromptTemplate):
        return name_or_path
    if os.path.isfile(name_or_path):
        with open(name_or_path, encoding="utf-8") as f:
            return _load_source(name_or_path, f.read())
    name = name_or_path[:-3] if name_or_path.endswith(".j2") else name_or_path
    if name in packaged_templates():
        return _load_packaged(name)
    raise FileNotFoundError(
        f"template {name_or_path!r} is neither a file nor a packaged template {packaged_templates()}")


def template_record(template: PromptTemplate) -> dict:
    """What a trained model keeps of the template its rows were built with (`template_from_record` reads it back):
    its source, so that it is judged the way it was trained even where the template file is gone."""
    return {"name": template.name, "source": template.source}


def template_from_record(record: dict) -> PromptTemplate:
    return _load_source(record["name"], record["source"])


def template_hash(template: str | PromptTemplate) -> str:
    """Content hash of a template (recorded in dataset cards and judge fingerprints)."""
    return load_template(template).hash


def _resolve(template: str | PromptTemplate | None, role: str) -> PromptTemplate:
    return load_template(DEFAULT_TEMPLATES[role] if template is None else template)


# ----------------------------------------------------------------------------- message shapes

def _text(text: str) -> dict:
    return {"type": "text", "text": text}


def user_with_image(text: str, n_images: int = 1) -> dict:
    return {"role": "user", "content": [*[{"type": "image"}] * n_images, _text(text)]}


def _shown(chain: dict, text: str) -> dict:
    """The user turn that shows the chain's images (one placeholder each, in order) and asks `text`."""
    return user_with_image(text, len(schema.chain_images(chain)))


def _text_only(*chains: dict) -> dict:
    """The template variable of text-only chains, `{}` otherwise (so templates without it render unchanged)."""
    return {"text_only": True} if all(schema.is_text_only(c) for c in chains) else {}


def user_turn(text: str) -> dict:
    return {"role": "user", "content": [_text(text)]}


def assistant_turn(text: str) -> dict:
    return {"role": "assistant", "content": [_text(text)]}


def _step_texts(chain: dict) -> list[str]:
    steps = chain.get("steps")
    if not steps:
        raise schema.SchemaError("a chain needs at least one step", chain.get("chain_id"), "steps")
    return [s["text"] for s in steps]


# ----------------------------------------------------------------------------- critique

def critique_messages(chain: dict, template: str | PromptTemplate | None = None,
                      notes: bool | str = False) -> list[dict]:
    """The user turn asking for a full step-by-step critique in the JSON format of `critique.py` (with `notes`:
    what the image shows about each step, before its verdict)."""
    style = note_style(notes)
    # only when set, so user templates without the variable still work ("check": questions that check each step)
    variables = {"notes": True if style == "rewrite" else _asked(style)} if style else {}
    variables.update(_text_only(chain))
    example = CRITIQUE_FORMAT_EXAMPLE
    if style in critique.CHECK_STYLES:
        example = CRITIQUE_CHECK_NOTES_FORMAT_EXAMPLE
    elif style:
        example = CRITIQUE_NOTES_TEXT_FORMAT_EXAMPLE if schema.is_text_only(chain) else CRITIQUE_NOTES_FORMAT_EXAMPLE
    text = _resolve(template, "critique").render(
        question=chain["question"], steps=_step_texts(chain), final_answer=chain.get("final_answer") or "",
        format_example=example, **variables)
    return [_shown(chain, text)]


def critique_target(chain: dict, notes: bool | str = False) -> str:
    return critique.format_critique(critique.gold_critique(chain, notes=notes))


# ----------------------------------------------------------------------------- verifier tasks

def _check_task(task: str) -> tuple[str, ...]:
    if task not in VERIFIER_TASKS:
        raise ValueError(f"unknown verifier task {task!r}; expected one of {list(VERIFIER_TASKS)}")
    return VERIFIER_TASKS[task]


def _check_step_index(chain: dict, step_index: int) -> None:
    n = len(_step_texts(chain))
    if not isinstance(step_index, int) or not 0 <= step_index < n:
        raise IndexError(f"{chain.get('chain_id')}: step_index {step_index!r} out of range for {n} steps")


def verifier_messages(task: str, chain: dict, step_index: int | None,
                      template: str | PromptTemplate | None = None) -> list[dict]:
    """The user turn for one single-label verifier task about one step (0-based `step_index`).

    For the chain-level task (`chain_correctness`) `step_index` is ignored.
    """
    labels = _check_task(task)
    steps = _step_texts(chain)
    variables = dict(task=task, labels=labels, question=chain["question"], steps=steps,
                     final_answer=chain.get("final_answer") or "", **_text_only(chain))
    if task not in CHAIN_LEVEL_TASKS:
        _check_step_index(chain, step_index)
        variables.update(step_number=step_index + 1, step=steps[step_index], previous=steps[:step_index])
    return [_shown(chain, _resolve(template, "verifier").render(**variables))]


def _bool_label(value: bool | None, yes: str, no: str) -> str | None:
    return None if value is None else (yes if value else no)


def verifier_target(task: str, chain: dict, step_index: int | None) -> str | None:
    """The gold label for a task on a step, or None where the task does not apply (or is unlabelled).

    Description tasks apply to description/both steps, logic tasks to reasoning/both steps, the error
    tasks only to steps with that kind of error. A step with several description errors is labelled with
    the first one listed (MiCEval asks for a single label).
    """
    _check_task(task)
    if task == "chain_correctness":
        return _bool_label(chain.get("chain_correct"), "correct", "incorrect")
    _check_step_index(chain, step_index)
    step = chain["steps"][step_index]
    if task == "step_type":
        return step.get("type")
    if task.startswith("description_"):
        if not schema.describes(step):
            return None
        if task == "description_correctness":
            return step.get("description_correctness")
        if task == "description_relevance":
            return step.get("description_relevance")
        erroneous = step.get("description_correctness") in ("partial", "unsupported")
        errors = step.get("description_errors") or []
        return errors[0] if erroneous and errors else None
    if not schema.reasons(step):
        return None
    if task == "logic_correctness":
        return _bool_label(step.get("logic_correct"), "correct", "incorrect")
    if task == "logic_relevance":
        return _bool_label(step.get("logic_relevant"), "relevant", "irrelevant")
    if task == "informativeness":
        return _bool_label(step.get("informative"), "informative", "uninformative")
    return step.get("logic_error") if step.get("logic_correct") is False else None  # logic_error


# ----------------------------------------------------------------------------- process reward (PRM)

def _prm_conversation(chain: dict, judgements: list[str], template, notes: bool = False) -> list[dict]:
    tpl = _resolve(template, "prm")
    steps = _step_texts(chain)
    messages = []
    for number, (step, judgement) in enumerate(zip(steps, judgements), 1):
        text = tpl.render(question=chain["question"], step_number=number, step=step, n_steps=len(steps),
                          positive=PRM_POSITIVE, negative=PRM_NEGATIVE, notes=_asked(notes), **_text_only(chain))
        messages.append(_shown(chain, text) if number == 1 else user_turn(text))
        messages.append(assistant_turn(judgement))
    return messages


# the PRM's notes are the critique's: the step as the image has it, or the questions that check it (`critique.py`)
prm_notes_of = critique.chain_notes
PRM_NOTE_STYLES = critique.NOTE_STYLES
note_style = critique.note_style


def _asked(notes):
    """The note style a prompt asks for: check notes are asked for alike, however their answers are worded (the
    model's own way of answering decides that), so a critic trained on "check-said" notes is scored as "check"."""
    return "check" if notes in critique.CHECK_STYLES else notes


def prm_turn(judgement: str, note: str | None = None) -> str:
    """One assistant turn of the PRM conversation: the judgement, after its note on a line of its own."""
    return judgement if note is None else f"{note}{PRM_NOTE_END}{judgement}"


def prm_messages(chain: dict, template: str | PromptTemplate | None = None, notes: bool = False) -> list[dict]:
    """Step-by-step conversation whose assistant turns are the gold `+`/`-` judgements (PRM training), each after
    the step's note (`critique.step_note`) when `notes`."""
    judgements = []
    written = prm_notes_of(chain, notes) if notes else [None] * len(chain["steps"])
    for i, (step, note) in enumerate(zip(chain["steps"], written)):
        where, field = chain.get("chain_id"), f"steps[{i}]"
        if step.get("correct") is None:
            raise schema.SchemaError("step has no correctness label", where, f"{field}.correct")
        verdict = PRM_POSITIVE if step["correct"] else PRM_NEGATIVE
        if notes and note is None:
            if note_style(notes) in critique.CHECK_STYLES:
                raise schema.SchemaError("a check note needs the step's questions (synthetic chains have them)",
                                         where, "meta.step_checks")
            raise schema.SchemaError("an incorrect step needs a correction or an explanation for its note", where,
                                     f"{field}.correction")
        judgements.append(prm_turn(verdict, note))
    return _prm_conversation(chain, judgements, template, notes)


def prm_prompt_messages(chain: dict, template: str | PromptTemplate | None = None, notes: bool = False) -> list[dict]:
    """The same conversation for scoring: every assistant turn holds `PRM_POSITIVE` as a placeholder.

    A scorer runs one teacher-forced pass and reads P(+) vs P(-) at each assistant position; the
    placeholder keeps the token layout identical to training without revealing any label. `notes` gives the
    instructions of a note-writing PRM (the scorer then writes the notes itself).
    """
    return _prm_conversation(chain, [PRM_POSITIVE] * len(_step_texts(chain)), template, notes)


# ----------------------------------------------------------------------------- outcome reward

def chain_completion_text(chain: dict) -> str:
    """The chain as its generator would have written it: one step per line, then the final answer."""
    text = "\n".join(_step_texts(chain))
    if chain.get("final_answer"):
        text += f"\n\nFinal answer: {chain['final_answer']}"
    return text


def outcome_messages(chain: dict, template: str | PromptTemplate | None = None) -> tuple[list[dict], list[dict]]:
    """(prompt, completion) for chain-level reward modelling: image + question, then the whole chain."""
    prompt = [_shown(chain, _resolve(template, "outcome").render(question=chain["question"], **_text_only(chain)))]
    return prompt, [assistant_turn(chain_completion_text(chain))]


# ----------------------------------------------------------------------------- policy

def policy_messages(chain: dict, template: str | PromptTemplate | None = None) -> list[dict]:
    """The user turn a policy answers: the chain's images and its question (`policy.j2`)."""
    return [_shown(chain, _resolve(template, "policy").render(question=chain["question"], **_text_only(chain)))]


def policy_target(chain: dict) -> str:
    """The chain as a policy writes it (`answers.policy_text`): one step per line, the answer stated last."""
    return answers.policy_text(_step_texts(chain), chain.get("final_answer"))


# ----------------------------------------------------------------------------- judging only (no training rows)

def score_messages(chain: dict) -> list[dict]:
    """The user turn asking for one 0-10 rating of the whole chain (read back by `critique.parse_score`)."""
    text = load_template("score").render(question=chain["question"], steps=_step_texts(chain),
                                         final_answer=chain.get("final_answer") or "", **_text_only(chain))
    return [_shown(chain, text)]


def step_score_messages(chain: dict, step_index: int) -> list[dict]:
    """The user turn asking for one 0-10 rating of step `step_index` given the question and the steps before it
    (MiCEval's per-step scoring evaluator; read back by `critique.parse_score`)."""
    _check_step_index(chain, step_index)
    texts = _step_texts(chain)
    text = load_template("step_score").render(question=chain["question"], previous=texts[:step_index],
                                              step=texts[step_index], step_number=step_index + 1,
                                              **_text_only(chain))
    return [_shown(chain, text)]


def step_check_messages(chain: dict, step_index: int) -> list[dict]:
    """The user turn asking whether step `step_index` is correct given the image, the question and the steps
    before it, to be answered "yes" or "no" (read as P(yes) by `train.scoring.StepCheckScorer`)."""
    _check_step_index(chain, step_index)
    texts = _step_texts(chain)
    text = load_template("step_check").render(question=chain["question"], previous=texts[:step_index],
                                              step=texts[step_index], step_number=step_index + 1,
                                              **_text_only(chain))
    return [_shown(chain, text)]


def listwise_messages(chains: list[dict]) -> list[dict]:
    """ShiftCheck's listwise question: the chains lettered A, B, ... in order, and "which one is best?" (read
    back by `critique.parse_letter`). The chains of a group answer one question about one image."""
    candidates = [{"letter": letter, "steps": _step_texts(c), "final_answer": c.get("final_answer") or ""}
                  for letter, c in zip(string.ascii_uppercase, chains)]
    text = load_template("listwise").render(question=chains[0]["question"], candidates=candidates,
                                            **_text_only(*chains))
    return [_shown(chains[0], text)]


def lookback_question_messages(chain: dict, step_index: int, max_questions: int) -> list[dict]:
    """LookBack's RaiseQuestion(LVLM, I, T_i): questions about the visual facts step `step_index` relies on, from
    the image and that step alone, as VISCO's Algorithm 1 has it (read back by `critique.parse_questions`)."""
    _check_step_index(chain, step_index)
    text = load_template("lookback_questions").render(step=_step_texts(chain)[step_index],
                                                      max_questions=max_questions)
    return [_shown(chain, text)]


def lookback_answer_messages(question: str, n_images: int = 1) -> list[dict]:
    """LookBack: one question answered from the image alone."""
    return [user_with_image(load_template("lookback_answer").render(question=question), n_images)]


def lookback_final_text(checks: list[dict]) -> str:
    """LookBack's final Critique(LVLM, I, q, (T, a), Q, A): what follows the critique prompt, the questions and
    their answers (each `{"question", "answer"}`)."""
    return load_template("lookback_final").render(checks=checks)


def rpts_tree_messages(chain: dict) -> list[dict]:
    """RPTS's restructuring (Sec. 3): the chain restated as premises -> conclusion, each step's premises being clues
    (visual: from the image; textual: from the question) and earlier steps (read back by `eval.rpts_tree.parse_tree`).
    Text only, no image: the paper has a language model reformat the chain's text, and the map of what rests on what
    is in that text."""
    text = load_template("rpts_tree").render(question=chain["question"], steps=_step_texts(chain),
                                             final_answer=chain.get("final_answer") or "")
    return [user_turn(text)]


def rpts_step_messages(chain: dict, step_index: int, premises: list[str], reads_image: bool) -> list[dict]:
    """RPTS's per-step scoring (Sec. 3): does step `step_index` follow from `premises` (their texts) alone, rated
    0-10 (read back by `critique.parse_score`); `reads_image` adds the check against the image for a step that
    reads a visual clue."""
    _check_step_index(chain, step_index)
    text = load_template("rpts_step").render(question=chain["question"], premises=premises,
                                             conclusion=_step_texts(chain)[step_index], reads_image=reads_image)
    return [_shown(chain, text)]
