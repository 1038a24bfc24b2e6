"""Honest data cards: `data synth` writes stats.json and a card and prints its counts; a critique build says when
its explanations are placeholders; critique-pref's realised corruption mix follows the requested weights; false
alarms never quote the same question's explanations (which state the truth and would give the pair away)."""

import json
import random
from collections import Counter

import pytest
from helpers import chain, chains, label_stats, step

from stepcritic import cli
from stepcritic.data_prep import build, pairs, schema, synth


def test_synth_writes_stats_and_a_card_and_prints_the_counts(tmp_path, capsys):
    out = tmp_path / "synth"
    assert cli.main(["data", "synth", "--n", "7", "--seed", "1", "--image-size", "32", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip()
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["chains"], stats["groups"], stats["n"], stats["seed"], stats["image_size"]) == (7, 3, 7, 1, 32)
    assert printed.startswith(f"synthesised chains=7, groups=3, steps={stats['steps']}, ")
    assert f"groups_without_faulty_chain={stats['groups_without_faulty_chain']}" in printed
    ds = schema.load_chains(str(out))
    assert stats["steps"] == sum(len(c["steps"]) for c in ds)
    assert stats["steps_incorrect"] == sum(s["correct"] is False for c in ds for s in c["steps"])
    card = (out / "README.md").read_text()
    assert card.startswith("# StepCritic chains: synthetic") and "| chains | 7 |" in card
    assert f"{stats['groups_with_several_chains']} of 3 groups hold two chains or more" in card


def test_the_group_counts_count_identical_and_fault_free_groups():
    meta = {"question_type": "colour", "step_faults": [None] * 3, "independent_after_error": False}  # as synth writes
    clean = [chain(f"a{i}", group_id="a", meta=meta) for i in range(2)]  # identical, no faulty chain
    mixed = [chain("b0", group_id="b", meta=meta),
             chain("b1", group_id="b", answer="blue", answer_correct=False, meta=meta)]
    alone = [chain("c0", group_id="c", meta=meta)]
    records = [schema.validate_chain(c, c["chain_id"]) for c in clean + mixed + alone]
    stats = label_stats(records)
    assert (stats["groups_with_several_chains"], stats["groups_identical_chains"],
            stats["groups_without_faulty_chain"]) == (2, 1, 1)


def unexplained(records):
    for c in records:
        for s in c["steps"]:
            s["explanations"] = []
    return records


@pytest.mark.parametrize("kind", ["critique-sft", "critique-pref"])
def test_a_critique_build_without_reference_critiques_says_its_explanations_are_placeholders(tmp_path, kind):
    stats = build.build_dataset(unexplained(chains(6)), kind, str(tmp_path / "bare"), test_fraction=0.3)
    assert stats["explanations"]["reference"] == 0 and stats["explanations"]["placeholder"] > 0
    card = (tmp_path / "bare" / "README.md").read_text()
    assert "**Placeholder explanations**" in card and '"This step is incorrect."' in card
    stats = build.build_dataset(chains(6), kind, str(tmp_path / "explained"), test_fraction=0.3)
    assert stats["explanations"]["placeholder"] == 0
    card = (tmp_path / "explained" / "README.md").read_text()
    assert "Placeholder" not in card and "explained by a reference critique" in card


def test_the_build_command_notes_placeholder_explanations(tmp_path, capsys):
    path = tmp_path / "chains.jsonl"
    with open(path, "w") as f:
        for c in unexplained(chains(6)):
            c["image"] = "img.png"
            f.write(json.dumps(c) + "\n")
    (tmp_path / "img.png").write_bytes(chains(2)[0]["image"]["bytes"])
    assert cli.main(["data", "build", "--chains", str(path), "--kind", "critique-sft", "--out",
                     str(tmp_path / "o"), "--test-fraction", "0.3"]) == 0
    assert "target explanation is a placeholder" in capsys.readouterr().out


@pytest.fixture(scope="module")
def synthetic():
    return synth.synthesize(900, seed=5, image_size=24)


@pytest.mark.parametrize("mix", [None, {"answer_flip": 1, "reluctant": 2, "false_alarm": 1},
                                 {"miss_perception": 3, "over_propagation": 1, "wrong_explanation": 1}])
def test_critique_pref_realised_mix_matches_the_weights(synthetic, tmp_path, mix):
    stats = build.build_dataset(synthetic, "critique-pref", str(tmp_path / "p"), test_fraction=0.1, pref_mix=mix)
    weights = stats["pref_mix"]["weights"]
    realised = Counter(stats["pref_mix"]["realised"])
    pairs_made = sum(realised.values())
    assert pairs_made == sum(stats["rows"].values()) == stats["chains_used"] > 300
    assert stats["chains_used"] + sum(stats["chains_skipped"].values()) == 900  # left-out chains are counted
    for name, weight in weights.items():  # exact up to rounding in each split (was: answer_flip 46% of 1/6)
        share = realised[name] / pairs_made
        assert share == pytest.approx(weight / sum(weights.values()), abs=0.01), (name, dict(realised))


def test_the_corruption_plan_gives_what_applies_in_the_requested_shares():
    records = [schema.validate_chain(c, c["chain_id"]) for c in chains(40)]  # half correct, half answer errors
    pool = pairs.ExplanationPool(records)
    mix = {"false_alarm": 3.0, "answer_flip": 1.0}
    plan = pairs.plan_corruptions(records, mix, pool, seed=0)
    # false alarms apply only to the 20 correct chains, so 3:1 allows 26 pairs (19 + 7); the rest are left out
    assert Counter(plan.values()) == {"false_alarm": 19, "answer_flip": 7, pairs.OVER_QUOTA: 14}
    for c in records:
        assert plan[c["chain_id"]] in pairs.applicable(c, mix, pool) + [pairs.OVER_QUOTA]
    assert plan == pairs.plan_corruptions(list(reversed(records)), mix, pool, seed=0)  # order-free


def test_false_alarms_never_quote_their_own_questions_explanations():
    # "The circle is red." flagged with "The circle is red, not blue." gives the rejected critique away without
    # the image; an explanation written for another question cannot be checked against the step's words
    group = [chain("q1-ok", group_id="q1"),
             chain("q1-bad", group_id="q1", answer="blue", answer_correct=False,
                   steps=[step("The circle is blue.", correct=False, explanations=["The circle is red, not blue."])])]
    other = [chain("q2-bad", group_id="q2", question="How many shapes?", answer="2", answer_correct=False,
                   steps=[step("There are 2 shapes.", correct=False, explanations=["There is only 1 shape."])])]
    records = [schema.validate_chain(c, c["chain_id"]) for c in group + other]
    pool = pairs.ExplanationPool(records)
    for seed in range(5):
        rejected = pairs.apply_corruption(records[0], "false_alarm", pool, random.Random(seed))
        assert [s.get("explanation") for s in rejected["steps"] if s["correct"] is False] == \
            ["There is only 1 shape."]
    alone = pairs.ExplanationPool(records[:2])  # no other question has an explanation: the generic sentence
    rejected = pairs.apply_corruption(records[0], "false_alarm", alone, random.Random(0))
    assert [s.get("explanation") for s in rejected["steps"] if s["correct"] is False] == [pairs.FALLBACK_FALSE_ALARM]
    # a wrong explanation still comes from another question
    rejected = pairs.apply_corruption(records[1], "wrong_explanation", pool, random.Random(0))
    assert rejected["steps"][0]["explanation"] == "There is only 1 shape."
