"""`method: reward`: an outcome reward model on a VLM or a text model, trained on `outcome-rm` pairs (Bradley-Terry).

transformers has no sequence-classification class for the VLMs we train (LLaVA, Qwen-VL, Idefics3/SmolVLM)
and TRL's RewardTrainer drops images, so the model is ours: the VLM's decoder (LM head unused) plus a linear
value head on the final hidden state of the last real token. Images go through the vision tower like in
generation; a text model (a causal LM, see `modality`) is the same model with no images, one class for both.
A saved reward model is the backbone (full weights or LoRA adapter) + `value_head.safetensors` +
`reward_config.json`, next to the processor.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import torch
from torch import nn
from transformers import Trainer

from stepcritic.data_prep.images import to_rgb
from stepcritic.train import common, modality

VALUE_HEAD_FILE = "value_head.safetensors"
CONFIG_FILE = "reward_config.json"


class VLMRewardModel(nn.Module):
    """A VLM backbone (optionally a PeftModel) with a scalar value head: `forward(**batch) -> rewards (B,)`."""

    def __init__(self, backbone, value_head_dropout: float = 0.0):
        super().__init__()
        self.backbone = backbone
        hidden_size = backbone.config.get_text_config().hidden_size
        self.dropout = nn.Dropout(value_head_dropout)
        self.value_head = nn.Linear(hidden_size, 1)
        # A small init keeps the first rewards near zero, so the loss starts at log 2 whatever the backbone.
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1))
        nn.init.zeros_(self.value_head.bias)
        self.value_head.to(dtype=next(backbone.parameters()).dtype)

    @property
    def config(self):
        return self.backbone.config

    def decoder(self):
        """The backbone without its LM head (LoRA layers are injected in place, so they stay active)."""
        base = self.backbone.get_base_model() if common.is_peft(self.backbone) else self.backbone
        if not hasattr(base, "model"):
            raise TypeError(f"{type(base).__name__} has no inner `.model` decoder to read hidden states from")
        return base.model

    def gradient_checkpointing_enable(self, **kwargs):
        self.backbone.gradient_checkpointing_enable(**kwargs)
        if common.is_peft(self.backbone):
            self.backbone.enable_input_require_grads()  # frozen embeddings would cut the checkpointed graph

    def forward(self, input_ids, attention_mask, **vision_inputs):
        hidden = self.decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                **vision_inputs).last_hidden_state
        # Position of the last real token, whichever side the batch was padded on.
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        last = (positions * attention_mask).argmax(dim=1)
        final = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.value_head(self.dropout(final.to(self.value_head.weight.dtype))).squeeze(-1).float()

    def save_pretrained(self, out_dir: str, state_dict: dict | None = None) -> None:
        from safetensors.torch import save_file

        os.makedirs(out_dir, exist_ok=True)
        backbone_state = None
        if state_dict is not None:  # e.g. gathered by DeepSpeed: split it the way our modules are named
            backbone_state = {k[len("backbone."):]: v for k, v in state_dict.items() if k.startswith("backbone.")}
        self.backbone.save_pretrained(out_dir, state_dict=backbone_state)
        head = {k: v.detach().contiguous().cpu() for k, v in self.value_head.state_dict().items()}
        save_file(head, os.path.join(out_dir, VALUE_HEAD_FILE))
        with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
            json.dump({"kind": "vlm-reward", "hidden_size": self.value_head.in_features,
                       "value_head_dropout": self.dropout.p, "adapter": common.is_peft(self.backbone)}, f, indent=2)

    def load_weights(self, path: str) -> None:
        """Load a saved reward model's weights into this one in place (resuming a run)."""
        from safetensors.torch import load_file

        if common.is_peft(self.backbone):
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.backbone, load_peft_weights(path))
        else:
            saved = type(self.backbone).from_pretrained(path, dtype=next(self.backbone.parameters()).dtype)
            self.backbone.load_state_dict(saved.state_dict())
        self.value_head.load_state_dict(load_file(os.path.join(path, VALUE_HEAD_FILE)))

    @classmethod
    def from_pretrained(cls, path: str, dtype=None) -> tuple["VLMRewardModel", object]:
        """(reward model, processor) from a folder written by `save_pretrained` (+ the processor)."""
        from safetensors.torch import load_file

        from stepcritic.train.loading import load_critic

        with open(os.path.join(path, CONFIG_FILE)) as f:
            config = json.load(f)
        backbone, processor = load_critic(path, dtype=dtype)
        model = cls(backbone, config.get("value_head_dropout", 0.0))
        model.value_head.load_state_dict(load_file(os.path.join(path, VALUE_HEAD_FILE)))
        return model.eval(), processor


# ----------------------------------------------------------------------------- data

def pair_conversations(row: dict) -> tuple[list, list]:
    """(chosen, rejected) full conversations of an outcome-rm row, with the row's image filled in."""
    from trl.data_utils import prepare_multimodal_messages

    images = [to_rgb(image) for image in row.get("images") or []]
    return tuple(prepare_multimodal_messages(list(row["prompt"]) + list(row[side]), images=images)
                 for side in ("chosen", "rejected"))


def encode(processor, conversations: list) -> dict:
    return processor.apply_chat_template(conversations, tokenize=True, return_dict=True, return_tensors="pt",
                                         processor_kwargs={"padding": True, "padding_side": "right"})


class PairCollator:
    """Rows -> one batch holding every chosen conversation, then every rejected one."""

    def __init__(self, processor):
        self.processor = processor

    def __call__(self, rows: list[dict]) -> dict:
        pairs = [pair_conversations(row) for row in rows]
        return dict(encode(self.processor, [c for c, _ in pairs] + [r for _, r in pairs]))


def drop_long_pairs(dataset, processor, max_length: int | None):
    """Keep the pairs whose both sides (image tokens included) fit in `max_length` tokens.

    Cutting the end off instead would remove the very token the reward is read from.
    """
    if not max_length or dataset is None:
        return dataset

    def fits(row):
        return all(len(encode(processor, [conv])["input_ids"][0]) <= max_length for conv in pair_conversations(row))

    kept = dataset.filter(fits, desc=f"pairs <= {max_length} tokens")
    if len(kept) < len(dataset):
        common.logger.warning("dropped %d of %d pairs longer than max_length=%d", len(dataset) - len(kept),
                              len(dataset), max_length)
    return kept


# ----------------------------------------------------------------------------- training

class RewardModelTrainer(Trainer):
    """Bradley-Terry training of a `VLMRewardModel` (loss, accuracy and margin logged per mode)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs = False  # the loss is ours: let the Trainer scale it for accumulation
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        rewards = model(**inputs)
        chosen, rejected = rewards.chunk(2)
        loss = -nn.functional.logsigmoid(chosen - rejected).mean()
        if self.args.center_rewards_coefficient:
            loss = loss + self.args.center_rewards_coefficient * torch.mean((chosen + rejected) ** 2)
        metrics = self._metrics["train" if model.training else "eval"]
        metrics["accuracy"].append((chosen > rejected).float().mean().item())
        metrics["margin"].append((chosen - rejected).mean().item())
        metrics["rewards/chosen"].append(chosen.mean().item())
        metrics["rewards/rejected"].append(rejected.mean().item())
        return (loss, {"chosen": chosen, "rejected": rejected}) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def log(self, logs: dict, start_time: float | None = None) -> None:
        mode = "eval" if any(key.startswith("eval_") for key in logs) else "train"
        prefix = "eval_" if mode == "eval" else ""
        for key, values in self._metrics[mode].items():
            logs[prefix + key] = sum(values) / len(values)
        self._metrics[mode].clear()
        super().log(logs, start_time)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir or self.args.output_dir
        if self.args.should_save:
            self.accelerator.unwrap_model(self.model).save_pretrained(output_dir, state_dict=state_dict)
            self.processing_class.save_pretrained(output_dir)
            torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        (model or self.model).load_weights(resume_from_checkpoint)


def build_trainer(recipe, model, processor, train_data, eval_data):
    from trl.trainer.utils import disable_dropout_in_model

    args = recipe.training_args
    backbone = common.prepare_model(recipe, model, task_type=None)
    if args.disable_dropout:
        disable_dropout_in_model(backbone)
    reward_model = VLMRewardModel(backbone, args.value_head_dropout)
    common.log_trainable(reward_model, "reward model (backbone + value head)")
    return RewardModelTrainer(
        model=reward_model, args=args, data_collator=PairCollator(processor),
        processing_class=modality.trainer_processing_class(processor),
        train_dataset=drop_long_pairs(train_data, processor, args.max_length),
        eval_dataset=drop_long_pairs(eval_data, processor, args.max_length))
