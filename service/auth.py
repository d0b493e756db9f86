"""The API key: where a client presents it and how it is compared (in constant time).

The check itself runs in :class:`service.middleware.Guards`, before routing and
before any body is read, for every route but the health and documentation ones: a new router
cannot forget it. Admin routes add :func:`service.deps.require_admin_key` on top.
"""

from __future__ import annotations

import secrets

#: never behind the key: probes (the V2 protocol's too), metrics scrapes and the API documentation
PUBLIC_PATHS = frozenset({"/livez", "/readyz", "/v2/health/live", "/v2/health/ready", "/metrics", "/docs", "/docs/oauth2-redirect", "/redoc",
                          "/openapi.json",
                          # the API docs' assets (service.routers.docs: Swagger UI and ReDoc, installed with the package)
                          "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css",
                          "/docs/assets/redoc.standalone.js", "/docs/assets/favicon.png",
                          # the viewer's page and assets (static, no data: what it draws comes from routes behind the key)
                          "/viewer", "/viewer/viewer.js", "/viewer/viewer.css"})


def presented_key(x_api_key: str | None, authorization: str | None) -> str | None:
    """The key from ``X-API-Key``, else from ``Authorization: Bearer <key>``."""
    if x_api_key is not None:
        return x_api_key
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


def key_matches(presented: str | None, expected: str) -> bool:
    """Constant-time comparison (``secrets.compare_digest``); a missing key never matches."""
    return presented is not None and secrets.compare_digest(presented.encode(), expected.encode())
