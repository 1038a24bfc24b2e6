"""A policy's own chains (`stepcritic generate`) and their step labels from rollouts (`stepcritic data label`).

Comes after eval in the one-way flow: both commands ask any generative judge spec eval knows (`hf:`, `vllm:`,
`openai:`, a `py:` GenerativeJudge) and save every answer with eval's crash-safe cache (`eval.asking`).
"""
