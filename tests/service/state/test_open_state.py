"""``service.state.open_state``: a state URL names its backend and its file."""

from __future__ import annotations

import pytest

from service.state import open_state


def test_state_urls_name_the_backend_and_the_file(tmp_path, monkeypatch):
    import pytest

    from service.settings import ServiceSettings
    from service.state import open_state, sqlite_path

    assert sqlite_path("sqlite://") is None and str(sqlite_path("sqlite:///rel/s.db")) == "rel/s.db"
    assert str(sqlite_path("sqlite:////abs/s.db")) == "/abs/s.db"
    state = open_state(f"sqlite:///{tmp_path}/s.db")  # SQLAlchemy's spelling: four slashes for an absolute path
    assert state.shared and state.path == tmp_path / "s.db" and state.health() is None
    assert not open_state(None).shared
    monkeypatch.setenv("LMVE_STATE_DB", str(tmp_path / "old.sqlite"))
    assert ServiceSettings().state_url == f"sqlite:///{tmp_path}/old.sqlite"  # the old variable still works
    monkeypatch.setenv("LMVE_STATE_URL", "sqlite:///elsewhere.sqlite")
    with pytest.raises(ValueError, match="LMVE_STATE_URL .* or LMVE_STATE_DB"):
        ServiceSettings()
    monkeypatch.delenv("LMVE_STATE_DB")
    monkeypatch.setenv("LMVE_STATE_URL", "mysql://db/lmve")
    with pytest.raises(ValueError, match="sqlite:// or postgresql://; got 'mysql'"):
        ServiceSettings()
