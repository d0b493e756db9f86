"""The process-level tests share the service tests' fixtures (bundles, repositories, the state backends and
the session's PostgreSQL cluster): imported here, pytest registers them for this folder too."""

import pytest

from tests.e2e.servers import serving_repository
from tests.service.conftest import (client, make_client, pg_cluster, repository_copy, site_repository,  # noqa: F401
                                    state_url, test_rows)
from tests.training.conftest import walk_repository  # noqa: F401


@pytest.fixture(scope="session")
def walk_server(walk_repository, tmp_path_factory):  # noqa: F811
    """A real ``lmve-serve`` over :func:`tests.training.conftest.walk_repository`, its radio watch off: the tests
    compare its answers with ``lmve-predict``'s, which score with the bundle as trained (the walk's weak phone
    would otherwise be followed, as it should be in service)."""
    root, _ = walk_repository
    with serving_repository(root, "synthetic", tmp_path_factory.mktemp("walk-logs"), LMVE_RADIO="off") as client:
        yield client
