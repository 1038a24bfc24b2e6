"""The perception probe's data: every question has one right answer, readable from the image or the text."""

import re

from stepcritic.experiments.perception_probe import colour_questions


def test_each_question_asks_about_a_shape_that_occurs_once_and_answers_its_colour():
    data = colour_questions(3, 40, seed=0, as_text=True)
    assert len(data) == 40
    for row in data:
        prompt = row["messages"][0]["content"][1]["text"]
        shape = re.search(r"What colour is the (\w+)\?", prompt).group(1)
        scene = re.findall(r"(\w+) (\w+)\.", prompt.split("What colour")[0])
        assert len(scene) == 3
        matches = [colour for colour, s in scene if s == shape]
        assert matches == [row["messages"][1]["content"][0]["text"]]


def test_image_questions_show_the_scene_and_text_controls_show_a_blank():
    image_row = colour_questions(3, 1, seed=0)[0]
    text_row = colour_questions(3, 1, seed=0, as_text=True)[0]
    assert image_row["messages"][0]["content"][1]["text"].startswith("What colour")
    assert len(set(image_row["images"][0].getdata())) > 2        # white, grid lines and shapes
    assert set(text_row["images"][0].getdata()) == {(255, 255, 255)}
