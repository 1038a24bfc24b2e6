"""`method: grpo`: reinforcement learning of a critic with TRL's `GRPOTrainer` and a verifiable reward.

The prompts are the user turns of `critique-sft` rows (image included); the gold answer of each row (the
assistant turn) is turned into label columns that TRL hands to the reward function as keyword arguments.
verifier-sft conversations (the "task" and "chain" layouts) become one prompt per assistant turn: that turn's
question alone, as the "rows" layout asks it. Rewards, per sampled completion:

- critique-sft: the share of agreements with the gold labels over every step verdict plus the answer verdict
  (a step the critique leaves out counts as a disagreement), read with the forgiving
  `data_prep.critique.parse_critique`; output with no readable verdict at all gets `UNPARSEABLE_REWARD`.
- verifier-sft: 1 when the reply is the gold label, 0 when it is another known label of the task,
  `UNPARSEABLE_REWARD` otherwise.

policy-sft rows train a policy instead, with its answers and a critic as rewards: `policy_grpo` (`run.method_module`).
"""

from __future__ import annotations

import json

from stepcritic.data_prep import contract, critique, prompts
from stepcritic.train import common, modality

UNPARSEABLE_REWARD = -1.0


def completion_text(completion) -> str:
    """The text of a sampled completion (a plain string, or TRL's list of assistant messages)."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message["content"]
        parts.extend([content] if isinstance(content, str) else
                     [part["text"] for part in content if part.get("type") == "text"])
    return "".join(parts)


def critique_reward(completions, gold_verdicts, gold_answer_correct, **_) -> list[float]:
    """Agreement of each sampled critique with the gold step verdicts and answer verdict."""
    rewards = []
    for completion, gold, answer in zip(completions, gold_verdicts, gold_answer_correct):
        parsed = critique.parse_critique(completion_text(completion), len(gold))
        if all(v is None for v in parsed.verdicts) and parsed.answer_correct is None:
            rewards.append(UNPARSEABLE_REWARD)
            continue
        agreements = sum(v is not None and v == g for v, g in zip(parsed.verdicts, gold))
        agreements += parsed.answer_correct is not None and parsed.answer_correct == answer
        rewards.append(agreements / (len(gold) + 1))
    return rewards


def verifier_reward(completions, label, task, **_) -> list[float]:
    """1 for the gold label, 0 for another label of the task, the unparseable penalty for anything else."""
    rewards = []
    for completion, gold, task_name in zip(completions, label, task):
        reply = completion_text(completion).strip().strip(".").lower()
        known = {choice.lower() for choice in prompts.VERIFIER_TASKS[task_name]}
        rewards.append(float(reply == gold.lower()) if reply in known else UNPARSEABLE_REWARD)
    return rewards


def critique_prompt_row(row: dict) -> dict:
    """A critique-sft row as a GRPO row: the user turn as prompt, the gold critique as label columns."""
    *prompt, answer = row["messages"]
    gold = json.loads(completion_text([answer]))
    return {"prompt": prompt, "gold_verdicts": [bool(item["correct"]) for item in gold["steps"]],
            "gold_answer_correct": bool(gold["answer_correct"])}


def verifier_prompt_row(row: dict) -> dict:
    return {"prompt": row["messages"][:-1]}


def parts(content) -> list[dict]:
    """Message content as parts (a text model's rows hold plain strings, which carry no image)."""
    return content if isinstance(content, list) else []


def turn_prompts(messages: list[dict]) -> list[list[dict]]:
    """The prompt of each assistant turn of a conversation: the user message right before it, alone.

    Each turn of a verifier conversation asks a complete, self-contained question, so the prompt leaves out the
    earlier turns: their gold answers would give its answer away (a chain-level `correct` says every step is), and
    a question asked alone at evaluation has none. The conversation shows the image once, in its first
    user turn; every later prompt gets those image parts back at the start, so each prompt is the single-turn
    ("rows" layout) prompt of its question and holds a placeholder for every image of the row.
    """
    images = [part for part in parts(messages[0]["content"]) if part["type"] == "image"]
    out = []
    for before, message in zip(messages, messages[1:]):
        if message["role"] == "assistant" and before["role"] == "user":
            content = before["content"]
            if images and not any(part["type"] == "image" for part in parts(content)):
                content = [*images, *content]
            out.append([{**before, "content": content}])
    return out


def verifier_turn_rows(batch):
    """A batch (an Arrow table) of verifier conversations as GRPO rows, one per assistant turn: the turn's prompt
    and its items of `tasks`, `labels`, `step_indices` as `task`, `label`, `step_index` (what the rows layout has).

    Arrow in and out, so the images and ids are repeated per turn as stored, never decoded and re-encoded.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = [column for column in contract.VERIFIER_TURN_COLUMNS if column in batch.column_names]
    per_row = [turn_prompts(messages) for messages in batch["messages"].to_pylist()]
    counts = pc.list_value_length(batch["tasks"]).to_pylist()
    for row, (prompt, n) in enumerate(zip(per_row, counts)):
        if len(prompt) != n:  # the lists would pair each turn with another turn's label
            where = batch["chain_id"][row].as_py() if "chain_id" in batch.column_names else f"row {row} of a batch"
            raise contract.DataContractError(f"verifier conversation {where}: {len(prompt)} answered questions "
                                             f"but {n} tasks")
    parents = [row for row, prompt in enumerate(per_row) for _ in prompt]
    out = batch.drop_columns(["messages", *lists]).take(parents)
    out = out.append_column("prompt", pa.array([turn for prompt in per_row for turn in prompt],
                                               batch.schema.field("messages").type))
    for column in lists:
        out = out.append_column(contract.VERIFIER_TURN_COLUMNS[column], pc.list_flatten(batch[column]))
    return out


def as_prompts(dataset, kind: str):
    if dataset is None:
        return None
    if contract.is_conversation(kind, dataset.column_names):
        # batched: a batch of conversations comes back as more rows, one per turn
        lists = [column for column in contract.VERIFIER_TURN_COLUMNS if column in dataset.column_names]
        turns = dataset.with_format("arrow").map(verifier_turn_rows, batched=True,
                                                 remove_columns=["messages", *lists],
                                                 desc="prompts for GRPO, one per turn")
        return turns.with_format(None)
    to_row = critique_prompt_row if kind == "critique-sft" else verifier_prompt_row
    return dataset.map(to_row, remove_columns=["messages"], desc="prompts for GRPO")


def build_trainer(recipe, model, processor, train_data, eval_data):
    from trl import GRPOTrainer

    kind = recipe.script_args.dataset_kind
    reward = critique_reward if kind == "critique-sft" else verifier_reward
    model = common.prepare_model(recipe, model)
    # TRL 1.16 left-pads the prompts it generates from, but re-encodes them for the training forward pass with
    # the tokenizer's default side: with Qwen-VL (right by default) the image positions of `mm_token_type_ids`
    # then miss the image tokens whenever prompts differ in length, and the rotary index fails (trl#5785).
    tokenizer = getattr(processor, "tokenizer", processor)
    tokenizer.padding_side = "left"
    return GRPOTrainer(model=model, reward_funcs=[reward], args=recipe.training_args,
                       train_dataset=as_prompts(train_data, kind), eval_dataset=as_prompts(eval_data, kind),
                       processing_class=modality.trainer_processing_class(processor))
