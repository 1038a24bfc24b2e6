"""The reward-model loop on the embedded default: policy -> samples -> labels -> PRMs -> search -> RL, in one command.

    python -m stepcritic.experiments.policy_loop --out outputs/policy-loop

Every stage a `stepcritic` command as a user runs it, the measuring between them in this module:

1. `experiments.rollout_labels` in the same folder: the tiny policy, its chains, their rollout labels and three PRMs
   (on MC labels, hard and soft, and on the checker's true labels), beside the demo's PRM (generator chains, notes).
2. `stepcritic search` on the held-out questions of seed 2 (scenes no policy or PRM trained on), `--n 16`: majority,
   random, oracle, best-of-N and weighted best-of-N with each PRM as the critic, in one `--out` run again with
   `--overwrite` (the policy's samples are saved once and reused; each critic's metrics are copied aside), and again
   with the aggregate that picks best at N = 16 when it is not `min`, for its interval. Then beam search and DVTS
   with the demo's PRM on the first `tree_questions` of them, beside best-of-N on the same questions, with the
   tokens the policy wrote per question, at N = 1, 2, ... `tree_n`.
3. `stepcritic train --config tiny/policy-grpo`: GRPO of the policy from the same start, same steps and samples,
   with the rewards of `GRPO_RUNS` (the outcome reward, the verifiable one, compares with the gold answer; the
   critic is the demo's PRM and never sees it). Greedy accuracy on the held-out questions of the policy's
   dataset (groups no training row shows) at every evaluation, beside the critic's reward.

Writes `OUT/loop.md` and `OUT/loop.json` (with rollout_labels' `results.md` beside them). Every stage whose output
exists is skipped, so a stopped run goes on where it stopped; each stage's wall time is kept in `OUT/timings.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time

from stepcritic.experiments import rollout_labels
from stepcritic.experiments.rollout_labels import TEMPLATE, Run

# beam and DVTS write a step at a time, 2 x (1 + 2 + ... + tree_n) continuations a step per question: the costliest
PLAN = {"n": 16, "max_new_tokens": 96, "tree_questions": 32, "tree_n": 4, "grpo_steps": 40, "grpo_lr": 1e-4}
POLICY = "hf:runs/policy,batch_size=64"
CRITICS = {"mc": "PRM on MC labels", "mc-soft": "PRM on MC soft labels", "true": "PRM on true labels",
           "demo": "the demo's PRM"}
# the critic of the tree searches and of GRPO: the one trained to read the image (the others judge at chance)
TREE_CRITIC = GRPO_CRITIC = "demo"
# GRPO runs: name -> rewards and options; every run logs the critic's reward beside accuracy
GRPO_RUNS = {
    "outcome": ["--policy_rewards", "outcome"],
    "critic": ["--policy_rewards", "critic"],
    "outcome critic": ["--policy_rewards", "outcome", "critic"],
    "critic, answer required": ["--policy_rewards", "critic", "--critic_requires_answer", "true"],
}


def critic_specs(demo_prm: str) -> dict:
    """Each critic's judge spec, from OUT (the commands run there)."""
    return {name: f"prm:{demo_prm if name == 'demo' else f'runs/prm-{name}'},batch_size=32" for name in CRITICS}


def search_args(critic: str, methods: list[str], out: str, *extra, n: int | None = None) -> list:
    return ["search", "--policy", POLICY, "--template", TEMPLATE, "--critic", critic, "--chains",
            "data/test-synth", "--method", *methods, "--n", n or PLAN["n"], "--max-new-tokens",
            PLAN["max_new_tokens"], *extra, "--out", out, "--overwrite", "--quiet"]


def point(metrics: dict, method: str) -> dict:
    return metrics["methods"][method][str(metrics["n"])]


def best_aggregate(metrics: dict) -> str:
    top = str(metrics["n"])
    return max(metrics["by_aggregate"], key=lambda a: (metrics["by_aggregate"][a]["best-of-n"][top], a == "min"))


def searched(run: Run, specs: dict) -> dict:
    """The sampled methods with each critic, and beam / DVTS against best-of-N on the first questions."""
    d = run.path
    out = {}
    for name in CRITICS:
        kept = d("search", f"sampled-{name}.json")
        if not os.path.exists(kept):
            methods = ["majority", "random", "oracle", "best-of-n", "weighted"]
            run.sc(f"search sampled ({name})", *search_args(specs[name], methods, "search/sampled"))
            shutil.copy(d("search", "sampled", "metrics.json"), kept)
        metrics = json.load(open(kept))
        aggregate = best_aggregate(metrics)
        row = {"questions": metrics["questions"], "by_aggregate": metrics["by_aggregate"],
               **{m: point(metrics, m) for m in metrics["methods"]}, "best_aggregate": aggregate,
               "samples": metrics["samples"]}
        if aggregate != "min":
            again = d("search", f"sampled-{name}-{aggregate}.json")
            if not os.path.exists(again):
                run.sc(f"search sampled ({name}, {aggregate})",
                       *search_args(specs[name], ["best-of-n", "weighted"], "search/sampled", "--aggregate",
                                    aggregate))
                shutil.copy(d("search", "sampled", "metrics.json"), again)
            row[f"best-of-n {aggregate}"] = point(json.load(open(again)), "best-of-n")
            row[f"weighted {aggregate}"] = point(json.load(open(again)), "weighted")
        out[name] = row
    run.sc(f"search beam dvts ({TREE_CRITIC})",
           *search_args(specs[TREE_CRITIC], ["majority", "best-of-n", "beam", "dvts"], "search/trees", "--limit",
                        PLAN["tree_questions"], n=PLAN["tree_n"]),
           done=d("search", "trees", "metrics.json"))
    trees = json.load(open(d("search", "trees", "metrics.json")))
    return {"sampled": out, "trees": {"questions": trees["questions"], "methods": trees["methods"]}}


def at_tokens(curve: dict, tokens: float) -> tuple[float, bool]:
    """A curve's accuracy at `tokens` per question, linear in log tokens between its points; (value, inside)."""
    pts = sorted((p["tokens_per_question"], p["accuracy"]) for p in curve.values())
    if tokens <= pts[0][0] or tokens >= pts[-1][0]:
        return (pts[0][1] if tokens <= pts[0][0] else pts[-1][1]), False
    for (t0, a0), (t1, a1) in zip(pts, pts[1:]):
        if t0 <= tokens <= t1:
            w = (math.log(tokens) - math.log(t0)) / (math.log(t1) - math.log(t0))
            return a0 + w * (a1 - a0), True
    return pts[-1][1], False


def grpo(run: Run, specs: dict) -> dict:
    out = {}
    for name, extra in GRPO_RUNS.items():
        folder = "runs/grpo-" + name.replace(" ", "-").replace(",", "").replace("+", "plus")
        run.sc(f"GRPO ({name})", "train", "--config", "tiny/policy-grpo", "--model_name_or_path", "runs/policy",
               "--dataset_path", "data/policy-sft", "--output_dir", folder,
               "--max_steps", PLAN["grpo_steps"], "--learning_rate", PLAN["grpo_lr"], "--save_strategy", "no",
               "--reward_critic", specs[GRPO_CRITIC], *extra, done=run.path(folder, "trainer_state.json"))
        history = json.load(open(run.path(folder, "trainer_state.json")))["log_history"]
        # one per step: the run's closing evaluation repeats the last step's
        evals = list({e["step"]: e for e in history if "eval_accuracy" in e}.values())
        out[name] = {"steps": [e["step"] for e in evals], "accuracy": [e["eval_accuracy"] for e in evals],
                     "critic_reward": [e.get("eval_critic_reward") for e in evals],
                     "answered": [e.get("eval_answered") for e in evals], "chain_steps": [e.get("eval_steps")
                                                                                       for e in evals],
                     "hacking_at": next((e["step"] for e in evals if e.get("eval_reward_hacking")), None)}
    return out


def main(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rollout_labels.main(argparse.Namespace(out=args.out, prm_steps=None, demo_prm=args.demo_prm))
    out = os.path.abspath(args.out)
    run = Run(out)
    labelled = json.load(open(run.path("results.json")))
    specs = critic_specs(labelled["demo_prm"])
    results = {"plan": PLAN, "search": searched(run, specs), "grpo": grpo(run, specs)}
    results["prms"], results["accuracy"] = labelled["prms"], labelled["accuracy"]
    results["timings_s"] = run.timings
    results["wall_s_this_call"] = round(time.perf_counter() - start, 1)
    results["commands"] = run.commands
    with open(run.path("loop.json"), "w") as f:
        json.dump(results, f, indent=2)
    lines = report(results)
    with open(run.path("loop.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _p(point: dict) -> str:
    low, high = point["interval"] or (None, None)
    return f"{point['accuracy']:.3f}" + ("" if low is None else f" [{low:.3f}, {high:.3f}]")


def apart(better: dict, worse: dict) -> bool:
    return bool(better["interval"] and worse["interval"]) and better["interval"][0] > worse["interval"][1]


def report(r: dict) -> list[str]:
    n = r["plan"]["n"]
    lines = [f"## Test-time search, N = {n}, held-out questions (seed 2)", "",
             "| critic | majority | random | oracle | best-of-N (min) | weighted (min) | best aggregate: best-of-N | "
             "weighted | best-of-N - majority | weighted - majority |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in r["search"]["sampled"].items():
        agg = s["best_aggregate"]
        bon, wtd = s.get(f"best-of-n {agg}", s["best-of-n"]), s.get(f"weighted {agg}", s["weighted"])
        maj = s["majority"]
        diff = lambda p: f"{p['accuracy'] - maj['accuracy']:+.3f}" + (" (apart)" if apart(p, maj) else "")  # noqa
        lines.append(f"| {CRITICS[name]} | {_p(maj)} | {_p(s['random'])} | {_p(s['oracle'])} | {_p(s['best-of-n'])} "
                     f"| {_p(s['weighted'])} | `{agg}`: {_p(bon)} | {_p(wtd)} | {diff(bon)} | {diff(wtd)} |")
    trees = r["search"].get("trees") or {"questions": 0, "methods": {"beam": {}}}
    lines += ["", f"## Beam search and DVTS against best-of-N at equal tokens ({CRITICS[TREE_CRITIC]}, "
                  f"{trees['questions']} questions)", "",
              "| N | majority (tokens) | best-of-N (tokens) | beam (tokens) | best-of-N at beam's tokens "
              "| dvts (tokens) | best-of-N at dvts' tokens |", "|---|---|---|---|---|---|---|"]
    m = trees["methods"]
    for k in m["beam"]:
        cells = [f"{_p(m[x][k])} ({m[x][k]['tokens_per_question']:.0f})" for x in ("majority", "best-of-n")]
        for tree in ("beam", "dvts"):
            value, inside = at_tokens(m["best-of-n"], m[tree][k]["tokens_per_question"])
            cells += [f"{_p(m[tree][k])} ({m[tree][k]['tokens_per_question']:.0f})",
                      f"{value:.3f}" + ("" if inside else " (end of curve)")]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += ["", f"## GRPO of the policy, {r['plan']['grpo_steps']} steps at lr {r['plan']['grpo_lr']:g} "
                  f"(critic: {CRITICS[GRPO_CRITIC]})", "",
              "| rewards | held-out accuracy at each evaluation | start -> end | critic's reward | answers stated | "
              "steps per answer | check |", "|---|---|---|---|---|---|---|"]
    for name, g in r["grpo"].items():
        acc = ", ".join(f"{a:.3f}" for a in g["accuracy"])
        rew = ", ".join("-" if x is None else f"{x:.3f}" for x in g["critic_reward"])
        fired = f"fired at step {g['hacking_at']}" if g["hacking_at"] is not None else "-"
        lines.append(f"| `{name}` | {acc} | {g['accuracy'][0]:.3f} -> {g['accuracy'][-1]:.3f} | {rew} | "
                     f"{g['answered'][0]:.2f} -> {g['answered'][-1]:.2f} | {g['chain_steps'][0]:.2f} -> "
                     f"{g['chain_steps'][-1]:.2f} | {fired} |")
    lines += ["", "## Wall time per stage (seconds)", "", "| stage | s |", "|---|---|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in r["timings_s"].items()]
    lines.append(f"| total | {sum(r['timings_s'].values()):.0f} |")
    return lines


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="python -m stepcritic.experiments.policy_loop",
                                          description=__doc__.split("\n")[0])
    p.add_argument("--out", default="outputs/policy-loop", help="working folder (data/, runs/, search/, results)")
    p.add_argument("--demo-prm", default=None, metavar="DIR",
                   help="the PRM of a finished `stepcritic demo` (DEMO_OUT/models/prm); default: run the demo in OUT")
    return p


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
