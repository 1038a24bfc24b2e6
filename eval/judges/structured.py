"""Critique decoding under the critique's JSON structure: a local critic cannot write unparseable output.

The critique format (`data_prep.critique.format_critique`) is a fixed skeleton with three kinds of holes: a
verdict per step, an explanation for each step judged wrong, and the answer verdict. Free generation asks a
model to reproduce the skeleton too, and a small or lightly trained critic often breaks it (a dropped brace,
a step skipped or repeated): the README's first demo left 31% of its critiques unreadable. Here the skeleton
is written by the decoder and the model only fills the holes:

* a verdict is the likelier of " true" / " false" given everything so far (their full token sequences are
  scored, so it also works where a word is several tokens);
* an explanation is generated greedily up to its closing quote (or `max_explanation_tokens`).

The result is the exact string the critic was trained to write whenever the model agrees with the gold
structure, so its verdicts and explanations are read the same way as free generation's, never invented.
Segments are joined at pre-tokenizer boundaries (before a space or after punctuation), so the prefix
re-tokenises as it would in the training text.
"""

from __future__ import annotations

VERDICTS = (" true", " false")


class StructuredDecoder:
    def __init__(self, model, processor, max_explanation_tokens: int = 48):
        self.model, self.processor = model, processor
        self.tokenizer = processor.tokenizer
        self.max_explanation_tokens = max_explanation_tokens

    def _encode(self, texts: list[str], image):
        import torch

        images = [image] * len(texts) if image is not None else None
        batch = self.processor(text=texts, images=images, padding=True, padding_side="right", return_tensors="pt")
        return {k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def choose(self, prefix: str, image, options=VERDICTS) -> str:
        """The option with the highest total log-probability after `prefix`."""
        import torch

        prefix_len = self._encode([prefix], image)["input_ids"].shape[1]
        batch = self._encode([prefix + option for option in options], image)
        with torch.inference_mode():
            logprobs = self.model(**batch).logits.float().log_softmax(-1)
        ids, mask = batch["input_ids"], batch["attention_mask"]
        scores = []
        for row in range(len(options)):
            end = int(mask[row].sum())
            positions = torch.arange(prefix_len, end, device=ids.device)
            scores.append(float(logprobs[row, positions - 1, ids[row, positions]].sum()))
        return options[max(range(len(options)), key=scores.__getitem__)]

    def continue_until_quote(self, prefix: str, image) -> str:
        """Greedy text after `prefix` up to (not including) the first double quote."""
        import torch

        batch = self._encode([prefix], image)
        with torch.inference_mode():
            output = self.model.generate(**batch, max_new_tokens=self.max_explanation_tokens, do_sample=False,
                                         stop_strings=['"'], tokenizer=self.tokenizer,
                                         pad_token_id=self.tokenizer.pad_token_id)
        text = self.tokenizer.decode(output[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
        return text.split('"', 1)[0].strip().replace("\\", "")

    def critique(self, prompt_text: str, image, n_steps: int) -> str:
        """The critique JSON for a chain of `n_steps` steps; `prompt_text` ends with the generation prompt."""
        out = '{"steps": ['
        for k in range(1, n_steps + 1):
            out += ("" if k == 1 else ", ") + f'{{"step": {k}, "correct":'
            verdict = self.choose(prompt_text + out, image)
            out += verdict
            if verdict == " false":
                out += ', "explanation": "'
                out += self.continue_until_quote(prompt_text + out, image) + '"'
            out += "}"
        out += '], "answer_correct":'
        out += self.choose(prompt_text + out, image) + "}"
        return out
