"""ShiftCheck (CMMU) on hand-made groups of circularly shifted questions."""

import pytest

from stepcritic.eval.shiftcheck import circular_shifts, shiftcheck

OPTIONS = ["cat", "dog", "fox", "owl"]


def group(group_id, pick, gold="dog", options=OPTIONS, drop=()):
    """One record per circular shift; `pick(shown_options)` returns the letter the judge answers."""
    return [{"group_id": group_id, "options": shown, "prediction": pick(shown), "gold": gold}
            for i, shown in enumerate(circular_shifts(options)) if i not in drop]


def picks_content(content):
    return lambda shown: "ABCD"[shown.index(content)]


def always(letter):
    return lambda shown: letter


def test_circular_shifts_rotate_right_like_cmmu():
    assert circular_shifts(["A", "B", "C", "D"]) == [
        ["A", "B", "C", "D"], ["D", "A", "B", "C"], ["C", "D", "A", "B"], ["B", "C", "D", "A"]]
    assert circular_shifts([]) == []


def test_all_right_group_is_correct_and_shows_no_bias():
    result = shiftcheck(group("q1", picks_content("dog")))
    assert result["circular_accuracy"] == 1.0
    assert result["consistency"] == 1.0
    assert result["n_groups"] == 1 and result["n_excluded"] == 0
    assert result["bias_rate"] is None  # no failed group to measure bias on


def test_one_wrong_shift_fails_the_whole_group():
    records = group("q1", picks_content("dog"))
    records[2]["prediction"] = "A"  # shift 2 shows fox owl cat dog: "A" is "fox"
    result = shiftcheck(records + group("q2", picks_content("dog")))
    assert result["circular_accuracy"] == 0.5
    assert result["consistency"] == 0.5
    # Only the failed group q1 counts: it picked B, C, A (wrong), A over its four shifts.
    assert result["position_distribution"] == {"A": 50.0, "B": 25.0, "C": 25.0, "D": 0.0}
    assert result["bias_rate"] == pytest.approx((25 ** 2 + 0 + 0 + 25 ** 2) / 4)


def test_a_judge_that_follows_the_content_shows_no_bias_even_when_wrong():
    result = shiftcheck(group("q1", picks_content("fox")))
    assert result["circular_accuracy"] == 0.0
    assert result["consistency"] == 1.0
    assert result["position_distribution"] == {"A": 25.0, "B": 25.0, "C": 25.0, "D": 25.0}
    assert result["bias_rate"] == 0.0


def test_always_a_judge_has_maximal_bias():
    result = shiftcheck(group("q1", always("A")) + group("q2", always("A"), gold="cat"))
    assert result["circular_accuracy"] == 0.0
    assert result["consistency"] == 0.0
    assert result["position_distribution"] == {"A": 100.0, "B": 0.0, "C": 0.0, "D": 0.0}
    # Population variance of (100, 0, 0, 0) = mean of squared deviations from 25.
    assert result["bias_rate"] == pytest.approx((75 ** 2 + 3 * 25 ** 2) / 4)
    assert result["bias_rate_by_n_options"] == {4: pytest.approx(1875.0)}


def test_group_with_a_missing_shift_is_excluded():
    result = shiftcheck(group("q1", picks_content("dog"), drop={3}) + group("q2", always("B")))
    assert result["n_excluded"] == 1
    assert result["n_groups"] == 1
    assert result["circular_accuracy"] == 0.0  # only q2 counts, and it is wrong on 3 of 4 shifts


def test_duplicate_shift_instead_of_a_missing_one_is_excluded():
    records = group("q1", picks_content("dog"), drop={3})
    records.append(dict(records[0]))
    assert shiftcheck(records)["n_excluded"] == 1


def test_without_gold_consistency_is_reported_and_bias_uses_inconsistent_groups():
    consistent = group("q1", picks_content("owl"), gold=None)
    inconsistent = group("q2", always("C"), gold=None)
    result = shiftcheck(consistent + inconsistent)
    assert result["circular_accuracy"] is None
    assert result["consistency"] == 0.5
    assert result["position_distribution"]["C"] == 100.0
    assert result["n_bias_groups"] == 1


def test_unparseable_answers_stay_in_the_denominator():
    records = group("q1", always("A"))
    records[0]["prediction"] = None
    records[1]["prediction"] = "Z"  # names no shown option
    result = shiftcheck(records)
    assert result["circular_accuracy"] == 0.0
    assert result["position_distribution"] == {"A": 50.0, "B": 0.0, "C": 0.0, "D": 0.0}


def test_bias_rate_is_reported_per_option_count():
    three = group("q3", always("B"), options=["x", "y", "z"], gold="x")
    result = shiftcheck(three)
    assert result["bias_rate"] is None  # CMMU's headline number is for 4-option questions
    assert result["bias_rate_by_n_options"][3] == pytest.approx(((100 - 100 / 3) ** 2 + 2 * (100 / 3) ** 2) / 3)


def test_gold_must_be_one_of_the_options():
    with pytest.raises(ValueError, match="not one of its options"):
        shiftcheck(group("q1", always("A"), gold="zebra"))
