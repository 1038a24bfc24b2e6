"""Benchmarks, not tests: each module measures one thing and prints JSON; docs/benchmarks.md holds their numbers.

    python -m stepcritic.bench.train_throughput --config RECIPE    training samples/s, tokens/s, MFU
    python -m stepcritic.bench.scoring                             PRM one-pass scoring vs writing critiques
    python -m stepcritic.bench.masks                               assistant-mask encoding: transformers vs ours
    python -m stepcritic.bench.openai_judge                        API judge throughput against a local fake server
    python -m stepcritic.bench.runner                              `stepcritic eval` wall time and memory, 10k chains
    python -m stepcritic.bench.data_stage --n N [N ...]            every data stage's chains/s and peak memory at N
    python -m stepcritic.bench.gpu_suite --out DIR [--dry]         what only a GPU shows, resumable: real-size MFU and
                                                                   micro-batch sweeps, ZeRO-2/3 launches, 10k-chain PRM
                                                                   scoring, the tiny-gpu critic's steps/s

Experiments that ask what the tiny critic can learn, rather than how fast something runs, are in
`stepcritic.experiments`.
"""
