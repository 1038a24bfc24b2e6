"""Writing rows to Arrow as they are made, so no stage holds a whole dataset in Python objects.

`RowWriter` takes plain row dicts one at a time and hands them to `datasets`' `ArrowWriter` in batches that are
bounded both in rows and in (approximate) bytes: a batch of image-carrying rows is flushed after a few tens of MB,
however many rows that is, so peak memory depends on the batch bound, not on the number of rows. `save_dataset` /
`save_dataset_dict` then turn the written files into a folder `datasets.load_from_disk` reads (`save_to_disk`
copies the memory-mapped table in batches it sizes from the data, so that copy is bounded too).

What still grows with the input is what the stages must remember about every record (ids, group ids, counts), not
the records themselves.
"""

from __future__ import annotations

import os

# A batch is flushed when it holds this many rows or this many bytes of images and text, whichever comes first.
MAX_BATCH_ROWS = 1000
MAX_BATCH_BYTES = 32 * 2**20


def approx_bytes(value) -> int:
    """A cheap estimate of what a row value costs once written (bytes and strings dominate; containers recurse)."""
    if isinstance(value, (bytes, bytearray, str)):
        return len(value)
    if isinstance(value, dict):
        return sum(approx_bytes(v) for v in value.values()) + 8
    if isinstance(value, (list, tuple)):
        return sum(approx_bytes(v) for v in value) + 8
    return 8


class RowWriter:
    """Rows of `features` into the Arrow file at `path`, flushed in batches bounded by rows and bytes."""

    def __init__(self, path: str, features, max_rows: int = MAX_BATCH_ROWS, max_bytes: int = MAX_BATCH_BYTES):
        from datasets.arrow_writer import ArrowWriter

        self.path, self.features = path, features
        self.max_rows, self.max_bytes = max_rows, max_bytes
        self._writer = ArrowWriter(features=features, path=path)
        self._rows: list[dict] = []
        self._bytes = 0
        self.n_rows = 0

    def add(self, row: dict) -> None:
        self._rows.append(row)
        self._bytes += approx_bytes(row)
        self.n_rows += 1
        if len(self._rows) >= self.max_rows or self._bytes >= self.max_bytes:
            self.flush()

    def extend(self, rows) -> None:
        for row in rows:
            self.add(row)

    def flush(self) -> None:
        if self._rows:
            columns = {name: [row.get(name) for row in self._rows] for name in self.features}
            self._writer.write_batch(self.features.encode_batch(columns))
            self._rows, self._bytes = [], 0

    def close(self):
        """Write what is left and return the file as a memory-mapped `datasets.Dataset`."""
        from datasets import Dataset

        self.flush()
        # with no row at all ArrowWriter still writes the schema (the features were given), so an empty split loads
        self._writer.finalize()
        self._writer.close()
        return Dataset.from_file(self.path)


def save_dataset(dataset, out_dir: str) -> None:
    """`save_to_disk` in bounded batches; an empty dataset gets its one (empty) shard, which datasets would skip."""
    dataset.save_to_disk(out_dir, num_shards=1 if len(dataset) == 0 else None)


def save_dataset_dict(splits: dict, out_dir: str) -> None:
    """Save `{split: Dataset}` as a DatasetDict folder (empty splits included, see `save_dataset`)."""
    from datasets import DatasetDict

    DatasetDict(splits).save_to_disk(out_dir, num_shards={s: 1 if len(d) == 0 else None for s, d in splits.items()})


def temp_dir_beside(out_dir: str, prefix: str):
    """A temporary folder on the same disk as `out_dir` (written shards are large; /tmp may be small)."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=parent, prefix=prefix)
