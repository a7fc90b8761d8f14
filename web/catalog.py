"""What a user of the page may choose, by name, and the objects those names stand for.

Names are the presets, the platforms of the user's platforms folder (the calibrated ``host`` among them)
and the files uploaded to this server: a path typed into a request is refused, so the page never reads a
file the user did not send. A platform file is parsed once per version of the file (its modification
time): a profiled platform's tables take a good part of a second to read, more than an answer's search.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hwmodels.dtypes import DTYPE_BYTES
from hwmodels.errors import HetSpecError, UnknownNameError
from hwmodels.loader import load_platform_file, platform_file, platform_names
from hwmodels.platform import Platform
from sim.acceptance import ALPHA_PREFIX, acceptance_names
from sim.acceptance_loader import load_acceptance
from sim.model_spec import get_model, model_names
from sim.strategies import available_methods
from sim.whatif import SCALE_RANGE
from web.uploads import HEADER_SUFFIXES, MAX_UPLOAD_BYTES, UploadStore


@dataclass
class Catalog:
    """One server's uploads and parsed platform files (held by its app, never by the module)."""

    uploads: UploadStore = field(default_factory=UploadStore)
    parsed: dict[tuple[str, int], Platform] = field(default_factory=dict)

    def platform(self, name: str) -> Platform:
        path = platform_file(name)
        if path is None:
            raise UnknownNameError("platform", name, platform_names())
        key = (str(path), path.stat().st_mtime_ns)
        if key not in self.parsed:
            for old in [k for k in self.parsed if k[0] == key[0]]:
                del self.parsed[old]
            self.parsed[key] = load_platform_file(path)
        return self.parsed[key]

    def platforms(self) -> tuple[list[str], list[str]]:
        """The platforms that load, and one line for each file that does not."""
        names, problems = [], []
        for name in platform_names():
            try:
                self.platform(name)
                names.append(name)
            except HetSpecError as exc:
                problems.append(str(exc))
        return names, problems

    def model(self, name: str):
        if self.uploads.has("model", name):
            return self.uploads.get("model", name)
        names = model_names()
        if name not in names:
            raise UnknownNameError("model", name, list(names) + ["an uploaded config.json"])
        return get_model(name)

    def acceptance(self, name: str | None):
        if not name:
            return None
        if self.uploads.has("acceptance", name):
            return self.uploads.get("acceptance", name)
        if name.startswith(ALPHA_PREFIX) or name in acceptance_names():
            return load_acceptance(name)
        raise UnknownNameError("acceptance model", name, list(acceptance_names()) + ["alpha:<a>", "an uploaded file"])

    def choices(self) -> dict:
        """What the controls offer."""
        platforms, problems = self.platforms()
        return {"models": list(model_names()), "uploaded_models": self.uploads.labels("model"),
                "platforms": platforms, "platform_problems": problems, "methods": list(available_methods()),
                "acceptances": list(acceptance_names()), "uploaded_acceptances": self.uploads.labels("acceptance"),
                "dtypes": sorted(DTYPE_BYTES), "alpha_prefix": ALPHA_PREFIX, "scale_range": list(SCALE_RANGE),
                "max_upload_bytes": MAX_UPLOAD_BYTES, "header_suffixes": list(HEADER_SUFFIXES)}
