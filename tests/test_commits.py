"""The commit subjects since the contributing notes set the rule: at most 72 characters each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_SUBJECT = 72


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_every_commit_subject_since_the_rule_fits_72_characters():
    try:
        added = _git("log", "--diff-filter=A", "--format=%H", "--", "CONTRIBUTING.md").split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git history here (an unpacked source tree)")
    if not added:
        pytest.skip("CONTRIBUTING.md is not committed yet, or the clone is too shallow to see it")
    try:
        subjects = _git("log", "--format=%h %s", f"{added[-1]}^..HEAD").splitlines()
    except subprocess.CalledProcessError:  # a shallow clone whose first commit added the file
        subjects = _git("log", "--format=%h %s", "HEAD").splitlines()
    long = [line for line in subjects if len(line.split(" ", 1)[1]) > MAX_SUBJECT]
    assert not long, f"subjects over {MAX_SUBJECT} characters (say the detail in the body): {long}"
