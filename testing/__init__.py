"""Test doubles for the tests and the benchmarks; the `stepcritic` command never imports them.

    fake_openai_server    an OpenAI-compatible chat server on 127.0.0.1 that answers from what the prompt asks
    fake_score_server     a stand-in for `stepcritic serve` (/v1/score, /health) with failures to order

They ship with the package, because a benchmark of an installed package (`bench.openai_judge`) runs against them and
shipped code never imports from `tests/`; `tests/test_layering.py` checks that no module outside testing/, bench/
and tests/ imports this package.
"""
