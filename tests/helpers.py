"""Small hand-made chains for the always-on tests (no ../shared, no synthetic generator needed)."""

from __future__ import annotations

import io
import os
import re
import shlex

from PIL import Image, ImageDraw


def png(color=(255, 0, 0), size=64, shape="circle") -> bytes:
    im = Image.new("RGB", (size, size), "white")
    d = ImageDraw.Draw(im)
    box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
    (d.ellipse if shape == "circle" else d.rectangle)(box, fill=color)
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def step(text, correct=True, type="description", **kw):
    s = {"text": text, "type": type, "correct": correct}
    if type in ("description", "both"):
        s.setdefault("description_correctness", "correct" if correct else "unsupported")
        s.setdefault("description_relevance", "both")
        if not correct:
            s.setdefault("description_errors", ["attribute"])
    if type in ("reasoning", "both"):
        s.setdefault("logic_correct", correct)
        s.setdefault("logic_relevant", True)
        s.setdefault("informative", True)
        if not correct:
            s.setdefault("logic_error", "inter")
    if not correct:
        s.setdefault("explanations", [f"'{text}' does not match the image."])
    s.update(kw)
    return s


def chain(chain_id="c0", color=(255, 0, 0), question="What colour is the shape?", steps=None,
          answer="red", answer_correct=True, group_id=None, category="perception", **kw):
    steps = steps if steps is not None else [
        step("The image shows one circle."),
        step("The circle is red.", correct=answer_correct),
        step("So the answer is red.", correct=answer_correct, type="reasoning"),
    ]
    rec = {
        "chain_id": chain_id, "question": question, "image": {"bytes": png(color), "path": None},
        "steps": steps, "final_answer": answer, "reference_answer": "red", "answer_correct": answer_correct,
        "source": "fixture", "generator": "hand", "category": category, "meta": {},
    }
    if group_id:
        rec["group_id"] = group_id
    rec.update(kw)
    return rec


def chains(n=6):
    """n chains in n//2 groups, each group one correct and one incorrect chain."""
    out = []
    for g in range(n // 2):
        color = [(255, 0, 0), (0, 0, 255), (0, 160, 0)][g % 3]
        out.append(chain(f"g{g}-ok", color=color, group_id=f"g{g}"))
        out.append(chain(f"g{g}-bad", color=color, group_id=f"g{g}", answer="blue", answer_correct=False))
    return out


# the offline CPU recipes every training test starts from
RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes", "tiny")


def built_dataset(tmp_path_factory, kind: str, n_chains: int = 8) -> str:
    """A training dataset of `kind` built from `chains(n_chains)` with a quarter of the groups held out."""
    from stepcritic.data_prep.build import build_dataset

    out = str(tmp_path_factory.mktemp("data") / kind)
    build_dataset(chains(n_chains), kind, out, test_fraction=0.25, seed=0)
    return out


def ingest_and_build_every_kind(root, jsonl) -> tuple[str, dict]:
    """`stepcritic data ingest --format jsonl` of `jsonl`, then `data build` of every kind with a quarter of the
    groups held out, by the CLI as the README runs them: (the chains folder, {kind: built folder})."""
    from stepcritic.cli import main as stepcritic
    from stepcritic.data_prep import contract

    chains = str(root / "chains")
    assert stepcritic(["data", "ingest", "--format", "jsonl", "--input", str(jsonl), "--out", chains]) == 0
    built = {}
    for kind in contract.KIND_NAMES:
        built[kind] = str(root / kind)
        assert stepcritic(["data", "build", "--chains", chains, "--kind", kind, "--out", built[kind],
                           "--test-fraction", "0.25"]) == 0
    return chains, built


def cached_critiques(out) -> dict:
    """The critiques `stepcritic eval --out OUT` cached for its one judge, by chain id."""
    from stepcritic.eval.cache import JsonlLog

    [path] = [os.path.join(root, "critiques.jsonl") for root, _, files in os.walk(os.path.join(out, "cache"))
              if "critiques.jsonl" in files]
    return JsonlLog(path, "chain_id").load()


def train_tiny(root, recipe: str, kind: str, steps: int = 2) -> str:
    """A tiny critic trained `steps` steps by `recipes/tiny/RECIPE.yaml` on `kind` rows built from `chains(8)`, on one
    torch thread; its folder (`prm:DIR`, `reward:DIR`)."""
    import torch

    from stepcritic.data_prep.build import build_dataset
    from stepcritic.train.config import parse_recipe
    from stepcritic.train.run import train

    build_dataset(chains(8), kind, str(root / "data"), test_fraction=0.25, seed=0)
    config = parse_recipe(os.path.join(RECIPES, f"{recipe}.yaml"), dict(
        dataset_path=str(root / "data"), output_dir=str(root / "run"), max_steps=steps, per_device_train_batch_size=2,
        logging_steps=1, report_to="none", save_strategy="no"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(config)
    finally:
        torch.set_num_threads(threads)
    return str(root / "run")


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def walk(path: str) -> list[tuple[str, str, object]]:
    """A page's ```bash commands and ```python blocks in reading order: ("bash", where, argv) for every command
    (continuation lines joined, comments dropped, `&&` chains split, `$(...)` replaced by a word, leading VAR=value
    assignments and `/usr/bin/time -v` removed) and ("python", where, source) for every Python block."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    out = []
    for block in re.finditer(r"^```(bash|python)\n(.*?)^```", page, flags=re.S | re.M):
        start = page[:block.start()].count("\n") + 2
        where = f"{os.path.relpath(path, REPO)}:{start}"
        if block.group(1) == "python":
            out.append(("python", where, block.group(2)))
            continue
        logical, first = "", None
        for offset, line in enumerate(block.group(2).splitlines()):
            first = start + offset if not logical else first
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            logical += line
            text = re.sub(r"\$\([^)]*\)", "WORD", logical)
            logical = ""
            words = shlex.split(text, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                argv, words = words[:cut], words[cut + 1:]
                while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", argv[0]):
                    argv = argv[1:]
                if argv[:2] == ["/usr/bin/time", "-v"]:
                    argv = argv[2:]
                if argv:
                    out.append(("bash", f"{os.path.relpath(path, REPO)}:{first}", argv))
    return out


def shell_commands(path: str) -> list[tuple[str, list[str]]]:
    """(where, argv) for every command of a page's ```bash blocks (`walk`'s rules)."""
    return [(where, argv) for kind, where, argv in walk(path) if kind == "bash"]
