"""`lazymlx calibrate --ship` (calibration.save_choice): it rewrites a registry model's default
and gentle, and its fast only where the run ran the shipped one, so a run over other
candidates (Qwen2.5-Coder's point rules, 2026-12-02) cannot replace a fast it never judged."""

from __future__ import annotations

import json

import pytest

from lazymlx.engine import presets
from lazymlx.evals.calibration import save_choice
from lazymlx.evals.choice import Bar, Calibration
from lazymlx.evals.records import Record

MODEL = "qwen2.5-coder-0.5b"  # --ship writes registry models only
SHIPPED_FAST = "0.4@24% 0.4@57% sparse"
DEFAULT, FAST = "0.5@24% 0.3@57% sparse", "0.3@57% sparse"


def ran(*modes: str) -> list[Record]:
    """One record a mode: all save_choice reads of a run's records is which modes ran."""
    return [
        Record(
            "passkey",
            "calibration",
            1024,
            0,
            "raw",
            "filler",
            0.5,
            mode,
            1000,
            True,
            True,
            8,
            True,
            1.0,
            1.0,
            1.0,
            1.0,
            10.0,
            1.0,
            "",
        )  # fmt: skip
        for mode in modes
    ]


def ship(tmp_path, monkeypatch, before: dict, *modes: str) -> dict:
    monkeypatch.setattr(presets, "SHIPPED", tmp_path)
    if before:
        (tmp_path / f"{MODEL}.json").write_text(json.dumps(before))
    choice = Calibration([], DEFAULT, FAST, ran("baseline", *modes))
    save_choice(MODEL, {"records": "journal.jsonl"}, choice, Bar(), None, ship=True)
    return json.loads((tmp_path / f"{MODEL}.json").read_text())


@pytest.fixture
def shipped_fast() -> dict:
    return {"fast": {"config": {"decode": "sparse"}, "calibration": {"candidate": SHIPPED_FAST}}}


def test_ship_keeps_a_shipped_fast_the_run_never_ran(tmp_path, monkeypatch, shipped_fast):
    after = ship(tmp_path, monkeypatch, shipped_fast, DEFAULT, FAST)
    assert after["fast"] == shipped_fast["fast"]
    assert after["default"]["calibration"]["candidate"] == DEFAULT
    assert after["gentle"]["calibration"]["candidate"] == f"gentler({DEFAULT})"


def test_ship_replaces_a_shipped_fast_the_run_ran_and_chose_against(
    tmp_path, monkeypatch, shipped_fast
):
    after = ship(tmp_path, monkeypatch, shipped_fast, DEFAULT, FAST, SHIPPED_FAST)
    assert after["fast"]["calibration"]["candidate"] == FAST


def test_ship_writes_fast_where_none_shipped(tmp_path, monkeypatch):
    after = ship(tmp_path, monkeypatch, {}, DEFAULT, FAST)
    assert {name: entry["calibration"]["candidate"] for name, entry in after.items()} == {
        "default": DEFAULT,
        "gentle": f"gentler({DEFAULT})",
        "fast": FAST,
    }
