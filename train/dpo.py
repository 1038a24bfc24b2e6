"""`method: dpo`: preference tuning of a critique critic with TRL's `DPOTrainer` on `critique-pref` rows.

Start from the SFT critic: `model_name_or_path` is the SFT output (full or merged model, or a LoRA adapter
folder). The reference model then comes from TRL (1.16):

- adapter folder: the adapter keeps training and TRL copies it into a frozen "ref" adapter, so the reference
  is the SFT critic itself (not the bare base);
- full/merged model + `use_peft`: a fresh LoRA; the reference is the same model with the adapter disabled;
- full fine-tuning: a second, frozen copy of the starting checkpoint is loaded as the reference.
"""

from __future__ import annotations

from stepcritic.train import common, modality


def build_trainer(recipe, model, processor, train_data, eval_data):
    from trl import DPOTrainer

    model = common.prepare_model(recipe, model)
    ref_model = None
    if not common.is_peft(model):
        ref_model, _ = common.load_model(recipe, trainable=False)
        ref_model.requires_grad_(False)
    return DPOTrainer(model=model, ref_model=ref_model, args=recipe.training_args, train_dataset=train_data,
                      eval_dataset=eval_data, processing_class=modality.trainer_processing_class(processor))
