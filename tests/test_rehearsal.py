"""Rehearsal: the tiny base's scene questions written as rows, mixed into a critic's training rows by the recipe
keys `rehearsal_path` / `rehearsal_rows`, and never mistaken for the critic's own rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from stepcritic.train import rehearsal
from stepcritic.train.tiny import rehearsal as tiny_rehearsal

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("r") / "rehearsal")
    tiny_rehearsal.write(out, 12, seed=3)
    return out


def _png(colour="red"):
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def prm_rows(n=6, images=True):
    """Rows with the columns and types of `data build --kind prm-sft`."""
    from datasets import Dataset, Features, Image, List, Value

    rows = [{"messages": [{"role": "user", "content": [{"type": "image", "text": None},
                                                       {"type": "text", "text": f"Question: q{i}\n\nStep 1: s"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "Is it? yes.\n+"}]}],
             "step_targets": [1.0], "chain_id": f"c{i}", "group_id": f"g{i}",
             **({"images": [_png()]} if images else {})} for i in range(n)]
    text = {"type": Value("string"), "text": Value("string")}
    features = Features({"messages": List({"role": Value("string"), "content": List(text)}),
                         "step_targets": List(Value("float32")), "chain_id": Value("string"),
                         "group_id": Value("string"), **({"images": List(Image())} if images else {})})
    return Dataset.from_list(rows, features=features)


def said(row):
    """A row's texts, turn by turn (a saved image part gains `"text": None`)."""
    return [[part.get("text") for part in m["content"]] for m in row["messages"]]


def test_rows_are_the_bases_own_scene_questions_answered_as_it_answers(rehearsed):
    from datasets import load_from_disk

    rows = load_from_disk(rehearsed)["train"]
    assert len(rows) == 12
    record = json.loads(open(f"{rehearsed}/rehearsal.json").read())
    assert record["rows"] == 12 and record["seed"] == 3 and record["say_first"] is True
    for row in rows:
        messages = row["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"] * tiny_rehearsal.QUESTIONS
        assert messages[0]["content"][0]["type"] == "image" and len(row["images"]) == 1
        for m in messages[1::2]:  # said first: a reading, then the answer; never a judgement
            assert m["content"][0]["text"] not in ("+", "-") and "\n" not in m["content"][0]["text"]
    # row k depends on (seed, k) alone
    saved = [said(r) for r in rows]
    assert [said(r) for r in tiny_rehearsal.rows(12, seed=3)] == saved
    assert [said(r) for r in tiny_rehearsal.rows(5, seed=3)] == saved[:5]  # fewer: a prefix
    assert [said(r) for r in tiny_rehearsal.rows(5, seed=4)] != saved[:5]


def test_rows_never_draw_a_held_out_scene(monkeypatch):
    from stepcritic.train.tiny import base_pretrain, scene_qa

    first = list(tiny_rehearsal.rows(3, seed=0))
    weights = scene_qa.parse_weights(tiny_rehearsal.base_settings()["weights"]) or None
    _, _, items = tiny_rehearsal.draw(0, 0, weights, say_first=True)
    monkeypatch.setattr(base_pretrain, "excluded_scenes", lambda: frozenset({base_pretrain.scene_key(items)}))
    after = list(tiny_rehearsal.rows(3, seed=0))  # row 0's scene is now held out: it is skipped
    assert said(after[0]) == said(first[1]) and said(after[1]) == said(first[2])


def test_mix_appends_the_rows_with_the_training_columns_and_marks_them(rehearsed):
    train = prm_rows(6)
    mixed = rehearsal.mix(train, rehearsed, limit=4, seed=0)
    assert len(mixed) == 10 and set(mixed.column_names) == set(train.column_names) | {rehearsal.COLUMN}
    own = [r for r in mixed if not r[rehearsal.COLUMN]]
    other = [r for r in mixed if r[rehearsal.COLUMN]]
    assert sorted(r["chain_id"] for r in own) == [f"c{i}" for i in range(6)] and len(other) == 4
    assert all(r["step_targets"] is None and r["chain_id"] is None and len(r["images"]) == 1 for r in other)
    assert [r[rehearsal.COLUMN] for r in mixed] != [False] * 6 + [True] * 4  # shuffled together
    assert rehearsal.mix(train, rehearsed, seed=0).num_rows == 18  # no limit: every row


def test_mix_refuses_rows_it_cannot_use_in_one_line(rehearsed, tmp_path):
    from stepcritic.data_prep.contract import DataContractError

    with pytest.raises(DataContractError, match="rehearsal_rows is 50 but it holds 12 rows"):
        rehearsal.mix(prm_rows(), rehearsed, limit=50)
    with pytest.raises(DataContractError, match="the training rows do not"):
        rehearsal.mix(prm_rows(images=False), rehearsed)
    with pytest.raises(DataContractError, match="not a saved dataset"):
        rehearsal.mix(prm_rows(), str(tmp_path / "missing"))


def test_a_note_writing_prm_is_recognised_by_its_own_rows_not_the_rehearsed_ones(rehearsed):
    from datasets import Dataset

    from stepcritic.train.prm import writes_notes

    judged = prm_rows(6)
    rows = [dict(r, messages=[r["messages"][0], {"role": "assistant", "content": [{"type": "text", "text": "+"}]}])
            for r in judged]
    bare = Dataset.from_list(rows, features=judged.features)
    assert writes_notes(bare) is False
    assert writes_notes(rehearsal.mix(bare, rehearsed, seed=1)) is False  # the rehearsed answers are not notes
    assert writes_notes(rehearsal.mix(judged, rehearsed, seed=1)) is True


@pytest.mark.parametrize("overrides, message", [
    ({"rehearsal_rows": 10}, "`rehearsal_rows` is set but `rehearsal_path` is not"),
    ({"rehearsal_path": "r", "rehearsal_rows": 0}, "`rehearsal_rows` must be at least 1"),
])
def test_recipes_with_senseless_rehearsal_keys_stop_before_training(overrides, message):
    from stepcritic.train.config import RecipeError, parse_recipe

    with pytest.raises(RecipeError, match=message):
        parse_recipe(RECIPES / "tiny" / "prm.yaml", overrides)


def test_rehearsal_is_refused_for_methods_that_do_not_train_on_chat_rows():
    from stepcritic.train.config import RecipeError, parse_recipe

    with pytest.raises(RecipeError, match="method 'dpo' does not train on chat rows"):
        parse_recipe(RECIPES / "tiny" / "dpo.yaml", {"rehearsal_path": "r"})
    assert parse_recipe(RECIPES / "tiny" / "prm.yaml", {"rehearsal_path": "r"}).script_args.rehearsal_path == "r"


def test_the_writer_command_line(tmp_path, capsys):
    out = str(tmp_path / "rows")
    assert tiny_rehearsal.main(tiny_rehearsal.make_parser().parse_args(["--out", out, "--rows", "3"])) == 0
    assert "wrote 3 rehearsal rows" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--question-weights: unknown question kind 'biger'"):
        tiny_rehearsal.main(tiny_rehearsal.make_parser().parse_args(["--out", out, "--question-weights", "biger=2"]))
