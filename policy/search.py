"""`stepcritic search`: how many more questions a policy answers right when a critic picks among its answers or
steers its steps (test-time search, after huggingface/search-and-learn).

One sampled run: every question of the input is asked `n` times, through `generate`'s sampling and cache (the same
keys and `samples.jsonl`), and every sample the critic can read is scored once. Accuracy at N = 1, 2, 4, ... n comes
from that run by subsampling: for each question, every N-subset of its samples when there are at most `subsets` of
them, else `subsets` drawn from a generator seeded by the seed and the question (`eval.best_of_n.subsets`); each
method's accuracy is averaged over the subsets, then over the questions, with a bootstrap interval over questions.

Methods on the samples (a sample with no answer abstains from votes; a blank one is a sample with no answer):
- `majority`: the most frequent answer; `random`: a uniform pick; `oracle`: right when any sample is (the ceiling);
- `best-of-n`: the sample with the highest chain score, its step scores aggregated by `rewards.core`'s rule;
- `weighted`: per answer, the summed chain scores of its samples; the answer with the highest sum.
Ties share: the expected accuracy over the tied picks (`eval.best_of_n.pick_accuracy`).

Methods over steps, run once per budget N (they write their own chains, one step at a time; the critic scores each
partial chain, so it must give step scores):
- `beam`: N continuations per step; the top N/E partial chains are kept and each continued E times (`expansions`);
- `dvts`: N/W independent subtrees (`beam_width`), each keeping its best partial chain and continuing it W times.
A continuation's first step is kept and the rest of it dropped (no backend stops at a step); a chain is finished
when that step states an answer, and leaves the beam. After `max_steps` steps the unfinished chains are dropped.
The pick is the finished chain with the highest score. A continuation's cache key holds the prefix, its tree, slot
and number, so two budgets that reach the same prefix share its continuations.

Compute is reported beside accuracy as what the policy wrote per question (every reply, kept or not): tokens by the
policy's own tokenizer where it is a local model folder (the backends return text, not token counts), and words.

Neither the gold answer nor a label reaches a pick: the critic sees the question, the images, the steps and the
stated answer; the gold answer only scores the pick.
"""

from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass

from stepcritic.data_prep import answers, prompts, schema
from stepcritic.policy import common
from stepcritic.policy.generate import _gold, questions, read_sample, sample_key

SAMPLED = ("majority", "random", "oracle", "best-of-n", "weighted")
TREES = ("beam", "dvts")
METHODS = SAMPLED + TREES
AGGREGATES = ("min", "mean", "last", "prod")  # rewards.core's rule; checked there when scores are read
PLOT = "accuracy_vs_n.png"


@dataclass(frozen=True)
class SearchSettings:
    methods: tuple = ("majority", "random", "oracle", "best-of-n", "weighted")
    n: int = 4
    aggregate: str = "min"
    beam_width: int = 4
    expansions: int = 4
    max_steps: int = 12
    subsets: int = 32
    seed: int = 0

    def check(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise common.PolicyError(f"--method {unknown[0] if unknown else '(none)'!r} is not a method; choose from "
                                     f"{' '.join(METHODS)}")
        if self.aggregate not in AGGREGATES:
            raise common.PolicyError(f"--aggregate must be one of {' '.join(AGGREGATES)}, got {self.aggregate!r}")
        # powers of 2: every budget on the curve splits into whole beams and subtrees, as search-and-learn's do
        for flag, value in (("--n", self.n), ("--beam-width", self.beam_width), ("--expansions", self.expansions)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
                raise common.PolicyError(f"{flag} must be a power of 2 (1, 2, 4, ...), got {value!r}")
        if self.max_steps < 1:
            raise common.PolicyError(f"--max-steps must be at least 1, got {self.max_steps}")
        if self.subsets < 1:
            raise common.PolicyError(f"--subsets must be at least 1, got {self.subsets}")


def budgets(n: int) -> list[int]:
    """1, 2, 4, ... n: the curve's N."""
    return [2 ** k for k in range(n.bit_length()) if 2 ** k <= n]


def words(text: str) -> int:
    return len((text or "").split())


def token_counter(spec: str):
    """How many tokens a reply of a local policy (`hf:` or `vllm:` of a model folder) is, by its own tokenizer; None
    for a policy behind an API or a folder without a tokenizer (the words then stand for compute alone)."""
    from stepcritic.eval.judges.registry import parse_spec

    parsed = parse_spec(spec)
    if parsed.kind not in ("hf", "vllm") or not parsed.target or not os.path.isdir(parsed.target):
        return None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(parsed.target)
    except Exception:  # whatever transformers raises for a folder it cannot read a tokenizer from
        return None
    return lambda text: len(tokenizer(text or "", add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------- picks on one set of samples

def weighted_accuracy(answers_: list, scores: list, correct: list) -> float:
    """Expected correctness of the answer whose samples' chain scores sum highest (a score the critic did not give
    adds 0); samples with no answer abstain, and with none answered the pick is wrong."""
    total, right = defaultdict(float), defaultdict(list)
    for a, s, c in zip(answers_, scores, correct):
        if a is not None:
            total[a] += s or 0.0
            right[a].append(c)
    if not total:
        return 0.0
    top = max(round(v, 9) for v in total.values())  # rounded as pick_accuracy rounds: last bits are no preference
    tied = [a for a, v in total.items() if round(v, 9) == top]
    return statistics.fmean(sum(right[a]) / len(right[a]) for a in tied)


def subset_accuracy(samples: list[dict]) -> dict:
    """Each sampled method's accuracy on one set of samples ({"answer", "correct", "score"})."""
    from stepcritic.eval.best_of_n import majority_accuracy, oracle_accuracy, pick_accuracy, random_accuracy

    answered = [s["answer"] for s in samples]
    correct = [s["correct"] for s in samples]
    scores = [s["score"] for s in samples]
    majority = majority_accuracy(answered, correct)
    return {"majority": 0.0 if majority is None else majority,  # no sample answered: nothing right to vote for
            "random": random_accuracy(correct), "oracle": oracle_accuracy(correct),
            "best-of-n": pick_accuracy(scores, correct), "weighted": weighted_accuracy(answered, scores, correct)}


def sampled_values(group_id: str, samples: list[dict], n: int, max_subsets: int, seed: int) -> dict:
    """Per sampled method, (accuracy, {"words", "tokens"} written) at N = n for one question, averaged over its
    N-subsets."""
    from stepcritic.eval.best_of_n import subsets

    drawn = subsets(len(samples), n, group_id, max_subsets, seed)
    per = [subset_accuracy([samples[i] for i in idx]) for idx in drawn]
    spent = {unit: statistics.fmean(sum(samples[i][unit] or 0 for i in idx) for idx in drawn)
             for unit in ("words", "tokens")}
    return {m: (statistics.fmean(p[m] for p in per), spent) for m in SAMPLED}


# ----------------------------------------------------------------------------- the critic

def critic_chain(question: dict, steps: list[str], answer: str | None) -> dict:
    """What the critic is shown of a chain: the question, its images, the steps and the stated answer; its id is a
    hash of that content, so a chain written twice (a sample, a beam) is scored once."""
    from stepcritic.eval.asking import content_key

    images = [schema.image_fingerprint(image) for image in schema.chain_images(question)]
    cid = "search-" + content_key("critic-chain", question["question"], images, steps, answer)
    return {"chain_id": cid, "group_id": question["group_id"], "source": question["source"],
            "category": question["category"], "question": question["question"], "image": question["image"],
            "extra_images": question["extra_images"], "steps": [{"text": s} for s in steps], "final_answer": answer,
            "reference_answer": None, "answer_correct": None, "chain_correct": None, "generator": "policy",
            "meta": "{}", "preference_rank": None, "subset": None, "set_id": None, "digest": cid}


def can_score_steps(critic) -> bool:
    """Whether the critic gives step scores; an outcome reward model (`reward:`) scores whole chains only."""
    from stepcritic.eval.judges.reward import RewardJudge

    while critic is not None:
        if isinstance(critic, RewardJudge):
            return False
        critic = getattr(critic, "inner", None)
    return True


class Scores:
    """The critic's scores of chains, each critique saved as it arrives (eval's `JudgeCache`): a rerun asks only
    for the chains whose critique was not saved."""

    def __init__(self, critic, out_dir: str, aggregate: str, progress: bool):
        from stepcritic.eval.cache import JudgeCache

        self.critic, self.aggregate, self.progress = critic, aggregate, progress
        self.cache = JudgeCache(out_dir, critic.cache_name, critic.fingerprint())
        self.records = self.cache.critiques.load()
        self.asked = self.cached = 0
        self.seen: set = set()

    def score(self, chains: list[dict]) -> None:
        """Ask the critic for every chain not saved yet."""
        from tqdm.auto import tqdm

        from stepcritic.eval.errors import EvalError, FailedRequests
        from stepcritic.eval.judging import cache_record, is_current

        unique = {c["chain_id"]: c for c in chains}
        missing = [c for cid, c in unique.items() if not is_current(self.records.get(cid), c)]
        self.cached += sum(cid not in self.seen for cid in unique) - len(missing)
        self.seen.update(unique)
        self.asked += len(missing)
        failures = {}
        bar = tqdm(total=len(missing), desc=f"{self.critic.name} scores", unit="chain", disable=not self.progress)
        stream = self.critic.judge_stream(iter(missing))
        try:
            for index, critique in stream:
                chain = missing[index]
                if critique.chain_id != chain["chain_id"] or len(critique.verdicts) != len(chain["steps"]):
                    raise EvalError(f"critic {self.critic.name!r} returned a critique of the wrong chain or step "
                                    f"count for {chain['chain_id']!r}")
                if critique.failed:
                    failures[chain["chain_id"]] = critique.error or "no answer"
                    continue
                record = cache_record(critique, chain["digest"])
                self.cache.critiques.append([record])
                self.records[chain["chain_id"]] = record
                bar.update(1)
        finally:
            stream.close()
            bar.close()
            self.cache.critiques.sync()
        if failures:
            raise FailedRequests(f"{len(failures)} of {len(missing)} chains got no score from the critic (the "
                                 f"others are saved); run the same command again to ask only those (first error: "
                                 f"{next(iter(failures.values()))})")

    def of(self, chain: dict, aggregate: str | None = None) -> tuple[float | None, list]:
        """(the chain's score under the aggregate, its step scores) from its saved critique."""
        from stepcritic.eval.judges.base import Critique
        from stepcritic.rewards.core import scored

        got = scored(Critique.from_json(self.records[chain["chain_id"]]), aggregate or self.aggregate)
        return got.score, got.step_scores

    def close(self) -> None:
        self.cache.close()


# ----------------------------------------------------------------------------- search over steps

@dataclass
class Tree:
    """One beam: the partial chains it continues (`active`, each a tuple of steps) and the finished chains it kept,
    as (score, answer)."""

    keep: int
    expand: int
    active: list
    finished: list


@dataclass
class Run:
    method: str
    budget: int
    row: int
    trees: list
    words: int = 0
    tokens: int = 0


def shape(method: str, budget: int, settings: SearchSettings) -> tuple[int, int, int]:
    """(trees, chains kept per tree, continuations per kept chain) of a method at a budget: N continuations a step."""
    if method == "beam":
        expand = min(settings.expansions, budget)
        return 1, budget // expand, expand
    width = min(settings.beam_width, budget)
    return budget // width, 1, width


def next_step(prefix: tuple, text: str) -> tuple[tuple | None, str | None, bool]:
    """A continuation read as (the prefix with its first new step, the answer stated, finished); (None, None, True)
    when it adds nothing a critic can score (blank, or an answer line after no step)."""
    steps, answer = read_sample(text)
    if not steps:
        return (prefix, answer, True) if prefix and answer is not None else (None, None, True)
    stated = answers.answer_of_text(steps[0])
    if stated is None and len(steps) == 1:
        stated = answer  # the continuation's last "Final answer:" line follows this one step
    return prefix + (steps[0],), stated, stated is not None


def tree_search(model, fingerprint: str, template, shown: dict, rows: list, settings: SearchSettings, log,
                scores: Scores, count_tokens, progress: bool) -> tuple[list[Run], dict]:
    """Every beam and DVTS run of every question at every budget, a step at a time, all of them together."""
    from stepcritic.eval.asking import content_key
    from stepcritic.eval.errors import EvalError
    from stepcritic.eval.judges.prompting import chain_prompt
    from stepcritic.policy.label import rollout_prompt

    runs = []
    for method in (m for m in TREES if m in settings.methods):
        for budget in budgets(settings.n):
            n_trees, keep, expand = shape(method, budget, settings)
            for row in rows:
                runs.append(Run(method, budget, row, [Tree(keep, expand, [()], []) for _ in range(n_trees)]))
    images = {row: [schema.image_fingerprint(i) for i in schema.chain_images(shown[row])] for row in rows}
    totals = {"asked": 0, "cached": 0, "steps": 0}

    def prompt(row, prefix):
        question = shown[row]
        if not prefix:
            return lambda: chain_prompt(prompts.policy_messages(question, template), question)
        seen = {**question, "steps": [{"text": s} for s in prefix]}
        return lambda: rollout_prompt(seen, len(prefix) - 1, template)

    for step in range(settings.max_steps):
        jobs, wanted = [], []
        for r, run in enumerate(runs):
            for t, tree in enumerate(run.trees):
                for slot, prefix in enumerate(tree.active):
                    width = tree.expand * (tree.keep if not prefix else 1)  # the root is continued N times
                    for j in range(width):
                        key = content_key("search", fingerprint, template.hash, shown[run.row]["question"],
                                          images[run.row], list(prefix), t, slot, j, settings.seed)
                        jobs.append((key, prompt(run.row, prefix)))
                        wanted.append((r, t, prefix, key))
        if not jobs:
            break
        totals["steps"] += 1
        # each step's draws seeded by what it asks: a resumed or longer search draws new numbers for new keys
        asked, texts = common.ask_saved(model, jobs, log, settings.seed, "continuations", progress,
                                        f"search step {step + 1}")
        totals["asked"] += asked["asked"]
        totals["cached"] += asked["cached"]
        grown = defaultdict(list)  # (run, tree): its new chains, in the order asked
        for r, t, prefix, key in wanted:
            runs[r].words += words(texts[key])
            runs[r].tokens += count_tokens(texts[key]) if count_tokens else 0
            steps, answer, done = next_step(prefix, texts[key])
            if steps is not None:
                grown[r, t].append((steps, answer, done))
        chains = {(r, t, k): critic_chain(shown[runs[r].row], list(s), a)
                  for (r, t), new in grown.items() for k, (s, a, _) in enumerate(new)}
        scores.score(list(chains.values()))
        if chains and not any(s is not None for c in chains.values() for s in scores.of(c)[1]):
            raise EvalError(f"critic {scores.critic.name!r} gave no step score to any partial chain; --method beam "
                            "and dvts need step scores (a prm:, step-check:, hf: or py: critic)")
        last = step == settings.max_steps - 1
        for r, run in enumerate(runs):
            for t, tree in enumerate(run.trees):
                new = grown.get((r, t), [])
                ranked = sorted(range(len(new)), key=lambda k: _rank(scores.of(chains[r, t, k])[0]))
                tree.active = []
                for k in ranked[:tree.keep]:
                    steps, answer, done = new[k]
                    if done:
                        tree.finished.append((scores.of(chains[r, t, k])[0], answer))
                    elif not last:  # past the step limit an unfinished chain has no answer to pick
                        tree.active.append(steps)
    return runs, totals


def _rank(score: float | None) -> float:
    """Sort key: the highest score first, a chain the critic gave no score last (the sort is stable: ties keep the
    order asked)."""
    return float("inf") if score is None else -score


def run_accuracy(run: Run, question: dict) -> float:
    """Expected correctness of the run's pick: its highest-scored finished chain, ties shared; none finished is
    wrong."""
    from stepcritic.eval.best_of_n import pick_accuracy

    finished = [f for tree in run.trees for f in tree.finished]
    if not finished:
        return 0.0
    return pick_accuracy([s for s, _ in finished], [answers.reaches_gold(question, a) for _, a in finished])


# ----------------------------------------------------------------------------- metrics

def curve_point(bootstrap, groups: list[str], values: list[float], spent: list[dict], tokens: bool) -> dict:
    """Accuracy over questions with its bootstrap interval (eval's: questions resampled), and the words and tokens
    written per question (tokens None without the policy's tokenizer)."""
    from stepcritic.eval.bootstrap import interval

    return {"accuracy": round(statistics.fmean(values), 6),
            "interval": interval(bootstrap.sums(groups, values) / len(groups)),
            "words_per_question": round(statistics.fmean(s["words"] for s in spent), 2),
            "tokens_per_question": round(statistics.fmean(s["tokens"] for s in spent), 2) if tokens else None}


def metrics_of(shown: dict, rows: list, samples: dict, runs: list[Run], settings: SearchSettings,
               tokens: bool) -> dict:
    from stepcritic.eval.bootstrap import GroupBootstrap

    groups = [shown[row]["group_id"] for row in rows]
    bootstrap = GroupBootstrap(groups)  # one set of draws: every method and N resampled alike
    methods = {m: {} for m in settings.methods}
    for n in budgets(settings.n):
        if any(m in SAMPLED for m in settings.methods):
            per_row = [sampled_values(shown[row]["group_id"], samples[row], n, settings.subsets, settings.seed)
                       for row in rows]
        for method in settings.methods:
            if method in SAMPLED:
                values, spent = [v[method][0] for v in per_row], [v[method][1] for v in per_row]
            else:
                by_row = {run.row: run for run in runs if run.method == method and run.budget == n}
                values = [run_accuracy(by_row[row], shown[row]) for row in rows]
                spent = [{"words": by_row[row].words, "tokens": by_row[row].tokens} for row in rows]
            methods[method][str(n)] = curve_point(bootstrap, groups, values, spent, tokens)
    return methods


def by_aggregate(shown: dict, rows: list, samples: dict, settings: SearchSettings) -> dict:
    """best-of-n's and weighted's accuracy at each N under every aggregate, from the same critiques: which rule
    picks best, without asking the critic again."""
    scored = [m for m in ("best-of-n", "weighted") if m in settings.methods]
    out = {}
    for aggregate in AGGREGATES if scored else ():
        out[aggregate] = {m: {} for m in scored}
        for n in budgets(settings.n):
            per_row = [sampled_values(shown[row]["group_id"], [{**s, "score": s["scores"][aggregate]}
                                                              for s in samples[row]],
                                      n, settings.subsets, settings.seed) for row in rows]
            for m in scored:
                out[aggregate][m][str(n)] = round(statistics.fmean(v[m][0] for v in per_row), 6)
    return out


# ----------------------------------------------------------------------------- report and plot

def write_report(metrics: dict, path: str, plotted: bool) -> None:
    ns = [str(n) for n in metrics["ns"]]
    lines = [f"# Test-time search: {metrics['policy']} with {metrics['critic']}", "",
             f"{metrics['questions']} questions of `{metrics['chains']}`, {metrics['n']} samples each "
             f"(one sampled run, subsampled for N < {metrics['n']}: at most {metrics['settings']['subsets']} subsets "
             f"a question, seed {metrics['settings']['seed']}); chain score: `{metrics['aggregate']}` of the step "
             f"scores. Accuracy with its 95% bootstrap interval over questions; beam and DVTS are run once per N.", "",
             "## Accuracy", "", "| method | " + " | ".join(f"N={n}" for n in ns) + " |",
             "|---|" + "---|" * len(ns)]
    for method, curve in metrics["methods"].items():
        cells = []
        for n in ns:
            point = curve[n]
            low_high = f" [{point['interval'][0]:.2f}, {point['interval'][1]:.2f}]" if point["interval"] else ""
            cells.append(f"{point['accuracy']:.3f}{low_high}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    first = next(iter(metrics["methods"].values()))
    unit = "tokens" if first[ns[0]]["tokens_per_question"] is not None else "words"
    lines += ["", f"## {unit.capitalize()} written by the policy per question (compute)", "",
              "| method | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|" + "---|" * len(ns)]
    for method, curve in metrics["methods"].items():
        lines.append(f"| {method} | " + " | ".join(f"{curve[n][f'{unit}_per_question']:g}" for n in ns) + " |")
    if metrics["by_aggregate"]:
        lines += ["", "## Picks by every aggregate of the step scores (the same critiques)", "",
                  "| aggregate | method | " + " | ".join(f"N={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
        for aggregate, per_method in metrics["by_aggregate"].items():
            for method, curve in per_method.items():
                lines.append(f"| {aggregate} | {method} | " + " | ".join(f"{curve[n]:.3f}" for n in ns) + " |")
    s = metrics["samples"]
    lines += ["", f"Samples: {s['total']} ({s['answered']} with an answer, {s['right']} right, {s['blank']} blank). "
              f"Asked now: {metrics['asked']['samples']} samples, {metrics['asked']['continuations']} continuations, "
              f"{metrics['asked']['critic']} critiques; saved before: {metrics['cached']['samples']}, "
              f"{metrics['cached']['continuations']}, {metrics['cached']['critic']}."]
    if plotted:
        lines += ["", f"![accuracy against N]({PLOT})"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(metrics: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ns = metrics["ns"]
    for method, curve in metrics["methods"].items():
        ys = [curve[str(n)]["accuracy"] for n in ns]
        style = {"oracle": "--", "random": ":", "majority": ":"}.get(method, "-")  # the references apart
        line, = ax.plot(ns, ys, marker="o", linestyle=style, label=method)
        spans = [curve[str(n)]["interval"] for n in ns]
        if all(spans):
            ax.fill_between(ns, [s[0] for s in spans], [s[1] for s in spans], color=line.get_color(), alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (samples, or continuations per step)")
    ax.set_ylabel("answer accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------------- the command

def search(chains_path: str, policy: str, critic_spec: str, out_dir: str, settings: SearchSettings,
           temperature: float | None = 1.0, max_new_tokens: int | None = 256, template: str | None = None,
           limit: int | None = None, overwrite: bool = False, progress: bool = False) -> dict:
    """Sample, score and search (see the module docstring); writes `metrics.json`, `report.md` and the plot to
    `out_dir` and returns the metrics."""
    from stepcritic.eval.bootstrap import settings as interval_settings
    from stepcritic.eval.cache import JsonlLog
    from stepcritic.eval.errors import EvalError
    from stepcritic.eval.judges.prompting import chain_prompt
    from stepcritic.eval.judges.registry import build_judge

    settings.check()
    clock = common.Clock()
    inputs = {"--chains": chains_path, "--template": template}
    common.check_out(out_dir, overwrite, inputs)
    chains = schema.load_chains(chains_path, decode_images=False)
    rows = questions(chains)[:limit]
    where = common.where_of(chains_path)
    shown = {}
    for i in rows:  # every question has a gold answer before anything is asked
        shown[i] = chains[i]
        _gold(shown[i], where(shown[i], i))
    loaded = prompts.load_template(template or prompts.DEFAULT_TEMPLATES["policy"])
    critic = build_judge(critic_spec)
    steps_wanted = any(m in TREES for m in settings.methods)
    try:
        if steps_wanted and not can_score_steps(critic):
            raise EvalError(f"--critic {critic_spec!r} scores whole chains only; --method beam and dvts need step "
                            "scores of partial chains (a prm:, step-check:, hf: or py: critic)")
        model = common.generative_model(policy, temperature, max_new_tokens, "--policy", continues=steps_wanted)
        count_tokens = token_counter(policy)
    except BaseException:
        critic.close()
        raise
    scores = Scores(critic, out_dir, settings.aggregate, progress)
    try:
        fingerprint = model.fingerprint()
        folder = common.cache_dir(out_dir, model.cache_name, fingerprint)
        keys = {(i, k): sample_key(fingerprint, loaded, shown[i], k, settings.seed)
                for i in rows for k in range(settings.n)}

        def make(i):
            return lambda: chain_prompt(prompts.policy_messages(shown[i], loaded), shown[i])

        jobs = [(keys[i, k], make(i)) for i in rows for k in range(settings.n)]
        log = JsonlLog(os.path.join(folder, "samples.jsonl"), "key")
        sampled, texts = common.ask_saved(model, jobs, log, settings.seed, "samples", progress)
        samples, to_score = {}, []
        for i in rows:
            samples[i] = []
            for k in range(settings.n):
                text = texts[keys[i, k]]
                steps, answer = read_sample(text)
                chain = critic_chain(shown[i], steps, answer) if steps else None
                samples[i].append({"answer": None if answer is None else answers.normalize_answer(answer),
                                   "correct": answers.reaches_gold(shown[i], answer), "words": words(text),
                                   "tokens": count_tokens(text) if count_tokens else None, "chain": chain})
                to_score += [chain] if chain else []
        if any(m in ("best-of-n", "weighted") for m in settings.methods):
            scores.score(to_score)
        for row in samples.values():
            for s in row:
                known = s["chain"] is not None and s["chain"]["chain_id"] in scores.records
                s["scores"] = {a: scores.of(s["chain"], a)[0] if known else None for a in AGGREGATES}
                s["score"] = s["scores"][settings.aggregate]
        runs, searched = [], {"asked": 0, "cached": 0, "steps": 0}
        if steps_wanted:
            expansions = JsonlLog(os.path.join(folder, "continuations.jsonl"), "key")
            runs, searched = tree_search(model, fingerprint, loaded, shown, rows, settings, expansions, scores,
                                         count_tokens, progress)
        critic_fingerprint = critic.fingerprint()
    finally:
        model.close()
        scores.close()
        critic.close()

    flat = [s for row in samples.values() for s in row]
    metrics = {"command": "stepcritic search", "chains": chains_path, "policy": model.cache_name,
               "policy_fingerprint": fingerprint, "critic": critic.cache_name, "critic_fingerprint": critic_fingerprint,
               "questions": len(rows), "n": settings.n, "aggregate": settings.aggregate, "ns": budgets(settings.n),
               "settings": {**asdict(settings), "methods": list(settings.methods), **common.sampling(model),
                            "template": loaded.name, "template_hash": loaded.hash},
               "methods": metrics_of(shown, rows, samples, runs, settings, tokens=count_tokens is not None),
               "by_aggregate": by_aggregate(shown, rows, samples, settings),
               "samples": {"total": len(flat), "answered": sum(s["answer"] is not None for s in flat),
                           "right": sum(s["correct"] for s in flat), "blank": sum(s["chain"] is None for s in flat)},
               "asked": {"samples": sampled["asked"], "continuations": searched["asked"], "critic": scores.asked},
               "cached": {"samples": sampled["cached"], "continuations": searched["cached"], "critic": scores.cached},
               "search_steps": searched["steps"]}
    metrics["intervals"] = interval_settings()
    metrics["wall_seconds"] = clock.seconds()

    def write(target):
        os.makedirs(target)
        with open(os.path.join(target, "metrics.json"), "w") as f:
            json.dump(metrics, f, indent=2, sort_keys=True)
        plot(metrics, os.path.join(target, PLOT))
        write_report(metrics, os.path.join(target, "report.md"), plotted=True)

    common.install(out_dir, inputs, write)
    return metrics
