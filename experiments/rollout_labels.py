"""Step labels by rollouts against true labels, and PRMs trained on them, on the embedded default.

    python -m stepcritic.experiments.rollout_labels --out outputs/rollout-labels [--prm-steps 150] [--demo-prm DIR]

One command, every stage a `stepcritic` command as a user runs it (`data synth`, `data build`, `train`, `generate`,
`data label`, `eval`), the measuring between them in this module:

1. A tiny policy: `recipes/tiny/policy.yaml` fine-tuned on the clean chains of 3,000 synthetic chains (seed 0). Its
   answer accuracy on held-out standard-level questions (seed 2), greedy (`--temperature 0`, one sample) and at
   temperature 1 (four samples a question).
2. Its chains at temperature 1 on the questions of two more seeds: seed 1's for labelling and PRM training, seed 2's
   for judging. No scene (the rendered shapes) of one seed occurs in another: checked, and the run stops if one does.
3. True step labels for both, read off the rendered scene by `experiments.scene_check` (measurement only: they go to
   folders of their own, never to `data label` or to the rollout-labelled PRM's rows). `data label` labels seed 1's
   chains from the generated folder itself, which carries no step label: `--method mc` at N = 1, 2, 4, 8, 16 and
   `--method binary` at the same N, all in one `--out` run again with `--overwrite` (every rollout is keyed by its
   prefix and its number, so N = 16 reuses the 8 of N = 8 and binary search reuses mc's), each result copied aside.
   Step F1 of each against the true labels (incorrect = positive; `eval.metrics.step_f1`) with the rollouts spent.
4. PRMs, `recipes/tiny/prm.yaml` with the same steps and options: on seed 1's chains with the N = 8 mc labels
   (hard, and again with `--step-targets soft`) and on the same chains with the true labels. Beside them the demo's
   PRM, trained on the generator's chains with notes (`stepcritic demo --out OUT/demo`, or `--demo-prm DIR` for one
   already trained; its training scenes are checked against seed 2's too). `stepcritic eval` judges them and the
   prompted base (`step-check:` on the same tiny base) on seed 2's chains with true labels: step F1, AUROC and
   bootstrap intervals.

Writes `OUT/results.md`, `OUT/results.json` and `OUT/label_f1.png`. Every stage whose output exists is skipped, so a
stopped run goes on where it stopped (the commands themselves resume too).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

# policy: 3,000 chains of seed 0 (their clean chains are the policy's rows); PRM questions of seed 1, test questions
# of seed 2 (groups of 3 chains: n / 3 questions)
PLAN = {"n_policy": 3000, "policy_steps": 400, "n_label": 300, "n_test": 300, "samples": 4, "prm_steps": 150,
        "rollouts": (1, 2, 4, 8, 16), "train_rollouts": 8, "batch": 64}
SEEDS = {"policy": 0, "label": 1, "test": 2}
TEMPLATE = "policy_brief"
PRM_TEMPLATE = "prm_brief"


class Run:
    """The stages of one experiment folder. Each stage's wall time is kept in `OUT/timings.json` as it ends, so a
    resumed run reports the stages an earlier run did too."""

    def __init__(self, out: str):
        self.out = out
        saved = os.path.join(out, "timings.json")
        self.timings: dict[str, float] = json.load(open(saved)) if os.path.exists(saved) else {}
        self.commands: list[str] = []

    def path(self, *parts) -> str:
        return os.path.join(self.out, *parts)

    def sc(self, name: str, *argv, done: str | None = None) -> None:
        """Run `stepcritic ARGV` (as `python -m stepcritic`), skipped when `done` exists already."""
        shown = "stepcritic " + " ".join(str(a) for a in argv)
        self.commands.append(shown)
        if done and os.path.exists(done):
            print(f"[{name}] done already: {done}", flush=True)
            return
        print(f"[{name}] {shown}", flush=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "stepcritic", *map(str, argv)], check=True, cwd=self.out)
        self.timings[name] = round(self.timings.get(name, 0.0) + time.perf_counter() - start, 1)
        with open(self.path("timings.json"), "w") as f:
            json.dump(self.timings, f, indent=2)


def chains_list(path: str) -> list[dict]:
    from stepcritic.data_prep import schema

    chains = schema.load_chains(path, decode_images=False)
    return [chains[i] for i in range(len(chains))]


def scene_keys(path: str) -> set[str]:
    from stepcritic.data_prep import schema

    chains = schema.load_chains(path, decode_images=False)
    keys = set()
    for meta in chains.data.column("meta").to_pylist():
        scene = json.loads(meta)["scene"]
        keys.add(json.dumps(sorted(json.dumps(item, sort_keys=True) for item in scene)))
    return keys


def answer_accuracy(path: str) -> dict:
    stats = json.load(open(os.path.join(path, "stats.json")))
    return {"samples": stats["samples"], "right": stats["answers_correct"], "parsed": stats["parsed"],
            "accuracy": round(stats["answers_correct"] / stats["samples"], 4)}


def true_labels(path: str) -> dict[str, list[bool]]:
    return {c["chain_id"]: [s["correct"] for s in c["steps"]] for c in chains_list(path)}


def label_quality(labelled: str, truth: dict[str, list[bool]]) -> dict:
    """Step F1 of a labelled folder's hard labels against the true ones, over the chains both label; rollouts."""
    from stepcritic.eval.metrics import step_auroc, step_f1

    gold, pred, soft = [], [], []
    for chain in chains_list(labelled):
        true = truth.get(chain["chain_id"])
        if true is None or len(true) != len(chain["steps"]):
            continue
        gold += true
        pred += [s["correct"] for s in chain["steps"]]
        # a step the search never rolled out (binary: after the first wrong one) scores as its hard label
        soft += [float(s["correct"]) if s["soft_label"] is None else s["soft_label"] for s in chain["steps"]]
    stats = json.load(open(os.path.join(labelled, "stats.json")))
    f1 = step_f1(gold, pred)
    r = stats["rollouts"]
    return {"f1": f1["f1"], "precision": f1["precision"], "recall": f1["recall"], "steps": f1["n"],
            "soft_auroc": step_auroc(gold, soft), "soft_f1_half": step_f1(gold, [x >= 0.5 for x in soft])["f1"],
            "steps_incorrect_true": f1["tp"] + f1["fn"], "steps_flagged": f1["tp"] + f1["fp"],
            "rollouts": r["total"], "per_chain": r["per_chain"], "per_step": r["per_step"],
            "chains": stats["chains_out"], "left_out": stats["left_out"], "wall_seconds": stats["wall_seconds"]}


def plot(quality: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method, marker in (("mc", "o"), ("binary", "s")):
        rows = [quality[k] for k in sorted(quality, key=lambda k: quality[k]["rollouts"]) if k.startswith(method)]
        ax.plot([r["per_step"] for r in rows], [r["f1"] for r in rows], marker=marker, label=f"--method {method}")
        for key in quality:
            if key.startswith(method):
                ax.annotate(f"N={key.split('-')[1]}", (quality[key]["per_step"], quality[key]["f1"]), fontsize=7,
                            textcoords="offset points", xytext=(3, -9))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rollouts per step")
    ax.set_ylabel("step F1 against true labels")
    ax.set_title("Rollout labels of the tiny policy's chains")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def judge_rows(metrics: dict, roles: dict) -> dict:
    rows = {}
    for role, name in roles.items():
        step = metrics["judges"][name]["overall"]["critique"]["step"]
        rows[role] = {"judge": name, "f1": step.get("f1"), "f1_ci": step.get("f1_ci"),
                      "auroc": step.get("auroc"), "auroc_ci": step.get("auroc_ci"),
                      "precision": step.get("precision"), "recall": step.get("recall"), "n": step.get("n")}
    return rows


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    from stepcritic.experiments import scene_check

    plan = dict(PLAN)
    if args.prm_steps:
        plan["prm_steps"] = args.prm_steps
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    run = Run(out)
    start = time.perf_counter()
    d = run.path

    # ---- data: three seeds, no scene shared
    for part, n in (("policy", plan["n_policy"]), ("label", plan["n_label"]), ("test", plan["n_test"])):
        run.sc(f"synth {part}", "data", "synth", "--n", n, "--seed", SEEDS[part], "--out", f"data/{part}-synth",
               done=d("data", f"{part}-synth"))
    # the demo's PRM: trained by `stepcritic demo` (its PRM stage is what this needs), or given
    demo_prm = os.path.abspath(args.demo_prm) if args.demo_prm else d("demo", "models", "prm")
    if not args.demo_prm:
        run.sc("demo (for its PRM)", "demo", "--out", "demo", done=d("demo", "targets.json"))
    keys = {part: scene_keys(d("data", f"{part}-synth")) for part in SEEDS}
    pairs = [("policy", "label"), ("policy", "test"), ("label", "test")]
    demo_chains = os.path.join(os.path.dirname(os.path.dirname(demo_prm)), "data", "train-chains")
    if os.path.exists(demo_chains):
        keys["demo"] = scene_keys(demo_chains)
        pairs.append(("demo", "test"))
    shared = {f"{a}/{b}": len(keys[a] & keys[b]) for a, b in pairs}
    if any(shared.values()):
        raise SystemExit(f"scenes shared between seeds: {shared}")

    # ---- the policy
    run.sc("build policy-sft", "data", "build", "--chains", "data/policy-synth", "--kind", "policy-sft", "--template",
           TEMPLATE, "--out", "data/policy-sft", "--quiet", done=d("data", "policy-sft"))
    run.sc("train policy", "train", "--config", "tiny/policy", "--dataset_path", "data/policy-sft", "--output_dir",
           "runs/policy", "--max_steps", plan["policy_steps"], "--save_strategy", "no",
           done=d("runs", "policy", "config.json"))
    policy = f"hf:runs/policy,batch_size={plan['batch']}"
    run.sc("generate greedy (test)", "generate", "--policy", policy, "--template", TEMPLATE, "--chains",
           "data/test-synth", "--samples", 1, "--temperature", 0, "--out", "data/test-greedy", "--quiet",
           done=d("data", "test-greedy", "stats.json"))
    for part in ("test", "label"):
        run.sc(f"generate T=1 ({part})", "generate", "--policy", policy, "--template", TEMPLATE, "--chains",
               f"data/{part}-synth", "--samples", plan["samples"], "--temperature", 1, "--out",
               f"data/{part}-chains", "--quiet", done=d("data", f"{part}-chains", "stats.json"))
    accuracy = {"greedy": answer_accuracy(d("data", "test-greedy")),
                "temperature 1": answer_accuracy(d("data", "test-chains"))}

    # ---- true labels (measurement only: folders of their own)
    checked = {part: scene_check.write_checked(d("data", f"{part}-chains"), d("data", f"{part}-true"))
               for part in ("label", "test")}
    truth = true_labels(d("data", "label-true"))

    # ---- rollout labels: one --out, rerun with --overwrite at each N, each result copied aside
    quality = {}
    work = "data/label-rollouts"
    for method in ("mc", "binary"):
        for n in plan["rollouts"]:
            kept = d("data", f"label-{method}-{n}")
            if not os.path.exists(os.path.join(kept, "stats.json")):
                run.sc(f"label {method} N={n}", "data", "label", "--chains", "data/label-chains", "--completer",
                       policy, "--template", TEMPLATE, "--method", method, "--rollouts", n, "--out", work,
                       "--overwrite", "--quiet")
                if os.path.exists(kept):
                    shutil.rmtree(kept)
                shutil.copytree(d(work), kept, ignore=shutil.ignore_patterns("cache"))
            quality[f"{method}-{n}"] = label_quality(kept, truth)

    # ---- PRMs, same recipe and steps
    mc = f"data/label-mc-{plan['train_rollouts']}"
    sources = {"mc": (mc, "hard"), "mc-soft": (mc, "soft"), "true": ("data/label-true", "hard")}
    for name, (chains, targets) in sources.items():
        run.sc(f"build prm-sft ({name})", "data", "build", "--chains", chains, "--kind", "prm-sft", "--template",
               PRM_TEMPLATE, "--step-targets", targets, "--out", f"data/prm-{name}", "--quiet",
               done=d("data", f"prm-{name}"))
        run.sc(f"train PRM ({name})", "train", "--config", "tiny/prm", "--dataset_path", f"data/prm-{name}",
               "--output_dir", f"runs/prm-{name}", "--max_steps", plan["prm_steps"], "--save_strategy", "no",
               done=d("runs", f"prm-{name}", "config.json"))
    from stepcritic.train.config import parse_recipe

    base = parse_recipe("tiny/prm").model_path()
    specs = {"PRM on MC labels": "prm:runs/prm-mc,batch_size=32",
             "PRM on MC soft labels": "prm:runs/prm-mc-soft,batch_size=32",
             "PRM on true labels": "prm:runs/prm-true,batch_size=32",
             "the demo's PRM": f"prm:{demo_prm},batch_size=32", "prompted base": f"step-check:{base}"}
    judges = [a for spec in specs.values() for a in ("--judge", spec)]
    run.sc("eval", "eval", "--chains", "data/test-true", *judges, "--tasks", "critique", "--out", "eval",
           "--no-progress", done=d("eval", "metrics.json"))
    metrics = json.load(open(d("eval", "metrics.json")))
    from stepcritic.eval.judges.registry import build_judge

    here = os.getcwd()
    os.chdir(out)  # the specs name folders below OUT, as the eval command was run there
    try:
        names = {spec: build_judge(spec).name for spec in specs.values()}
    finally:
        os.chdir(here)
    prms = judge_rows(metrics, {role: names[spec] for role, spec in specs.items()})

    results = {"plan": plan, "seeds": SEEDS, "demo_prm": demo_prm, "scenes_shared": shared, "accuracy": accuracy,
               "checked": checked, "label_quality": quality, "prms": prms, "timings_s": run.timings,
               "wall_s": round(time.perf_counter() - start, 1), "commands": run.commands}
    with open(d("results.json"), "w") as f:
        json.dump(results, f, indent=2)
    plot(quality, d("label_f1.png"))
    with open(d("results.md"), "w") as f:
        f.write("\n".join(report(results)) + "\n")
    print("\n".join(report(results)))
    return 0


def _n(x, digits=3):
    return "-" if x is None else f"{x:.{digits}f}"


def _ci(ci):
    return "-" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def report(r: dict) -> list[str]:
    acc = r["accuracy"]
    lines = ["| policy answers (held-out questions) | samples | right | accuracy |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['samples']} | {v['right']} | {v['accuracy']:.3f} |" for k, v in acc.items()]
    lines += ["", "| true labels (checker) | chains | kept | steps | unparsed | ambiguous | incorrect (kept) |",
              "|---|---|---|---|---|---|---|"]
    for part, c in r["checked"].items():
        lines.append(f"| {part} | {c.get('chains', 0)} | {c.get('chains_kept', 0)} | {c.get('steps', 0)} | "
                     f"{c.get('steps_unparsed', 0)} | {c.get('steps_ambiguous', 0)} | {c.get('steps_incorrect', 0)} |")
    lines += ["", "| labels | N | rollouts | per chain | per step | step F1 | precision | recall | soft: AUROC | "
                  "soft: F1 at 0.5 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key, q in r["label_quality"].items():
        method, n = key.split("-")
        lines.append(f"| `--method {method}` | {n} | {q['rollouts']} | {q['per_chain']} | {q['per_step']} | "
                     f"{_n(q['f1'])} | {_n(q['precision'])} | {_n(q['recall'])} | {_n(q['soft_auroc'])} | "
                     f"{_n(q['soft_f1_half'])} |")
    lines += ["", "| judge on held-out policy chains | step F1 | 95% interval | step AUROC | 95% interval |",
              "|---|---|---|---|---|"]
    for role, p in r["prms"].items():
        lines.append(f"| {role} (`{p['judge']}`) | {_n(p['f1'])} | {_ci(p['f1_ci'])} | {_n(p['auroc'])} | "
                     f"{_ci(p['auroc_ci'])} |")
    return lines


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="python -m stepcritic.experiments.rollout_labels",
                                          description=__doc__.split("\n")[0])
    p.add_argument("--out", default="outputs/rollout-labels", help="working folder (data/, runs/, eval/, results)")
    p.add_argument("--prm-steps", type=int, default=None, help="optimiser steps of every PRM (default 150)")
    p.add_argument("--demo-prm", default=None, metavar="DIR",
                   help="the PRM of a finished `stepcritic demo` (DEMO_OUT/models/prm); default: run the demo in OUT")
    return p


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
