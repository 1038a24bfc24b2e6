"""`data build --num-proc N`: worker processes make and encode the rows, and the dataset, its Arrow files
byte for byte, and build_stats.json are those of a build in one process; a bad value or a bad chain is one line and
exit code 2, as in one process."""

import filecmp
import os
import random

import pytest
from datasets import Dataset, load_from_disk
from helpers import png

from stepcritic import cli
from stepcritic.data_prep import arrow_io, build, schema, synth
from stepcritic.data_prep.splits import SPLITS


def varied_chains(n: int = 30) -> list[dict]:
    """Synthetic chains with every skip reason a per-chain kind counts (a neutral step, unknown labels) and chains
    with two images (rows cross from the workers with each chain's images once)."""
    chains = synth.synthesize(n, seed=4, image_size=32)
    faulty_groups = {c["group_id"] for c in chains if c["chain_correct"] is False}
    for c in chains[13:]:
        if c["chain_correct"] and c["group_id"] in faulty_groups:  # rows of every kind, outcome-rm's chosen chains
            c["extra_images"] = [{"bytes": png((0, 90, 200), size=32), "path": None}]
    chains[3]["steps"][0].update(rating=0, correct=None)  # neutral
    chains[7]["steps"][-1]["correct"] = None  # unknown step label
    chains[11]["answer_correct"] = None
    chains[12]["chain_correct"] = None
    return [schema.validate_chain(c, c["chain_id"]) for c in chains]


@pytest.fixture(scope="module")
def chains_dirs(tmp_path_factory) -> dict:
    records = varied_chains()
    scattered = list(records)
    random.Random(2).shuffle(scattered)  # a group's chains far apart: outcome-rm fetches the rest of the group
    folder = tmp_path_factory.mktemp("chains")
    schema.save_chains(records, str(folder / "ordered"))
    schema.save_chains(scattered, str(folder / "scattered"))
    return {"ordered": str(folder / "ordered"), "scattered": str(folder / "scattered")}


@pytest.fixture
def small_batches(monkeypatch):
    # several chain batches per worker in flight, groups across batches, written batches cut inside a worker's rows
    # by either bound (a row of these is 1-4 kB)
    monkeypatch.setattr(build, "CHAIN_BATCH", 4)
    monkeypatch.setattr(arrow_io, "MAX_BATCH_ROWS", 7)
    monkeypatch.setattr(arrow_io, "MAX_BATCH_BYTES", 6000)


CASES = [("critique-sft", {}, "ordered"),
         ("verifier-sft", {"verifier_layout": "rows"}, "ordered"),
         ("verifier-sft", {"verifier_layout": "task"}, "ordered"),
         ("verifier-sft", {"verifier_layout": "chain"}, "ordered"),
         ("prm-sft", {}, "ordered"),
         ("prm-sft", {"prm_notes": True, "step_targets": "soft"}, "ordered"),
         ("critique-pref", {}, "ordered"),
         ("outcome-rm", {}, "scattered")]


@pytest.mark.parametrize("kind,options,order", CASES, ids=[f"{k}-{'-'.join(map(str, o.values()))}-{s}".strip("-")
                                                           for k, o, s in CASES])
def test_two_processes_build_what_one_builds(kind, options, order, chains_dirs, tmp_path, small_batches,
                                             monkeypatch):
    in_workers = []
    monkeypatch.setattr(build, "_made_in_workers", lambda *a, _f=build._made_in_workers: in_workers.append(1) or _f(*a))
    chains = schema.load_chains(chains_dirs[order])
    one = build.build_dataset(chains, kind, str(tmp_path / "one"), test_fraction=0.3, seed=3, **options)
    two = build.build_dataset(chains, kind, str(tmp_path / "two"), test_fraction=0.3, seed=3, num_proc=2, **options)
    assert in_workers == [1]
    assert one == two
    assert all(one["rows"][s] > 0 for s in SPLITS), one["rows"]
    a, b = load_from_disk(str(tmp_path / "one")), load_from_disk(str(tmp_path / "two"))
    assert any(len(row["images"]) == 2 for s in SPLITS for row in a[s].select_columns("images"))
    for s in SPLITS:
        assert a[s].to_list() == b[s].to_list(), s
        # the same record batches too: the rows made in workers are cut and joined as RowWriter flushes them
        arrow = os.path.join(s, "data-00000-of-00001.arrow")
        assert filecmp.cmp(tmp_path / "one" / arrow, tmp_path / "two" / arrow, shallow=False), s


def one_line_error(capsys, argv: list[str]) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("value", ["0", "-2"])
def test_num_proc_must_be_positive(tmp_path, capsys, value):
    data = tmp_path / "chains.jsonl"
    data.write_text("")  # never read: the option is checked first
    line = one_line_error(capsys, ["data", "build", "--chains", str(data), "--kind", "verifier-sft", "--out",
                                   str(tmp_path / "o"), "--num-proc", value])
    assert line == f"stepcritic data: error: --num-proc must be a positive number of processes, got {value}"
    assert not (tmp_path / "o").exists()
    with pytest.raises(build.BuildError, match="--num-proc"):
        build.check_options("prm-sft", num_proc=True)


@pytest.mark.parametrize("kind", ["verifier-sft", "outcome-rm"])  # validated in a worker / in the reading process
def test_a_bad_chain_read_by_a_worker_is_the_same_one_line(kind, tmp_path, capsys, small_batches):
    records = varied_chains()
    records[21] = dict(records[21], steps=[])  # a later batch than the first: a worker validates it
    folder = str(tmp_path / "bad")
    Dataset.from_list(records, features=schema.features()).save_to_disk(folder)
    lines = {}
    for n in ("1", "2"):
        lines[n] = one_line_error(capsys, ["data", "build", "--chains", folder, "--kind", kind, "--out",
                                           str(tmp_path / f"o{n}"), "--num-proc", n])
    assert lines["1"] == lines["2"] == (f"stepcritic data: error: {records[21]['chain_id']}, field 'steps': "
                                        "a chain needs at least one step")
    with pytest.raises(schema.SchemaError) as raised:  # the class and its fields cross the process boundary
        build.build_dataset(schema.load_chains(folder), kind, str(tmp_path / "api"), num_proc=2)
    assert (raised.value.where, raised.value.field) == (records[21]["chain_id"], "steps")
    assert raised.value.__cause__ is None  # no worker traceback attached


def killed(records, first):  # a worker that dies (the kernel's OOM killer, say)
    os.kill(os.getpid(), 9)


def test_a_worker_that_dies_is_one_line(chains_dirs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build, "_worker_rows", killed)  # the forked workers see it
    line = one_line_error(capsys, ["data", "build", "--chains", chains_dirs["ordered"], "--kind", "prm-sft",
                                   "--out", str(tmp_path / "o"), "--num-proc", "2"])
    assert "worker process ended abruptly" in line and "try fewer processes" in line
