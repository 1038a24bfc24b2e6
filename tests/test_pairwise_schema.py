"""Pairwise preference items in the canonical schema: one chain per response, grouped by `group_id`, the human
preference as each chain's `preference_rank` (1 best, equal ranks a tie), the benchmark's breakdowns as `category`
and `subset`, and `set_id` for groups scored together; they round-trip through save and load, and chains datasets
saved before these fields still load and build."""

import pytest
from helpers import chains, png

from stepcritic.data_prep.build import build_dataset
from stepcritic.data_prep.schema import SchemaError, load_chains, save_chains, validate_chain

IMAGE = {"bytes": png(), "path": None}


def response(chain_id: str, text: str, rank, **kw) -> dict:
    return {"chain_id": chain_id, "group_id": "item-1", "question": "Describe the picture.", "image": IMAGE,
            "steps": [text], "preference_rank": rank, "category": "general", "subset": "captioning",
            "set_id": "question-7", **kw}


def test_preference_fields_validate_and_round_trip(tmp_path):
    pair = [validate_chain(response("a", "A red circle.", 1), "a"),
            validate_chain(response("b", "A blue square.", 2), "b")]
    assert [(c["preference_rank"], c["subset"], c["set_id"]) for c in pair] == [
        (1, "captioning", "question-7"), (2, "captioning", "question-7")]
    assert all(c["steps"][0]["correct"] is None and c["chain_correct"] is None for c in pair)  # no step verdicts
    saved = save_chains(pair, str(tmp_path / "pairs"))
    loaded = load_chains(str(tmp_path / "pairs"))
    assert [(r["preference_rank"], r["subset"], r["set_id"], r["group_id"]) for r in loaded] == [
        (1, "captioning", "question-7", "item-1"), (2, "captioning", "question-7", "item-1")]
    assert saved.features["preference_rank"].dtype == "int32"
    tie = validate_chain(response("c", "A circle.", 1), "c")
    assert tie["preference_rank"] == pair[0]["preference_rank"]  # equal ranks: a tie
    plain = validate_chain({"chain_id": "p", "question": "q", "image": IMAGE, "steps": ["s"]}, "p")
    assert (plain["preference_rank"], plain["subset"], plain["set_id"]) == (None, None, None)


@pytest.mark.parametrize("rank", [0, -1, 1.5, True, "1"])
def test_a_bad_rank_names_the_record_and_field(rank):
    with pytest.raises(SchemaError, match=r"^x, field 'preference_rank': preference_rank must be a whole number"):
        validate_chain(response("x", "text", rank), "x")


def test_chains_saved_before_the_preference_fields_still_load_and_build(tmp_path):
    from datasets import load_from_disk

    new = str(tmp_path / "new")
    save_chains([validate_chain(c, c["chain_id"]) for c in chains(8)], new)
    old = str(tmp_path / "old")
    load_from_disk(new).remove_columns(["preference_rank", "subset", "set_id"]).save_to_disk(old)
    loaded = load_chains(old, decode_images=False)
    assert "preference_rank" not in loaded.column_names and len(loaded) == 8
    again = validate_chain(dict(loaded[0]), "again")
    assert (again["preference_rank"], again["subset"], again["set_id"]) == (None, None, None)
    stats = build_dataset(loaded, "prm-sft", str(tmp_path / "prm"), test_fraction=0.25, seed=0)
    assert stats["chains_in"] == 8 and sum(stats["rows"].values()) == 8
