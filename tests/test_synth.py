"""The synthetic chain generator: schema, determinism, labels re-derived from the scene, taxonomy
coverage, and the absence of a text-only shortcut."""

from __future__ import annotations

import collections
import io
import json
import re

import numpy as np
import pytest
from helpers import label_stats
from PIL import Image

from stepcritic.data_prep import schema, synth
from stepcritic.data_prep.render import COLOURS, GRID, PLURALS

SINGULAR = {plural: shape for shape, plural in PLURALS.items()}
COLOUR_WORDS = "|".join(COLOURS)
SHAPE_WORDS = "|".join(PLURALS)


@pytest.fixture(scope="module")
def chains():
    return synth.synthesize(1000, seed=0)


def scene_of(chain) -> list[dict]:
    return schema.chain_meta(chain)["scene"]


def item_named(scene, ref: str) -> dict:
    """`ref` is "circle" (a shape that occurs once) or "red circle"."""
    words = ref.split()
    found = [it for it in scene if it["shape"] == words[-1] and (len(words) == 1 or it["colour"] == words[0])]
    assert len(found) == 1, (ref, scene)
    return found[0]


def count_of(scene, word: str) -> int:
    """Items of a shape ("circles", "cross") or colour ("red")."""
    shape = SINGULAR.get(word, word)
    return sum(it["shape"] == shape or it["colour"] == word for it in scene)


def relation_holds(scene, a: str, relation: str, b: str) -> bool:
    x, y = item_named(scene, a), item_named(scene, b)
    return {"to the left of": x["col"] < y["col"], "to the right of": x["col"] > y["col"],
            "above": x["row"] < y["row"], "below": x["row"] > y["row"]}[relation]


def bigger(scene, a: str, b: str) -> bool:
    return item_named(scene, a)["size"] == "big" and item_named(scene, b)["size"] == "small"


def description_truths(text: str, scene) -> list[bool]:
    """The truth of each fact a description states, worked out from the scene alone."""
    patterns = [
        (rf"The ({SHAPE_WORDS}) is ({COLOUR_WORDS})\.", lambda s, c: [item_named(scene, s)["colour"] == c]),
        (r"The (.+) is at the (.+)\.", lambda ref, cell: [item_named(scene, ref)["cell"] == cell]),
        (r"There (?:is|are) (\d) (\w+)(?: shapes?)? and (\d) (\w+)(?: shapes?)?(?:, so .*)?\.",
         lambda n1, w1, n2, w2: [count_of(scene, w1) == int(n1), count_of(scene, w2) == int(n2)]),
        (r"There (?:is|are) (\d) (\w+)(?: shapes?)?\.", lambda n, w: [count_of(scene, w) == int(n)]),
        (r"The image contains (.+)\.",
         lambda listed: [count_of(scene, s) > 0 for s in re.findall(SHAPE_WORDS, listed)]
         + [len(re.findall(SHAPE_WORDS, listed)) == len({it["shape"] for it in scene})]),
        (r"The (\w+ \w+) is (to the left of|to the right of|above|below) the (\w+ \w+)\.",
         lambda a, r, b: [relation_holds(scene, a, r, b)]),
        (r"The (\w+ \w+) is bigger than the (\w+ \w+)\.", lambda a, b: [bigger(scene, a, b)]),
    ]
    for pattern, truths in patterns:
        m = re.fullmatch(pattern, text)
        if m:
            return truths(*m.groups())
    raise AssertionError(f"no description template matches {text!r}")


def reference_from_scene(question: str, scene) -> str:
    rules = [
        (r"What colour is the (\w+)\?", lambda s: item_named(scene, s)["colour"]),
        (r"How many (\w+) are there\?", lambda p: str(count_of(scene, p))),
        (r"How many (\w+) and (\w+) are there altogether\?", lambda p, q: str(count_of(scene, p) + count_of(scene, q))),
        (r"Are there more (\w+) shapes than (\w+) shapes\?", lambda a, b: count_of(scene, a) > count_of(scene, b)),
        (r"Is there a (\w+) in the image\?", lambda s: count_of(scene, s) > 0),
        (r"Is the (\w+ \w+) bigger than the (\w+ \w+)\?", lambda a, b: bigger(scene, a, b)),
        (r"Is the (\w+ \w+) (to the left of|to the right of|above|below) the (\w+ \w+)\?",
         lambda a, r, b: relation_holds(scene, a, r, b)),
    ]
    for pattern, rule in rules:
        m = re.fullmatch(pattern, question)
        if m:
            answer = rule(*m.groups())
            return answer if isinstance(answer, str) else ("yes" if answer else "no")
    raise AssertionError(f"unknown question {question!r}")


# ----------------------------------------------------------------------------- schema and determinism

def test_every_chain_validates_and_is_well_formed(chains):
    assert len(chains) == 1000
    schema.check_unique_ids(chains)
    for c in chains:
        assert schema.validate_chain(c, c["chain_id"]) == c  # already canonical
        assert 2 <= len(c["steps"]) <= synth.MAX_STEPS
        assert (c["source"], c["generator"]) == ("synthetic", "synth")
        kind = schema.chain_meta(c)["question_type"]
        assert c["category"] == ("reasoning" if kind in ("sum", "compare") else "perception")


def test_same_seed_gives_identical_output_and_prefixes():
    def dump(cs):
        return json.dumps(cs, sort_keys=True, default=lambda b: b.hex())
    first = synth.synthesize(40, seed=7)
    assert dump(first) == dump(synth.synthesize(40, seed=7))
    assert dump(first[:20]) == dump(synth.synthesize(20, seed=7))
    assert dump(first) != dump(synth.synthesize(40, seed=8))


def test_images_show_the_scene_in_meta():
    for c in synth.synthesize(30, seed=2, image_size=72):
        image = Image.open(io.BytesIO(c["image"]["bytes"])).convert("RGB")
        assert image.size == (72, 72)
        cell = 72 / GRID
        occupied = {(it["row"], it["col"]): it["colour"] for it in scene_of(c)}
        for row in range(GRID):
            for col in range(GRID):
                centre = image.getpixel((int((col + 0.5) * cell), int((row + 0.5) * cell)))
                expected = COLOURS[occupied[(row, col)]] if (row, col) in occupied else (255, 255, 255)
                assert centre == expected


# ----------------------------------------------------------------------------- labels


def test_step_labels_are_consistent_with_aspects(chains):
    for c in chains:
        for i, s in enumerate(c["steps"]):
            assert s["correct"] == schema.step_correct_from_aspects(s)
            assert all(p < i for p in s["premises"])
            if s["correct"]:
                assert not s["explanations"] and not s["description_errors"] and s["logic_error"] is None
            else:
                assert len(s["explanations"]) >= 2 and len(set(s["explanations"])) == len(s["explanations"])
        assert c["chain_correct"] == all(s["correct"] for s in c["steps"])


def test_descriptions_are_labelled_by_what_the_scene_shows(chains):
    checked = collections.Counter()
    for c in chains:
        scene = scene_of(c)
        for s in c["steps"]:
            if s["type"] == "reasoning":
                continue
            truths = description_truths(s["text"], scene)
            expected = "correct" if all(truths) else ("partial" if any(truths) else "unsupported")
            if s["text"].startswith("The image contains") and not all(truths):
                expected = "partial" if any(truths[:-1]) else "unsupported"
            assert s["description_correctness"] == expected, (s["text"], scene)
            checked[expected] += 1
    assert min(checked.values()) > 10 and set(checked) == {"correct", "partial", "unsupported"}


def test_colour_error_explanations_state_the_true_colour(chains):
    seen = 0
    for c in chains:
        for s in c["steps"]:
            m = re.fullmatch(rf"The ({SHAPE_WORDS}) is ({COLOUR_WORDS})\.", s["text"])
            if m and s["description_correctness"] == "unsupported":
                true_colour = item_named(scene_of(c), m.group(1))["colour"]
                assert all(true_colour in e for e in s["explanations"][:1])
                seen += 1
    assert seen > 5


def test_answers_and_reasoning_steps_match_the_scene(chains):
    for c in chains:
        scene = scene_of(c)
        assert c["reference_answer"] == reference_from_scene(c["question"], scene)
        last = c["steps"][-1]
        assert last["text"] == f"So the answer is {c['final_answer']}."
        assert c["answer_correct"] == (c["final_answer"] == c["reference_answer"]) == last["correct"]
        for s in c["steps"]:
            more = re.fullmatch(r"So there are more (\w+) shapes than (\w+) shapes\.", s["text"])
            if more and s["informative"]:
                assert s["correct"] == (count_of(scene, more.group(1)) > count_of(scene, more.group(2)))
            both = re.fullmatch(r"There (?:is|are) (\d) (\w+) shapes? and (\d) (\w+) shapes?, "
                                r"so there are more (\w+) shapes than \w+ shapes\.", s["text"])
            if both:  # the conclusion must agree with the counts stated in the same sentence
                n1, c1, n2, c2, more_colour = both.groups()
                assert s["logic_correct"] == (more_colour == (c1 if int(n1) > int(n2) else c2))


def test_inter_errors_and_propagated_errors_are_told_apart(chains):
    for c in chains:
        steps, faults = c["steps"], schema.chain_meta(c)["step_faults"]
        for s, fault in zip(steps, faults):
            if fault == "inter":
                assert s["logic_error"] == "inter" and s["logic_correct"] is False
            if fault == "propagated":  # follows its premises, but one of them is wrong
                assert s["logic_error"] is None
                assert s["logic_correct"] is False and any(not steps[p]["correct"] for p in s["premises"])
                assert any("builds on the mistake" in e for e in s["explanations"])


def test_repeats_and_irrelevant_steps(chains):
    repeats = irrelevant = 0
    for c in chains:
        for s in c["steps"]:
            if s["informative"] is False:
                repeats += 1
                assert s["text"] == c["steps"][s["premises"][0]]["text"] and not s["correct"]
            if s["description_relevance"] in ("image", "none"):
                irrelevant += 1
                assert not s["correct"]
                assert (s["description_relevance"] == "none") == (s["description_correctness"] != "correct")
    assert repeats > 10 and irrelevant > 10


# ----------------------------------------------------------------------------- mix and coverage


def test_groups_mix_clean_and_faulty_chains(chains):
    groups = collections.defaultdict(list)
    for c in chains:
        groups[c["group_id"]].append(c)
    assert all(len(g) == 3 for g in list(groups.values())[:-1])
    for g in groups.values():
        assert len({(c["question"], c["image"]["bytes"]) for c in g}) == 1
    mixed = sum(any(c["chain_correct"] for c in g) and not all(c["chain_correct"] for c in g) for g in groups.values())
    assert mixed / len(groups) > 0.75
    stats = label_stats(chains)
    assert 0.25 <= stats["step_error_rate"] <= 0.40
    assert 0.4 <= stats["chains_fully_correct"] / len(chains) <= 0.65


def test_error_taxonomy_is_covered(chains):
    stats = label_stats(chains)
    assert set(stats["description_errors"]) == set(schema.DESCRIPTION_ERRORS)
    assert min(stats["description_errors"].values()) > 0
    assert stats["logic_errors"].get("inter", 0) > 0 and stats["logic_errors"].get("intra", 0) > 0
    relevance = collections.Counter(s["description_relevance"] for c in chains for s in c["steps"])
    assert relevance["image"] > 0 and relevance["none"] > 0
    assert stats["uninformative"] > 0 and stats["propagated"] > 0
    assert set(stats["step_types"]) == set(schema.STEP_TYPES)
    assert set(stats["question_types"]) == set(synth.QUESTIONS)


def test_later_steps_can_be_independent_of_an_earlier_error(chains):
    independent = 0
    for c in chains:
        steps = c["steps"]
        wrong = {i for i, s in enumerate(steps) if not s["correct"]}
        # a correct step after a wrong one that does not rest on it: VISCO's counter-example to
        # "errors always propagate"
        independent += any(s["correct"] and wrong and min(wrong) < i and not wrong & set(s["premises"])
                           for i, s in enumerate(steps))
    assert independent > 50
    assert sum(schema.chain_meta(c)["independent_after_error"] for c in chains) >= independent


def test_error_rate_rescales_faults():
    assert all(c["chain_correct"] for c in synth.synthesize(60, seed=1, error_rate=0.0))
    low = label_stats(synth.synthesize(300, seed=1, error_rate=0.1))["step_error_rate"]
    high = label_stats(synth.synthesize(300, seed=1, error_rate=0.5))["step_error_rate"]
    assert low < 0.2 < high


def test_error_rate_from_the_command_line_and_out_of_range(tmp_path, capsys):
    from stepcritic import cli

    out = str(tmp_path / "many-wrong")
    assert cli.main(["data", "synth", "--n", "60", "--seed", "1", "--error-rate", "0.5", "--out", out]) == 0
    with open(f"{out}/stats.json") as f:
        assert json.load(f)["error_rate"] == 0.5
    capsys.readouterr()
    assert cli.main(["data", "synth", "--n", "6", "--error-rate", "1.5", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--error-rate must be between 0 and 1, got 1.5" in err[0]


def _bigger_steps(chains):
    return [step["correct"] for c in chains
            for step, template in zip(c["steps"], schema.chain_meta(c)["step_templates"]) if template == "bigger"]


def test_fault_rates_replace_one_templates_rate_and_leave_the_other_chains_as_they_were():
    default, always = synth.synthesize(600, seed=2), synth.synthesize(600, seed=2, fault_rates="bigger=1")
    never = synth.synthesize(600, seed=2, fault_rates={"bigger": 0.0})
    wrong = {name: 1 - np.mean(_bigger_steps(c)) for name, c in (("default", default), ("always", always),
                                                                 ("never", never))}
    assert len(_bigger_steps(default)) > 40
    # every faulty chain's size claim goes wrong at rate 1 (each group's clean reference chain stays right)
    assert wrong["never"] < wrong["default"] < 0.4 < 0.6 < wrong["always"]
    # the draws are the same: a chain without a size claim is the same chain
    unsized = [i for i, c in enumerate(default) if "bigger" not in schema.chain_meta(c)["step_templates"]]
    assert len(unsized) > 400
    assert all(default[i] == always[i] == never[i] for i in unsized)


def test_fault_rates_errors_name_the_part_and_the_command_line_records_them(tmp_path, capsys):
    from stepcritic import cli

    with pytest.raises(synth.SynthError, match="unknown template 'biger' \\(did you mean 'bigger'\\?\\)"):
        synth.parse_fault_rates("biger=0.5")
    with pytest.raises(synth.SynthError, match="bigger=x: the rate must be a number"):
        synth.parse_fault_rates("bigger=x")
    assert synth.parse_fault_rates(" bigger=0.75, colour=0 ") == {"bigger": 0.75, "colour": 0.0}
    out = str(tmp_path / "sizes")
    assert cli.main(["data", "synth", "--n", "30", "--fault-rates", "bigger=0.75", "--out", out]) == 0
    with open(f"{out}/stats.json") as f:
        assert json.load(f)["fault_rates"] == {"bigger": 0.75}
    with open(f"{out}/README.md") as f:
        assert "own fault rates bigger=0.75" in f.read()
    capsys.readouterr()
    assert cli.main(["data", "synth", "--n", "6", "--fault-rates", "bigger=2", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fault-rates: bigger=2: the rate must be between 0 and 1" in err[0]
    assert not (tmp_path / "x").exists()


def test_synthesize_to_disk_round_trips(tmp_path):
    stats = synth.synthesize_to_disk(25, 3, str(tmp_path / "synth"), chains_per_question=2)
    ds = schema.load_chains(str(tmp_path / "synth"))
    assert len(ds) == stats["chains"] == 25 and stats["groups"] == 13
    assert stats["steps_incorrect"] == sum(not s["correct"] for row in ds for s in row["steps"])


# ----------------------------------------------------------------------------- no text-only shortcut


def _step_rows(cs, keep):
    rows = [(s["text"], scene_of(c), not s["correct"]) for c in cs for s in c["steps"] if keep(s)]
    return [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows], dtype=int)


def _scene_facts(scene) -> list[str]:
    facts = set()
    for it in scene:
        facts |= {f"{it['shape']}={it['colour']}", f"{it['shape']}@{it['cell']}", f"{it['colour']}@{it['cell']}",
                  f"{it['colour']}.{it['shape']}={it['size']}"}
    for key in ("shape", "colour"):
        facts |= {f"n.{k}={v}" for k, v in collections.Counter(it[key] for it in scene).items()}
    return sorted(facts)


def _text_with_scene(text: str, scene) -> str:
    """Step words plus (word, fact) pairs for the scene facts about what the step names."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    pairs = [f"{w}|{f}" for f in _scene_facts(scene) if any(w in re.split(r"[=@. ]", f) for w in words)
             for w in words]
    return " ".join(words + [p.replace(" ", "_") for p in pairs])


def _auc(train, test, featurise=lambda text, scene: text) -> float:
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    vectoriser = CountVectorizer(token_pattern=r"\S+", binary=True)
    x_train = vectoriser.fit_transform([featurise(t, s) for t, s in zip(train[0], train[1])])
    model = LogisticRegression(C=0.3, solver="liblinear", max_iter=2000).fit(x_train, train[2])
    x_test = vectoriser.transform([featurise(t, s) for t, s in zip(test[0], test[1])])
    return roc_auc_score(test[2], model.predict_proba(x_test)[:, 1])


def test_step_text_alone_does_not_predict_the_label_but_text_with_scene_does():
    train_chains, test_chains = synth.synthesize(2000, seed=0), synth.synthesize(2000, seed=1)
    for keep in (lambda s: s["type"] == "description", lambda s: True):
        assert abs(_auc(_step_rows(train_chains, keep), _step_rows(test_chains, keep)) - 0.5) < 0.07
    describe = lambda s: s["type"] == "description"  # noqa: E731
    train, test = _step_rows(train_chains, describe), _step_rows(test_chains, describe)
    # the same classifier, shown the scene, does much better: the labels live in the image
    assert _auc(train, test, _text_with_scene) > _auc(train, test) + 0.12


def test_duplicate_texts_carry_both_labels_at_similar_rates():
    by_text = collections.defaultdict(list)
    for c in synth.synthesize(3000, seed=4):
        for s in c["steps"]:
            by_text[s["text"]].append(not s["correct"])
    overall = np.mean([x for v in by_text.values() for x in v])
    frequent = [(np.mean(v), len(v)) for v in by_text.values() if len(v) >= 20]
    assert len(frequent) > 40
    assert all(0 < rate < 1 for rate, _ in frequent)  # every frequent sentence is sometimes right, sometimes wrong
    # each sentence's error rate is the overall one up to sampling noise (4 binomial standard errors)
    assert all(abs(rate - overall) < 4 * np.sqrt(overall * (1 - overall) / n) for rate, n in frequent)
    assert np.mean([abs(rate - overall) for rate, _ in frequent]) < 0.08


def test_easy_level_has_fewer_shapes_and_still_no_text_shortcut():
    easy = synth.synthesize(2000, seed=0, level="easy")
    scenes = [schema_meta["scene"] for schema_meta in (json.loads(c["meta"]) for c in easy)]
    counted = collections.Counter(len(s) for s in scenes)
    assert max(counted) <= 5 and np.mean([len(s) for s in scenes]) < 2.6  # standard scenes hold 3-5 shapes
    assert {json.loads(c["meta"])["level"] for c in easy} == {"easy"}
    assert {c["category"] for c in easy} == {"perception"}
    train, test = _step_rows(easy, lambda s: True), _step_rows(synth.synthesize(2000, seed=1, level="easy"),
                                                                 lambda s: True)
    assert abs(_auc(train, test) - 0.5) < 0.07


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match="unknown level"):
        synth.synthesize(3, level="hard")
