"""sandpit's dependency checker: which requirements are already satisfied, and by what.

Run by sandpit-executor as the installer user: python3 -I deps.py, with a JSON object on
stdin {"requirements": [PEP 508 strings], "dirs": [installed package directories]}. It prints
one JSON list, one entry per requirement in order:

  {"status": "present", "version": "1.0", "path": ""}     the image satisfies it
  {"status": "present", "version": "1.0", "path": DIR}    an installed directory does
  {"status": "missing"}                                   pip is needed
  {"status": "invalid", "error": "..."}                   it does not parse here

A requirement whose environment marker is false here is present (nothing to install). For a
requirement with extras, the extras' own requirements must be satisfied in the same place.
It never imports the packages it checks and never starts pip.
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


def main():
    job = json.load(sys.stdin)
    json.dump([check(r, job.get("dirs") or []) for r in job["requirements"]], sys.stdout)


main()
