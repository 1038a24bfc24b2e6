"""The training-throughput benchmark's pieces: synthetic image batches, the model-FLOPs count, and the frozen
vision tower kept out of autograd (the fix the GPU benchmark motivated)."""

from pathlib import Path

import pytest
import torch

from stepcritic.bench import train_throughput as bench
from stepcritic.train import archs
from stepcritic.train.config import parse_recipe

QWEN_SFT = Path(__file__).resolve().parent.parent / "recipes" / "qwen2.5-vl-3b" / "sft-lora.yaml"
# one timed step of a tiny config, batch 2: 0.68-21.5 samples/s measured on a loaded 2-core AMD EPYC with AVX-512
MIN_SAMPLES_PER_S = 0.1


def tiny_qwen(*overrides):
    """A tiny Qwen2.5-VL prepared as the 3B recipe prepares the real one (LoRA, frozen tower, checkpointing)."""
    recipe = parse_recipe(str(QWEN_SFT), list(overrides))
    torch.manual_seed(0)
    model = bench.build_model(recipe, real_size=False).train()
    model.activation_checkpointing_enable(recipe.training_args.activation_checkpointing_kwargs)
    return recipe, model


def backward(model, image_size=56):
    batch = bench.synthetic_batch(model, 2, 48, image_size, "cpu")
    batch.pop("image_patches", None)
    seen = {}
    blocks = next(m for n, m in model.named_modules() if n.endswith("visual.blocks"))
    blocks[-1].register_forward_hook(lambda mod, args, out: seen.update(requires_grad=out.requires_grad))
    model(**batch).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    return seen["requires_grad"], missing


def test_synthetic_image_batch_matches_the_qwen_layout():
    _, model = tiny_qwen()
    batch = bench.synthetic_batch(model, 3, 40, 112, "cpu")
    side = 112 // 28 * 2  # 14 px patches, merged 2 x 2
    assert batch["image_grid_thw"].tolist() == [[1, side, side]] * 3
    assert batch["pixel_values"].shape == (3 * side * side, 3 * 2 * 14 * 14)
    image = batch["input_ids"] == model.config.image_token_id
    assert image.sum(1).tolist() == [side * side // 4] * 3
    assert (batch["labels"][image] == -100).all() and (batch["labels"][~image] >= 0).all()
    assert (batch["mm_token_type_ids"].bool() == image).all()
    with pytest.raises(ValueError, match="do not fit"):
        bench.synthetic_batch(model, 1, 8, 112, "cpu")


def test_training_flops_is_six_n_per_token_plus_attention_when_all_trains():
    recipe, model = tiny_qwen("--use_peft", "false", "--freeze_vision_tower", "false")
    text = model.config.get_text_config()
    matrices = sum(p.numel() for p in model.get_decoder().parameters()) - model.get_input_embeddings().weight.numel()
    matrices += model.get_output_embeddings().weight.numel()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    attention = 6 * text.num_hidden_layers * 32 * text.num_attention_heads * head_dim
    assert bench.training_flops(model, tokens=100, seq_len=32) == 100 * (6 * matrices + attention)
    # LoRA: the frozen base costs 4N per token (no weight gradients), the adapters 6N
    _, lora = tiny_qwen("--lora_r", "2")
    assert bench.training_flops(lora, 100, 32) < bench.training_flops(model, 100, 32)
    # images add the vision side's forward (frozen tower: 2 x its parameters per patch)
    vision = sum(p.numel() for n, p in lora.named_parameters() if "visual" in n)
    assert bench.training_flops(lora, 100, 32, image_patches=7) - bench.training_flops(lora, 100, 32) == 7 * 2 * vision


def test_frozen_vision_tower_stays_out_of_autograd_and_everything_trainable_still_learns():
    _, model = tiny_qwen()  # LoRA on the language model, vision tower and projector frozen
    vision_tracked, missing = backward(model)
    assert not vision_tracked and not missing
    # full fine-tuning with the tower frozen: the projector (Qwen's merger, inside `visual`) still trains
    _, model = tiny_qwen("--use_peft", "false")
    vision_tracked, missing = backward(model)
    assert not vision_tracked and not missing
    assert any("merger" in n and p.grad is not None for n, p in model.named_parameters())
    # LoRA on the vision tower: nothing may be cut off from the gradient
    _, model = tiny_qwen("--lora_on_vision", "true")
    assert archs.run_frozen_vision_without_grad(model) == []
    vision_tracked, missing = backward(model)
    assert vision_tracked and not missing


def test_train_throughput_reports_a_run_with_images():
    recipe = parse_recipe(str(QWEN_SFT), ["--per_device_train_batch_size", "2"])
    report = bench.train_throughput(recipe, steps=1, real_size=False, seq_len=64, image_size=56)
    assert report["image_tokens_per_sample"] == 4 and report["seq_len"] == 64
    assert report["trainable"] < report["parameters"] and report["samples_per_s"] >= MIN_SAMPLES_PER_S
    assert report["distributed"] == "NO" and "mfu" not in report  # no GPU, no utilisation


def test_fused_loss_equals_the_full_logits_loss_with_images_and_lora():
    # the throughput benchmark times TRL's fused LM head, what the trainers run; it must be the same loss
    import torch

    recipe = parse_recipe(str(QWEN_SFT), ["--per_device_train_batch_size", "2"])
    model = bench.build_model(recipe, real_size=False, fused_loss=True)
    batch = bench.synthetic_batch(model, 2, 48, 56, "cpu")
    batch.pop("image_patches", None)
    with torch.no_grad():
        full, fused = model(**batch).loss, model(**batch, fused_lm_head=True).loss
    assert torch.allclose(full, fused, rtol=1e-4), (full, fused)
    report = bench.train_throughput(recipe, steps=1, real_size=False, seq_len=48, image_size=56, loss="full")
    assert report["loss"] == "full" and report["samples_per_s"] >= MIN_SAMPLES_PER_S


@pytest.mark.parametrize("folder, image_size", [("qwen3-vl-4b", 64), ("gemma-3-4b", None), ("internvl3-2b", None)])
def test_new_families_benchmark_with_the_fused_loss_they_train_with(folder, image_size):
    # the fused head must give the model's own loss on each new family too (Gemma 3 scales its embeddings, Qwen3-VL
    # adds deepstack features to early decoder layers), or the benchmark would time a different computation
    recipe = parse_recipe(str(QWEN_SFT.parent.parent / folder / "sft-lora.yaml"),
                          ["--per_device_train_batch_size", "2"])
    torch.manual_seed(0)
    model = bench.build_model(recipe, real_size=False, fused_loss=True)
    batch = bench.synthetic_batch(model, 2, 48, image_size, "cpu")
    batch.pop("image_patches", None)
    with torch.no_grad():
        full, fused = model(**batch).loss, model(**batch, fused_lm_head=True).loss
    assert torch.allclose(full, fused, rtol=1e-4), (full, fused)
    report = bench.train_throughput(recipe, steps=1, real_size=False, seq_len=48, image_size=image_size)
    assert report["image_tokens_per_sample"] == (4 if image_size else 0)  # 64 px: 2 x 2 merged 16 px patches
    assert report["trainable"] < report["parameters"] and report["samples_per_s"] >= MIN_SAMPLES_PER_S
    if image_size is None:  # their image inputs are laid out otherwise: refused, not faked
        with pytest.raises(ValueError, match="Qwen2-VL family"):
            bench.synthetic_batch(model, 1, 48, 64, "cpu")


def test_base_probe_scores_only_the_final_answer_of_every_question_kind():
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny import base_pretrain as base_probe
    from stepcritic.train.tiny import scene_qa
    from stepcritic.train.tiny.cache import tiny_critic_path

    assert base_probe._last_run([3, 4, 9, 10, 11]) == [9, 10, 11] and base_probe._last_run([5]) == [5]
    model, processor = load_critic(tiny_critic_path())
    scores = base_probe.probe(model, processor, per_question=2, caption=True)
    assert list(scores) == list(scene_qa.KINDS)
    assert all(0.0 <= value <= 1.0 for value in scores.values())


def test_the_base_probe_on_the_chains_scenes_and_on_their_step_checks():
    """`--scenes synth` draws the critic's own scenes; `--checks` asks the questions the chains' steps need, each
    once per chain, grouped by kind. What it protects: a base is judged on what the critic will ask of it."""
    import json

    from stepcritic.data_prep.schema import chain_meta
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.experiments import base_probe as tool
    from stepcritic.train.loading import load_critic
    from stepcritic.train.tiny import base_pretrain
    from stepcritic.train.tiny.cache import tiny_critic_path

    sizes = {len(base_pretrain.probe_scene(__import__("random").Random(k), "synth")) for k in range(60)}
    assert max(sizes) >= 6  # the chains' scenes reach past what the random probe usually draws
    with pytest.raises(ValueError, match="unknown probe scenes"):
        base_pretrain.probe(None, None, scenes="chains")

    chains = synthesize(300, seed=11)
    questions = [q for c in chains for check in chain_meta(c)["step_checks"] if check
                 for q, _ in tool.CHECK.findall(check)]
    kinds = {tool.check_kind(q) for q in questions}  # every check question has a kind
    assert kinds == {"sum", "more", "count_colour", "count_shape", "colour", "where", "exists", "bigger", "relation"}

    model, processor = load_critic(tiny_critic_path())
    scores = tool.check_probe(model, processor, chains[:6], limit=20, batch_size=8)
    # each check once per scene: the chains of a group share it
    assert sum(v["n"] for v in scores.values()) == min(20, len({(c["group_id"], q.strip()) for c in chains[:6]
                                                              for check in chain_meta(c)["step_checks"] if check
                                                              for q, _ in tool.CHECK.findall(check)}))
    assert all(0.0 <= v["accuracy"] <= 1.0 for v in scores.values())
    json.dumps(scores)
