"""Ingest adapters: faithful label mapping, clear errors naming the record and field, and exact accounting."""

import base64
import json
import os
import subprocess
import sys

import pytest
from helpers import miceval_record, png, visco_record, write_jsonl

from stepcritic.data_prep.ingest import IngestError, ingest
from stepcritic.data_prep.schema import load_chains

# ----------------------------------------------------------------------------- MiCEval (hand-made fixture)

@pytest.fixture
def miceval_dir(tmp_path):
    img_dir = tmp_path / "dataset" / "image" / "vqav2" / "images"
    img_dir.mkdir(parents=True)
    (img_dir / "a.png").write_bytes(png())
    records = [
        miceval_record(0),                                                   # correct chain
        miceval_record(1, informative="Yes", cot="No"),                      # "Yes" = uninformative step
        miceval_record(2, relevance="Image Relevant", cot="No"),             # relevant to the image only: an error
        miceval_record(3, correctness="Partially correct", cot="No"),
        miceval_record(4, question="Another question?"),
    ]
    return write_jsonl(tmp_path / "dataset" / "MiCEval_Normal.jsonl", records)


def test_miceval_fixture_labels_and_chain_check(miceval_dir, tmp_path):
    stats = ingest("miceval", miceval_dir, str(tmp_path / "out"))
    assert (stats["n_chains"], stats["n_steps"], stats["n_rejected"]) == (5, 10, 0)
    assert stats["chain_label_check"]["agree"] == 5
    ds = load_chains(str(tmp_path / "out"))
    by_id = {r["chain_id"]: r for r in ds}
    assert by_id["miceval-0"]["chain_correct"] is True
    assert by_id["miceval-0"]["steps"][1]["informative"] is True
    assert by_id["miceval-1"]["steps"][1]["informative"] is False
    assert by_id["miceval-1"]["steps"][1]["correct"] is False
    assert by_id["miceval-2"]["steps"][0]["description_relevance"] == "image"
    assert by_id["miceval-2"]["steps"][0]["correct"] is False
    partial = by_id["miceval-3"]["steps"][0]
    assert (partial["description_correctness"], partial["description_errors"], partial["human_score"]) == \
        ("partial", ["attribute"], 0.5)
    assert by_id["miceval-0"]["group_id"] == by_id["miceval-1"]["group_id"] != by_id["miceval-4"]["group_id"]
    meta = json.loads(by_id["miceval-0"]["meta"])
    assert meta["cot_fully_correct"] == "Yes" and meta["origin_dataset"] == "vqav2"
    assert by_id["miceval-0"]["image"].size == (64, 64)
    assert json.load(open(tmp_path / "out" / "stats.json"))["n_chains"] == 5


def test_miceval_disagreement_is_reported_not_hidden(miceval_dir, tmp_path):
    bad = miceval_record(9, informative="Yes", cot="Yes")  # file says fully correct, labels say otherwise
    lines = open(miceval_dir).read().splitlines() + [json.dumps(bad)]
    write_jsonl(miceval_dir, lines)
    stats = ingest("miceval", miceval_dir, None)
    assert stats["chain_label_check"]["disagree"] == 1
    assert stats["chain_label_check"]["disagreeing_chains"] == ["miceval-9"]


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r["steps"]["2"].update(informativeness_label="Maybe"), "steps.2.informativeness_label"),
    (lambda r: r.update(image="dataset/image/missing.png"), "image"),
    (lambda r: r.update(steps={}), "steps"),
    (lambda r: r["steps"].pop("1"), "steps"),
])
def test_miceval_bad_records(miceval_dir, tmp_path, mutate, field):
    rec = miceval_record(7)
    mutate(rec)
    lines = open(miceval_dir).read().splitlines() + [json.dumps(rec), "{not json"]
    write_jsonl(miceval_dir, lines)
    with pytest.raises(IngestError) as e:
        ingest("miceval", miceval_dir, None)
    assert "MiCEval_Normal.jsonl:6" in str(e.value) and field in str(e.value)
    stats = ingest("miceval", miceval_dir, str(tmp_path / "skip"), on_error="skip")
    assert stats["n_records"] == 7 == stats["n_chains"] + stats["n_rejected"]
    assert [r["where"] for r in stats["rejected"]] == ["MiCEval_Normal.jsonl:6", "MiCEval_Normal.jsonl:7"]
    assert stats["rejected"][0]["field"] == field
    assert "malformed JSON" in stats["rejected"][1]["reason"]


# ----------------------------------------------------------------------------- VISCO

def test_visco(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [visco_record(0), visco_record(1, labels=(True, True))])
    stats = ingest("visco", path, str(tmp_path / "out"))
    assert (stats["n_chains"], stats["n_steps"]) == (2, 5)
    c = load_chains(str(tmp_path / "out"))[0]
    assert [s["correct"] for s in c["steps"]] == [True, False, True]
    assert c["steps"][1]["explanations"] == ["There are two circles.", "Only two.", "Miscounted."]
    assert c["steps"][0]["explanations"] == []
    assert (c["category"], c["generator"], c["answer_correct"], c["chain_correct"]) == ("perception", "m", False, False)


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r.update(reasoning_correctness=[True, False]), "reasoning_correctness"),
    (lambda r: r.update(reasoning_correctness=[True, "nope", True]), "reasoning_correctness[1]"),
    (lambda r: r.update(image=base64.b64encode(b"not an image").decode()), "image"),
    (lambda r: r["response"].update(reasoning=[]), "response.reasoning"),
])
def test_visco_bad_records(tmp_path, mutate, field):
    rec = visco_record(5)
    mutate(rec)
    path = write_jsonl(tmp_path / "test.jsonl", [visco_record(0), rec])
    with pytest.raises(IngestError, match=f"test.jsonl:2.*{field.replace('[', '.').replace(']', '.')}"):
        ingest("visco", path, None)
    stats = ingest("visco", path, None, on_error="skip")
    assert (stats["n_chains"], stats["n_rejected"]) == (1, 1)


# ----------------------------------------------------------------------------- stepwise and canonical jsonl

def test_stepwise(tmp_path):
    (tmp_path / "img.png").write_bytes(png())
    rows = [{"id": "a", "prompt": "Q?", "completions": ["s1", "s2"], "labels": [True, False], "image": "img.png"},
            {"id": "b", "prompt": "Q?", "completions": ["s1"], "labels": [1], "images": ["img.png"]},
            {"id": "c", "prompt": "Q?", "completions": ["s1", "s2"], "labels": [True], "image": "img.png"},
            {"id": "d", "prompt": "Q?", "completions": ["s1"], "labels": [True], "image": "nope.png"}]
    path = write_jsonl(tmp_path / "prm.jsonl", rows)
    stats = ingest("stepwise", path, str(tmp_path / "out"), on_error="skip")
    assert (stats["n_chains"], stats["n_rejected"]) == (2, 2)
    assert {r["field"] for r in stats["rejected"]} == {"labels", "image"}
    ds = load_chains(str(tmp_path / "out"))
    assert [s["correct"] for s in ds[0]["steps"]] == [True, False]
    assert ds[0]["group_id"] == ds[1]["group_id"]  # same image + question


def test_stepwise_labels(tmp_path):
    """1/0 and +/- read as true/false; any other label (a float, a string, a list, an object) is a rejection."""
    (tmp_path / "img.png").write_bytes(png())
    good = [[True, False], [1, 0], ["+", "-"]]
    bad = [[1.0, 0], ["true", False], [2, 0], [None, 0], [[True], 0], [{"ok": 1}, 0]]
    rows = [{"id": str(i), "prompt": f"Q{i}?", "completions": ["s1", "s2"], "labels": labels, "image": "img.png"}
            for i, labels in enumerate(good + bad)]
    path = write_jsonl(tmp_path / "prm.jsonl", rows)
    stats = ingest("stepwise", path, str(tmp_path / "out"), on_error="skip")
    assert (stats["n_chains"], stats["n_rejected"]) == (len(good), len(bad))
    assert {r["field"] for r in stats["rejected"]} == {"labels[0]"}
    for chain in load_chains(str(tmp_path / "out")):
        assert [s["correct"] for s in chain["steps"]] == [True, False]
    with pytest.raises(IngestError, match=r"list.jsonl:1.*unknown label \[True\]"):  # not a bare TypeError
        ingest("stepwise", write_jsonl(tmp_path / "list.jsonl", [rows[7]]), None)


def test_canonical_jsonl_and_duplicates(tmp_path):
    (tmp_path / "img.png").write_bytes(png())
    good = {"chain_id": "x", "question": "Q?", "image": "img.png",
            "steps": [{"text": "a", "type": "reasoning", "logic_correct": True, "logic_relevant": True,
                       "informative": True}, "plain text step"]}
    unknown_field = dict(good, chain_id="y", colour="red")
    bad_type = dict(good, chain_id="z", steps=[{"text": "a", "type": "guess"}])
    path = write_jsonl(tmp_path / "mine.jsonl", [good, good, unknown_field, bad_type])
    stats = ingest("jsonl", path, str(tmp_path / "out"), on_error="skip")
    assert stats["n_chains"] == 1 and stats["n_rejected"] == 3
    assert [r["field"] for r in stats["rejected"]] == ["chain_id", "colour", "steps[0].type"]
    c = load_chains(str(tmp_path / "out"))[0]
    assert c["steps"][0]["correct"] is True and c["steps"][1]["correct"] is None and c["chain_correct"] is None


def test_cli_fail_and_skip_exit_codes(tmp_path):
    path = write_jsonl(tmp_path / "test.jsonl", [visco_record(0), "{broken"])
    cmd = [sys.executable, "-m", "stepcritic", "data", "ingest", "--format", "visco", "--input", path,
           "--out", str(tmp_path / "o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode != 0 and "test.jsonl:2" in r.stderr and "malformed JSON" in r.stderr
    r = subprocess.run(cmd + ["--on-error", "skip"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "n_chains=1" in r.stdout and "n_rejected=1" in r.stdout and "test.jsonl:2" in r.stderr


# ----------------------------------------------------------------------------- the real MiCEval release

@pytest.mark.shared
def test_real_miceval_normal(miceval_jsonl, tmp_path):
    stats = ingest("miceval", miceval_jsonl, str(tmp_path / "mic"))
    assert (stats["n_chains"], stats["n_steps"], stats["n_rejected"]) == (446, 1144, 0)
    assert stats["chain_label_check"] == {"field": "cot_fully_correct", "agree": 446, "disagree": 0,
                                          "disagreeing_chains": []}
    lc = stats["label_counts"]
    assert lc["type"] == {"both": 4, "description": 852, "reasoning": 288}
    assert lc["informative"]["False"] == 38  # the redundant steps: "Yes" on MiCEval's uninformativeness question
    assert os.path.exists(tmp_path / "mic" / "stats.json")
