"""An offline vLLM engine judge (`vllm:MODEL_DIR`), for fast local evaluation on GPU machines.

vLLM is an optional extra (`pip install 'stepcritic[vllm]'`); without it the judge refuses to start with
a message saying so. Prompts are sent through `LLM.chat` in the OpenAI message format, so images travel
as data URLs exactly as they do to an API endpoint. The engine starts on first use. vLLM admits one image per
prompt unless told otherwise: `max_images=N` for chains with several.
"""

from __future__ import annotations

from stepcritic.errors import require_extra
from stepcritic.eval.judges.artifacts import weights_digest
from stepcritic.eval.judges.generative import GenerativeJudge, Prompt, Reply
from stepcritic.eval.judges.openai_judge import openai_messages


class VLLMJudge(GenerativeJudge):
    kind = "vllm"
    CONTINUES = True  # goes on writing an assistant turn begun in the prompt (`Prompt.continue_final`)
    OPTIONS = {**GenerativeJudge.OPTIONS, "gpu_memory_utilization": float, "max_model_len": int,
               "tensor_parallel_size": int, "max_images": int}
    RUNTIME_OPTIONS = GenerativeJudge.RUNTIME_OPTIONS | {"gpu_memory_utilization", "tensor_parallel_size", "max_images"}

    def __init__(self, spec: str, target: str | None = None, gpu_memory_utilization: float = 0.85,
                 max_model_len: int = 8192, tensor_parallel_size: int = 1, max_images: int = 1, **options):
        require_extra("vllm", "the vllm judge", "or use hf:MODEL_DIR, which needs no extra")
        if not target:
            raise ValueError("the vllm judge needs a model folder or Hub id: vllm:MODEL_DIR")
        options.setdefault("batch_size", 256)  # vLLM schedules a large batch better than many small ones
        super().__init__(spec, target=target, gpu_memory_utilization=gpu_memory_utilization,
                         max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
                         max_images=max_images, **options)
        self.engine_args = {"model": target, "gpu_memory_utilization": gpu_memory_utilization,
                            "max_model_len": max_model_len, "tensor_parallel_size": tensor_parallel_size}
        if max_images > 1:
            self.engine_args["limit_mm_per_prompt"] = {"image": max_images}
        self._engine = None

    def fingerprint_extra(self) -> dict:
        return {**super().fingerprint_extra(), "weights": weights_digest(self.target)}

    def _llm(self):
        from vllm import LLM

        if self._engine is None:
            self._engine = LLM(**self.engine_args)
        return self._engine

    def verifier(self, task: str) -> "VLLMJudge":
        judge = super().verifier(task)
        judge._llm = self._llm  # one engine on the GPU for every task
        return judge

    def generate(self, prompts: list[Prompt]) -> list[Reply]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)
        replies: list[Reply | None] = [None] * len(prompts)
        # `LLM.chat` continues the last turn or opens a new one for a whole call: one call for each kind of prompt
        for continuing in (False, True):
            chosen = [i for i, p in enumerate(prompts) if p.continue_final == continuing]
            if not chosen:
                continue
            outputs = self._llm().chat([openai_messages(prompts[i]) for i in chosen], params, use_tqdm=False,
                                       add_generation_prompt=not continuing, continue_final_message=continuing)
            for i, out in zip(chosen, outputs):
                replies[i] = Reply(text=out.outputs[0].text)
        return replies
