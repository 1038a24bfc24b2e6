"""The reward-model and process benchmark formats, from the hand-written fixtures in tests/fixtures (each in its
benchmark's published layout, bad records included on purpose): exact counts (records in = kept + rejected), each
rejection named by record and field, the preference as ranks within a group, the benchmarks' breakdowns, and the
text-only process sets through build."""

import json
import os
import subprocess
import sys

import pytest
from datasets import load_from_disk

from stepcritic.data_prep.build import build_dataset
from stepcritic.data_prep.ingest import IngestError, ingest
from stepcritic.data_prep.schema import chain_images, chain_meta, load_chains

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
INPUTS = {
    "vl-rewardbench": "vl-rewardbench/test.jsonl",
    "multimodal-rewardbench": "multimodal-rewardbench/all_data.json",
    "mm-rlhf-rewardbench": "mm-rlhf-rewardbench/mm_reward_bench.jsonl",
    "processbench": "processbench/gsm8k.json",
    "prmbench": "prmbench/prmtest.jsonl",
}
# format -> (records, kept, chains, [(where, field) of each rejection])
EXPECTED = {
    "vl-rewardbench": (7, 3, 6, [("test.jsonl:4", "human_ranking"), ("test.jsonl:5", "response[1]"),
                                 ("test.jsonl:6", "image"), ("test.jsonl:7", None)]),
    "multimodal-rewardbench": (6, 3, 6, [("all_data.json:item4", "Better"), ("all_data.json:item5", "Output2"),
                                         ("all_data.json:item6", "Image")]),
    "mm-rlhf-rewardbench": (6, 3, 6, [("mm_reward_bench.jsonl:4", "video"), ("mm_reward_bench.jsonl:5", "chosen"),
                                      ("mm_reward_bench.jsonl:6", "rejected")]),
    "processbench": (7, 3, 3, [("gsm8k.json:item4", "label"), ("gsm8k.json:item5", "label"),
                               ("gsm8k.json:item6", "steps[1]"), ("gsm8k.json:item7", "final_answer_correct")]),
    "prmbench": (6, 3, 3, [("prmtest.jsonl:4", "error_steps[0]"), ("prmtest.jsonl:5", "modified_process"),
                           ("prmtest.jsonl:6", "classification")]),
}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    out = {}
    for fmt, path in INPUTS.items():
        stats = ingest(fmt, os.path.join(FIXTURES, path), str(root / fmt), on_error="skip", log=lambda _: None)
        out[fmt] = (stats, {c["chain_id"]: c for c in load_chains(str(root / fmt))}, str(root / fmt))
    return out


@pytest.mark.parametrize("fmt", list(INPUTS))
def test_counts_and_rejections_are_exact(fmt, ingested):
    stats, chains, _ = ingested[fmt]
    n_records, n_kept, n_chains, rejected = EXPECTED[fmt]
    assert (stats["n_records"], stats["n_kept"], stats["n_chains"]) == (n_records, n_kept, n_chains)
    assert stats["n_records"] == stats["n_kept"] + stats["n_rejected"] and len(chains) == n_chains
    assert [(r["where"], r["field"]) for r in stats["rejected"]] == rejected


@pytest.mark.parametrize("fmt", list(INPUTS))
def test_a_bad_record_stops_the_run_in_one_line(fmt, tmp_path):
    _, _, _, rejected = EXPECTED[fmt]
    where, field = rejected[0]
    with pytest.raises(IngestError) as e:
        ingest(fmt, os.path.join(FIXTURES, INPUTS[fmt]), str(tmp_path / "out"), log=lambda _: None)
    message = str(e.value)
    assert "\n" not in message and message.startswith(where) and (field is None or f"field '{field}'" in message)


def test_vl_rewardbench_ranks_categories_and_paragraphs(ingested):
    _, chains, _ = ingested["vl-rewardbench"]
    kite = [chains[f"vl-rewardbench-RLAIF-V_1-{n}"] for n in (1, 2)]
    assert [c["preference_rank"] for c in kite] == [1, 2]  # human_ranking [0, 1]: the first is preferred
    assert {c["group_id"] for c in kite} == {"vl-rewardbench-RLAIF-V_1"}
    assert [(c["category"], c["subset"], c["generator"]) for c in kite] == [
        ("rlaif-v", "hallucination", "model-a"), ("rlaif-v", "hallucination", "model-b")]
    assert [s["text"] for s in kite[1]["steps"]] == ["A red balloon floats over a field.", "It is tied to a fence."]
    assert all(s["correct"] is None for c in kite for s in c["steps"]) and len(chain_images(kite[0])) == 1
    boxes = [chains[f"vl-rewardbench-wildvision_2-{n}"] for n in (1, 2)]
    assert [c["preference_rank"] for c in boxes] == [2, 1] and boxes[0]["reference_answer"] == "1"
    tie = [chains[f"vl-rewardbench-mathverse_3-{n}"]["preference_rank"] for n in (1, 2)]
    assert tie == [1, 1] and chains["vl-rewardbench-mathverse_3-1"]["subset"] == "reasoning"


def test_multimodal_rewardbench_better_and_its_breakdown(ingested):
    _, chains, _ = ingested["multimodal-rewardbench"]
    ranks = {cid: c["preference_rank"] for cid, c in chains.items()}
    assert ranks == {"multimodal-rewardbench-mathvista_7-1": 1, "multimodal-rewardbench-mathvista_7-2": 2,
                     "multimodal-rewardbench-pairs_3-1": 2, "multimodal-rewardbench-pairs_3-2": 1,
                     "multimodal-rewardbench-nocaps_2-1": 1, "multimodal-rewardbench-nocaps_2-2": 2}
    breakdown = {c["group_id"]: (c["category"], c["subset"]) for c in chains.values()}
    assert breakdown == {"multimodal-rewardbench-mathvista_7": ("reasoning", "reasoning/math"),
                         "multimodal-rewardbench-pairs_3": ("safety", "safety/bias"),
                         "multimodal-rewardbench-nocaps_2": ("open_generation/correctness_task", None)}


def test_mm_rlhf_pairs_of_one_question_share_a_set(ingested):
    _, chains, _ = ingested["mm-rlhf-rewardbench"]
    groups = {}
    for c in chains.values():
        groups.setdefault(c["group_id"], []).append(c)
    assert len(groups) == 3 and all(sorted(c["preference_rank"] for c in g) == [1, 2] for g in groups.values())
    sets = {g: {c["set_id"] for c in members} for g, members in groups.items()}
    assert sorted(s for (s,) in sets.values()) == ["q1", "q1", "q2"]  # ACC+ groups the two pairs of q1
    assert {c["category"] for c in chains.values()} == {"mcq", "short"}
    chosen = chains["mm-rlhf-rewardbench-q1-1-1"]
    assert chosen["preference_rank"] == 1 and chain_meta(chosen)["reason"] == "Right colour."


def test_processbench_labels_up_to_the_first_error(ingested):
    _, chains, _ = ingested["processbench"]
    verdicts = {cid: [s["correct"] for s in c["steps"]] for cid, c in chains.items()}
    assert verdicts == {"processbench-gsm8k-0": [True, True, True],
                        "processbench-gsm8k-1": [True, False, None],  # after the first error: unlabelled
                        "processbench-math-2": [False, None]}
    assert [chains[c]["chain_correct"] for c in verdicts] == [True, False, False]
    assert [chains[c]["answer_correct"] for c in verdicts] == [True, False, False]
    assert all(c["image"] is None and c["category"] in ("gsm8k", "math") for c in chains.values())
    # one problem answered by two generators: one group
    assert chains["processbench-gsm8k-0"]["group_id"] == chains["processbench-gsm8k-1"]["group_id"]


def test_prmbench_step_labels_categories_and_reasons(ingested):
    _, chains, _ = ingested["prmbench"]
    circular = chains["prmbench-circular_0"]
    assert [s["correct"] for s in circular["steps"]] == [False, True, False]
    assert circular["steps"][0]["text"] == "Suppose the pen costs 2 dollars."  # the "1. " numbering dropped
    reason = "It assumes the answer and then checks it instead of deriving it."
    assert [s["explanations"] for s in circular["steps"]] == [[reason], [], [reason]]
    assert {c["category"] for c in chains.values()} == {"circular", "counterfactual", "multi_solutions"}
    assert chains["prmbench-multi_solutions_2"]["chain_correct"] is True
    assert chain_meta(circular)["error_steps"] == [1, 3]


def test_text_only_process_sets_build(ingested, tmp_path):
    stats = build_dataset(load_chains(ingested["prmbench"][2]), "prm-sft", str(tmp_path / "prm"), test_fraction=0.0,
                          seed=0)
    rows = load_from_disk(str(tmp_path / "prm"))["train"]
    assert stats["text_only_chains"] == 3 and len(rows) == 3 and all(row["images"] == [] for row in rows)
    assert sorted(r["step_targets"] for r in rows) == [[0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0]]
    # ProcessBench leaves the steps after the first error unlabelled: prm-sft takes only its error-free chains,
    # while outcome-rm pairs the right and the wrong answer to one problem
    folder = ingested["processbench"][2]
    stats = build_dataset(load_chains(folder), "prm-sft", str(tmp_path / "pb-prm"), test_fraction=0.0, seed=0)
    assert stats["rows"]["train"] == 1 and stats["chains_skipped"] == {"unknown_step_label": 2}
    stats = build_dataset(load_chains(folder), "outcome-rm", str(tmp_path / "pb-rm"), test_fraction=0.0, seed=0)
    (pair,) = load_from_disk(str(tmp_path / "pb-rm"))["train"]
    assert (pair["chosen_chain_id"], pair["rejected_chain_id"], pair["images"]) == (
        "processbench-gsm8k-0", "processbench-gsm8k-1", [])


def test_worker_processes_give_the_same_chains(ingested, tmp_path):
    stats = ingest("vl-rewardbench", os.path.join(FIXTURES, INPUTS["vl-rewardbench"]), str(tmp_path / "two"),
                   on_error="skip", log=lambda _: None, num_proc=2)
    assert (stats["n_kept"], stats["n_chains"]) == (3, 6)
    first = load_chains(ingested["vl-rewardbench"][2], decode_images=False).to_list()
    assert load_chains(str(tmp_path / "two"), decode_images=False).to_list() == first


def test_cli_says_records_kept_and_chains(tmp_path):
    r = subprocess.run([sys.executable, "-m", "stepcritic", "data", "ingest", "--format", "mm-rlhf-rewardbench",
                        "--input", os.path.join(FIXTURES, INPUTS["mm-rlhf-rewardbench"]), "--out", str(tmp_path / "o"),
                        "--on-error", "skip"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "n_records=6, n_kept=3, n_rejected=3, n_chains=6" in r.stdout and "Traceback" not in r.stderr
    assert json.load(open(tmp_path / "o" / "stats.json"))["n_kept"] == 3
