"""The tiny critic's tokenizer: byte-level BPE trained offline on critic vocabulary, and its chat template.

The Hub is unreachable from tests, CI and the demo, so the tokenizer is trained here, on a small corpus of what
critic prompts and answers say plus the synthetic generator's own wording. The corpus is part of the build:
`corpus_digest()` enters the tiny critic's cache key, so a wording change in the generator rebuilds the
tokenizer instead of silently reusing a stale one.
"""

from __future__ import annotations

import hashlib

PAD_TOKEN = "<|endoftext|>"
TURN_START = "<|im_start|>"
TURN_END = "<|im_end|>"
IMAGE_TOKEN = "<image>"
# Idefics3's processor looks these up by name when it expands an image into its token sequence.
IDEFICS3_TOKENS = ("<fake_token_around_image>", "<global-img>", "<end_of_utterance>")

# ChatML-style turns.  The end-of-turn token sits INSIDE the generation span: the model has to learn to stop,
# and TRL warns when the stop token falls outside the assistant mask.  Content may be a plain string or a list
# of parts ({"type": "image"} / {"type": "text", "text": ...}); every image part becomes one placeholder that
# the processor expands into the image's tokens.
CHAT_TEMPLATE = (
    "{%- macro render(content) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part.type == 'image' -%}" + IMAGE_TOKEN + "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- for message in messages -%}"
    "{{ '" + TURN_START + "' + message.role + '\\n' }}"
    "{%- if message.role == 'assistant' -%}"
    "{% generation %}{{ render(message.content) + '" + TURN_END + "' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ render(message.content) + '" + TURN_END + "\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '" + TURN_START + "assistant\\n' }}{%- endif -%}"
)

COLOURS = ("red", "green", "blue", "yellow", "orange", "purple", "black", "white", "gray", "pink", "brown", "cyan")
SHAPES = ("circle", "square", "triangle", "rectangle", "star", "hexagon", "diamond", "ellipse", "pentagon", "cross")
RELATIONS = ("left of", "right of", "above", "below", "next to", "inside", "larger than", "smaller than")
CRITIC_SENTENCES = (
    "You are a careful critic of visual reasoning.",
    "Look at the image, read the question and check every step of the reasoning chain.",
    "For each step say whether it is correct or incorrect, and explain the error of an incorrect step.",
    "Answer with + if the step is correct and - if the step is incorrect.",
    "Reply with a JSON object that lists the steps and whether the final answer is correct.",
    "Question: How many shapes are in the image? Answer: 3",
    "Question: What colour is the largest shape? Options: A, B, C, D.",
    "Step 1: The image shows two shapes. Step 2: Therefore the answer is B.",
    "The description of the image is wrong: the shape is not there.",
    "The logic does not follow from the previous step, so this step is incorrect.",
    "The final answer is correct. The final answer is incorrect.",
    "Is the step correct? yes no true false right wrong valid invalid",
)


def corpus() -> list[str]:
    """Deterministic text covering the words, numbers and JSON that critic prompts and answers use."""
    from stepcritic.data_prep.critique import format_critique

    lines = list(CRITIC_SENTENCES)
    for i, colour in enumerate(COLOURS):
        for j, shape in enumerate(SHAPES):
            other = f"{COLOURS[(i + j + 1) % len(COLOURS)]} {SHAPES[(i * 3 + j) % len(SHAPES)]}"
            relation = RELATIONS[(i + j) % len(RELATIONS)]
            lines.append(f"The {colour} {shape} is {relation} the {other}. There are {i + j} {shape}s.")
    for n_steps in range(1, 9):
        for pattern in range(4):
            steps = [{"step": k, "correct": (k + pattern) % 3 != 0} for k in range(1, n_steps + 1)]
            for item in steps:
                if not item["correct"]:
                    colour = COLOURS[item["step"] % len(COLOURS)]
                    item["explanation"] = f"The {colour} shape is not a {SHAPES[pattern]}."
            lines.append(format_critique({"steps": steps, "answer_correct": pattern % 2 == 0}))
    # The synthetic generator's own wording (cells, sizes, counts), so that the demo's steps are mostly whole-word
    # tokens: shorter sequences, and one token per word is one less thing a from-scratch model has to learn.
    from stepcritic.data_prep.render import CELL_NAMES, SIZES
    from stepcritic.data_prep.synth import synthesize

    lines.extend(f"The {size} shape is at the {cell}." for row in CELL_NAMES for cell in row for size in SIZES)
    for chain in synthesize(100, seed=4242, image_size=32):
        lines.append(chain["question"])
        lines.extend(step["text"] for step in chain["steps"])
    # Repetition gives the frequent words enough counts to become whole tokens.
    return lines * 3


def train_tokenizer(vocab_size: int, special_tokens: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    # Digits are split one by one so step numbers and counts never merge into arbitrary multi-digit tokens.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=TURN_END,
        pad_token=PAD_TOKEN,
        model_max_length=4096,
        extra_special_tokens={"image_token": IMAGE_TOKEN},
    )


def corpus_digest() -> str:
    """A hash of the training corpus: what the tokenizer learns from, for cache keys."""
    return hashlib.sha256("\n".join(corpus()).encode()).hexdigest()[:16]
