"""How big a built dataset is on disk beside the chains it was built from, and why: `data build`'s size line.

A row carries its chain's images (TRL's vision trainers read them from the row), so a kind with many rows per chain
writes each image many times: verifier-sft's rows from MiCEval take several times the chains' bytes. The line says
so with the numbers, rather than leaving a user to find a folder far bigger than its input.
"""

from __future__ import annotations

import glob
import os

# images written this many times over the chains' own are worth a sentence saying why
REPEATED = 1.5


def disk_bytes(path: str) -> int:
    """Bytes of a file, or of every file under a folder."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def image_bytes(arrow_files: list[str], columns: tuple[str, ...]) -> int:
    """Bytes of the encoded images in `columns` of Arrow files (`{"bytes", "path"}` structs, alone or in lists),
    read from the offsets alone (memory-mapped: the images themselves are not read)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = 0
    for path in arrow_files:
        with pa.memory_map(path) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:  # the file format, not the stream format `datasets` writes
                table = pa.ipc.open_file(source).read_all()
        for name in columns:
            if name not in table.column_names:
                continue
            for chunk in table.column(name).chunks:
                while pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type):
                    chunk = chunk.flatten()
                if pa.types.is_struct(chunk.type) and chunk.type.get_field_index("bytes") >= 0:
                    total += pc.sum(pc.binary_length(chunk.field("bytes"))).as_py() or 0
    return total


def human(n: int) -> str:
    """Bytes in the unit that shows them best: 812 B, 40.3 kB, 967.4 MB, 1.2 GB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def chain_files(chains) -> list[str]:
    """The Arrow files a loaded chains Dataset reads (its folder's, or the cache a .jsonl was written to)."""
    return [f["filename"] for f in getattr(chains, "cache_files", []) or [] if os.path.isfile(f["filename"])]


def size_line(stats: dict, chains, chains_path: str, out: str) -> str:
    """One line: the output's bytes on disk against the chains', and, when the rows repeat the chains' images, that
    they do, how often, and the layout that writes them once (verifier-sft)."""
    files = chain_files(chains)
    in_bytes = sum(os.path.getsize(f) for f in files) if files else disk_bytes(chains_path)
    out_bytes = disk_bytes(out)
    ratio = f", {out_bytes / in_bytes:.1f}x the chains' {human(in_bytes)}" if in_bytes else ""
    line = f"size: {human(out_bytes)} on disk{ratio}"
    out_images = image_bytes(sorted(glob.glob(os.path.join(out, "*", "*.arrow"))), ("images",))
    in_images = image_bytes(files, ("image", "extra_images")) if files else 0
    rows, used = sum(stats["rows"].values()), stats["chains_used"]
    if not out_images or not in_images or out_images < REPEATED * in_images or not used:
        return line
    line += (f"; images are {human(out_images)} of it, {out_images / in_images:.1f}x the chains' {human(in_images)}: "
             f"each of the {rows:,} rows ({rows / used:.1f} a chain) carries its chain's images again")
    if stats["kind"] == "verifier-sft" and stats.get("verifier_layout", "rows") != "chain":
        line += " (--verifier-layout chain writes them once a chain)"
    return line
