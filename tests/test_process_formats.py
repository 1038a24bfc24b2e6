"""Process-supervision formats: VisualProcessBench (three-way step labels, neutral kept distinct) and Monte-Carlo
scored steps (VisualPRM400K layout, soft labels with a threshold), from the hand-made fixtures in tests/fixtures,
through ingest (exact counts), the canonical schema, and every build choice (`--neutral`, `--step-targets`)."""

import json
import os

import pytest
from datasets import load_from_disk
from helpers import chain, step

from stepcritic import cli
from stepcritic.data_prep import build, labels, schema
from stepcritic.data_prep.ingest import IngestError, ingest
from stepcritic.data_prep.schema import SchemaError, load_chains, validate_chain

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
VPB = os.path.join(FIXTURES, "visualprocessbench", "test.jsonl")
MC = os.path.join(FIXTURES, "visualprm", "annotations.jsonl")


def quiet(_):
    pass


@pytest.fixture(scope="module")
def vpb(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("vpb") / "chains")
    return ingest("visualprocessbench", VPB, out, on_error="skip", log=quiet), out


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mc") / "chains")
    return ingest("visualprm", MC, out, on_error="skip", log=quiet), out


def by_id(path):
    return {c["chain_id"]: c for c in load_chains(path)}


# ----------------------------------------------------------------------------- VisualProcessBench

def test_visualprocessbench_counts_are_exact(vpb):
    stats, _ = vpb
    assert (stats["n_records"], stats["n_chains"], stats["n_rejected"], stats["n_steps"]) == (9, 5, 4, 15)
    assert stats["n_records"] == stats["n_chains"] + stats["n_rejected"]
    assert [(r["where"], r["field"]) for r in stats["rejected"]] == [
        ("test.jsonl:6", "response.process_correctness[1]"),  # label 2
        ("test.jsonl:7", "response.process_correctness"),  # 2 labels for 3 steps
        ("test.jsonl:8", "image[0]"),  # no such file
        ("test.jsonl:9", "response"),  # a string, not {steps, process_correctness}
    ]
    assert stats["label_counts"]["rating"] == {"-1": 2, "0": 3, "1": 10}
    assert stats["label_counts"]["correct"] == {"False": 2, "None": 3, "True": 10}
    assert stats["label_notes"] == {"neutral_steps": 3, "soft_labelled_steps": 0, "soft_labelled_correct": 0,
                                    "soft_labelled_incorrect": 0, "multi_image_chains": 1, "extra_images": 1}
    assert stats["multi_image_chains"] == ["visualprocessbench-test.jsonl-4"]


def test_visualprocessbench_labels_neutral_and_images(vpb):
    _, out = vpb
    chains = by_id(out)
    first, neutral, multi, mixed = (chains[f"visualprocessbench-test.jsonl-{i}"] for i in (1, 3, 4, 5))
    assert [(s["rating"], s["correct"]) for s in first["steps"]] == [(1, True), (1, True), (-1, False)]
    assert first["chain_correct"] is False and first["answer_correct"] is None
    assert (first["generator"], first["category"], first["reference_answer"]) == ("policy-a", "MathVerse", "A")
    # a neutral step is neither right nor wrong: correct stays null, the raw 0 stays on the step
    assert [(s["rating"], s["correct"]) for s in neutral["steps"]] == [(1, True), (0, None), (1, True)]
    assert neutral["chain_correct"] is None and neutral["steps"][1]["human_score"] is None
    assert [s["rating"] for s in mixed["steps"]] == [0, -1, 0, 1] and mixed["chain_correct"] is False
    # two images: the first is the chain's image, the second its extra image, both kept in order
    assert multi["image"].size == (32, 32) and multi["image"].getpixel((16, 16)) == (0, 160, 0)
    assert len(multi["extra_images"]) == 1 and multi["extra_images"][0].getpixel((16, 16)) == (0, 0, 200)
    assert all(c["extra_images"] == [] for c in (first, neutral, mixed))
    # same image and question, two policies: one group
    assert first["group_id"] == chains["visualprocessbench-test.jsonl-2"]["group_id"] != neutral["group_id"]


def test_visualprocessbench_card_says_what_was_left_open_and_out(vpb):
    _, out = vpb
    card = open(os.path.join(out, "README.md")).read()
    assert "| records in | 9 |" in card and "| records rejected | 4 |" in card
    assert "3 steps are rated neutral" in card and "--neutral skip|correct|incorrect" in card
    assert "1 chains show several images (1 beyond the first). Every image is kept, in order" in card


def test_visualprocessbench_fail_mode_names_line_and_field(tmp_path):
    with pytest.raises(IngestError, match=r"test.jsonl:6, field 'response.process_correctness\[1\]': unknown label 2"):
        ingest("visualprocessbench", VPB, None)


def test_visualprocessbench_image_root(tmp_path):
    """Paths resolve against --image-root or its images/ folder; a wrong root names every path it tried."""
    stats = ingest("visualprocessbench", VPB, None, image_root=os.path.join(FIXTURES, "visualprocessbench", "images"),
                   on_error="skip", log=quiet)
    assert stats["n_chains"] == 5
    stats = ingest("visualprocessbench", VPB, None, image_root=str(tmp_path), on_error="skip", log=quiet)
    assert stats["n_chains"] == 0 and {r["field"] for r in stats["rejected"]} >= {"image[0]"}
    assert f"{tmp_path}/images/mathverse/1.png" in stats["rejected"][0]["reason"]


# ----------------------------------------------------------------------------- Monte-Carlo scored steps

def test_soft_labels_counts_and_default_threshold(mc):
    stats, out = mc
    assert (stats["n_records"], stats["n_chains"], stats["n_rejected"], stats["n_steps"]) == (8, 4, 4, 8)
    assert [(r["where"], r["field"]) for r in stats["rejected"]] == [
        ("annotations.jsonl:5", "steps_with_score[0].score"),  # 1.5
        ("annotations.jsonl:6", "steps_with_score[0].score"),  # "high"
        ("annotations.jsonl:7", "steps_with_score"),  # missing
        ("annotations.jsonl:8", "steps_with_score[1].step"),  # blank text
    ]
    assert stats["soft_threshold"] == labels.SOFT_THRESHOLD == 0.0
    assert {k: v for k, v in stats["label_notes"].items() if v} == {
        "soft_labelled_steps": 8, "soft_labelled_correct": 6, "soft_labelled_incorrect": 2,
        "multi_image_chains": 1, "extra_images": 1}
    chains = by_id(out)
    area = chains["visualprm-annotations.jsonl-1"]
    # the score stays on the step; correct = score above the threshold (0.5 > 0, 0.0 is not)
    assert [(s["soft_label"], s["correct"]) for s in area["steps"]] == [(1.0, True), (0.5, True), (0.0, False)]
    assert area["question"] == "What is the area of the red square if each side is 2?"  # no <image> placeholder
    assert json.loads(area["meta"])["num_mc_correct"] == [8, 4, 0]
    assert chains["visualprm-annotations.jsonl-4"]["question"] == "What shape is it?"  # question_orig preferred
    assert area["group_id"] == chains["visualprm-annotations.jsonl-2"]["group_id"]


def test_soft_threshold_option(tmp_path):
    stats = ingest("visualprm", MC, str(tmp_path / "c"), on_error="skip", log=quiet, soft_threshold=0.5)
    assert (stats["label_notes"]["soft_labelled_correct"], stats["label_notes"]["soft_labelled_incorrect"]) == (3, 5)
    area = by_id(str(tmp_path / "c"))["visualprm-annotations.jsonl-1"]
    assert [s["correct"] for s in area["steps"]] == [True, False, False]  # 0.5 is not above 0.5
    assert "above 0.5 (`--soft-threshold`): 3 correct, 5 incorrect" in open(tmp_path / "c" / "README.md").read()
    for bad in (1, 1.5, -0.1, True):
        with pytest.raises(IngestError, match="--soft-threshold must be in"):
            ingest("visualprm", MC, None, soft_threshold=bad)


def test_cli_prints_the_notes(tmp_path, capsys):
    argv = ["data", "ingest", "--format", "visualprm", "--input", MC, "--out", str(tmp_path / "c"),
            "--on-error", "skip", "--soft-threshold", "0.3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "n_records=8, n_kept=4, n_rejected=4, n_chains=4, n_steps=8" in out
    assert "8 steps with a soft label; above 0.3: 4 correct, 4 incorrect" in out
    assert "1 chains show several images (1 beyond the first), all kept in order" in out


# ----------------------------------------------------------------------------- the canonical schema

def test_canonical_steps_take_rating_and_soft_label():
    chain = validate_chain({"chain_id": "x", "question": "Q?", "image": {"bytes": step_image(), "path": None},
                            "steps": [{"text": "a", "rating": 0}, {"text": "b", "rating": -1},
                                      {"text": "c", "soft_label": 0.25}, {"text": "d", "soft_label": 0.25,
                                                                          "correct": False}]},
                           soft_threshold=0.2)
    assert [s["correct"] for s in chain["steps"]] == [None, False, True, False]  # a given boolean wins
    assert chain["chain_correct"] is False
    for bad_step, field in [({"text": "a", "rating": 2}, "steps[0].rating"),
                            ({"text": "a", "rating": True}, "steps[0].rating"),
                            ({"text": "a", "rating": 1.0}, "steps[0].rating"),
                            ({"text": "a", "rating": 0, "correct": True}, "steps[0].correct"),
                            ({"text": "a", "rating": 1, "correct": False}, "steps[0].correct"),
                            ({"text": "a", "soft_label": 1.5}, "steps[0].soft_label"),
                            ({"text": "a", "soft_label": float("nan")}, "steps[0].soft_label")]:
        with pytest.raises(SchemaError) as e:
            validate_chain({"chain_id": "x", "question": "Q?", "image": {"bytes": step_image(), "path": None},
                            "steps": [bad_step]}, "mine.jsonl:3")
        assert (e.value.where, e.value.field) == ("mine.jsonl:3", field)


def step_image():
    from helpers import png

    return png()


def test_chains_saved_before_the_new_fields_still_load(tmp_path):
    """A dataset whose step struct has no rating / soft_label reads them as null and builds as before."""
    from datasets import Dataset

    old = [validate_chain(c, c["chain_id"]) for c in (chain("a", group_id="g1"), chain("b", group_id="g2"))]
    for c in old:
        for s in c["steps"]:
            del s["rating"], s["soft_label"]
    features = schema.features()
    features["steps"].feature.pop("rating")
    features["steps"].feature.pop("soft_label")
    Dataset.from_list(old, features=features).save_to_disk(str(tmp_path / "old"))
    loaded = load_chains(str(tmp_path / "old"))
    assert "rating" not in loaded[0]["steps"][0]
    stats = build.build_dataset(loaded, "prm-sft", str(tmp_path / "prm"), test_fraction=0.5)
    assert stats["chains_used"] == 2 and stats["neutral"] == {"policy": "skip", "steps": 0}


# ----------------------------------------------------------------------------- build: --neutral and --step-targets

def all_rows(path):
    ds = load_from_disk(path)
    return [r for split in ds for r in ds[split]]


@pytest.mark.parametrize("policy,plus,minus,neutral", [("skip", 10, 2, 3), ("correct", 13, 2, 0),
                                                        ("incorrect", 10, 5, 0)])
def test_prm_sft_neutral_policies(vpb, tmp_path, policy, plus, minus, neutral):
    _, chains = vpb
    stats = build.build_dataset(load_chains(chains), "prm-sft", str(tmp_path / "prm"), test_fraction=0.3,
                                neutral=policy)
    assert stats["chains_used"] == 5 and stats["chains_skipped"] == {}
    total = {k: sum(stats["label_balance"][s].get(k, 0) for s in stats["label_balance"]) for k in ("+", "-", "neutral")}
    assert total == {"+": plus, "-": minus, "neutral": neutral}
    assert stats["neutral"] == {"policy": policy, "steps": 3} and stats["step_targets"] == "hard"
    assert json.load(open(tmp_path / "prm" / "build_stats.json"))["neutral"]["policy"] == policy
    assert f"`--neutral {policy}`" in open(tmp_path / "prm" / "README.md").read()
    mixed = next(r for r in all_rows(str(tmp_path / "prm")) if r["chain_id"].endswith("-5"))  # ratings 0, -1, 0, 1
    assert mixed["step_targets"] == {"skip": [None, 0.0, None, 1.0], "correct": [1.0, 0.0, 1.0, 1.0],
                                     "incorrect": [0.0, 0.0, 0.0, 1.0]}[policy]
    judgements = [m["content"][0]["text"] for m in mixed["messages"] if m["role"] == "assistant"]
    # a neutral step left open shows the scorer's placeholder; its null target keeps it out of the loss
    assert judgements == {"skip": ["+", "-", "+", "+"], "correct": ["+", "-", "+", "+"],
                          "incorrect": ["-", "-", "-", "+"]}[policy]


def test_neutral_policy_in_the_other_kinds(vpb, tmp_path):
    _, chains = vpb
    loaded = load_chains(chains)
    skip = build.build_dataset(loaded, "critique-sft", str(tmp_path / "c"), test_fraction=0.3)
    # VisualProcessBench gives no verdict on the final answer, so the critique kinds have no target anyway; the
    # neutral chains say why first
    assert skip["chains_skipped"] == {"neutral_step": 2, "unknown_answer_label": 3}
    for policy, verdicts in [("skip", {"True": 2, "False": 2}), ("correct", {"True": 3, "False": 2}),
                             ("incorrect", {"True": 2, "False": 3})]:
        stats = build.build_dataset(loaded, "verifier-sft", str(tmp_path / policy), test_fraction=0.3, neutral=policy)
        balance = {k: sum(stats["label_balance"][s].get(f"chain_correctness/{k}", 0) for s in stats["label_balance"])
                   for k in ("correct", "incorrect")}
        assert balance == {"correct": verdicts["True"], "incorrect": verdicts["False"]}, policy


def test_prm_sft_soft_targets(mc, tmp_path):
    _, chains = mc
    hard = build.build_dataset(load_chains(chains), "prm-sft", str(tmp_path / "hard"), test_fraction=0.3)
    soft = build.build_dataset(load_chains(chains), "prm-sft", str(tmp_path / "soft"), test_fraction=0.3,
                               step_targets="soft")
    targets = {r["chain_id"]: r["step_targets"] for r in all_rows(str(tmp_path / "soft"))}
    assert targets["visualprm-annotations.jsonl-1"] == [1.0, 0.5, 0.0]
    assert targets["visualprm-annotations.jsonl-3"] == [0.25, 0.125]
    assert {r["chain_id"]: r["step_targets"] for r in all_rows(str(tmp_path / "hard"))}[
        "visualprm-annotations.jsonl-3"] == [1.0, 1.0]
    assert (hard["step_targets"], soft["step_targets"]) == ("hard", "soft")
    assert sum(soft["label_balance"][s].get("soft target", 0) for s in soft["label_balance"]) == 5
    assert "Step targets: soft" in open(tmp_path / "soft" / "README.md").read()


def test_build_option_errors(tmp_path, capsys):
    with pytest.raises(build.BuildError, match="only applies to kind 'prm-sft'"):
        build.check_options("critique-sft", step_targets="soft")
    with pytest.raises(build.BuildError, match="neutral must be one of"):
        build.check_options("prm-sft", neutral="maybe")
    code = cli.main(["data", "build", "--chains", VPB, "--kind", "verifier-sft", "--step-targets", "soft",
                     "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--step-targets soft only applies to kind 'prm-sft'" in err[0]
    code = cli.main(["data", "ingest", "--format", "visualprm", "--input", MC, "--out", str(tmp_path / "i"),
                     "--soft-threshold", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--soft-threshold must be in [0, 1)" in err[0] and "got 1.0" in err[0]


def test_label_notes_ignore_plain_chains():
    plain = validate_chain(chain("p", steps=[step("The circle is red.")]), "p")
    assert not any(labels.label_notes(plain).values())
