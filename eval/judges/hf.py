"""A local transformers vision-language judge: a base model, a trained critic, or a LoRA adapter folder.

`hf:MODEL_DIR[,mode=critique|verifier|score][,task=...][,max_new_tokens=256][,temperature=0]`.
With `structured=true,notes=true` (a critic trained with `data build --critique-notes`), each step's verdict is read
from the note the critic writes about it, as the `prm:` judge reads a note-writing PRM: P(step correct) is the
probability it gives to the step's own text as what the image shows, at the least likely token. With `notes=check`
(`--critique-notes check`: the note asks questions that check the step, answered) it is P(" true") after the note.
Prompts are generated in batches of `batch_size` with left padding (so every row's answer starts at the
same position) and greedy decoding unless `temperature` > 0. The model loads on first use, so building
the judge to check the cache costs nothing.
"""

from __future__ import annotations

from stepcritic.data_prep.images import to_rgb
from stepcritic.eval.judges.artifacts import pick_device, weights_digest
from stepcritic.eval.judges.base import Critique
from stepcritic.eval.judges.generative import GenerativeJudge, Prompt, Reply, critique_from_reply


class HFJudge(GenerativeJudge):
    kind = "hf"
    CONTINUES = True  # goes on writing an assistant turn begun in the prompt (`Prompt.continue_final`)
    OPTIONS = {**{k: v for k, v in GenerativeJudge.OPTIONS.items() if k != "max_tokens"},
               "max_new_tokens": int, "dtype": str, "device": str, "structured": bool}

    def __init__(self, spec: str, target: str | None = None, max_new_tokens: int = 256, dtype: str = "auto",
                 device: str | None = None, structured: bool = False, **options):
        if not target:
            raise ValueError("the hf judge needs a model folder or Hub id: hf:MODEL_DIR")
        # only when set, so existing caches keep their keys; "critique+letter" since the listwise choice is decoded
        # under its structure too (answers cached by the free-text version are not reused)
        extra = {"structured": "critique+letter"} if structured else {}
        super().__init__(spec, target=target, max_tokens=max_new_tokens, dtype=dtype, device=device, **options,
                         **extra)
        if structured and (self.mode != "critique" or self.strategy != "direct"):
            raise ValueError("structured=true decodes critiques: it needs mode=critique and strategy=direct")
        self.dtype, self.device, self.structured = dtype, device, structured
        self._model = self._processor = None

    def fingerprint_extra(self) -> dict:
        extra = {**super().fingerprint_extra(), "weights": weights_digest(self.target)}
        if self.structured and self.notes:  # notes scored with what follows them: older cached notes are not reused
            extra["note_scoring"] = "note+end"
        return extra

    def verifier(self, task: str) -> "HFJudge":
        judge = super().verifier(task)
        judge.structured = False  # constrained decoding writes critiques; a verifier reply is one label
        judge._load = self._load  # the model, loaded once, on this judge
        return judge

    def _load(self):
        if self._model is None:
            from stepcritic.train.loading import load_critic

            model, processor = load_critic(self.target, dtype=self.dtype, merged=True)
            self._model = model.to(pick_device(self.device)).eval()
            # left padding: in a batch every prompt then ends where generation starts
            processor.tokenizer.padding_side = "left"
            self._processor = processor
        return self._model, self._processor

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        if not self.structured:
            return super().judge_batch(chains)
        from stepcritic.eval.judges.structured import StructuredDecoder

        model, processor = self._load()
        decoder = StructuredDecoder(model, processor, max_explanation_tokens=min(self.max_tokens, 48))
        critiques = []
        for chain in chains:
            prompt = self.critique_prompt(chain)
            text = processor.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False)
            images = [to_rgb(image) for image in prompt.images]
            if not self.notes:
                critiques.append(critique_from_reply(chain, Reply(decoder.critique(text, images, len(chain["steps"])))))
                continue
            written, p_correct = decoder.critique_with_notes(text, images, [s["text"] for s in chain["steps"]],
                                                             read="verdict" if self.notes == "check" else "note")
            critique = critique_from_reply(chain, Reply(written))
            critique.p_incorrect = [1.0 - p for p in p_correct]
            critique.extra = {**(critique.extra or {}), "p_correct": p_correct}
            critiques.append(critique)
        return critiques

    def pick_best(self, chains: list[dict]) -> int | None:
        """With `structured`, the listwise choice is the likeliest candidate letter (see `structured.py`)."""
        if not self.structured or not 1 <= len(chains) <= 26:
            return super().pick_best(chains)
        import string

        from stepcritic.data_prep.prompts import listwise_messages
        from stepcritic.eval.judges.generative import chain_prompt
        from stepcritic.eval.judges.structured import StructuredDecoder

        model, processor = self._load()
        prompt = chain_prompt(listwise_messages(chains), chains[0])
        text = processor.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False)
        picked = StructuredDecoder(model, processor).pick_letter(text, [to_rgb(i) for i in prompt.images],
                                                                 string.ascii_uppercase[:len(chains)])
        return super().pick_best(chains) if picked is None else picked

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        model, processor = self._load()
        return [Reply(text=text) for text in generate_texts(model, processor, prompts, self.max_tokens,
                                                             self.temperature, self.batch_size)]


def generate_texts(model, processor, prompts: list[Prompt], max_new_tokens: int, temperature: float = 0.0,
                   batch_size: int = 8) -> list[str]:
    """What a loaded transformers model writes for each prompt: batches of `batch_size`, greedy unless `temperature`
    > 0. The processor's tokenizer must pad on the left, so that in a batch every prompt ends where generation
    starts. Also used on a policy while it trains (`train.policy_grpo`)."""
    import torch

    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    texts = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        chat = [processor.apply_chat_template(p.messages, add_generation_prompt=not p.continue_final,
                                              continue_final_message=p.continue_final, tokenize=False)
                for p in batch]
        images = [to_rgb(image) for p in batch for image in p.images]
        inputs = processor(text=chat, images=images or None, padding=True, return_tensors="pt").to(model.device)
        with torch.inference_mode():
            output = model.generate(**inputs, max_new_tokens=max_new_tokens,
                                    pad_token_id=processor.tokenizer.pad_token_id, **sampling)
        texts += processor.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    return texts
