"""The what-if page's server: a small JSON API over :mod:`web.answer` and the static page that calls it.

Endpoints (every error is ``{"error": "<one line>"}`` with a 4xx status):

- ``GET /`` the page; ``GET /static/...`` its script, style and Plotly's JavaScript (from the
  ``plotly`` package, served from disk: nothing is fetched from the network);
- ``GET /api/options``: the presets, platforms, methods and acceptance models to choose from;
- ``POST /api/answer``: the controls (:class:`QueryIn`) -> best configuration of each method, curves,
  roofline;
- ``POST /api/upload?kind=model|acceptance&filename=NAME`` (the file as the request body) -> its name;
- ``POST /api/table.csv``, ``/api/platform.toml``, ``/api/trace.json``: the downloads.

Bad input is a 400 (a name that is not a choice, a malformed upload, a what-if scale out of range:
the simulator's own one-line message) or a 422 (a request of the wrong shape).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel

from hwmodels.errors import HetSpecError
from sim.whatif import WhatIf
from web.answer import Query, answer, chrome_trace, platform_toml, table_csv
from web.catalog import Catalog
from web.uploads import MAX_UPLOAD_BYTES

STATIC = Path(__file__).resolve().parent / "static"
PAGE_FILES = {"app.js": "text/javascript", "style.css": "text/css"}


class QueryIn(BaseModel):
    """The controls as the page sends them (types only: the simulator checks the values)."""

    model: str
    platform: str
    methods: list[str] = ["all"]
    acceptance: str | None = None
    context: int = 256
    batch: int = 1
    dtype: str | None = None
    mem_bw: float = 1.0
    peak_flops: float = 1.0
    link_bw: float = 1.0
    acceptance_scale: float = 1.0
    trace_method: str | None = None

    def query(self) -> Query:
        return Query(model=self.model, platform=self.platform, methods=tuple(self.methods),
                     acceptance=self.acceptance or None, context=self.context, batch=self.batch,
                     dtype=self.dtype or None,
                     whatif=WhatIf(mem_bw=self.mem_bw, peak_flops=self.peak_flops, link_bw=self.link_bw,
                                   acceptance=self.acceptance_scale))


def plotly_js() -> Path | None:
    """Plotly's bundled ``plotly.min.js`` (None when the ``plotly`` package is not installed)."""
    try:
        path = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    except ModuleNotFoundError:
        return None
    return path if path.is_file() else None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "request"
    return f"{where}: {first.get('msg', 'invalid request')}"


def create_app() -> FastAPI:
    """A fresh app with its own uploads and parsed platforms."""
    app = FastAPI(title="HetSpec what-if", docs_url=None, redoc_url=None, openapi_url=None)
    catalog = Catalog()
    plotly = plotly_js()

    @app.exception_handler(HetSpecError)
    async def _hetspec_error(request: Request, exc: HetSpecError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(exc))

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name == "plotly.min.js":
            if plotly is None:
                return _error(404, "plotly is not installed: pip install 'hetspec[web]'")
            return FileResponse(plotly, media_type="text/javascript")
        if name not in PAGE_FILES:
            return _error(404, f"no such file: {name}")
        return FileResponse(STATIC / name, media_type=PAGE_FILES[name])

    @app.get("/api/options")
    def options() -> dict:
        return {**catalog.choices(), "plots": plotly is not None}

    @app.post("/api/answer")
    def post_answer(body: QueryIn) -> dict:
        return answer(body.query(), catalog)

    @app.post("/api/upload")
    async def upload(request: Request, kind: str, filename: str) -> dict:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:     # refused before it is read
            return _error(413, f"upload {filename}: more than the {MAX_UPLOAD_BYTES} bytes read")
        data = await request.body()
        if len(data) > MAX_UPLOAD_BYTES:
            return _error(413, f"upload {filename}: more than the {MAX_UPLOAD_BYTES} bytes read")
        key, loaded = catalog.uploads.add(kind, filename, data)
        return {"id": key, "kind": kind, "name": loaded.name}

    @app.post("/api/table.csv")
    def post_table(body: QueryIn) -> Response:
        return Response(table_csv(body.query(), catalog), media_type="text/csv",
                        headers={"Content-Disposition": 'attachment; filename="hetspec-table.csv"'})

    @app.post("/api/platform.toml")
    def post_platform(body: QueryIn) -> Response:
        return Response(platform_toml(body.query(), catalog), media_type="application/toml",
                        headers={"Content-Disposition": 'attachment; filename="platform.toml"'})

    @app.post("/api/trace.json")
    def post_trace(body: QueryIn) -> JSONResponse:
        return JSONResponse(chrome_trace(body.query(), catalog, body.trace_method),
                            headers={"Content-Disposition": 'attachment; filename="hetspec-trace.json"'})

    return app
