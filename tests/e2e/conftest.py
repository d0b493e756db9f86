"""The process-level tests share the service tests' fixtures (bundles, repositories, the state backends and
the session's PostgreSQL cluster): imported here, pytest registers them for this folder too."""

from tests.service.conftest import (client, make_client, pg_cluster, repository_copy, site_repository,  # noqa: F401
                                    state_url, test_rows)
