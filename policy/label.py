"""`stepcritic data label`: step labels from rollouts, with no human label (Math-Shepherd, OmegaPRM, VisualPRM400K).

A completer (any generative spec that can go on writing an assistant turn: `hf:`, `vllm:`, a `py:` GenerativeJudge)
is shown the image, the question and a chain's first steps as the beginning of its own answer, and writes the rest
`rollouts` times. A prefix's score is the share of those continuations whose answer is the gold one
(`answers.reaches_gold`); a step is correct (hard label) when the score of the prefix that ends with it is above 0.

- `mc` (Math-Shepherd, VisualPRM400K): every step's prefix is rolled out. `max_steps` merges the steps beyond it into
  the last one kept (VisualPRM400K: 12); `stop_after_zero` stops a chain at its first step scored 0, the steps after it
  incorrect with no score of their own (VisualPRM400K does so).
- `binary` (OmegaPRM): binary search for the first prefix scored 0, under `rollout_budget` rollouts per chain; the
  steps before it are correct, it and the steps after it incorrect; a prefix's own score is kept where it was rolled
  out. A chain whose search the budget cannot finish is left out (counted).
- `consensus` (Qwen2.5-Math-PRM): a judge critiques each labelled chain; a chain is kept when its first step judged
  wrong is the one the rollouts found (or neither finds one), and dropped otherwise (counted).

The prefix that is the whole chain needs no rollout: its score is whether the chain's own answer is the gold one.

What the labeller sees of a chain is `blind(chain)`: the question, the images, the gold answer, the steps' text and
the chain's own answer. Its step labels, aspect labels, explanations and corrections never reach a choice it makes
(which prefix to roll out, where a search goes, what the judge is shown); in the output they move to
`meta.true_labels`, which no build reads, and the schema's own `soft_label` and `correct` hold the rollouts' labels,
so `data build --kind prm-sft` (hard, or `--step-targets soft`) reads them unchanged.

Rollouts are asked a round at a time (every chain's next prefixes together, `rollouts` continuations of each), batched
by the completer, and each saved as it arrives (`eval.asking.ask`, keyed by the completer's fingerprint, the template,
the question and images, the prefix, the continuation's number and the seed): a killed run resumes asking only what
was not saved, and two chains that share a prefix share its rollouts.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from stepcritic.data_prep import answers, prompts, schema
from stepcritic.policy import common
from stepcritic.policy.generate import read_sample

METHODS = ("mc", "binary")
LABELLER = "stepcritic.policy.label"
# every per-step annotation that says whether, or how, a step is right: moved out of the labelled steps' way
TRUE_LABEL_FIELDS = ("correct", "soft_label", "rating", "human_score", "description_correctness",
                     "description_relevance", "description_errors", "logic_correct", "logic_relevant", "informative",
                     "logic_error", "explanations", "correction")
SEEN_FIELDS = ("chain_id", "group_id", "source", "question", "reference_answer", "image", "extra_images",
               "final_answer")


@dataclass(frozen=True)
class LabelSettings:
    method: str = "mc"
    rollouts: int = 8
    max_steps: int | None = None
    stop_after_zero: bool = False
    rollout_budget: int | None = None
    seed: int = 0

    def check(self) -> None:
        if self.method not in METHODS:
            raise common.PolicyError(f"--method must be one of {list(METHODS)}, got {self.method!r}")
        if isinstance(self.rollouts, bool) or not isinstance(self.rollouts, int) or self.rollouts < 1:
            raise common.PolicyError(f"--rollouts must be at least 1, got {self.rollouts!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise common.PolicyError(f"--max-steps must be at least 1, got {self.max_steps}")
        if self.stop_after_zero and self.method != "mc":
            raise common.PolicyError("--stop-after-zero applies to --method mc (binary search stops by itself)")
        if self.rollout_budget is not None and self.method != "binary":
            raise common.PolicyError("--rollout-budget applies to --method binary")
        if self.rollout_budget is not None and self.rollout_budget < self.rollouts:
            raise common.PolicyError(f"--rollout-budget {self.rollout_budget} is less than one prefix's --rollouts "
                                     f"{self.rollouts}")


# ----------------------------------------------------------------------------- what the labeller sees

def blind(chain: dict, max_steps: int | None = None) -> dict:
    """The chain as the labeller sees it: no label of any step, its steps beyond `max_steps` merged into the last one
    kept."""
    seen = {name: chain.get(name) for name in SEEN_FIELDS}
    texts = [s["text"] for s in chain["steps"]]
    if max_steps is not None and len(texts) > max_steps:
        texts = texts[:max_steps - 1] + [" ".join(texts[max_steps - 1:])]
    seen["steps"] = [{"text": t} for t in texts]
    return seen


def own_answer(seen: dict) -> str | None:
    return seen.get("final_answer") or read_sample(answers.policy_text([s["text"] for s in seen["steps"]]))[1]


def prefix_text(seen: dict, end: int) -> str:
    """The beginning of the completer's answer: the steps up to `end` (included), one per line, and a line break
    after them, so that what it writes next is the next step."""
    return "\n".join(s["text"] for s in seen["steps"][:end + 1]) + "\n"


def rollout_prompt(seen: dict, end: int, template):
    from stepcritic.eval.judges.prompting import Prompt, chain_prompt

    prompt = chain_prompt(prompts.policy_messages(seen, template) + [prompts.assistant_turn(prefix_text(seen, end))],
                          seen)
    return Prompt(prompt.messages, prompt.images, continue_final=True)


def rollout_key(fingerprint: str, template, seen: dict, end: int, k: int, seed: int) -> str:
    from stepcritic.eval.asking import content_key

    images = [schema.image_fingerprint(image) for image in schema.chain_images(seen)]
    return content_key("rollout", fingerprint, template.hash, seen["question"], images,
                       [s["text"] for s in seen["steps"][:end + 1]], k, seed)


# ----------------------------------------------------------------------------- searches, one per chain

class Search:
    """One chain's labelling: which prefixes it wants rolled out next (`wanted`), told their scores (`take`)."""

    def __init__(self, seen: dict, settings: LabelSettings):
        self.n = len(seen["steps"])
        self.settings = settings
        self.scores: list[float | None] = [None] * self.n
        self.rollouts = [0] * self.n
        self.left_out: str | None = None

    def cost(self, end: int) -> int:
        return 0 if end == self.n - 1 else self.settings.rollouts

    def wanted(self) -> list[int]:
        raise NotImplementedError

    def take(self, end: int, score: float, n_rollouts: int) -> None:
        self.scores[end], self.rollouts[end] = score, n_rollouts

    def labels(self) -> list[bool]:
        raise NotImplementedError


class MonteCarlo(Search):
    def __init__(self, seen, settings):
        super().__init__(seen, settings)
        self.next = 0

    def wanted(self) -> list[int]:
        if not self.settings.stop_after_zero:
            return [i for i in range(self.n) if self.scores[i] is None]
        if self.next >= self.n or (self.next and self.scores[self.next - 1] == 0):
            return []
        return [self.next]

    def take(self, end, score, n_rollouts):
        super().take(end, score, n_rollouts)
        self.next = end + 1

    def labels(self) -> list[bool]:
        # after a step scored 0 (stop_after_zero), the steps that rest on it are wrong too
        zero = next((i for i, s in enumerate(self.scores) if s == 0), None)
        return [s > 0 if s is not None else not (zero is not None and i > zero) for i, s in enumerate(self.scores)]


class BinarySearch(Search):
    def __init__(self, seen, settings):
        super().__init__(seen, settings)
        self.lo, self.hi = 0, self.n  # the first wrong step is in [lo, hi]; n: none

    def wanted(self) -> list[int]:
        if self.lo >= self.hi or self.left_out:
            return []
        mid = (self.lo + self.hi) // 2
        budget = self.settings.rollout_budget
        if budget is not None and sum(self.rollouts) + self.cost(mid) > budget:
            self.left_out = "over_budget"
            return []
        return [mid]

    def take(self, end, score, n_rollouts):
        super().take(end, score, n_rollouts)
        if score > 0:
            self.lo = end + 1
        else:
            self.hi = end

    def labels(self) -> list[bool]:
        return [i < self.lo for i in range(self.n)]


SEARCHES = {"mc": MonteCarlo, "binary": BinarySearch}


def first_error(labels: list[bool | None]) -> int | None:
    return next((i for i, ok in enumerate(labels) if ok is False), None)


# ----------------------------------------------------------------------------- the command

def _checked(chains, where_of) -> None:
    """Every chain has a gold answer and images that decode, before any rollout is asked for."""
    from stepcritic.data_prep.images import to_rgb

    for i in range(len(chains)):
        chain = chains[i]
        where = where_of(chain, i)
        gold = chain.get("reference_answer")
        if not isinstance(gold, str) or not gold.strip():
            raise schema.SchemaError("no gold answer: a rollout's label is whether it reaches it", where,
                                     "reference_answer")
        for j, image in enumerate(schema.chain_images(chain)):
            try:
                to_rgb(image)
            except Exception as e:  # whatever PIL raises for bytes that are no image
                field = "image" if j == 0 else f"extra_images[{j - 1}]"
                raise schema.SchemaError(f"image cannot be decoded ({type(e).__name__}: {e})", where, field) from None


def labelled_chain(chain: dict, seen: dict, search: Search, method: str) -> dict:
    """The input chain with the rollouts' labels in `soft_label` and `correct`, its own labels in `meta.true_labels`."""
    merged = len(seen["steps"]) != len(chain["steps"])
    hard = search.labels()
    steps = []
    for i, step in enumerate(seen["steps"]):
        kept = {} if merged else {"type": chain["steps"][i].get("type"), "premises": chain["steps"][i].get("premises")}
        steps.append({"text": step["text"], **kept, "correct": hard[i], "soft_label": search.scores[i]})
    meta = schema.chain_meta(chain)
    true = {name: [s.get(name) for s in chain["steps"]] for name in TRUE_LABEL_FIELDS
            if any(s.get(name) not in (None, []) for s in chain["steps"])}
    if true:
        true["chain_correct"] = chain.get("chain_correct")
        meta["true_labels"] = true
    meta["rollout_labels"] = {"method": method, "scores": search.scores, "rollouts": search.rollouts,
                              "first_error": first_error(hard), "merged_steps": len(chain["steps"]) - len(steps)}
    answer = seen.get("final_answer")
    answer_correct = answers.reaches_gold(seen, answer) if answer is not None else chain.get("answer_correct")
    return {**{name: chain.get(name) for name in schema.CHAIN_FIELDS}, "steps": steps, "chain_correct": None,
            "answer_correct": answer_correct, "meta": meta}


def _consensus(judge_spec: str, seen: dict, hard: dict, out_dir: str, progress: bool) -> tuple[dict, dict]:
    """Per chain id, whether the judge's first wrong step is the rollouts' (kept) or not; and the counts."""
    from stepcritic.eval.cache import JudgeCache
    from stepcritic.eval.judges.base import Critique
    from stepcritic.eval.judges.registry import build_judge
    from stepcritic.eval.judging import cache_record, is_current
    from stepcritic.eval.runner import chain_digest

    judge = build_judge(judge_spec)
    cache = JudgeCache(out_dir, judge.cache_name, judge.fingerprint())
    try:
        done = cache.critiques.load()
        digests = {cid: chain_digest(c) for cid, c in seen.items()}
        missing = [cid for cid in hard if not is_current(done.get(cid), {"digest": digests[cid]})]
        from tqdm.auto import tqdm

        with tqdm(total=len(missing), desc=f"{judge.name} consensus", unit="chain", disable=not progress) as bar:
            for index, critique in judge.judge_stream(seen[cid] for cid in missing):
                if not critique.failed:
                    cache.critiques.append([cache_record(critique, digests[missing[index]])])
                bar.update(1)
        done = cache.critiques.load()
    finally:
        cache.close()
        judge.close()
    kept, counts = {}, {"judge": judge.cache_name, "kept": 0, "dropped": 0, "unreadable": 0, "unanswered": 0}
    for cid, labels in hard.items():
        record = done.get(cid)
        if not is_current(record, {"digest": digests[cid]}):
            kept[cid] = False
            counts["unanswered"] += 1
            continue
        critique = Critique.from_json(record)
        verdicts = list(critique.verdicts)
        if all(v is None for v in verdicts) and critique.p_incorrect:
            verdicts = [None if p is None else p <= 0.5 for p in critique.p_incorrect]
        if not critique.valid or any(v is None for v in verdicts):
            kept[cid] = False
            counts["unreadable"] += 1
            continue
        kept[cid] = first_error(verdicts) == first_error(labels)
    counts["kept"] = sum(kept.values())
    counts["dropped"] = len(kept) - counts["kept"]
    return kept, counts


def _roll_out(model, ids: list[str], seen: dict, searches: dict, log, loaded, fingerprint: str,
              settings: LabelSettings, progress: bool, saved: set) -> dict:
    """Every search of `ids` to its end, a round at a time; returns the counts of rollouts asked, saved before
    (`saved`: the keys in the log when the run began), and rounds."""
    totals = {"asked": 0, "cached": 0, "rounds": 0}
    n = settings.rollouts
    while wanted := [(cid, end) for cid in ids for end in searches[cid].wanted()]:
        totals["rounds"] += 1
        jobs, keys = [], {}
        for cid, end in wanted:
            if searches[cid].cost(end) == 0:  # the whole chain: its own answer says
                searches[cid].take(end, float(answers.reaches_gold(seen[cid], own_answer(seen[cid]))), 0)
                continue
            keys[cid, end] = [rollout_key(fingerprint, loaded, seen[cid], end, k, settings.seed) for k in range(n)]
            jobs += [(key, lambda c=cid, e=end: rollout_prompt(seen[c], e, loaded)) for key in keys[cid, end]]
        if not jobs:
            continue
        _, texts = common.ask_saved(model, jobs, log, settings.seed, "rollouts", progress,
                                    f"rollouts (round {totals['rounds']})")
        round_keys = {key for key, _ in jobs}
        totals["asked"] += len(round_keys - saved)
        totals["cached"] += len(round_keys & saved)
        saved |= round_keys
        for (cid, end), ks in keys.items():
            prefix = prefix_text(seen[cid], end)
            reached = [answers.reaches_gold(seen[cid], read_sample(prefix + texts[key])[1]) for key in ks]
            searches[cid].take(end, sum(reached) / n, n)
    return totals


def label(chains_path: str, completer: str, out_dir: str, settings: LabelSettings, temperature: float | None = 1.0,
          max_new_tokens: int | None = 128, template: str | None = None, consensus: str | None = None,
          overwrite: bool = False, progress: bool = False, world=None) -> dict | None:
    """Label every step of the chains at `chains_path` by rollouts of `completer` into a chains folder at `out_dir`;
    returns its stats (also in `out_dir/stats.json`). Under several ranks (`world`, a `distributed.World`) each rolls
    out its share of the questions and rank 0 writes the folder; the others return None."""
    from stepcritic import distributed
    from stepcritic.eval.cache import JsonlLog, merge_shards
    from stepcritic.policy.card import write_label_card

    settings.check()
    clock = common.Clock()
    inputs = {"--chains": chains_path, "--template": template}
    common.check_out(out_dir, overwrite, inputs)
    chains = schema.load_chains(chains_path, decode_images=False)
    _checked(chains, common.where_of(chains_path))
    loaded = prompts.load_template(template or prompts.DEFAULT_TEMPLATES["policy"])
    if consensus is not None:  # a judge that cannot be built is said before any rollout
        from stepcritic.eval.judges.registry import build_judge

        build_judge(consensus).close()
    model = common.generative_model(completer, temperature, max_new_tokens, "--completer", continues=True)
    ids = chains.data.column("chain_id").to_pylist()
    seen = {cid: blind(chains[i], settings.max_steps) for i, cid in enumerate(ids)}
    world = world or distributed.ONE_PROCESS
    try:
        fingerprint = model.fingerprint()
        path = os.path.join(common.cache_dir(out_dir, model.cache_name, fingerprint), "rollouts.jsonl")

        def roll_out(share: list[str], shard: str | None, progress: bool, saved: set | None = None):
            searches = {cid: SEARCHES[settings.method](seen[cid], settings) for cid in share}
            log = JsonlLog(path, "key", shard=shard)
            totals = _roll_out(model, share, seen, searches, log, loaded, fingerprint, settings, progress,
                               set(log.load()) if saved is None else saved)
            return searches, totals

        if world.size == 1:
            merge_shards(os.path.dirname(path))  # what a killed run of several ranks saved
            searches, totals = roll_out(ids, None, progress)
        else:  # whole questions to each rank, by the prefixes their chains have to roll out
            work: dict = {}
            for cid in ids:
                work[seen[cid]["group_id"]] = work.get(seen[cid]["group_id"], 0) + len(seen[cid]["steps"])
            # a server's completer is asked from rank 0 alone, at its own concurrency (`Judge.shards`)
            mine = distributed.share(world, work) if model.shards else (set(work) if world.main else set())

            def roll_out_share(shard):
                roll_out([cid for cid in ids if seen[cid]["group_id"] in mine], shard, progress and world.main)

            before = common.ask_on_ranks(world, roll_out_share, path)
            if before is None:
                return None
            # every search again from the merged rollouts, asking nothing: rank 0 holds every chain's labels, and
            # counts as one process would have, with what was saved before this run as saved
            searches, totals = roll_out(ids, None, False, before)
    finally:
        model.close()
    hard = {cid: searches[cid].labels() for cid in ids if not searches[cid].left_out}
    agreed, consensus_counts = (None, None)
    if consensus is not None:
        agreed, consensus_counts = _consensus(consensus, {cid: seen[cid] for cid in hard}, hard, out_dir, progress)
    keep = [cid for cid in hard if agreed is None or agreed[cid]]

    spent = [sum(searches[cid].rollouts) for cid in ids]
    n_steps = sum(searches[cid].n for cid in ids)
    counts = {"chains_in": len(ids), "chains_out": len(keep),
              "left_out": {"over_budget": sum(bool(s.left_out) for s in searches.values()),
                           **({"consensus": consensus_counts["dropped"]} if consensus_counts else {})},
              "steps": sum(searches[cid].n for cid in keep),
              "steps_incorrect": sum(not ok for cid in keep for ok in hard[cid]),
              "steps_merged": sum(len(chains[i]["steps"]) - searches[cid].n for i, cid in enumerate(ids)),
              "rollouts": {"total": sum(spent), "asked": totals["asked"], "cached": totals["cached"],
                           "rounds": totals["rounds"], "per_chain": round(sum(spent) / max(len(ids), 1), 3),
                           "per_step": round(sum(spent) / max(n_steps, 1), 3),
                           "prefixes_rolled_out": sum(r > 0 for s in searches.values() for r in s.rollouts)}}
    stats = {}
    index = {cid: i for i, cid in enumerate(ids)}

    def labelled():
        for cid in keep:
            record = labelled_chain(chains[index[cid]], seen[cid], searches[cid], settings.method)
            counts["true_labels_moved"] = counts.get("true_labels_moved", 0) + ("true_labels" in record["meta"])
            yield schema.validate_chain(record, where=cid)

    def write(target):
        if not keep:
            raise common.PolicyError(f"no chain is left to write: {json.dumps(counts['left_out'])}")
        schema.save_chains(labelled(), target)
        stats.update({"labeller": LABELLER, "input": chains_path, "method": settings.method,
                      "settings": {**asdict(settings), **common.sampling(model), "template": loaded.name,
                                   "template_hash": loaded.hash},
                      "completer": model.cache_name, "completer_fingerprint": fingerprint,
                      **({"consensus": consensus_counts} if consensus_counts else {}), **counts,
                      "wall_seconds": clock.seconds()})
        stats.setdefault("true_labels_moved", 0)
        with open(os.path.join(target, schema.CHAINS_STATS_FILE), "w") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
        write_label_card(stats, os.path.join(target, "README.md"))

    common.install(out_dir, inputs, write)
    return {"out_dir": out_dir, **stats}
