"""`--tasks pairwise` asks each judge only what the task reads, and its report says what its numbers are: a generative
judge is asked the pairs and no critique (a judge that scores responses still critiques every chain, for its scores),
a rerun into the same folder asks nothing, the Diagnostics text describes the pairwise columns it shows, and replies
that name neither response are counted as unparseable, beside an accuracy that counts them wrong."""

import json

from helpers import ShortestWins, ingest_fixture

from stepcritic.eval import report as R
from stepcritic.eval import tasks as T
from stepcritic.eval.judges.generative import GenerativeJudge, Reply
from stepcritic.eval.runner import evaluate

# the VL-RewardBench fixture's two pairs (its third item is a tie in the data), each asked in both orders
N_PAIRS = 2


def prompt_text(prompt) -> str:
    parts = []
    for message in prompt.messages:
        content = message["content"]
        parts += [content] if isinstance(content, str) else [c.get("text", "") for c in content]
    return "\n".join(parts)


class Scripted(GenerativeJudge):
    """A generative judge whose replies to "which response is better?" follow `REPLIES` in turn, recording what
    each prompt asked: "pick" for that question, "critique" for anything else."""

    kind = "test-scripted"
    needs_images = False
    REPLIES = ("A",)

    def __init__(self, spec, **options):
        super().__init__(spec, **options)
        self.asked, self._turn = [], 0

    def generate(self, prompts):
        replies = []
        for prompt in prompts:
            if "Reply with the letter" in prompt_text(prompt):
                self.asked.append("pick")
                replies.append(Reply(self.REPLIES[self._turn % len(self.REPLIES)]))
                self._turn += 1
            else:
                self.asked.append("critique")
                replies.append(Reply('{"steps": []}'))
        return replies


class Unreadable(Scripted):
    kind = "test-unreadable"
    REPLIES = ("Neither is better.",)


class HalfUnreadable(Scripted):
    """Readable in the data's order, unparseable swapped: the runner asks a pair's two orders one after the other."""

    kind = "test-half-unreadable"
    REPLIES = ("A", "Neither is better.")


class CountingScorer(ShortestWins):
    kind = "test-counting-scorer"

    def __init__(self, spec, **options):
        super().__init__(spec, **options)
        self.judged = []

    def judge_batch(self, chains):
        self.judged += [c["chain_id"] for c in chains]
        return super().judge_batch(chains)


def pairwise_run(chains, judges, out, **kw):
    return evaluate(chains, judges, str(out), tasks=kw.pop("tasks", ("pairwise",)), progress=kw.pop("progress", False),
                    log=lambda line: None, **kw)


def test_a_generative_judge_is_asked_the_pairs_and_no_critique_a_scorer_its_critiques(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    generative, scorer = Scripted("generative"), CountingScorer("scorer")
    metrics = pairwise_run(chains, [generative, scorer], tmp_path / "out")
    # the pairs in both orders, nothing more: no critique of any of the fixture's responses
    assert generative.asked == ["pick"] * (2 * N_PAIRS)
    # the scorer compares its chain scores: every response critiqued once, no pair asked
    n_chains = metrics["n_chains"]
    assert len(scorer.judged) == n_chains and len(set(scorer.judged)) == n_chains
    assert metrics["judges"]["scorer"]["overall"]["pairwise"]["score"] == "chain"
    assert metrics["judges"]["generative"]["overall"]["pairwise"]["score"] == "both orders asked"
    predicted = [json.loads(line)["judge"] for line in (tmp_path / "out" / "predictions.jsonl").open()]
    assert predicted == ["scorer"] * n_chains


def test_a_rerun_asks_nothing_and_a_later_command_reads_both_judges_back(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    out = tmp_path / "out"
    asked_first = Scripted("generative")
    first = pairwise_run(chains, [asked_first, CountingScorer("scorer")], out)
    generative, scorer = Scripted("generative"), CountingScorer("scorer")
    again = pairwise_run(chains, [generative, scorer], out)
    # the second run finds both judges' caches complete: the two runs asked each pair in each order once, in all
    assert generative.asked == [] and scorer.judged == []
    assert asked_first.asked + generative.asked == ["pick"] * (2 * N_PAIRS)
    # another judge into the same folder: the earlier two are complete (the generative one without critiques, the
    # scorer with its critiques, which its pairwise answers came from) and reported as they were
    later = pairwise_run(chains, [Scripted("another")], out)
    assert later["earlier_judges"] == {"included": ["generative", "scorer"], "left_out": []}
    keys = ("accuracy", "n_pairs", "order", "flip_rate", "score", "n_unparseable", "n_replies")
    for name in ("generative", "scorer"):
        sections = [m["judges"][name]["overall"]["pairwise"] for m in (first, again, later)]
        assert all({k: s[k] for k in keys} == {k: sections[0][k] for k in keys} for s in sections)
    assert later["judges"]["scorer"]["overall"]["pairwise"]["accuracy"] == 0.75


def test_the_progress_bar_of_pair_questions_names_the_pairwise_task(tmp_path, capsys):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    capsys.readouterr()
    pairwise_run(chains, [Scripted("generative"), CountingScorer("scorer")], tmp_path / "out", progress=True)
    bars = capsys.readouterr().err
    assert "generative pairwise" in bars and "scorer critique" in bars
    assert "shiftcheck" not in bars and "generative critique" not in bars


def test_the_diagnostics_text_describes_the_columns_of_the_tasks_shown(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    pairwise_run(chains, [Scripted("generative")], tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text()
    diagnostics = report.split("## Diagnostics", 1)[1].split("\n## ", 1)[0]
    assert "Pair flip %" in diagnostics and "| Pair acc. (data order) |" in diagnostics
    for critique_column in ("Flagged %", "Propagation bias", "Brier"):
        assert critique_column not in diagnostics
    # with the critique task too, the table has both tasks' columns and the text says what each is
    both = R.diagnostics_text(T.metrics_for(["critique", "pairwise"], "diagnostics"))
    assert both.index("Propagation bias") < both.index("Pair flip %")
    assert "Pair flip %" not in R.diagnostics_text(T.metrics_for(["critique"], "diagnostics"))


def test_unparseable_replies_are_counted_and_shown_not_only_folded_into_accuracy(tmp_path):
    chains = ingest_fixture(tmp_path, "vl-rewardbench", "test.jsonl")
    out = tmp_path / "out"
    metrics = pairwise_run(chains, [Unreadable("unreadable"), HalfUnreadable("half"), ShortestWins("scorer")], out)
    saved = json.loads((out / "metrics.json").read_text())["judges"]
    unreadable, half, scorer = (saved[n]["overall"]["pairwise"] for n in ("unreadable", "half", "scorer"))
    assert (unreadable["n_unparseable"], unreadable["n_replies"]) == (2 * N_PAIRS, 2 * N_PAIRS)
    # counted wrong in its order, as VL-RewardBench counts a reply naming no answer, and a flip
    assert unreadable["accuracy"] == 0.0 and unreadable["flip_rate"] == 1.0
    assert (half["n_unparseable"], half["n_replies"]) == (N_PAIRS, 2 * N_PAIRS)
    assert half["order"]["swapped"] == 0.0 and half["accuracy"] == half["order"]["first"] / 2
    # a judge that scores responses writes no reply: no count, not 0
    assert scorer["n_unparseable"] is None and scorer["n_replies"] is None
    lines = {line.split("`")[1]: line for line in (out / "report.md").read_text().splitlines()
             if line.startswith("- `")}
    assert lines["unreadable"].endswith(f"unparseable: {2 * N_PAIRS} of {2 * N_PAIRS} replies")
    assert lines["half"].endswith(f"unparseable: {N_PAIRS} of {2 * N_PAIRS} replies")
    assert "unparseable" not in lines["scorer"]
    assert f"Pair acc. 0.0 (unparseable: {2 * N_PAIRS} of {2 * N_PAIRS} pair replies)" in R.summary_line(
        "unreadable", metrics["judges"]["unreadable"])
    assert "unparseable" not in R.summary_line("scorer", metrics["judges"]["scorer"])
