"""`train_sampling_strategy: group_by_length` on conversational rows, which carry no lengths of their own."""

from types import SimpleNamespace

from datasets import Dataset

from stepcritic.train import length_groups


def rows(n=400):
    # alternating short and long conversations: in this order every batch of 4 pads two short rows to a long one
    def message(k):
        text = "x" * (10 if k % 2 else 300 + k)
        return [{"role": "user", "content": [{"type": "image", "text": None}, {"type": "text", "text": text}]},
                {"role": "assistant", "content": [{"type": "text", "text": "+"}]}]
    return Dataset.from_dict({"messages": [message(k) for k in range(n)], "step_targets": [[1.0]] * n})


def trainer(data, strategy="group_by_length"):
    args = SimpleNamespace(train_sampling_strategy=strategy, length_column_name="length", train_batch_size=4,
                           gradient_accumulation_steps=1)
    return SimpleNamespace(args=args, train_dataset=data, _get_train_sampler=lambda *a: None)


def padded_share(order, lengths, batch=4):
    batches = [order[i:i + batch] for i in range(0, len(order), batch)]
    return sum(max(lengths[i] for i in b) * len(b) for b in batches) / sum(lengths)


def test_text_length_counts_every_string_but_the_part_types():
    assert length_groups.text_length([{"type": "text", "text": "abc"}, {"type": "image", "text": None}, "de"]) == 5


def test_grouped_batches_hold_rows_of_about_one_length():
    data = rows()
    t = trainer(data)
    assert length_groups.install(t, data)
    order = list(t._get_train_sampler())
    lengths = length_groups.row_lengths(data)
    assert sorted(order) == list(range(len(data)))  # every row once
    assert padded_share(order, lengths) < 1.1 < padded_share(list(range(len(data))), lengths)


def test_left_alone_unless_asked_or_when_rows_have_lengths():
    data = rows(8)
    assert not length_groups.install(trainer(data, strategy="random"), data)
    tokenised = data.add_column("input_ids", [[1, 2]] * 8)  # transformers counts these itself
    assert not length_groups.install(trainer(tokenised), tokenised)
    fewer = trainer(data.select(range(6)))  # a trainer that dropped rows: its lengths are not the dataset's
    assert not length_groups.install(fewer, data)
