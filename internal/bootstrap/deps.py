"""sandpit's dependency checker: which requirements are already satisfied, and by what.

Run by sandpit-executor as an unprivileged user that can only read: python3 -I deps.py, with
a JSON object on stdin {"requirements": [PEP 508 strings], "dirs": [installed package
directories]}. It prints one JSON list, one entry per requirement in order:

  {"status": "present", "version": "1.0", "path": ""}     the image satisfies it
  {"status": "present", "version": "1.0", "path": DIR}    an installed directory does
  {"status": "missing"}                                   pip is needed
  {"status": "invalid", "error": "..."}                   it does not parse here

A requirement whose environment marker is false here is present (nothing to install). For a
requirement with extras, the extras' own requirements must be satisfied in the same place.
It never imports the packages it checks and never starts pip.

With {"mode": "verify", "requirements": [...], "paths": [directories, in sys.path order]} it
checks the requirements together, as a run would import them: the first distribution of each
name on paths and then the image must satisfy it. It prints one entry per requirement:
{"ok": bool, "why": "what conflicts, when not ok"}. A requested package's own requirements
are checked the same way.
"""

import json
import sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # the image may lack packaging; pip vendors it
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name


def _find(name, paths):
    """The distribution named name (canonical) on paths (None: sys.path), or None."""
    for dist in metadata.distributions(path=paths) if paths is not None else metadata.distributions():
        if canonicalize_name(dist.metadata["Name"] or "") == name:
            return dist
    return None


def _satisfied(req, paths):
    """The version of req's distribution on paths when it satisfies req (extras included)."""
    dist = _find(canonicalize_name(req.name), paths)
    if dist is None or not req.specifier.contains(dist.version, prereleases=True):
        return None
    for extra in req.extras:
        for spec in dist.requires or []:
            dep = Requirement(spec)
            if dep.marker is None or not dep.marker.evaluate({"extra": extra}):
                continue
            if _satisfied(dep, paths) is None and (paths is None or _satisfied(dep, None) is None):
                return None
    return dist.version


def check(text, dirs):
    try:
        req = Requirement(text)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return {"status": "invalid", "error": str(exc)}
    if req.marker is not None and not req.marker.evaluate():
        return {"status": "present", "version": "", "path": ""}
    version = _satisfied(req, None)
    if version is not None:
        return {"status": "present", "version": version, "path": ""}
    best = None
    for d in dirs:
        version = _satisfied(req, [d])
        if version is not None and (best is None or _newer(version, best[0])):
            best = (version, d)
    if best is not None:
        return {"status": "present", "version": best[0], "path": best[1]}
    return {"status": "missing"}


def _newer(a, b):
    try:
        from packaging.version import Version
    except ImportError:
        from pip._vendor.packaging.version import Version
    try:
        return Version(a) > Version(b)
    except Exception:  # noqa: BLE001
        return False


def _first(name, paths):
    """The first distribution named name on paths and then the image, and where it is."""
    for p in paths:
        dist = _find(name, [p])
        if dist is not None:
            return dist, p
    return _find(name, None), "the image"


def verify(text, paths):
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate():
        return {"ok": True}
    dist, where = _first(canonicalize_name(req.name), paths)
    if dist is None:
        return {"ok": False, "why": f"{req.name} is on none of the run's paths"}
    if not req.specifier.contains(dist.version, prereleases=True):
        return {"ok": False, "why": f"version {dist.version} of {req.name} comes first on the run's path (from {where})"}
    # The package's own requirements must hold too, with what comes first on the path.
    for spec in dist.requires or []:
        dep = Requirement(spec)
        if dep.marker is not None and not dep.marker.evaluate({"extra": ""}):
            continue
        got, got_where = _first(canonicalize_name(dep.name), paths)
        if got is not None and not dep.specifier.contains(got.version, prereleases=True):
            return {"ok": False, "why": f"{req.name} {dist.version} requires {spec}, but version {got.version} comes first on the run's path (from {got_where})"}
    return {"ok": True}


def main():
    job = json.load(sys.stdin)
    if job.get("mode") == "verify":
        json.dump([verify(r, job.get("paths") or []) for r in job["requirements"]], sys.stdout)
        return
    json.dump([check(r, job.get("dirs") or []) for r in job["requirements"]], sys.stdout)


main()
