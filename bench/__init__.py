"""Benchmarks, not tests: each module measures one thing and prints JSON; docs/benchmarks.md holds their numbers.

    python -m stepcritic.bench.train_throughput --config RECIPE    training samples/s, tokens/s, MFU
    python -m stepcritic.bench.scoring                             PRM one-pass scoring vs writing critiques
    python -m stepcritic.bench.masks                               assistant-mask encoding: transformers vs ours
    python -m stepcritic.bench.perception_probe                    can the tiny critic read its images?
    python -m stepcritic.bench.base_probe --model DIR              what a tiny base answers about its scenes
    python -m stepcritic.bench.openai_judge                        API judge throughput against a local fake server
    python -m stepcritic.bench.runner                              `stepcritic eval` wall time and memory, 10k chains
    python -m stepcritic.bench.gpu_suite --out DIR [--dry]         what only a GPU shows, resumable: real-size MFU and
                                                                   micro-batch sweeps, ZeRO-2/3 launches, 10k-chain PRM
                                                                   scoring, the tiny-gpu critic's steps/s

The data stage's benchmark lives with the data stage: `python -m stepcritic.data_prep.bench --n N [N ...]`.
"""
