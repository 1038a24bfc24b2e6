"""Scene captions and questions (pre-training data for the tiny base) answer from the scene they describe."""

import random

from stepcritic.data_prep.render import Item
from stepcritic.train.tiny import scene_qa


def test_answers_follow_the_scene():
    items = [Item("circle", "red", "big", 0, 0), Item("square", "blue", "small", 1, 1)]
    rng = random.Random(0)
    assert scene_qa.caption(items) == "top left: a big red circle. centre: a small blue square."
    seen = {}
    for _ in range(400):
        for ask in scene_qa.QUESTIONS:
            asked = ask(rng, items)
            if asked:
                seen[asked[0]] = asked[1]
    assert seen["What colour is the circle?"] == "red"
    assert seen["Is the red circle to the left of the blue square?"] == "yes"
    assert seen["Is the blue square bigger than the red circle?"] == "no"
    assert seen["How many circles are there?"] == "1" and seen["Is there a cross in the image?"] == "no"
    assert seen["How many circles and squares are there altogether?"] == "2"


def test_conversations_never_carry_critic_words():
    for seed in range(30):
        messages, png = scene_qa.conversation(random.Random(seed))
        text = " ".join(part["text"] for m in messages for part in m["content"] if part.get("type") == "text")
        assert png.startswith(b"\x89PNG") and messages[0]["content"][0] == {"type": "image"}
        assert not any(word in text for word in ("Step", "correct", "+", "-"))


def test_yes_no_checks_are_true_about_half_of_the_time():
    # drawn blindly, "Is the circle red?" is "no" 3 times in 4 and a base learns to say "no" without looking
    from stepcritic.data_prep.render import place, random_pairs

    rng, answers = random.Random(0), {}
    for _ in range(3000):
        items = place(rng, random_pairs(rng, rng.randint(1, 6)))
        for ask in scene_qa.QUESTIONS:
            asked = ask(rng, items)
            if asked and asked[1] in ("yes", "no"):
                answers.setdefault(ask.__name__, []).append(asked[1] == "yes")
    assert len(answers) == 7
    for name, said in answers.items():
        assert 0.35 <= sum(said) / len(said) <= 0.65, (name, sum(said) / len(said))


def test_most_conversations_ask_about_the_image_without_a_caption_to_copy_from():
    rng = random.Random(1)
    firsts = [scene_qa.conversation(rng)[0][0]["content"][1]["text"] for _ in range(200)]
    captioned = sum(text == "Describe the image." for text in firsts) / len(firsts)
    assert 0.15 <= captioned <= 0.45


def test_question_weights_spend_the_draws_on_the_kinds_named():
    # a base continued on its weakest kinds (base_pretrain --question-weights) must actually see more of them
    rng = random.Random(2)
    weights = scene_qa.parse_weights("relation=6, bigger=0")
    asked = [m["content"][-1]["text"] for _ in range(150)
             for m in scene_qa.conversation(rng, weights=weights)[0] if m["role"] == "user"]
    relation = sum(" to the left of " in q or " above " in q or " below " in q or " to the right of " in q
                   for q in asked) / len(asked)
    assert relation > 0.25  # about 6/18 of the draws, against 1/13 without weights
    assert not any(" bigger than " in q for q in asked)


def test_question_weights_without_weights_leave_the_data_as_it_was():
    # the shipped bases were pre-trained on the unweighted stream: their commands must still reproduce it
    assert scene_qa.conversation(random.Random(5)) == scene_qa.conversation(random.Random(5), weights={})
    unweighted = scene_qa.conversation(random.Random(5))
    assert unweighted != scene_qa.conversation(random.Random(5), weights={"relation": 5.0})


def test_question_weights_errors_name_the_part():
    import pytest

    for text, said in [("relations=2", "unknown question kind 'relations'"), ("sum=x", "must be a number"),
                       ("sum=-1", "cannot be negative"),
                       (",".join(f"{k}=0" for k in scene_qa.KINDS if k not in ("relation", "bigger")), "every scene")]:
        with pytest.raises(ValueError, match=said):
            scene_qa.parse_weights(text)
    assert scene_qa.parse_weights("") == {}


def test_synth_scenes_draw_the_chains_scenes_and_nothing_else_of_them():
    # base_pretrain --synth-scenes: a base continued on the scenes a critic's steps are about (up to 8 shapes, several
    # of a kind), with the same questions; without it the stream is what the shipped bases were trained on
    assert scene_qa.conversation(random.Random(5)) == scene_qa.conversation(random.Random(5), synth_scenes=0.0)
    sizes = [len(scene_qa.conversation(random.Random(k), with_items=True, synth_scenes=1.0)[2]) for k in range(80)]
    assert max(sizes) >= 7 and min(sizes) >= 2
    random_sizes = [len(scene_qa.conversation(random.Random(k), with_items=True)[2]) for k in range(80)]
    assert max(random_sizes) <= 6
    for k in range(20):
        messages = scene_qa.conversation(random.Random(k), synth_scenes=1.0)[0]
        text = " ".join(part.get("text") or "" for m in messages for part in m["content"])
        assert "Step" not in text and "correct" not in text  # a scene and its questions, never a chain or a label


def _count_answers(balance_counts: bool) -> list[int]:
    rng, answers = random.Random(11), []
    for _ in range(400):
        messages, _, items = scene_qa.conversation(rng, with_items=True, synth_scenes=1.0,
                                                   balance_counts=balance_counts, weights={"count_colour": 6.0})
        said = [part["text"] for m in messages for part in m["content"] if part.get("type") == "text"]
        for question, answer in zip(said[::2], said[1::2]):
            colour = next((c for c in scene_qa.COLOUR_NAMES if question == f"How many {c} shapes are there?"), None)
            if colour:
                assert int(answer) == sum(it.colour == colour for it in items)  # answered from the scene
                answers.append(int(answer))
    return answers


def test_balanced_counts_ask_a_scenes_large_counts_more_often():
    # base_pretrain --balance-counts: drawn blindly a colour's count is 3 in about 1 question in 20, and a base learns
    # to answer 2 where a chain's step says 3; drawn by answer it is asked about twice as often, still from the scene
    blind, balanced = _count_answers(False), _count_answers(True)
    share = [sum(a >= 3 for a in answers) / len(answers) for answers in (blind, balanced)]
    assert share[1] > 1.5 * share[0]
    assert {0, 1, 2, 3} <= set(balanced)  # every count is still asked
    assert scene_qa.conversation(random.Random(5)) == scene_qa.conversation(random.Random(5), balance_counts=False)


def test_said_first_answers_read_the_scene_then_answer_as_before():
    # `say_first`: every answer first names what it is about and what the picture shows of it, then gives the same
    # answer; the same draws, so a scene's questions are the ones it would be asked without
    items = [Item("circle", "red", "big", 0, 0), Item("square", "blue", "small", 1, 1)]
    said = {}
    for seed in range(300):
        for ask in (*scene_qa.QUESTIONS, *scene_qa.BALANCED):
            plain, first = ask(random.Random(seed), items), ask(random.Random(seed), items, True)
            assert (plain is None) == (first is None)
            if plain:
                assert first[0] == plain[0] and first[1].endswith(" " + plain[1])
                said[first[0]] = first[1]
    assert said["What colour is the circle?"] == "circle red"
    assert said["Is the circle green?"] == "circle red no"
    assert said["Is the red circle to the left of the blue square?"] == "red circle top left blue square centre yes"
    assert said["Is the blue square bigger than the red circle?"] == "blue square small red circle big no"
    assert said["How many circles and squares are there altogether?"] == "circle 1 square 1 2"
    assert said["Are there more blue shapes than red shapes?"] == "blue 1 red 1 no"
    assert said["Is there 1 square?"] == "square 1 yes" and said["What is at the centre?"].startswith("centre a small")
    messages, _ = scene_qa.conversation(random.Random(3), say_first=True)
    plain, _ = scene_qa.conversation(random.Random(3))
    assert [m["role"] for m in messages] == [m["role"] for m in plain] and messages != plain
