"""`method: grpo`: reinforcement learning of a critic with TRL's `GRPOTrainer` and a verifiable reward.

The prompts are the user turns of `critique-sft` rows (image included); the gold answer of each row (the
assistant turn) is turned into label columns that TRL hands to the reward function as keyword arguments.
Rewards, per sampled completion:

- critique-sft: the share of agreements with the gold labels over every step verdict plus the answer verdict
  (a step the critique leaves out counts as a disagreement), read with the forgiving
  `data_prep.critique.parse_critique`; output with no readable verdict at all gets `UNPARSEABLE_REWARD`.
- verifier-sft: 1 when the reply is the gold label, 0 when it is another known label of the task,
  `UNPARSEABLE_REWARD` otherwise.
"""

from __future__ import annotations

import json

from stepcritic.data_prep import critique, prompts
from stepcritic.train import common

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


def as_prompts(dataset, kind: str):
    if dataset is None:
        return None
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
                       processing_class=processor)
