# sandpit fork server: imports the preloaded modules once, then forks one child per run, so a
# run starts without an interpreter start-up or the heavy imports. Started by sandpit-executor
# as root, as `python3 -u -I -X utf8 forkserver.py BOOTSTRAP MODULE...`, with descriptor 3 a
# SOCK_SEQPACKET socket to the executor. One JSON object per packet:
#   server -> executor, once:  {"type": "ready", "pid": int, "preloaded": [str], "skipped": {str: str},
#                                "modules": [str], "missing": [str], "data_bytes": int,
#                                "huge_bytes": int}
#                              modules: top-level names of every module it imported; missing:
#                              those it tried to import and found nowhere (optional
#                              dependencies the preload probed for); data_bytes: the data
#                              segment the preload added, which every child inherits;
#                              huge_bytes: its memory it collapsed into huge pages
#                          or: {"type": "unsafe", "error": str} (it then exits)
#   executor -> server, per run, with three descriptors (stdout, stderr, control) attached:
#                              {"id": str, "uid": int, "dir": str, "env": {str: str}}
#   executor -> server:        {"kill": int}: SIGKILL that child, if it has not been reaped
#   server -> executor:        {"type": "started", "id": str, "pid": int}
#                              {"type": "failed", "id": str, "error": str, "broken": bool}
#                              (broken: this server must not be used again)
#                              {"type": "exited", "id": str, "pid": int, "status": int, "cpu_ns": int}
#                              (a wait status, and the CPU time it used)
# The server never runs a run's code and never sees its code or INPUT: those reach the child
# over its own control descriptor, after the child has become the slot's uid. Every child
# starts from the same server state, so nothing of one run reaches another.
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import random  # noqa: F401 - its at-fork hook reseeds every child's generator
import resource
import select
import signal
import socket
import sys
import threading

_SOCK = 3
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_MAX_PACKET = 1 << 20


def _threads():
    return len(os.listdir("/proc/self/task"))


def _data_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    return 0


class _MissingRecorder:
    """The last finder on sys.meta_path: the names it is asked for were found by no other."""

    def __init__(self):
        self.names = set()

    def find_spec(self, fullname, path=None, target=None):
        self.names.add(fullname.partition(".")[0])
        return None


def _preload(names):
    """Imports names; returns those imported, those skipped (with why), and the top-level
    names of modules the imports looked for and did not find (pandas probes for numexpr and
    bottleneck at import: a run that installs one must start cold to have it seen)."""
    preloaded, skipped = [], {}
    missing = _MissingRecorder()
    sys.meta_path.append(missing)
    try:
        for name in names:
            try:
                importlib.import_module(name)
                preloaded.append(name)
            except BaseException as exc:  # noqa: BLE001 - a module the image lacks is skipped
                skipped[name] = f"{type(exc).__name__}: {exc}"
    finally:
        sys.meta_path.remove(missing)
    return preloaded, skipped, sorted(missing.names)


def _warm(preloaded):
    """Runs, once, the first use of the preloaded libraries that builds caches they keep for
    the life of the process, so that forked runs start with them built: matplotlib's first
    figure and PNG (its lazily imported modules and built tables; not the font file, which
    matplotlib drops in every forked child), PIL's image plugins (imported on the first
    Image.open) and pandas' first groupby. Measured on the bench's analysis program, A/B
    against a server without it on one loaded machine: p50 wall time 0.61x, CPU 0.80x. The
    work uses made-up data, writes nothing to disk and leaves no figure open, so every child
    still starts from the same state. A failure only costs the speed-up."""
    try:
        if "matplotlib.pyplot" in preloaded:
            import io
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.bar(["a", "b"], [1, 2])
            ax.plot([0, 1], [1, 0])
            ax.set_title("warm")
            fig.savefig(io.BytesIO(), format="png", dpi=36)
            plt.close("all")
        if "PIL.Image" in preloaded:
            from PIL import Image
            Image.preinit()  # the common formats' plugins; init() imports forty
        if "pandas" in preloaded:
            import pandas as pd
            pd.DataFrame({"k": ["a", "b"], "v": [1, 2]}).groupby("k")["v"].mean()
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


_MADV_COLLAPSE = 25  # Linux 6.1
_HUGE_PAGE = 2 << 20


def _huge_pages(libc):
    """Collapses the server's anonymous private memory (the heap the preload built) into 2 MiB
    transparent huge pages wherever a mapping holds a whole aligned 2 MiB (MADV_COLLAPSE, Linux
    6.1; it works whatever the system's THP mode, except "never"). A fork then copies one page
    table entry for each such 2 MiB instead of 512, and a child's exit tears down as few; a
    child's first write in one splits its own mapping of it and copies 4 KiB, as before. The
    server's memory grows by the untouched pages of each collapsed 2 MiB (about 2 MiB for the
    default preload). Returns the bytes collapsed and the bytes the kernel refused (a range
    mostly unpopulated, or a kernel without MADV_COLLAPSE: forks then cost what they did)."""
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    collapsed = refused = 0
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split()
        path = fields[5] if len(fields) > 5 else ""
        if fields[1] != "rw-p" or (path and path != "[heap]"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        lo = (start + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1)
        hi = end & ~(_HUGE_PAGE - 1)
        if hi - lo < _HUGE_PAGE:
            continue
        if madvise(lo, hi - lo, _MADV_COLLAPSE) == 0:
            collapsed += hi - lo
        else:
            refused += hi - lo
    return collapsed, refused


_MT_WORDS = 624  # MT19937's state: 624 words of 32 bits, then its position among them


def _numpy_reseeder(libc):
    """Returns a function that gives numpy's legacy global generator (np.random.rand, .seed and
    the rest, seeded once at numpy's import) fresh state in a forked child, as a new
    interpreter would have it; None without numpy. np.random.seed() costs a child about 0.8 ms
    and 160 copied pages (numpy's seeding code runs in each child for the first time); this
    function fills the generator's 624 state words with getrandom(2) where they lie and sets
    its position past them (its next draw mixes the new words first), which touches two pages.
    The words are found in the generator's memory here, and the finding is checked by
    reseeding once and reading the state back through numpy, after which the state is put
    back; where numpy's layout is not the one expected, it returns np.random.seed itself."""
    np_random = sys.modules.get("numpy.random")
    if np_random is None:
        return None
    fallback = np_random.seed
    try:
        generator = np_random.mtrand._rand
        name, keys, position, has_gauss, _ = generator.get_state(legacy=True)
        words = keys.astype("=u4").tobytes()
        bit_generator = generator._bit_generator
        size = sys.getsizeof(bit_generator)
        memory = ctypes.string_at(id(bit_generator), size)
        offset = memory.find(words)
        if (name != "MT19937" or has_gauss or len(words) != 4 * _MT_WORDS or offset < 0
                or memory.find(words, offset + 1) >= 0 or offset + len(words) + 4 > size):
            return fallback
        address = id(bit_generator) + offset
        pos = ctypes.c_int.from_address(address + len(words))
        if pos.value != position:
            return fallback
        getrandom = libc.getrandom
        getrandom.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        getrandom.restype = ctypes.c_ssize_t
        n = len(words)

        def reseed():
            if getrandom(address, n, 0) == n:
                pos.value = _MT_WORDS
            else:  # interrupted: numpy's own way
                fallback()

        saved = generator.get_state(legacy=True)
        reseed()
        _, new_keys, new_position, _, _ = generator.get_state(legacy=True)
        ok = (new_position == _MT_WORDS and new_keys.astype("=u4").tobytes() == ctypes.string_at(address, n)
              and new_keys.astype("=u4").tobytes() != words)
        generator.set_state(saved)
        return reseed if ok else fallback
    except Exception:  # noqa: BLE001 - numpy's own seeding is always right
        return fallback


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _serve(sock):
    """Serves the executor until it closes the socket (then exits). Returns only in a forked
    child, with the child's request and its three descriptors."""
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_w)
    children = {}  # pid -> execution ID
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            _reap(sock, children)
        if sock not in ready:
            continue
        data, fds, flags, _ = socket.recv_fds(sock, _MAX_PACKET, 3)
        if not data:
            sys.exit(0)  # the executor is gone; children die with us (their parent-death signal)
        req = json.loads(data)
        if "kill" in req:
            if req["kill"] in children:  # not reaped yet: the pid is still that child's
                os.kill(req["kill"], signal.SIGKILL)
            for fd in fds:
                os.close(fd)
            continue
        error, broken = None, False
        if len(fds) != 3 or flags & socket.MSG_CTRUNC:
            error = f"the request carried {len(fds)} descriptors; it needs stdout, stderr and control"
        elif not isinstance(req.get("uid"), int) or req["uid"] <= 0:
            error = f"uid {req.get('uid')!r} is not a slot's uid"
        elif _threads() != 1:
            # Forking with threads copies their locks in whatever state they are in.
            error, broken = f"the fork server has {_threads()} threads; it only forks with one", True
        if error is None:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # nothing buffered may be written twice
            # "started" goes out only once the child is the slot's uid (it closes its end of
            # this pipe then, or dies): the executor does not look into /proc while a process
            # is being made another uid's, because gVisor fixes the owner of /proc/<pid>/fd
            # (as root's, at that moment) the first time anything looks up /proc/<pid>.
            ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
            try:
                pid = os.fork()
            except OSError as exc:
                os.close(ready_r)
                os.close(ready_w)
                error = f"fork failed: {exc}"
            else:
                if pid == 0:
                    os.close(wake_r)
                    os.close(wake_w)
                    os.close(ready_r)
                    sock.close()
                    req["_ready_fd"] = ready_w
                    return req, fds
                os.close(ready_w)
                select.select([ready_r], [], [], 10)
                os.close(ready_r)
                children[pid] = req.get("id")
                _send(sock, {"type": "started", "id": req.get("id"), "pid": pid})
        if error is not None:
            _send(sock, {"type": "failed", "id": req.get("id"), "error": error, "broken": broken})
        for fd in fds:
            os.close(fd)


def _reap(sock, children):
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rid = children.pop(pid, None)
        if rid is not None:
            cpu_ns = int((usage.ru_utime + usage.ru_stime) * 1e9)
            _send(sock, {"type": "exited", "id": rid, "pid": pid, "status": status, "cpu_ns": cpu_ns})


def _become_run(req, fds, server_pid, libc, null, numpy_reseed):
    """Turns this freshly forked child into the run's process, as a cold start would be: its
    own session, the run's descriptors and nothing else, the slot's uid with no groups and no
    capabilities, the run's directory and environment, fresh random state. null is the
    server's descriptor of /dev/null, open for reading (the run's stdin); numpy_reseed see
    _reseed.

    Every Python object this touches is a page the child copies (its reference count is
    written): it does as little as it can, and what every child would do alike is done once in
    the server before it forks."""
    os.setsid()
    for src, dst in ((null, 0), (fds[0], 1), (fds[1], 2), (fds[2], 3)):
        os.dup2(src, dst)
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    uid = req["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    # A change of uid makes a process undumpable: its /proc files would belong to root. An
    # exec resets that for a cold run; here it is set back by hand.
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    os.close(req.pop("_ready_fd"))  # the server may now say "started" (see _serve)
    # Only now, as the slot's uid and dumpable: where close_range(2) is missing (gVisor),
    # closerange lists /proc/self/fd, and gVisor fixes that directory's owner at its first
    # lookup. No code of the run has arrived yet, and nothing else runs as the slot's uid.
    os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    try:
        # The OOM killer's first choice, before the code arrives (as the executor makes a cold
        # run). Only now, as the slot's uid: gVisor fixes the owner of /proc/self/fd when
        # /proc/self is first looked up, and a lookup as root would leave it root's.
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    # If the server dies, so does the run: nobody would be left to report its exit status.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server_pid:
        os._exit(70)
    os.chdir(req["dir"])
    # The run's environment, exactly: only the variables that differ from the server's are
    # changed (the same result as clearing it and setting every one, with fewer writes).
    env, environ = req["env"], os.environ
    for name in [name for name in environ if name not in env]:
        del environ[name]
    for name, value in env.items():
        if environ.get(name) != value:
            environ[name] = value
    _reseed(numpy_reseed)


def _reseed(numpy_reseed):
    """Gives the child the fresh state a new interpreter would have where modules keep it from
    their import: random generators, and caches of directories read from the environment.
    numpy_reseed reseeds numpy's legacy global generator (see _numpy_reseeder); None without
    numpy."""
    # random's own at-fork hook has reseeded its generator from os.urandom in this child.
    if numpy_reseed is not None:
        numpy_reseed()
    mpl = sys.modules.get("matplotlib")
    if mpl is not None:
        # matplotlib caches its config and cache directories at import (from MPLCONFIGDIR):
        # forget them so the run's own directory is used.
        for name in ("get_configdir", "get_cachedir"):
            fn = getattr(mpl, name, None)
            code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
            if code is not None and "called" in code.co_freevars:
                cells[code.co_freevars.index("called")].cell_contents = False


def main():
    bootstrap_path, names = sys.argv[1], sys.argv[2:]
    sock = socket.socket(fileno=_SOCK)
    os.set_inheritable(_SOCK, False)
    spec = importlib.util.spec_from_file_location("sandpit_bootstrap", bootstrap_path)
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    libc = ctypes.CDLL(None, use_errno=True)
    data_before = _data_bytes()
    preloaded, skipped, missing = _preload([n for n in names if n != "IPython"])
    _warm(preloaded)
    if "IPython" in names:
        # The notebook layer's shell and formatters, made once here (see bootstrap.py): a run
        # that shows a value or displays one pays neither IPython's import nor the shell.
        try:
            if bootstrap.prepare_notebook():
                preloaded.append("IPython")
            else:
                skipped["IPython"] = "IPython is not installed in the image"
        except Exception as exc:  # noqa: BLE001 - each run makes it when it needs it
            skipped["IPython"] = f"its shell could not be made: {type(exc).__name__}: {exc}"
    numpy_reseed = _numpy_reseeder(libc)
    # Objects of the preload never change again: keep the collector from touching (and so
    # copying) their pages in every child.
    gc.collect()
    gc.freeze()
    try:
        huge_bytes, _ = _huge_pages(libc)
    except (OSError, ValueError, AttributeError):  # an optimisation only
        huge_bytes = 0
    if threading.active_count() != 1 or _threads() != 1:
        _send(sock, {"type": "unsafe", "error": f"it has {_threads()} threads after importing {', '.join(preloaded) or 'nothing'}: forking is unsafe"})
        sys.exit(1)
    modules = sorted({name.partition(".")[0] for name in sys.modules})
    server_pid = os.getpid()
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # each child's stdin
    _send(sock, {"type": "ready", "pid": server_pid, "preloaded": preloaded, "skipped": skipped,
                 "modules": modules, "missing": missing, "data_bytes": max(_data_bytes() - data_before, 0),
                 "huge_bytes": huge_bytes})
    req, fds = _serve(sock)
    _become_run(req, fds, server_pid, libc, null, numpy_reseed)
    bootstrap.rehearse()
    return bootstrap


if __name__ == "__main__":
    main().main(forked=True)  # in a child: the run, which ends with sys.exit(status)
