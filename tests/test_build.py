"""Dataset builders (`stepcritic.data_prep.build`): every kind, splits, preference pairs, bad input."""

import json
import random
import time
from collections import Counter

import pytest
from datasets import load_from_disk
from helpers import chain, chains, png, step
from PIL import Image

from stepcritic.data_prep import build, critique, pairs, prompts, schema
from stepcritic.data_prep.splits import split_by_group

COLUMNS = {
    "critique-sft": {"messages", "images", "chain_id", "group_id"},
    "verifier-sft": {"messages", "images", "chain_id", "group_id", "task", "label", "step_index"},
    "prm-sft": {"messages", "step_targets", "images", "chain_id", "group_id"},
    "critique-pref": {"prompt", "chosen", "rejected", "images", "corruption", "chain_id", "group_id"},
    "outcome-rm": {"prompt", "chosen", "rejected", "images", "chosen_chain_id", "rejected_chain_id", "group_id"},
    "policy-sft": {"messages", "images", "chain_id", "group_id"},
}


def fixture_records():
    extra = [
        # An error in the middle followed by a correct step: over-propagation and reluctance apply.
        chain("prop", group_id="g-prop", steps=[
            step("The image shows a circle."),
            step("Circles are always blue.", correct=False, type="reasoning"),
            step("The circle in the image is red.", correct=True),
        ]),
        # No usable labels: every labelled kind must skip it and say why.
        chain("unlabelled", group_id="g-unlabelled", answer_correct=None,
              steps=[{"text": "There is a shape.", "type": None, "correct": None}]),
    ]
    return [schema.validate_chain(c, c["chain_id"]) for c in chains(8) + extra]


@pytest.fixture(scope="module")
def records():
    return fixture_records()


@pytest.fixture(scope="module")
def by_id(records):
    return {c["chain_id"]: c for c in records}


@pytest.fixture(scope="module")
def built(records, tmp_path_factory):
    """Every kind built once from a saved-and-reloaded chains dataset (the CLI's input path)."""
    root = tmp_path_factory.mktemp("built")
    schema.save_chains(records, str(root / "chains"))
    chains_ds = schema.load_chains(str(root / "chains"))
    out = {}
    for kind in build.KINDS:
        stats = build.build_dataset(chains_ds, kind, str(root / kind), test_fraction=0.25, seed=3)
        out[kind] = (stats, load_from_disk(str(root / kind)), root / kind)
    return out


def rows(dataset_dict):
    return [r for split in ("train", "test") for r in dataset_dict[split]]


@pytest.mark.parametrize("kind", build.KINDS)
def test_every_kind_builds_reloads_and_counts_add_up(built, kind):
    stats, ds, out_dir = built[kind]
    assert set(ds["train"].column_names) == COLUMNS[kind]
    assert {s: len(ds[s]) for s in ("train", "test")} == stats["rows"]
    assert stats["rows"]["train"] > 0 and stats["rows"]["test"] > 0
    assert stats["chains_in"] == 10 == stats["chains_used"] + sum(stats["chains_skipped"].values())
    assert sum(stats["chains"].values()) == stats["chains_in"]
    for row in rows(ds):
        (image,) = row["images"]
        assert isinstance(image, Image.Image) and image.size == (64, 64)
    card = (out_dir / "README.md").read_text()
    assert stats["template"]["hash"] in card and f"{stats['chains_in']} chains in" in card
    assert json.loads((out_dir / "build_stats.json").read_text()) == json.loads(json.dumps(stats))


def test_split_by_group_has_no_leakage_and_is_shared_by_all_kinds(built, records):
    test_groups = {c["group_id"] for c in split_by_group(records, 0.25, 3)["test"]}
    for kind, (_, ds, _) in built.items():
        train = {r["group_id"] for r in ds["train"]}
        test = {r["group_id"] for r in ds["test"]}
        assert train and test and not train & test, kind
        assert test <= test_groups and not train & test_groups, kind


def test_build_is_deterministic(records, tmp_path):
    first = build.build_dataset(records, "critique-pref", str(tmp_path / "a"), test_fraction=0.25, seed=3)
    second = build.build_dataset(records, "critique-pref", str(tmp_path / "b"), test_fraction=0.25, seed=3)
    assert first == second
    a, b = load_from_disk(str(tmp_path / "a")), load_from_disk(str(tmp_path / "b"))
    for split in ("train", "test"):
        assert a[split].remove_columns("images").to_list() == b[split].remove_columns("images").to_list()


def test_critique_sft_targets_and_skips(built, by_id):
    stats, ds, _ = built["critique-sft"]
    assert stats["chains_skipped"] == {"unknown_step_label": 1}
    for row in rows(ds):
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert row["messages"][1]["content"][0]["text"] == prompts.critique_target(by_id[row["chain_id"]])
    n_incorrect = sum(r["messages"][1]["content"][0]["text"].count('"correct": false') for r in rows(ds))
    balance = stats["label_balance"]
    assert n_incorrect == balance["train"].get("step/incorrect", 0) + balance["test"].get("step/incorrect", 0)


def test_critique_kinds_skip_chains_without_an_answer_verdict(tmp_path):
    no_answer = schema.validate_chain(chain("no-answer", answer_correct=None, steps=[step("A red circle.")]), "x")
    for kind in ("critique-sft", "critique-pref"):
        stats = build.build_dataset([no_answer], kind, str(tmp_path / kind), test_fraction=0.0)
        assert stats["chains_skipped"] == {"unknown_answer_label": 1} and stats["rows"] == {"train": 0, "test": 0}
    assert load_from_disk(str(tmp_path / "critique-sft"))["train"].column_names == list(build.features("critique-sft"))


def test_verifier_rows_exist_only_where_tasks_apply(built, by_id):
    stats, ds, _ = built["verifier-sft"]
    seen = Counter()
    for row in rows(ds):
        c, task, index = by_id[row["chain_id"]], row["task"], row["step_index"]
        assert row["label"] == prompts.verifier_target(task, c, index) in prompts.VERIFIER_TASKS[task]
        assert row["messages"][-1]["content"][0]["text"] == row["label"]
        if task == "chain_correctness":
            assert index is None
        elif task.startswith("description_"):
            assert schema.describes(c["steps"][index])
        elif task != "step_type":
            assert schema.reasons(c["steps"][index])
        if task in ("description_error", "logic_error"):
            assert c["steps"][index]["correct"] is False
        seen[f"{task}/{row['label']}"] += 1
    assert seen == Counter(stats["label_balance"]["train"]) + Counter(stats["label_balance"]["test"])
    assert stats["chains_skipped"] == {"no_verifier_labels": 1}


def test_prm_assistant_turns_match_step_labels(built, by_id):
    stats, ds, _ = built["prm-sft"]
    for row in rows(ds):
        judged = [m["content"][0]["text"] for m in row["messages"] if m["role"] == "assistant"]
        assert judged == ["+" if s["correct"] else "-" for s in by_id[row["chain_id"]]["steps"]]
    assert stats["chains_skipped"] == {"unknown_step_label": 1}


def what_changed(c: dict, chosen: dict, rejected: dict) -> str:
    """Name the corruption that turns `chosen` into `rejected`, judged only from the two critiques."""
    flips = [(a["correct"], b["correct"], i) for i, (a, b) in enumerate(zip(chosen["steps"], rejected["steps"]))
             if a["correct"] != b["correct"]]
    if not flips:
        if chosen["answer_correct"] != rejected["answer_correct"]:
            return "answer_flip"
        changed = [a for a, b in zip(chosen["steps"], rejected["steps"])
                   if a.get("explanation") != b.get("explanation")]
        return "wrong_explanation" if len(changed) == 1 else "unexplained"
    if chosen["answer_correct"] != rejected["answer_correct"]:
        return "several"
    if all(was is False for was, _, _ in flips) and len(flips) == 1:
        return "miss_perception" if schema.describes(c["steps"][flips[0][2]]) else "reluctant"
    if all(was is True for was, _, _ in flips):
        if all(s["correct"] for s in c["steps"]) and len(flips) == 1:
            return "false_alarm"
        first_error = next(i for i, s in enumerate(c["steps"]) if s["correct"] is False)
        if all(i > first_error for _, _, i in flips):
            return "over_propagation"
    return "several"


def test_preference_pairs_differ_and_their_labels_match_the_change(built, by_id):
    stats, ds, _ = built["critique-pref"]
    for row in rows(ds):
        chosen, rejected = (json.loads(row[k][0]["content"][0]["text"]) for k in ("chosen", "rejected"))
        assert chosen == critique.gold_critique(by_id[row["chain_id"]])
        assert chosen != rejected
        assert what_changed(by_id[row["chain_id"]], chosen, rejected) == row["corruption"]
    assert sum(stats["pref_mix"]["realised"].values()) == sum(stats["rows"].values())


@pytest.mark.parametrize("corruption", list(pairs.CORRUPTIONS))
def test_each_corruption_changes_what_its_name_says(records, corruption):
    pool = pairs.ExplanationPool(records)
    applied = 0
    for c in records:
        if c["chain_id"] == "unlabelled":
            continue
        if pairs.applicable(c, {corruption: 1.0}, pool) != [corruption]:
            continue
        rejected = pairs.apply_corruption(c, corruption, pool, random.Random(0))
        assert what_changed(c, critique.gold_critique(c), rejected) == corruption
        applied += 1
    assert applied > 0, f"no fixture chain exercises {corruption}"


def test_only_applicable_corruptions_are_drawn(records, tmp_path):
    stats = build.build_dataset(records, "critique-pref", str(tmp_path / "p"), test_fraction=0.0,
                                pref_mix={"miss_perception": 1.0})
    # Correct chains and the reasoning-only error chain have no perception error to miss.
    assert stats["chains_skipped"] == {"no_applicable_corruption": 5, "unknown_step_label": 1}
    assert stats["pref_mix"]["realised"] == {"miss_perception": 4}
    stats = build.build_dataset(records, "critique-pref", str(tmp_path / "q"), test_fraction=0.0,
                                pref_mix='{"answer_flip": 2, "false_alarm": 0}')
    assert stats["pref_mix"]["realised"] == {"answer_flip": 9}


@pytest.mark.parametrize("mix, message", [
    ({"typo": 1}, "unknown corruption 'typo'"),
    ({"answer_flip": -1}, "non-negative"),
    ({"answer_flip": 0}, "positive weight"),
    ("{not json", "not valid JSON"),
])
def test_bad_pref_mix_is_rejected(records, tmp_path, mix, message):
    with pytest.raises(ValueError, match=message):
        build.build_dataset(records, "critique-pref", str(tmp_path), pref_mix=mix)


def test_outcome_pairs_stay_within_groups(built, by_id):
    stats, ds, _ = built["outcome-rm"]
    for row in rows(ds):
        good, bad = by_id[row["chosen_chain_id"]], by_id[row["rejected_chain_id"]]
        assert good["chain_correct"] is True and bad["chain_correct"] is False
        assert good["group_id"] == bad["group_id"] == row["group_id"]
        assert row["chosen"][0]["content"][0]["text"] == prompts.chain_completion_text(good)
    assert stats["chains_skipped"] == {"no_contrast_in_group": 1, "unknown_chain_label": 1}


def test_rows_pass_trl_multimodal_preparation(built):
    from trl.data_utils import is_conversational, prepare_multimodal_messages

    for kind, (_, ds, _) in built.items():
        row = ds["train"][0]
        assert is_conversational(row), kind
        prepared = prepare_multimodal_messages(row.get("messages") or row["prompt"], images=row["images"])
        filled = [p for m in prepared for p in m["content"] if p["type"] == "image"]
        assert len(filled) == 1 and isinstance(filled[0]["image"], Image.Image), kind


def test_bad_input_names_the_chain_and_field(tmp_path):
    empty = chain("no-steps", steps=[])
    with pytest.raises(schema.SchemaError, match="no-steps, field 'steps'"):
        build.build_dataset([empty], "critique-sft", str(tmp_path))
    with pytest.raises(ValueError, match="unknown dataset kind 'critic-sft'"):
        build.build_dataset(fixture_records(), "critic-sft", str(tmp_path))
    with pytest.raises(TypeError, match="datasets.Dataset or a list"):
        build.build_dataset("chains/", "critique-sft", str(tmp_path))
    with pytest.raises(schema.SchemaError, match="g0-ok, field 'chain_id'"):
        build.build_dataset([chain("g0-ok"), chain("g0-ok")], "critique-sft", str(tmp_path))
    with pytest.raises(ValueError, match="only applies to kind 'critique-pref'"):
        build.build_dataset(fixture_records(), "prm-sft", str(tmp_path), pref_mix={"answer_flip": 1})


def test_building_every_kind_from_1000_chains_takes_seconds(tmp_path):
    rng = random.Random(0)
    many = []
    for g in range(250):
        image = {"bytes": png((rng.randrange(256), rng.randrange(256), 0), size=96), "path": None}
        for k in range(4):
            steps = [step(f"Step {j} of {g}-{k}.", correct=k % 2 == 0 or j != 1,
                          type=rng.choice(schema.STEP_TYPES)) for j in range(rng.randint(2, 6))]
            many.append(chain(f"c{g}-{k}", group_id=f"g{g}", steps=steps, answer_correct=k % 2 == 0, image=image))
    chains_ds = schema.save_chains([schema.validate_chain(c, c["chain_id"]) for c in many], str(tmp_path / "in"))
    for kind in build.KINDS:
        start = time.perf_counter()
        stats = build.build_dataset(chains_ds, kind, str(tmp_path / kind))
        assert time.perf_counter() - start < 30, kind
        # critique-pref leaves out the chains over its mix's quota (counted), to keep the requested shares
        left_out = stats["chains_skipped"].pop("over_mix_quota", 0) if kind == "critique-pref" else 0
        if kind == "policy-sft":  # a policy learns from the clean chains only: half of these
            left_out = stats["chains_skipped"].pop("not_clean")
        assert stats["chains_used"] + left_out == 1000 and not stats["chains_skipped"], kind
        assert stats["groups"] == {"train": 225, "test": 25}


def test_group_split_size_and_order_independence():
    many = [{"chain_id": f"c{i}", "group_id": f"g{i % 20}"} for i in range(60)]
    split = split_by_group(many, 0.1, seed=7)
    test_groups = {c["group_id"] for c in split["test"]}
    assert len(test_groups) == 2 and len(split["test"]) == 6 and len(split["train"]) == 54
    reordered = split_by_group(list(reversed(many)), 0.1, seed=7)
    assert {c["group_id"] for c in reordered["test"]} == test_groups
    assert split_by_group(many, 0.0, seed=7)["test"] == []
    assert len({c["group_id"] for c in split_by_group(many[:2], 0.1, seed=7)["test"]}) == 1  # at least one
    with pytest.raises(ValueError, match="test_fraction"):
        split_by_group(many, 1.0, seed=7)
