"""The look-up data: repeated word lists (the base's first pre-training stage) repeat exactly, and a text scene
carries no image."""

import random

from stepcritic.experiments.lookup_probe import conversations
from stepcritic.train.tiny import scene_qa
from stepcritic.train.tiny.base_pretrain import repeated_word_batch
from stepcritic.train.tiny.model import build_config


def test_the_second_half_of_each_word_list_repeats_the_first_token_for_token():
    tokenizer = build_config()[1].tokenizer
    batch = repeated_word_batch(tokenizer, random.Random(0), 6)
    for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"]):
        kept = ids[mask.bool()].tolist()
        half = len(kept) // 2
        assert len(kept) % 2 == 0 and kept[:half] == kept[half:]
        assert (labels[mask.bool()] == ids[mask.bool()]).all() and (labels[~mask.bool()] == -100).all()


def test_a_text_scene_states_its_caption_and_shows_no_image_and_answers_like_the_picture():
    as_text = conversations(scene_qa._exists, random.Random(3), 5, (2, 4), "text")
    as_image = conversations(scene_qa._exists, random.Random(3), 5, (2, 4), "image")
    for text, image in zip(as_text, as_image):
        assert [part["type"] for part in text[0]["content"]] == ["text"]
        assert text[0]["content"][0]["text"].endswith(image[0]["content"][1]["text"])  # same question
        assert text[1] == image[1]  # same answer
        assert ": a " in text[0]["content"][0]["text"]  # the caption names what is where


def test_four_tokens_per_cell_each_carry_one_idea_of_their_cell():
    # 16 px patches: a 6 x 6 token grid, each 2 x 2 square one cell; its top-left token is aligned to where the cell
    # is, the other three to the size, colour and shape of what is there (nothing when the cell is empty)
    from stepcritic.data_prep.render import CELL_NAMES, Item
    from stepcritic.train.tiny.alignment import word_per_token
    from stepcritic.train.tiny.vision_pretrain import token_cells

    assert token_cells(9).tolist() == list(range(9))
    assert token_cells(36).tolist()[:12] == [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]
    tokenizer = build_config()[1].tokenizer

    def word(w):
        return tokenizer.encode(" " + w, add_special_tokens=False)[0]
    words = word_per_token(tokenizer, [[Item("circle", "red", "big", 0, 1)]])[0]  # top row, middle column
    assert words[2].tolist()[:len(CELL_NAMES[0][1].split())] == [word(w) for w in CELL_NAMES[0][1].split()]
    assert [words[t, 0].item() for t in (3, 8, 9)] == [word("big"), word("red"), word("circle")]
    assert (words[1:2] == -100).all() and (words[6:8] == -100).all()  # cell 0 is empty: only its name is aligned
    assert words[0, 0].item() == word(CELL_NAMES[0][0].split()[0])


def test_a_scene_as_words_hands_each_image_token_the_sum_of_its_cells_word_embeddings(tmp_path):
    # `--scene words`, the perfectly aligned picture: what the model receives at each image token must be exactly
    # the current embeddings of the words that name the cell and what is there, and nothing else may change
    import torch

    from stepcritic.data_prep.render import CELL_NAMES
    from stepcritic.experiments.lookup_probe import encode, model_inputs
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny.model import build_tiny_critic

    model, processor = load_critic(build_tiny_critic(tmp_path / "init"))
    shown = []
    convs = conversations(scene_qa._exists, random.Random(5), 3, (1, 2), "words", shown)
    batch = encode(processor, convs, "words", shown)
    assert "pixel_values" not in batch and batch["words"].shape[:2] == (3, 9)
    inputs = model_inputs(model, batch)
    table = model.get_input_embeddings().weight
    slots = batch["input_ids"] == model.config.image_token_index
    assert torch.equal(inputs["inputs_embeds"][~slots], table[batch["input_ids"][~slots]])
    tokenizer = processor.tokenizer
    it = shown[0][0]
    words = [*CELL_NAMES[it.row][it.col].split(), it.size, it.colour, it.shape]
    expected = sum(table[tokenizer.encode(" " + w, add_special_tokens=False)[0]] for w in words)
    cell = inputs["inputs_embeds"][0][slots[0]][it.row * 3 + it.col]
    assert torch.allclose(cell, expected, atol=1e-6)


def test_a_caption_of_every_cell_names_all_nine_in_reading_order_and_only_the_shapes_there():
    from stepcritic.data_prep.render import CELL_NAMES, Item
    from stepcritic.experiments.lookup_probe import every_cell

    said = every_cell([Item("circle", "red", "big", 1, 2)])
    parts = said.split(". ")
    assert len(parts) == 9 and said.count("nothing") == 8
    assert parts[5].startswith(f"{CELL_NAMES[1][2]}: a big red circle")
    convs = conversations(scene_qa._exists, random.Random(3), 4, (2, 4), "text-all")
    assert all(c[0]["content"][0]["text"].count(": ") == 9 for c in convs)


def test_silent_empty_alignment_pulls_an_empty_cells_content_tokens_to_zero(monkeypatch):
    # `--silent-empty`: a token with no word is aligned to nothing at all; without it such a token is left free
    import torch

    from stepcritic.train.tiny import vision_pretrain
    from stepcritic.train.tiny.alignment import alignment_loss

    table = torch.nn.Embedding(10, 4)
    words = torch.tensor([[[1, -100], [2, 3], [-100, -100]]])  # three tokens: one word, two words, none
    target = torch.stack([table.weight[1], table.weight[2] + table.weight[3], torch.zeros(4)]).detach()

    class Model:
        def get_input_embeddings(self):
            return table

    def loss_with(last):
        monkeypatch.setattr(vision_pretrain, "cell_features", lambda m, p, n: torch.cat([target[:2], last])[None])
        return (alignment_loss(Model(), None, words).item(),
                alignment_loss(Model(), None, words, silent_empty=True).item())
    free, silent = loss_with(torch.zeros(1, 4))
    assert free == 0 and silent == 0
    free, silent = loss_with(torch.ones(1, 4))
    assert free == 0 and silent > 0


def test_an_echoed_answer_names_the_questions_shape_then_says_the_same_answer():
    # `--echo`: the only change is the subject said first, so that the colour is predicted right after its shape
    plain = conversations(scene_qa._colour, random.Random(4), 6, (2, 4), "text")
    echoed = conversations(scene_qa._colour, random.Random(4), 6, (2, 4), "text", echo=True)
    for a, b in zip(plain, echoed):
        assert a[0] == b[0]
        shape = a[0]["content"][0]["text"].split()[-1].rstrip("?")
        assert b[1]["content"][0]["text"] == f"{shape} {a[1]['content'][0]['text']}"
