"""``service.state.sqlite``: a state file from before the model repository moves to the model configured with
its bundle."""

from __future__ import annotations

import sqlite3

from service.state import SQLiteState

LEGACY = """
CREATE TABLE served (id INTEGER PRIMARY KEY CHECK (id = 1), path TEXT NOT NULL, bundle_id TEXT NOT NULL,
  configured TEXT, generation INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, bundle_id TEXT NOT NULL,
  method TEXT NOT NULL, inside INTEGER NOT NULL, p_value REAL NOT NULL, level REAL NOT NULL,
  inside_served INTEGER NOT NULL, site TEXT, device TEXT);
CREATE TABLE counters (method TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (method, name));
CREATE TABLE adaptive (bundle_id TEXT NOT NULL, method TEXT NOT NULL, alpha REAL NOT NULL, scale REAL,
  n INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (bundle_id, method));
INSERT INTO served VALUES (1, '/b/site.recal-1', 'b2', '/b/site', 4, 0);
INSERT INTO feedback (at, bundle_id, method, inside, p_value, level, inside_served) VALUES (0, 'b2', 'nle', 1, 0.5, 0.9, 1);
INSERT INTO counters VALUES ('nle', 'rows', 7);
INSERT INTO adaptive VALUES ('b2', 'nle', 0.08, NULL, 7, 0);
"""


def test_a_legacy_state_file_moves_to_the_model_configured_with_its_bundle(tmp_path):
    path = tmp_path / "state.sqlite"
    db = sqlite3.connect(path)
    db.executescript(LEGACY)
    db.commit()
    db.close()
    state = SQLiteState(path)  # the new tables beside the old ones; feedback gains its model column
    assert not state.claim_legacy("other", "/b/other")  # configured with another bundle: not this model's
    assert state.claim_legacy("site", "/b/site")
    rec = state.served("site")
    assert (rec.path, rec.bundle_id, rec.configured, rec.generation, rec.loaded) == ("/b/site.recal-1", "b2",
                                                                                    "/b/site", 4, True)
    assert state.counters()["site"]["nle"]["rows"] == 7
    assert state.adaptive_state("site", "b2") == {"nle": (0.08, None)}
    assert state.window("site", "b2", 10)["nle"].rows == 1
    assert not state.claim_legacy("site", "/b/site")  # done once: the legacy tables are gone
    state.close()
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"served", "counters", "adaptive"}
