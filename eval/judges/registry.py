"""Judge specs: `KIND[:TARGET][,key=value...]`, or the same as a dict / YAML block.

    always-correct
    random,rate=0.3,seed=0
    hf:runs/critic,mode=critique,max_new_tokens=256
    openai:gpt-4o,base_url=http://127.0.0.1:8000/v1,concurrency=32,strategy=lookback
    remote:http://gpu-box:8000,concurrency=16      (a `stepcritic serve` elsewhere)
    text-only:openai:gpt-4o,concurrency=32         (everything after "text-only:" is the inner spec)
    py:package.module.Class,delay=0.1              (any Judge subclass importable from PYTHONPATH)
    {"kind": "openai", "target": "gpt-4o", "concurrency": 32, "blank_image": true}

Values are typed (`true`/`false`, integers, floats, else strings) and then checked against the judge
class's `OPTIONS` (name -> type). `blank_image=true` on any spec is the same as wrapping it in
`text-only:`. Judge classes are imported only when a spec names them, so listing kinds stays instant.
A judge class is built as `cls(canonical_spec, target=TARGET, **options)` (no `target` when absent); a
`py:` class, whose target is the class itself, as `cls(canonical_spec, **options)`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field

from stepcritic.errors import UserError
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.artifacts import READS, model_folder_problem
from stepcritic.eval.judges.base import Judge
from stepcritic.eval.judges.scored import ScoredJudge

KINDS: dict[str, tuple[str, str]] = {
    "always-correct": ("stepcritic.eval.judges.baselines:AlwaysCorrectJudge",
                       "baseline: every step and the answer judged correct"),
    "random": ("stepcritic.eval.judges.baselines:RandomJudge",
               "baseline: each step flagged incorrect with probability rate"),
    "majority": ("stepcritic.eval.judges.baselines:MajorityJudge",
                 "baseline: the majority step class (prior: the share of incorrect steps; default: correct)"),
    "text-only": ("stepcritic.eval.judges.baselines:TextOnlyJudge",
                  "ablation: text-only:INNER_SPEC runs INNER_SPEC on blank images of the same size"),
    "hf": ("stepcritic.eval.judges.hf:HFJudge",
           "local transformers VLM or LoRA adapter: hf:MODEL_DIR"),
    "openai": ("stepcritic.eval.judges.openai_judge:OpenAIJudge",
               "OpenAI-compatible chat API: openai:MODEL"),
    "remote": ("stepcritic.eval.judges.remote:RemoteJudge",
               "the judge a running `stepcritic serve` scores with: remote:http://HOST:PORT"),
    "vllm": ("stepcritic.eval.judges.vllm_judge:VLLMJudge",
             "offline vLLM engine (needs the vllm extra and a GPU): vllm:MODEL_DIR"),
    "prm": ("stepcritic.eval.judges.prm:PRMJudge",
            "trained process reward model: prm:MODEL_DIR"),
    "step-check": ("stepcritic.eval.judges.step_check:StepCheckJudge",
                   "a general VLM asked of each step \"is it correct given the image?\", read as P(yes): "
                   "step-check:MODEL_DIR"),
    "reward": ("stepcritic.eval.judges.reward:RewardJudge",
               "trained outcome reward model (chain scores only): reward:MODEL_DIR"),
}
WRAPPERS = {"text-only"}  # kinds whose target is a whole inner spec
PYTHON = "py"  # the kind whose target is a Judge subclass to import: users' (and the tests') own judges
PYTHON_HELP = "any Judge subclass importable from PYTHONPATH: py:package.module.Class[,key=value...] (its own options)"
GENERIC_OPTIONS = {"blank_image": bool}  # accepted by every kind, handled here


@dataclass(frozen=True)
class JudgeSpec:
    kind: str
    target: str | None = None
    options: dict = field(default_factory=dict)

    def __str__(self) -> str:
        head = self.kind if self.target is None else f"{self.kind}:{self.target}"
        if self.kind in WRAPPERS:
            return head
        return ",".join([head] + [f"{k}={_format(v)}" for k, v in sorted(self.options.items())])


def _format(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def typed(value):
    """'true' -> True, '3' -> 3, '0.5' -> 0.5, anything else stays a string."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text)
    return text


def judge_class(kind: str, target: str | None = None):
    """The class a spec's kind names (for `py:`, the class its target names)."""
    if kind == PYTHON:
        return _python_class(target)
    if kind not in KINDS:
        raise ValueError(f"unknown judge kind {kind!r}; known kinds: {', '.join([*KINDS, PYTHON])}")
    module_name, class_name = KINDS[kind][0].split(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except ImportError as e:
        raise ValueError(f"judge kind {kind!r} is not available here: cannot import {module_name} ({e})") from None


def _python_class(target: str | None):
    if not target:
        raise ValueError(f"{PYTHON} needs a class, as in {PYTHON}:package.module.Class")
    module_name, _, class_name = target.replace(":", ".").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ValueError(f"cannot import {target!r} ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Judge)):
        raise ValueError(f"{target!r} is not a Judge subclass")
    return cls


def _checked_options(kind: str, target: str | None, options: dict, where: str) -> dict:
    """Options coerced to the types the judge class declares; unknown names are an error."""
    own = getattr(judge_class(kind, target), "OPTIONS", None)
    if own is None:  # a class that declares no option list checks its own keyword arguments
        return dict(options)
    declared = {**GENERIC_OPTIONS, **own}
    out = {}
    for name, value in options.items():
        if name not in declared:
            raise ValueError(f"{where}: unknown option {name!r} for judge kind {kind!r}; "
                             f"allowed: {', '.join(sorted(declared)) or 'none'}")
        want = declared[name]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif want is str and not isinstance(value, str):
            value = _format(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ValueError(f"{where}: option {name}={value!r} should be of type {want.__name__}")
        out[name] = value
    return out


def parse_spec(spec) -> JudgeSpec:
    """A judge spec string or dict -> `JudgeSpec`, with typed and checked options (ValueError otherwise)."""
    if isinstance(spec, JudgeSpec):
        return spec
    if isinstance(spec, dict):
        return _parse_dict(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a judge spec must be a non-empty string or a mapping, got {spec!r}")
    spec = spec.strip()
    kind = re.split(r"[:,]", spec, maxsplit=1)[0].strip()
    if kind in WRAPPERS:
        inner = spec[len(kind):].lstrip(":").strip()
        if not spec[len(kind):].startswith(":") or not inner:
            raise ValueError(f"judge spec {spec!r}: {kind} needs an inner spec, as in {kind}:KIND[:TARGET]")
        return JudgeSpec(kind, str(parse_spec(inner)))
    head, *pairs = spec.split(",")
    kind, colon, target = (part.strip() for part in head.partition(":"))
    if colon and not target:
        raise ValueError(f"judge spec {spec!r}: empty target after {kind!r}:")
    judge_class(kind, target or None)
    options = {}
    for pair in pairs:
        name, eq, value = (part.strip() for part in pair.partition("="))
        if not eq or not name:
            raise ValueError(f"judge spec {spec!r}: option {pair.strip()!r} is not key=value")
        if name in options:
            raise ValueError(f"judge spec {spec!r}: option {name!r} given twice")
        options[name] = typed(value)
    return JudgeSpec(kind, target or None, _checked_options(kind, target or None, options, f"judge spec {spec!r}"))


def _parse_dict(block: dict) -> JudgeSpec:
    block = dict(block)
    kind = block.pop("kind", None)
    if not isinstance(kind, str):
        raise ValueError(f"judge block {block!r} has no 'kind'")
    target = block.pop("target", None)
    options = {**block.pop("options", {}), **block}
    judge_class(kind, None if target is None else str(target))
    if kind in WRAPPERS:
        if target is None or options:
            raise ValueError(f"judge block of kind {kind!r} takes only 'target' (the inner spec or block)")
        return JudgeSpec(kind, str(parse_spec(target)))
    options = {k: typed(v) for k, v in options.items()}
    target = None if target is None else str(target)
    return JudgeSpec(kind, target, _checked_options(kind, target, options, f"judge block of kind {kind!r}"))


def make_judge(spec):
    """Build the judge a spec describes."""
    js = parse_spec(spec)
    if js.kind in WRAPPERS:
        return judge_class(js.kind)(str(js), make_judge(js.target))
    options = dict(js.options)
    if options.pop("blank_image", False):
        inner = JudgeSpec(js.kind, js.target, options)
        return judge_class("text-only")(f"text-only:{inner}", make_judge(inner))
    canonical = str(JudgeSpec(js.kind, js.target, options))
    if js.target is not None and js.kind != PYTHON:
        options["target"] = js.target
    return judge_class(js.kind, js.target)(canonical, **options)


def check_model_folders(judge) -> None:
    """Raise ValueError (one line) when a judge, or one it wraps, names a model folder that cannot serve it."""
    while judge is not None:
        target = getattr(judge, "target", None)
        if isinstance(target, str) and (isinstance(judge, ScoredJudge) or judge.kind in READS):
            problem = model_folder_problem(judge.kind, target)
            if problem:
                raise ValueError(problem)
        judge = getattr(judge, "inner", None)


def build_judge(spec: str):
    """A judge from its spec (every kind of `KINDS`, and `py:` for users' own Judge subclasses), its model
    folder checked before anything is loaded (`check_model_folders`)."""
    try:
        judge = make_judge(spec)
        try:
            check_model_folders(judge)
        except ValueError:
            judge.close()
            raise
        return judge
    except (ValueError, KeyError, TypeError, UserError) as e:
        message = str(e)  # the registry's own messages already name the spec
        raise EvalError(message if message.startswith("judge spec") else f"judge spec {spec!r}: {message}") from None


def option_usage(cls) -> list[str]:
    """Every option the registry accepts for a judge class (`OPTIONS` and the generic ones), as `name=VALUE`: the
    values it takes where they are few (`Judge.option_choices`), else its default, else its type."""
    defaults = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is not None:
            defaults.update({p.name: p.default for p in inspect.signature(init).parameters.values()
                             if p.default is not inspect.Parameter.empty and p.default is not None})
    defaults.pop("batch_size", None)  # kinds choose their own at build time (an API judge: 4 x concurrency)
    choices = cls.option_choices() if hasattr(cls, "option_choices") else {}
    usage = []
    for name, kind in {**own_options(cls), **GENERIC_OPTIONS}.items():
        if name in choices:
            default = f" ({defaults[name]})" if name in defaults else ""
            usage.append(f"{name}={'|'.join(choices[name])}{default}")
        elif name in defaults or kind is bool:
            usage.append(f"{name}={_format(defaults.get(name, False))}")
        else:
            usage.append(f"{name}={kind.__name__.upper()}")
    return usage


def own_options(cls) -> dict:
    return dict(getattr(cls, "OPTIONS", None) or {})


def describe_kinds() -> str:
    """Every kind with what it is, and every option the registry accepts for it, for `stepcritic eval --list-judges`.
    Listing imports each kind's class (no model, no heavy library)."""
    helps = {**{kind: help_text for kind, (_, help_text) in KINDS.items()}, PYTHON: PYTHON_HELP}
    width = max(map(len, helps))
    lines = []
    for kind, help_text in helps.items():
        lines.append(f"{kind:<{width}}  {help_text}")
        if kind in WRAPPERS or kind == PYTHON:
            continue
        try:
            usage = option_usage(judge_class(kind))
        except ValueError as e:  # an optional kind that cannot be imported here
            usage = [f"(options not listed: {e})"]
        indent, line = " " * (width + 4), ""
        for piece in re.split(r"(?<=\|)|(?<=, )", ", ".join(usage)):  # lines break after a comma or a "|"
            if line and len(indent + line + piece.rstrip()) > 116:
                lines.append(indent + line.rstrip())
                line = ""
            line += piece
        if line:
            lines.append(indent + line)
    return "\n".join(lines)
