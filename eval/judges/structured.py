"""Critique decoding under the critique's JSON structure: a local critic cannot write unparseable output.

The critique format (`data_prep.critique.format_critique`) is a fixed skeleton with three kinds of holes: a
verdict per step, an explanation for each step judged wrong, and the answer verdict. Free generation asks a
model to reproduce the skeleton too, and a small or lightly trained critic often breaks it (a dropped brace,
a step skipped or repeated): the demo's critic once left 31% of its critiques unreadable. Here the skeleton
is written by the decoder and the model only fills the holes:

* a verdict is the likelier of " true" / " false" given everything so far (their full token sequences are
  scored, so it also works where a word is several tokens);
* an explanation is generated greedily up to its closing quote (or `max_explanation_tokens`).

The listwise question (ShiftCheck, "which answer is best?") is answered the same way: the likeliest of the
candidates' letters right after the prompt, one forward pass instead of free text that may name no letter.

The result is the exact string the critic was trained to write whenever the model agrees with the gold
structure, so its verdicts and explanations are read the same way as free generation's, never invented.
Segments are joined at pre-tokenizer boundaries (before a space or after punctuation), so the prefix
re-tokenises as it would in the training text.
"""

from __future__ import annotations

import json

VERDICTS = (" true", " false")
# what follows a note in the critique: a note is scored together with it, because a tokenizer may merge the note's
# last characters with the quote and comma after it (SmolLM2's `.",` is one token), so a note scored before a bare
# quote ends in a token the critic never saw there and every note looks improbable
NOTE_END = '", "correct":'


class StructuredDecoder:
    """Fills one chain's critique skeleton. The prompt (image included) is encoded once per chain and kept in
    the model's KV cache; each verdict or explanation then only runs the critique written so far, re-tokenised
    whole (its pieces join at pre-tokenizer boundaries, so the tokens are those of the training text)."""

    def __init__(self, model, processor, max_explanation_tokens: int = 48):
        self.model, self.processor = model, processor
        self.tokenizer = processor.tokenizer
        self.max_explanation_tokens = max_explanation_tokens
        self.max_note_tokens = max(max_explanation_tokens, 64)  # a check note asks up to three questions
        # every token that contains a double quote ends an explanation (as an extra end-of-sequence id: the
        # `stop_strings` route rebuilds a vocabulary-wide table on every generate call)
        vocab = self.tokenizer.get_vocab()
        self.stop_ids = sorted({i for i in vocab.values() if '"' in self.tokenizer.decode([i])}
                               | {self.tokenizer.eos_token_id})

    def _prefill(self, prompt_text: str, images: list):
        import torch

        batch = self.processor(text=[prompt_text], images=images or None, return_tensors="pt")
        batch = {k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.inference_mode():
            cache = self.model(**batch, use_cache=True).past_key_values
        return batch["input_ids"], cache

    def _ids(self, text: str):
        return self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(self.model.device)

    def _rewind(self, cache, prompt_len: int) -> None:
        extra = cache.get_seq_length() - prompt_len
        if extra > 0:
            cache.crop(-extra)

    def _logprobs(self, prompt, written: str, continuation: str):
        """Log-probabilities of the tokens that `continuation` adds after the critique `written` so far."""
        import torch

        prompt_ids, cache = prompt
        n_known = self._ids(written).shape[1]
        ids = self._ids(written + continuation)
        mask = torch.ones(1, prompt_ids.shape[1] + ids.shape[1], dtype=torch.long, device=ids.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True).logits
        self._rewind(cache, prompt_ids.shape[1])
        positions = torch.arange(n_known, ids.shape[1], device=ids.device)
        return logits[0].float().log_softmax(-1)[positions - 1, ids[0, positions]]

    def choose(self, prompt, written: str, options=VERDICTS) -> str:
        """The option with the highest total log-probability after the critique `written` so far."""
        scores = [float(self._logprobs(prompt, written, option).sum()) for option in options]
        return options[max(range(len(options)), key=scores.__getitem__)]

    def continue_until_quote(self, prompt, written: str, max_new_tokens: int | None = None) -> str:
        """Greedy text after the critique `written` so far, up to (not including) the first double quote."""
        import torch

        prompt_ids, cache = prompt
        ids = torch.cat([prompt_ids, self._ids(written)], dim=1)
        with torch.inference_mode():
            output = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                                         max_new_tokens=max_new_tokens or self.max_explanation_tokens, do_sample=False,
                                         eos_token_id=self.stop_ids, pad_token_id=self.tokenizer.pad_token_id)
        self._rewind(cache, prompt_ids.shape[1])
        text = self.tokenizer.decode(output[0, ids.shape[1]:], skip_special_tokens=True)
        return text.split('"', 1)[0].strip().replace("\\", "")

    def pick_letter(self, prompt_text: str, images: list, letters: str) -> int | None:
        """The index of the likeliest of `letters` as the reply's first token, or None when two letters share a
        first token (the caller then lets the model write its reply)."""
        import torch

        firsts = [int(self._ids(letter)[0, 0]) for letter in letters]
        if len(set(firsts)) < len(firsts):
            return None
        batch = self.processor(text=[prompt_text], images=images or None, return_tensors="pt")
        batch = {k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.inference_mode():
            logits = self.model(**batch, logits_to_keep=1).logits[0, -1]
        return max(range(len(letters)), key=lambda k: float(logits[firsts[k]]))

    def text_probability(self, prompt, written: str, text: str, end: str = NOTE_END) -> float:
        """The least probability of any token of `text` (and the `end` that follows it in the critique) right
        after `written`."""
        return float(self._logprobs(prompt, written, text + end).min().exp())

    def critique_with_notes(self, prompt_text: str, images: list, steps: list[str],
                            threshold: float = 0.5, read: str = "note") -> tuple[str, list[float]]:
        """The critique JSON of a critic that writes what the image shows ("shows") before each verdict, and per
        step P(correct): with `read="note"`, the probability of the step's own text as that note
        (`text_probability`); with `read="verdict"` (check notes: questions about the image, answered), P(" true")
        against P(" false") right after the critic's own note. The verdict written is that probability against
        `threshold`, so the JSON says what the scores say; the note written is the critic's own (greedy), and
        stays in the context for the later steps, as in training. Check notes come after the step copied under
        "says" (`critique.gold_critique`), which the decoder writes."""
        import math

        prompt = self._prefill(prompt_text, images)
        out, p_correct = '{"steps": [', []
        for k, step in enumerate(steps, 1):
            out += ("" if k == 1 else ", ") + f'{{"step": {k}, '
            if read == "verdict":  # a check note follows the step it checks, copied as in training
                out += '"says": ' + json.dumps(step, ensure_ascii=False) + ", "
            out += '"shows": "'
            if read == "verdict":
                out += self.continue_until_quote(prompt, out, self.max_note_tokens) + NOTE_END
                true, false = (float(self._logprobs(prompt, out, verdict).sum()) for verdict in VERDICTS)
                p_correct.append(1.0 / (1.0 + math.exp(false - true)))
            else:
                p_correct.append(self.text_probability(prompt, out, step))
                out += self.continue_until_quote(prompt, out) + NOTE_END
            verdict = VERDICTS[0] if p_correct[-1] >= threshold else VERDICTS[1]
            out += verdict
            if verdict == VERDICTS[1]:
                out += ', "explanation": "'
                out += self.continue_until_quote(prompt, out) + '"'
            out += "}"
        out += '], "answer_correct":'
        out += self.choose(prompt, out) + "}"
        return out, p_correct

    def critique(self, prompt_text: str, images: list, n_steps: int) -> str:
        """The critique JSON for a chain of `n_steps` steps; `prompt_text` ends with the generation prompt."""
        prompt = self._prefill(prompt_text, images)
        out = '{"steps": ['
        for k in range(1, n_steps + 1):
            out += ("" if k == 1 else ", ") + f'{{"step": {k}, "correct":'
            verdict = self.choose(prompt, out)
            out += verdict
            if verdict == " false":
                out += ', "explanation": "'
                out += self.continue_until_quote(prompt, out) + '"'
            out += "}"
        out += '], "answer_correct":'
        out += self.choose(prompt, out) + "}"
        return out
