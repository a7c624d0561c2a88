# sandpit bench's fork floor: the memory of a preload and the CPU a bare fork and _exit of a
# process holding it costs, measured inside a sandbox container. `sandpit bench` runs it as
# root through the Engine API (as `docker exec` does), as
#   python3 -u -I -X utf8 -c SCRIPT EXECUTOR_PID_FILE BOOTSTRAP FORKS MODULE...
# It first reads the box's fork server (the executor's child whose command line names
# forkserver.py) and its waiting children, before its own imports share their pages; then it
# becomes what the fork server is (the same interpreter flags, the run environment's variables
# that decide what the imports do, bootstrap.py loaded, MODULE... imported, the collector
# frozen, its anonymous memory collapsed into huge pages as forkserver.py beside BOOTSTRAP does
# it), and times FORKS forks whose child calls os._exit(0) at once, each waited for. It
# prints one JSON object:
#   {"server": {"pid": int, "rss_bytes": int, "pss_bytes": int, "anon_bytes": int,
#               "children": int, "group_pss_bytes": int | null} | null,
#    "probe": {"preloaded": [str], "skipped": {str: str}, "import_ms": float,
#              "rss_bytes": int, "pss_bytes": int, "anon_bytes": int, "mappings": int,
#              "huge_bytes": int},
#    "forks": int, "fork_cpu_ns": int, "cpu_source": "cgroup v2" | "cgroup v1" | "rusage",
#    "fork_rusage_ns": int, "fork_wall_ns": [int]}
# fork_cpu_ns is the CPU time the box's cgroup used over the forks (rusage of this process and
# its children when the cgroup cannot be read); fork_rusage_ns the same from rusage alone.
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import resource
import shutil
import sys
import tempfile
import time


def rollup(pid):
    """Rss, Pss and Anonymous of /proc/PID/smaps_rollup, in bytes; None when unreadable (the
    container's root has no CAP_SYS_PTRACE, so another uid's process is not readable)."""
    out = {"Rss": 0, "Pss": 0, "Anonymous": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in out:
                    out[name] = int(rest.split()[0]) * 1024
    except OSError:
        return None
    return out


def ppid_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def cmdline(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def server(pid_file):
    """The fork server's memory, and with its waiting children (which share its pages)."""
    try:
        with open(pid_file) as f:
            executor = int(f.read().strip())
    except (OSError, ValueError):
        return None
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                procs[int(entry)] = (ppid_of(int(entry)), cmdline(int(entry)))
            except (OSError, IndexError, ValueError):
                pass
    servers = [p for p, (pp, cmd) in procs.items() if pp == executor and any(a.endswith(b"forkserver.py") for a in cmd)]
    if len(servers) != 1:
        return None
    pid = servers[0]
    own = rollup(pid)
    if own is None:
        return None
    children = [rollup(p) for p, (pp, _) in procs.items() if pp == pid]
    group = None  # unknown unless every child is readable
    if all(c is not None for c in children):
        group = own["Pss"] + sum(c["Pss"] for c in children)
    return {"pid": pid, "rss_bytes": own["Rss"], "pss_bytes": own["Pss"], "anon_bytes": own["Anonymous"],
            "children": len(children), "group_pss_bytes": group}


def cgroup_cpu_ns():
    """The CPU time this box's cgroup has used, in nanoseconds, and where it came from."""
    try:
        with open("/sys/fs/cgroup/cpu.stat") as f:
            for line in f:
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) * 1000, "cgroup v2"
    except OSError:
        pass
    for path in ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"):
        try:
            with open(path) as f:
                return int(f.read()), "cgroup v1"
        except (OSError, ValueError):
            pass
    return None, "rusage"


def rusage_ns():
    total = 0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += int((ru.ru_utime + ru.ru_stime) * 1e9)
    return total


def main():
    pid_file, bootstrap_path, forks, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    report = {"server": server(pid_file)}
    home = tempfile.mkdtemp(prefix="sandpit-bench-floor-")
    try:
        mpl = os.path.join(home, ".matplotlib")
        try:  # the image's font cache, as the executor seeds a run's MPLCONFIGDIR
            shutil.copytree("/opt/sandpit/matplotlib", mpl)
        except OSError:
            os.mkdir(mpl)
        os.environ.update({"HOME": home, "MPLBACKEND": "Agg", "MPLCONFIGDIR": mpl,
                           "XDG_CONFIG_HOME": os.path.join(home, ".config"), "XDG_CACHE_HOME": os.path.join(home, ".cache"),
                           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        if os.path.exists(bootstrap_path):
            spec = importlib.util.spec_from_file_location("sandpit_bootstrap", bootstrap_path)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        t0 = time.perf_counter()
        preloaded, skipped = [], {}
        for name in names:
            try:
                importlib.import_module(name)
                preloaded.append(name)
            except BaseException as exc:  # noqa: BLE001 - as the fork server skips it
                skipped[name] = f"{type(exc).__name__}: {exc}"
        import_ms = (time.perf_counter() - t0) * 1000
        gc.collect()
        gc.freeze()
        huge_bytes = 0
        server_path = os.path.join(os.path.dirname(bootstrap_path), "forkserver.py")
        if os.path.exists(server_path):  # the fork server's huge pages, when it makes them
            spec = importlib.util.spec_from_file_location("sandpit_forkserver", server_path)
            server_module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(server_module)
            if hasattr(server_module, "_huge_pages"):
                huge_bytes, _ = server_module._huge_pages(ctypes.CDLL(None, use_errno=True))
        mine = rollup(os.getpid()) or {"Rss": 0, "Pss": 0, "Anonymous": 0}
        with open("/proc/self/maps") as f:
            mappings = sum(1 for _ in f)
        report["probe"] = {"preloaded": preloaded, "skipped": skipped, "import_ms": round(import_ms, 1),
                           "rss_bytes": mine["Rss"], "pss_bytes": mine["Pss"], "anon_bytes": mine["Anonymous"],
                           "mappings": mappings, "huge_bytes": huge_bytes}

        walls = []
        cpu0, source = cgroup_cpu_ns()
        ru0 = rusage_ns()
        for _ in range(forks):
            t = time.perf_counter_ns()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            walls.append(time.perf_counter_ns() - t)
        ru1 = rusage_ns()
        cpu1, _ = cgroup_cpu_ns()
        report.update({"forks": forks, "fork_rusage_ns": ru1 - ru0, "fork_wall_ns": walls, "cpu_source": source,
                       "fork_cpu_ns": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else ru1 - ru0})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(report))


main()
