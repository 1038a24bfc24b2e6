"""The prompted per-step judge `step-check:`: P(yes) read at the answer's first token, the same however the steps
are batched, one score per step, and a model that answers "yes" (or "no") to everything read as such."""

import pytest

from stepcritic.data_prep.synth import synthesize


@pytest.fixture(scope="module")
def tiny():
    from stepcritic.train.tiny.cache import tiny_critic_path

    return tiny_critic_path()


def test_scores_do_not_depend_on_batching_or_left_padding(tiny):
    from stepcritic.train.scoring import StepCheckScorer

    chains = synthesize(4, seed=7)
    one = StepCheckScorer.from_pretrained(tiny, batch_size=1).score(chains)
    many = StepCheckScorer.from_pretrained(tiny, batch_size=16).score(chains)
    assert [len(s) for s in one] == [len(c["steps"]) for c in chains]
    for a, b in zip(one, many):
        assert a == pytest.approx(b, abs=1e-4)
        assert all(0.0 < p < 1.0 for p in a)


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_a_model_that_always_answers_one_word_is_read_as_that_word(tiny, answer):
    from stepcritic.eval.judges.registry import make_judge

    judge = make_judge(f"step-check:{tiny},threshold=0.5")
    scorer = judge.scorer
    word = scorer.answer_ids[0 if answer == "yes" else 1]

    def favour(module, inputs, logits):  # the answer word becomes the likeliest token everywhere
        logits[..., word] += 100.0
        return logits
    scorer.model.get_output_embeddings().register_forward_hook(favour)
    chains = synthesize(3, seed=3)
    for critique in judge.judge_batch(chains):
        assert all(v is (answer == "yes") for v in critique.verdicts)
        assert len(critique.p_incorrect) == len(critique.verdicts)
