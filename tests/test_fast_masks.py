"""The vectorised assistant mask (train/fast_masks.py) must equal transformers' own, image placeholders included."""

import io
import random


def _conversations(n: int):
    from PIL import Image
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.train.tiny.scene_qa import conversation

    rng, out = random.Random(0), []
    for _ in range(n):
        messages, png = conversation(rng, n_questions=rng.randint(1, 5))
        out.append(prepare_multimodal_messages(messages, images=[Image.open(io.BytesIO(png)).convert("RGB")]))
    return out


def test_fast_mask_equals_transformers():
    import torch
    from transformers import AutoProcessor
    from transformers.processing_utils import ProcessorMixin

    from stepcritic.train import fast_masks
    from stepcritic.train.tiny.cache import tiny_critic_path

    processor = AutoProcessor.from_pretrained(tiny_critic_path(vision_pretrain_steps=200))
    conversations = _conversations(6)
    kwargs = dict(tokenize=True, return_dict=True, return_tensors="pt", return_assistant_tokens_mask=True,
                  processor_kwargs={"padding": True, "padding_side": "right"})
    fast_masks.install()
    fast = processor.apply_chat_template(conversations, **kwargs)["assistant_masks"]
    original = ProcessorMixin._slow_adjust_assistant_masks_indices
    patched = ProcessorMixin._adjust_assistant_masks_indices
    try:
        ProcessorMixin._adjust_assistant_masks_indices = original
        slow = processor.apply_chat_template(conversations, **kwargs)["assistant_masks"]
    finally:
        ProcessorMixin._adjust_assistant_masks_indices = patched
    assert torch.equal(fast, slow)
    assert 0 < int(fast.sum()) < fast.numel()  # a real mask: some tokens in, padding and prompt out
