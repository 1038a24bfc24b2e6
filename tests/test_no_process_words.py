"""The project describes the software, not how it was made.

No file in the repository (code, comments, tests, docs, recipes, scripts, templates) refers to work periods, to
ticket numbers, to "this machine" instead of the hardware a number was measured on, or to the tools used to write
it. A measurement names its hardware ("a 2-core x86-64 CPU", "one H100"); a test docstring says what the test
protects. The few legitimate uses are allowed by exact pattern below, each with its reason.
"""

import fnmatch
import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# what is not allowed, case-insensitive; whitespace may span a line break ("issue\n11")
FORBIDDEN = {
    "a work period": r"\bsessions?\b",
    "a ticket or issue number": r"\bissues?\s*(?:no\.?\s*)?#?\d+|\btickets?\b|(?<![\w/#&])#\d+\b",
    "'this machine' instead of the hardware": r"\bthis\s+(?:\d+-core\s+)?(?:cpu\s+)?(?:machine|box|computer)\b"
                                               r"|\bthis\s+\d+-core\b",
    "the tools used to build the project": r"\bclaude\b|\bcodex\b|\bcopilot\b|\bchatgpt\b|\bai\s+assistant\b"
                                            r"|\bcoding\s+agent\b",
}

# (file, pattern of the allowed match's line, why)
ALLOWED = [
    ("bench/gpu_suite.py", r"start_new_session=True", "subprocess.Popen's keyword: a process group of its own"),
    ("*", r"DeepSpeed (?:issue )?#7170", "an upstream DeepSpeed bug the ZeRO-3 image check works around"),
    ("tests/test_train_sft.py", r"#7170", "checks that the ZeRO-3 image error names that upstream bug"),
    ("train/grpo.py", r"trl#5785", "an upstream TRL bug the GRPO collator works around"),
    ("tests/test_metrics.py", r"Claude-3\.5-Sonnet", "a model's row in a paper's table, reproduced by a test"),
    ("tests/test_paper_tables.py", r"Claude-3\.5-Sonnet", "a model's row in a paper's table, reproduced by a test"),
    ("tests/test_pairwise.py", r"Claude 3\.5 Sonnet", "a leaderboard row, reproduced by a test"),
    ("tests/*", r'scope="session"', "pytest's fixture scope: built once per test run"),
    ("tests/test_no_process_words.py", r".", "this file names the patterns it forbids"),
    ("train/tiny/base_smollm2/tokenizer.json", r".", "SmolLM2's vocabulary, shipped as its authors wrote it"),
]

def project_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted(p for p in set(listed) if os.path.isfile(os.path.join(REPO, p)))


def hits(path: str) -> list[str]:
    try:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:  # weights and other binary files
        return []
    lines = text.splitlines()
    found = []
    for what, pattern in FORBIDDEN.items():
        for match in re.finditer(pattern, text, flags=re.I):
            line_no = text.count("\n", 0, match.start())
            line = lines[line_no] if line_no < len(lines) else ""
            if any(fnmatch.fnmatch(path, where) and re.search(allowed, line) for where, allowed, _ in ALLOWED):
                continue
            found.append(f"{path}:{line_no + 1}: {what}: {match.group(0)!r} in {line.strip()[:100]!r}")
    return found


def test_no_file_refers_to_how_the_project_was_made():
    found = [hit for path in project_files() for hit in hits(path)]
    assert found == [], "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    def caught(text: str) -> bool:
        return any(re.search(pattern, text, flags=re.I) for pattern in FORBIDDEN.values())

    for bad in ("the fifth session found", "(README, issue\n11)", "see #24", "Issue 13, item 2:", "a ticket",
                "on this 2-core machine", "measured on this machine", "written with Claude"):
        assert caught(bad), bad
    for fine in ("a 2-core x86-64 CPU, 24 GiB", "one H100", "question g1#0", "colour #ff0000", "tissue 3",
                 "the issue of scale", "# 1. ingest"):
        assert not caught(fine), fine
