"""``GET /docs`` and ``GET /redoc``: the API's interactive pages, served with no network.

FastAPI's own pages load Swagger UI and ReDoc from a public CDN (and ReDoc's fonts from Google), so on a
site without internet they stay blank. These pages are FastAPI's same HTML
(:func:`fastapi.openapi.docs.get_swagger_ui_html`, :func:`~fastapi.openapi.docs.get_redoc_html`) pointed
at the copies of Swagger UI 5 and ReDoc 2 that the ``fastapi-offline`` package installs, served from
``/docs/assets/<file>`` (only the names in :data:`FILES`: no path from the request reaches the disk).
The pages and their assets are public, like ``/openapi.json`` (see :data:`service.auth.PUBLIC_PATHS`).

Each page carries a Content-Security-Policy (:data:`POLICY`) that lets the browser load nothing from
another origin: ReDoc's sidebar asks ``cdn.redoc.ly`` for its logo, which the policy refuses before any
lookup (ReDoc then leaves the logo out).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse

from service.exceptions import APIError

router = APIRouter(include_in_schema=False)
ASSETS = Path(str(files("fastapi_offline").joinpath("static")))
#: the served files and their media types
FILES = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
         "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}
PREFIX = "/docs/assets/"
REDIRECT = "/docs/oauth2-redirect"  #: Swagger UI's OAuth2 redirect page
#: the paths of the pages and their assets (public: :data:`service.auth.PUBLIC_PATHS`)
PATHS = frozenset({"/docs", REDIRECT, "/redoc", *(PREFIX + name for name in FILES)})
#: the assets belong to the installed package's version: a browser may keep them a day
CACHE = {"Cache-Control": "public, max-age=86400"}
#: this server only (inline: the pages' own start-up script and the styles both UIs inject; blob: ReDoc's
#: search worker; data: Swagger UI's icons)
POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
          "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:")


def _confined(response):
    response.headers["Content-Security-Policy"] = POLICY
    return response


def _root(request: Request) -> str:
    return request.scope.get("root_path", "")


@router.get("/docs")
async def swagger_ui(request: Request):
    root, app = _root(request), request.app
    return _confined(get_swagger_ui_html(openapi_url=root + app.openapi_url, title=f"{app.title} - Swagger UI",
                               oauth2_redirect_url=root + REDIRECT,
                               swagger_js_url=root + PREFIX + "swagger-ui-bundle.js",
                               swagger_css_url=root + PREFIX + "swagger-ui.css",
                               swagger_favicon_url=root + PREFIX + "favicon.png",
                               swagger_ui_parameters=app.swagger_ui_parameters))


@router.get(REDIRECT)
async def swagger_ui_redirect():
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request):
    root, app = _root(request), request.app
    return _confined(get_redoc_html(openapi_url=root + app.openapi_url, title=f"{app.title} - ReDoc",
                          redoc_js_url=root + PREFIX + "redoc.standalone.js",
                          redoc_favicon_url=root + PREFIX + "favicon.png", with_google_fonts=False))


@router.get(PREFIX + "{asset}")
async def asset(asset: str):
    if asset not in FILES:
        raise APIError(404, "Not Found", f"the API docs have no file {asset!r}; they have {', '.join(FILES)}",
                       field="asset", expected=" | ".join(FILES), received=asset)
    return FileResponse(ASSETS / asset, media_type=FILES[asset], headers=CACHE)
