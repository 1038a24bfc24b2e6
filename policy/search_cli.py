"""`stepcritic search`: its options and what it runs (stdlib-only imports at module top, so `--help` stays instant)."""

from __future__ import annotations

import argparse
import sys

# policy/search.py's, here without importing it (a test keeps them equal)
METHODS = ("majority", "random", "oracle", "best-of-n", "weighted", "beam", "dvts")
AGGREGATES = ("min", "mean", "last", "prod")


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="stepcritic search")
    p.description = ("Test-time search: how many more questions a policy answers right when a critic picks among "
                     "its samples (best-of-N, weighted best-of-N) or steers its steps (beam search, DVTS), against "
                     "majority vote, a random pick and the oracle. One sampled run of N per question, subsampled "
                     "into accuracy-vs-N curves (1, 2, 4, ... N) with bootstrap intervals over questions; beam and "
                     "DVTS run once per N. Writes metrics.json, report.md and a plot. Every sample, continuation "
                     "and critique is saved as it arrives: the same command run again after a kill asks only for "
                     "what is missing.")
    p.epilog = ("example: stepcritic search --policy hf:runs/policy --template policy_brief --critic prm:runs/prm "
                "--chains data/questions --method majority best-of-n weighted beam --n 16 --out results/search")
    p.add_argument("--policy", required=True, metavar="SPEC",
                   help="a generative model spec, as `stepcritic generate` takes it; beam and dvts need one that "
                        "goes on writing a begun answer (hf:, vllm:, openai:...,continues=true, a py: GenerativeJudge)")
    p.add_argument("--critic", required=True, metavar="SPEC",
                   help="any judge spec `stepcritic eval` takes (prm:, reward:, hf:, remote:, ...); beam and dvts "
                        "need step scores (not reward:)")
    p.add_argument("--chains", required=True, help="the questions: a chains folder or .jsonl with gold answers")
    p.add_argument("--method", nargs="+", required=True, metavar="METHOD",
                   help=f"any of: {' '.join(METHODS)}")
    p.add_argument("--n", type=int, required=True, metavar="N",
                   help="samples per question, and the largest budget of the curve (a power of 2)")
    p.add_argument("--aggregate", default="min", metavar="RULE",
                   help=f"a chain's score from its step scores: {'|'.join(AGGREGATES)} (default min)")
    p.add_argument("--beam-width", type=int, default=4, metavar="W",
                   help="dvts: N/W subtrees, each continuing its best chain W times a step (default 4)")
    p.add_argument("--expansions", type=int, default=4, metavar="E",
                   help="beam: the best N/E chains kept a step, each continued E times (default 4)")
    p.add_argument("--max-steps", type=int, default=12, metavar="K",
                   help="beam and dvts: at most K steps; a chain unfinished by then is dropped (default 12)")
    p.add_argument("--subsets", type=int, default=32, metavar="S",
                   help="subsample draws per question and N for the curve (default 32; all when fewer exist)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature of the policy (default 1; wins over the spec's own)")
    p.add_argument("--max-new-tokens", type=int, default=256,
                   help="longest reply of the policy, in tokens (default 256)")
    p.add_argument("--seed", type=int, default=0, help="seeds the sampling, the subsets and the saved answers' keys")
    p.add_argument("--template", default=None,
                   help="the policy prompt (policy, the default, or policy_brief), as `stepcritic generate` takes it")
    p.add_argument("--limit", type=int, default=None, help="the first N questions only")
    p.add_argument("--out", required=True, help="output folder; an unfinished run's folder is resumed")
    p.add_argument("--overwrite", action="store_true",
                   help="write a finished --out again (its saved samples and scores are reused: another critic "
                        "asks the policy nothing more)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(args: argparse.Namespace) -> int:
    from stepcritic.policy.search import SearchSettings, search

    settings = SearchSettings(methods=tuple(args.method), n=args.n, aggregate=args.aggregate,
                              beam_width=args.beam_width, expansions=args.expansions, max_steps=args.max_steps,
                              subsets=args.subsets, seed=args.seed)
    progress = not args.quiet and sys.stderr.isatty()
    metrics = search(args.chains, args.policy, args.critic, args.out, settings, temperature=args.temperature,
                     max_new_tokens=args.max_new_tokens, template=args.template, limit=args.limit,
                     overwrite=args.overwrite, progress=progress)
    top = str(metrics["n"])
    shown = ", ".join(f"{m} {c[top]['accuracy']:.3f}" for m, c in metrics["methods"].items())
    print(f"searched questions={metrics['questions']} at N={top}: {shown} ({metrics['asked']['samples']} samples, "
          f"{metrics['asked']['continuations']} continuations and {metrics['asked']['critic']} critiques asked) "
          f"-> {args.out}")
    return 0
