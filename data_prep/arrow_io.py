"""Writing rows to Arrow as they are made, so no stage holds a whole dataset in Python objects.

`RowWriter` takes plain row dicts one at a time and hands them to `datasets`' `ArrowWriter` in batches that are
bounded both in rows and in (approximate) bytes: a batch of image-carrying rows is flushed after a few tens of MB,
however many rows that is, so peak memory depends on the batch bound, not on the number of rows. Rows made in
another process can come already encoded (`EncodedRows`), and are written in the batches the same rows as dicts
would have made. `save_files` then makes the written files a folder `datasets.load_from_disk` reads, without reading
them again.

What still grows with the input is what the stages must remember about every record (ids, group ids, counts), not
the records themselves.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

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


@dataclass
class EncodedRows:
    """Rows of an `images` column and others, encoded to Arrow for a trip between processes, each row's images once.

    A row's images are its chain's, and verifier-sft has a row per task and step: written out row by row, a batch of
    MiCEval chains (images of a few hundred KB) would cross as 10 times their size, in several copies. So `rows`
    holds every column but the images, `images` one row per distinct image list, and `image_of` each row's
    position in it; `RowWriter.add_encoded` puts them back together a written batch at a time."""

    rows: bytes  # an Arrow stream
    images: bytes  # an Arrow stream, one column "images"
    image_of: list[int]
    sizes: list[int]  # each row's `approx_bytes`, so the writer cuts the batches it would cut of the rows as dicts

    @classmethod
    def of(cls, rows: list[dict], features) -> EncodedRows:
        from datasets import Features

        distinct: dict[tuple, int] = {}  # the same images are the same objects: the chain's own
        image_lists, image_of = [], []
        for row in rows:
            key = tuple(map(id, row["images"]))
            if key not in distinct:
                distinct[key] = len(image_lists)
                image_lists.append(row["images"])
            image_of.append(distinct[key])
        others = Features({name: feature for name, feature in features.items() if name != "images"})
        return cls(_to_arrow({name: [row.get(name) for row in rows] for name in others}, others),
                   _to_arrow({"images": image_lists}, Features({"images": features["images"]})),
                   image_of, [approx_bytes(row) for row in rows])

    def __len__(self) -> int:
        return len(self.sizes)


def _to_arrow(batch: dict[str, list], features) -> bytes:
    """A batch of columns as an Arrow stream, encoded and typed as `RowWriter` writes them. Not through `datasets`'
    `ArrowWriter`: it costs a few ms a call (schema metadata, casts), as much as encoding the rows of a batch of 64
    chains; the writer hands the batches it joins to one."""
    import pyarrow as pa

    table = pa.Table.from_pydict(features.encode_batch(batch), schema=features.arrow_schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


class RowWriter:
    """Rows of `features` into the Arrow file at `path`, flushed in batches bounded by rows and bytes.

    Rows come as dicts (`add`, `extend`) or already encoded (`add_encoded`), one way per file: the two write their
    batches by different paths, and a file of one way is the same batch for batch as the file of the other."""

    def __init__(self, path: str, features, max_rows: int | None = None, max_bytes: int | None = None):
        from datasets.arrow_writer import ArrowWriter

        self.path, self.features = path, features
        self.max_rows = MAX_BATCH_ROWS if max_rows is None else max_rows
        self.max_bytes = MAX_BATCH_BYTES if max_bytes is None else max_bytes
        # One flush, one Arrow record batch (datasets would cut image rows into batches of 100): opening an Arrow
        # stream file reads every batch's header through the memory map, and with small batches the pages faulted in
        # around them came to half the file, counted in the resident memory of every process that opens it.
        self._writer = ArrowWriter(features=features, path=path, writer_batch_size=self.max_rows)
        self._rows: list[dict] = []
        self._pieces: list[tuple] = []  # encoded rows: (rows without images, distinct images, each row's position)
        self._pending = self._bytes = 0
        self._given: str | None = None  # "as dicts" or "encoded", once the first rows came
        self.n_rows = 0

    def add(self, row: dict) -> None:
        self._given_as("as dicts")
        self._rows.append(row)
        self._bytes += approx_bytes(row)
        self._pending += 1
        self.n_rows += 1
        if self._pending >= self.max_rows or self._bytes >= self.max_bytes:
            self.flush()

    def extend(self, rows) -> None:
        for row in rows:
            self.add(row)

    def add_encoded(self, encoded: EncodedRows) -> None:
        """Rows encoded elsewhere, cut and joined into the batches `add` would have flushed of the same rows (the
        same bounds on the same per-row sizes), so the file is the same batch for batch. Their images are put in at
        the flush, so memory holds the images of one written batch, not of every row of every piece."""
        import pyarrow as pa

        self._given_as("encoded")
        table = pa.ipc.open_stream(encoded.rows).read_all()
        images = pa.ipc.open_stream(encoded.images).read_all().column("images")
        start = 0
        for i, size in enumerate(encoded.sizes):
            self._pending += 1
            self._bytes += size
            if self._pending >= self.max_rows or self._bytes >= self.max_bytes:
                self._pieces.append((table.slice(start, i + 1 - start), images, encoded.image_of[start:i + 1]))
                start = i + 1
                self.flush()
        if start < len(encoded.sizes):
            self._pieces.append((table.slice(start), images, encoded.image_of[start:]))
        self.n_rows += len(encoded.sizes)

    def _given_as(self, way: str) -> None:
        if self._given not in (None, way):
            raise ValueError(f"{self.path}: rows {way} after rows {self._given}; one writer takes one way")
        self._given = way

    def flush(self) -> None:
        if self._rows:
            columns = {name: [row.get(name) for row in self._rows] for name in self.features}
            self._writer.write_batch(self.features.encode_batch(columns))
        elif self._pieces:
            self._writer.write_table(self._joined_pieces())
        self._rows, self._pieces, self._pending, self._bytes = [], [], 0, 0

    def _joined_pieces(self):
        import pyarrow as pa

        # one record batch, each column copied into fresh buffers sized as those of rows written as dicts
        # (`concat_arrays`, `take`): joined slices would keep their pieces' buffers, the same values in other bytes
        columns = []
        for name in self.features:
            if name == "images":  # every row's images taken from the pieces' distinct ones: their only copy
                distinct, positions, offset = [], [], 0
                for _, images, image_of in self._pieces:
                    distinct += images.chunks
                    positions += [offset + i for i in image_of]
                    offset += len(images)
                columns.append(pa.concat_arrays(distinct).take(positions))
            else:
                columns.append(pa.concat_arrays([c for rows, _, _ in self._pieces for c in rows.column(name).chunks]))
        return pa.table(columns, schema=self.features.arrow_schema)

    def close(self):
        """Write what is left and return the file as a memory-mapped `datasets.Dataset`."""
        from datasets import Dataset

        self.flush()
        # with no row at all ArrowWriter still writes the schema (the features were given), so an empty split loads
        self._writer.finalize()
        self._writer.close()
        return Dataset.from_file(self.path)


def iter_rows(dataset, batch_size: int, columns: list[str] | None = None):
    """Lists of row dicts of `dataset` in order, `batch_size` at a time, images as their encoded {bytes, path}.

    Why not `dataset.iter`: it reads through the memory map, and every page read stays counted in the process's
    resident memory until the map is dropped, so a pass over 400 MB of chains ends 400 MB larger. When the dataset
    is its Arrow files as they are on disk (no row selection), they are read with plain reads instead, one record
    batch at a time, and the memory is given back after each: the rows as stored (a cast of the dataset's features,
    such as decoding images, is not applied). Otherwise (a selection of rows, renamed columns) `dataset.iter`.
    """
    import pyarrow as pa

    files = [f["filename"] for f in dataset.cache_files]
    columns = list(dataset.column_names if columns is None else columns)
    if _whole_files(dataset) and all(_has_columns(path, columns) for path in files):
        n_rows, pending = 0, []
        for path in files:
            with pa.OSFile(path) as source:
                for record_batch in pa.ipc.open_stream(source):
                    table = pa.Table.from_batches([record_batch]).select(columns)
                    for chunk in table.to_batches(max_chunksize=batch_size):
                        pending += chunk.to_pylist()
                        n_rows += chunk.num_rows
                        while len(pending) >= batch_size:
                            yield pending[:batch_size]
                            pending = pending[batch_size:]
        if pending:
            yield pending
        if n_rows != len(dataset):  # pragma: no cover (files and table disagree: never for a saved dataset)
            raise RuntimeError(f"read {n_rows} rows from {files}, the dataset has {len(dataset)}")
        return
    for batch in dataset.select_columns(columns).with_format(None).iter(batch_size=batch_size):
        yield [dict(zip(batch, values)) for values in zip(*batch.values())]


def _whole_files(dataset) -> bool:
    """Whether `dataset` is every row of one Arrow file as written (no row selection, no slice)."""
    from datasets.table import MemoryMappedTable

    table = dataset.data
    return (dataset._indices is None and isinstance(table, MemoryMappedTable)
            and not any(name in ("slice", "filter", "take") for name, *_ in table.replays))


def _has_columns(path: str, columns: list[str]) -> bool:
    import pyarrow as pa

    with pa.OSFile(path) as source:
        return set(columns) <= set(pa.ipc.open_stream(source).schema.names)


def save_files(files: dict[str, str] | str, features, out_dir: str, n_rows: dict[str, int] | int) -> None:
    """Make the Arrow files `RowWriter` wrote (one per split, or one) the data of a `save_to_disk` folder at
    `out_dir`, without copying them.

    Why not `save_to_disk` of the written data: it reads the whole memory-mapped file to copy it, and every page
    read stays in the process's resident memory, so the peak grows with the output (967 MB of verifier rows from
    MiCEval peaked at 1.35 GB). Instead `save_to_disk` writes an empty dataset of the same features (so the
    metadata files are the library's own), and the written file, in the Arrow stream format `ArrowWriter` and
    `save_to_disk` both use, takes the place of its one empty shard. Reloading checks the row counts; should a
    later `datasets` keep them elsewhere, the copy is made the slow way instead.
    """
    from datasets import Dataset, DatasetDict, load_from_disk

    single = isinstance(files, str)
    files, n_rows = ({"": files}, {"": n_rows}) if single else (files, n_rows)
    empty = {s: Dataset.from_dict({name: [] for name in features}, features=features) for s in files}
    if single:
        empty[""].save_to_disk(out_dir, num_shards=1)
    else:
        DatasetDict(empty).save_to_disk(out_dir, num_shards={s: 1 for s in files})
    for split, path in files.items():
        os.replace(path, os.path.join(out_dir, split, "data-00000-of-00001.arrow"))
    saved = load_from_disk(out_dir)
    if {s: len(saved if single else saved[s]) for s in files} != n_rows:  # pragma: no cover (a datasets change)
        moved = {s: os.path.join(out_dir, s, "data-00000-of-00001.arrow") for s in files}
        data = {s: Dataset.from_file(path, in_memory=True) for s, path in moved.items()}
        shutil.rmtree(out_dir)
        if single:
            data[""].save_to_disk(out_dir)
        else:
            DatasetDict(data).save_to_disk(out_dir)


def temp_dir_beside(out_dir: str, prefix: str):
    """A temporary folder on the same disk as `out_dir` (written shards are large; /tmp may be small)."""
    import tempfile

    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=parent, prefix=prefix)
