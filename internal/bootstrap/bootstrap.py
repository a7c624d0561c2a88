# sandpit bootstrap: runs one execution's code. Started by sandpit-executor as the slot's uid
# with descriptor 3 connected to the executor (a cold start), or imported by forkserver.py,
# whose children call main() once they are the slot's uid (a fork). Protocol
# (newline-delimited JSON on fd 3):
#   executor -> bootstrap, once: {"code": str, "input": any, "limits": {...}, "timeout_ms": int,
#                                 "paths": [str], "call_bytes": int, "preload_data_bytes": int,
#                                 "limit_address_space": bool, "charts": bool}
#   bootstrap -> executor:       {"type": "output", "bytes": int} followed by that many bytes:
#                                a piece of OUTPUT's JSON text (UTF-8); the pieces of a run
#                                join into one text, whose size the executor measures itself
#                                {"type": "memory_error"}: a MemoryError ended a thread or the
#                                program (it only relabels a run that exits with a non-zero
#                                status; see the executor's classify)
#                                {"type": "call", "method": str, "args": {...}}  (agent.*)
#   executor -> bootstrap, per call: {"type": "reply", "ok": bool, "value": any, "error": str}
# Nothing the program writes here decides its outcome: that comes from what the executor
# observes (exit status, signals, the box's counters, the bytes it received).
#
# With "charts", matplotlib's figures are saved as figure-N.png in the run's directory at each
# plt.show() and, for those still open, when the program ends, and PIL's Image.show() saves
# image-N.png: the executor collects them with the run's other output files. A figure shown
# is also a display: its image/png and, when it holds data, its e2b/chart (see _figure_chart).
#
# sys.stdout and sys.stderr stay descriptors 1 and 2 (pipes to the executor, written through
# as with -u); before a write to one of them follows a write to the other, the bootstrap waits
# until the executor has read what the other's pipe holds, so the program's writes reach the
# executor, which reads one pipe at a time, in the order they were made.
import atexit
import builtins
import fcntl
import gc
import io
import json
import linecache
import math
import os
import resource
import select
import signal
import sys
import termios
import threading
import time
import traceback
import types
import weakref

_FD = 3
_FILE = "main.py"
_MEMORY_ERROR = b'{"type": "memory_error"}\n'
# This file's frames, hidden from a run's tracebacks: the name it was compiled under, which
# stays when the executor runs it from its compiled code (RunRoot/bootstrap.pyc, __file__).
_BOOTSTRAP = os.path.abspath(sys._getframe().f_code.co_filename)

# Private references: user code may replace json.dumps, os.write or sys.exit; the bootstrap
# must still report its result.
_dumps, _loads = json.dumps, json.loads
_write, _read, _exit, _os_exit = os.write, os.read, sys.exit, os._exit
_write_lock = threading.Lock()  # one frame at a time on the control line
_OUTPUT_PIECE = 1 << 20  # bytes of OUTPUT's JSON per frame


def _write_all(data):
    while data:
        n = _write(_FD, data)
        data = data[n:]


def _send(obj, payload=b""):
    """Writes one frame: obj as a JSON line, then payload's raw bytes."""
    data = (_dumps(obj) + "\n").encode() + payload
    with _write_lock:
        _write_all(data)


_pending = [b""]  # bytes read from the control line past the last line


_ACK = b'{"type":"ack"}'  # the executor has a display in order with the streams


def _read_line():
    while True:
        buf = _pending[0]
        while b"\n" not in buf:
            chunk = _read(_FD, 1 << 20)
            if not chunk:
                return None
            buf += chunk
        line, _, _pending[0] = buf.partition(b"\n")
        if line != _ACK:  # one that came after _await_ack stopped waiting
            return line


def _await_ack(timeout=1.0):
    """Waits, up to timeout seconds, until the executor acknowledges the display just sent:
    it then has it in order with what the streams held, and what the program writes next
    comes after it. (A program that wrote a frame of its own that swallowed the display gets
    no answer: it goes on after the timeout.)"""
    deadline = _monotonic() + timeout
    with _call_lock:
        while True:
            buf = _pending[0]
            if b"\n" in buf:
                line, _, rest = buf.partition(b"\n")
                if line == _ACK:
                    _pending[0] = rest
                return
            left = deadline - _monotonic()
            if left <= 0 or not select.select([_FD], [], [], left)[0]:
                return
            chunk = _read(_FD, 1 << 20)
            if not chunk:
                return
            _pending[0] = buf + chunk


_SECRET_CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")


_env_set = [None]  # the env a session's interpreter last set


def _apply_env(init):
    """The session's environment (its template's, then its request's), set before the code
    when it differs from what this interpreter last set: a call's own changes to those
    variables persist from call to call, as its globals do."""
    env = init.get("env")
    if env and env != _env_set[0]:
        os.environ.update(env)
        _env_set[0] = env


def _apply_secrets(init):
    """The run's secrets (docs/secrets.md): each named secret's placeholder in its environment
    variable (the value never enters the box), and the trust bundle the executor wrote (the
    box's own roots and the daemon's CA, which signs the certificates the egress proxy presents
    for the secrets' hosts), named to ssl, requests, pip and curl by their variables."""
    env = init.get("secret_env")
    if not env:
        return
    os.environ.update(env)
    ca_file = init.get("secret_ca_file")
    if ca_file:
        for name in _SECRET_CA_VARS:
            os.environ[name] = ca_file


def _read_init():
    line = _read_line()
    if line is None:
        raise SystemExit("sandpit bootstrap: the executor closed the control line early")
    return _loads(line)


_AGENT_DOC = """Calls back into the sandpit host for the agent this run belongs to.

Every function sends one request to the host and returns plain dicts and lists. A failure in
the host raises agent.Error with the host's message; a wrong argument raises TypeError (or
ValueError for a value out of range) before anything is sent. A run may make a limited number
of calls, each with a limited size and time; see the limits in the error messages.
"""


class _AgentError(Exception):
    """A call into the host failed; str(error) is the host's message."""


_AgentError.__module__ = "agent"
_AgentError.__name__ = _AgentError.__qualname__ = "Error"
_call_lock = threading.Lock()
_call_limit = [0]


def _call(method, args):
    try:
        body = _dumps({"type": "call", "method": method, "args": args}, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"agent.{method}: the arguments must be JSON-serialisable: {exc}") from None
    data = (body + "\n").encode()
    if _call_limit[0] and len(data) > _call_limit[0] + 256:
        raise _AgentError(f"agent.{method}: the request is {len(data)} bytes; the limit is {_call_limit[0]} bytes")
    with _call_lock:
        with _write_lock:
            _write_all(data)
        line = _read_line()
    if line is None:
        raise _AgentError(f"agent.{method}: the control line to the host is closed")
    reply = _loads(line)
    if not reply.get("ok"):
        raise _AgentError(reply.get("error") or f"agent.{method} failed")
    return reply.get("value")


def _need_str(method, name, value, optional=False, max_len=100_000):
    if value is None and optional:
        return
    if not isinstance(value, str):
        kind = "a string or None" if optional else "a string"
        raise TypeError(f"agent.{method}: {name} must be {kind}, not {type(value).__name__}")
    if len(value) > max_len:
        raise ValueError(f"agent.{method}: {name} is {len(value)} characters; the limit is {max_len}")


def _need_int(method, name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"agent.{method}: {name} must be an int, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"agent.{method}: {name} is {value}; allowed range is {lo} to {hi}")


def search_memory(query, limit=10):
    """Search the agent's memories by text, best match first (full-text search, BM25 rank).

    query: str, the words to look for. limit: int, 1 to 1000 (default 10).
    Returns a list of dicts: {"id", "text", "metadata", "created_at", "score"}.
    """
    _need_str("search_memory", "query", query)
    _need_int("search_memory", "limit", limit, 1, 1000)
    return _call("search_memory", {"query": query, "limit": limit})


def get_facts(subject=None, predicate=None, limit=100):
    """Return the agent's facts (subject, predicate, object triples), filtered by subject and/or
    predicate when given (exact match).

    subject, predicate: str or None. limit: int, 1 to 1000 (default 100).
    Returns a list of dicts: {"id", "subject", "predicate", "object", "metadata", "created_at"}.
    """
    _need_str("get_facts", "subject", subject, optional=True)
    _need_str("get_facts", "predicate", predicate, optional=True)
    _need_int("get_facts", "limit", limit, 1, 1000)
    return _call("get_facts", {"subject": subject, "predicate": predicate, "limit": limit})


def query_graph(start=None, relation=None, depth=1, limit=100):
    """Return part of the agent's knowledge graph as {"nodes": [...], "edges": [...]}.

    With start (a node id), the neighbourhood of that node up to depth edges away (1 to 5,
    following edges both ways), optionally only along edges whose relation is relation.
    Without start, any nodes and the edges between them. limit: int, 1 to 1000, caps the nodes
    (and the edges at 10 per node). "truncated" is True when the walk stopped at a cap and
    left out nodes or edges.
    Nodes are {"id", "type", "properties"}; edges {"source", "target", "relation", "properties"}.
    """
    _need_str("query_graph", "start", start, optional=True)
    _need_str("query_graph", "relation", relation, optional=True)
    _need_int("query_graph", "depth", depth, 1, 5)
    _need_int("query_graph", "limit", limit, 1, 1000)
    return _call("query_graph", {"start": start, "relation": relation, "depth": depth, "limit": limit})


def get_documents(query=None, ids=None, limit=10):
    """Return the agent's documents: those whose title or content matches query (full-text,
    best first), those with the given ids, or the newest when neither is given.

    query: str or None. ids: list of str or None. limit: int, 1 to 1000 (default 10).
    Returns a list of dicts: {"id", "title", "content", "metadata", "created_at"}.
    """
    _need_str("get_documents", "query", query, optional=True)
    if ids is not None:
        if not isinstance(ids, (list, tuple)) or not all(isinstance(i, str) for i in ids):
            raise TypeError("agent.get_documents: ids must be a list of strings or None")
        ids = list(ids)
    _need_int("get_documents", "limit", limit, 1, 1000)
    return _call("get_documents", {"query": query, "ids": ids, "limit": limit})


def store_result(key, value):
    """Store value (anything JSON-serialisable) under key for this agent, linked to this run.
    Storing a key again replaces its value and keeps the earlier ones as history.

    key: str, 1 to 200 characters. Returns {"key", "version", "execution_id", "created_at"}.
    """
    _need_str("store_result", "key", key, max_len=200)
    if not key:
        raise ValueError("agent.store_result: key must not be empty")
    return _call("store_result", {"key": key, "value": value})


def log(message, level="info"):
    """Write a log line for this run: kept with the execution, streamed to the caller as it
    happens, and written to the daemon's log. level: "debug", "info", "warning" or "error".
    Returns None.
    """
    _need_str("log", "message", message)
    if level not in ("debug", "info", "warning", "error"):
        raise ValueError(f'agent.log: level is {level!r}; use "debug", "info", "warning" or "error"')
    _call("log", {"message": message, "level": level})


def _agent_module(call_bytes):
    _call_limit[0] = call_bytes or 0
    mod = types.ModuleType("agent", _AGENT_DOC)
    for fn in (search_memory, get_facts, query_graph, get_documents, store_result, log):
        fn.__module__ = "agent"
        setattr(mod, fn.__name__, fn)
    mod.Error = _AgentError
    sys.modules["agent"] = mod
    return mod


def _set_limit(kind, value):
    if value and value > 0:
        resource.setrlimit(kind, (value, value))


def _apply_limits(init, oom=True):
    limits = init.get("limits") or {}
    memory = limits.get("memory_bytes")
    if memory and memory > 0:
        # The fork server's preloaded modules: their data is allowed on top, for every run
        # (a fork inherits them, a cold run may import them), so that the same code gets
        # the same outcome however the run started.
        memory += init.get("preload_data_bytes") or 0
    if init.get("limit_address_space"):
        # gVisor ignores RLIMIT_DATA but enforces RLIMIT_AS: the same allowance, on top of the
        # address space the process already has (the interpreter, and a fork's preload).
        _set_limit(resource.RLIMIT_AS, memory and memory + _address_space())
    else:
        _set_limit(resource.RLIMIT_DATA, memory)
    _set_limit(resource.RLIMIT_FSIZE, limits.get("file_size_bytes"))
    _set_limit(resource.RLIMIT_NOFILE, limits.get("open_files"))
    _set_limit(resource.RLIMIT_NPROC, limits.get("processes"))
    if not init.get("session"):
        # CPU seconds: a backstop under the executor's wall-clock kill. (A session's
        # interpreter lives across calls: its CPU time adds up, so only the wall clock and the
        # executor's interrupt and kill bound a call there.)
        _set_limit(resource.RLIMIT_CPU, math.ceil(init.get("timeout_ms", 0) / 1000) + 1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not oom:
        return  # a fork server's child has done it (see forkserver.py)
    try:
        # The kernel's OOM killer must pick the run, never the executor.
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


_memory_error = [False]  # a MemoryError ended a thread of the program
_main_pid = [0]  # the run's process: only it sends OUTPUT (a forked child may end the program too)
# Private references, as above: the exit sequence must work whatever the program replaced.
_kill, _getpid, _signal, _sleep, _monotonic, _ioctl, _yield = (
    os.kill, os.getpid, signal.signal, time.sleep, time.monotonic, fcntl.ioctl, os.sched_yield)


def _address_space():
    """The process's address space (VmSize of /proc/self/status), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _report_memory_error():
    _memory_error[0] = True
    try:
        with _write_lock:
            _write_all(_MEMORY_ERROR)
    except OSError:
        pass


def _thread_excepthook(args, _previous=threading.excepthook):
    if issubclass(args.exc_type, MemoryError):
        _report_memory_error()
    _previous(args)


def _pipe_pending(fd):
    """The bytes waiting in the pipe at descriptor fd (0 when fd is not a pipe)."""
    try:
        return int.from_bytes(_ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
    except OSError:
        return 0


def _wait_read(fd):
    """Waits, up to a second, until the executor has read what the pipe at fd holds: it reads
    all of a pipe at once, and sends what it read on before it reads another pipe. It yields
    the processor first (the executor is usually that quick), then sleeps."""
    pending = _pipe_pending(fd)
    deadline, tries, delay = None, 0, 0.0001
    while pending:
        if tries < 100:
            tries += 1
            _yield()
        else:
            if deadline is None:
                deadline = _monotonic() + 1
            elif _monotonic() > deadline:
                return
            _sleep(delay)
            delay = min(delay * 2, 0.005)
        now = _pipe_pending(fd)
        if now < pending:  # the executor read the pipe since: what was there is read
            return
        pending = now


class _StreamFile(io.FileIO):
    """Descriptor 1 or 2 as the raw layer of sys.stdout or sys.stderr (as python3 -u has it).
    A write that follows a write to the other stream first waits until the executor has read
    the other stream's pipe, so that the two streams keep the order the program wrote them in."""

    _last = [1]  # the descriptor written last, in this process

    def write(self, b):
        fd = self.fileno()
        if _StreamFile._last[0] != fd:
            _StreamFile._last[0] = fd
            _wait_read(3 - fd)
        return super().write(b)


def _ordered_streams():
    """Makes sys.stdout and sys.stderr (and sys.__stdout__, sys.__stderr__) keep their order:
    text layers written through, as python3 -u has them, over _StreamFile."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        old.flush()
        raw = _StreamFile(fd, "wb", closefd=False)
        raw.name = f"<{name}>"
        stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, newline="\n",
                                  write_through=True)
        stream.mode = "w"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
        _streams[fd - 1] = stream
    builtins.print = _print


_streams = [None, None]  # the run's own sys.stdout and sys.stderr (see _ordered_streams)
_builtin_print = builtins.print


def _print(*args, sep=" ", end="\n", file=None, flush=False):
    """print, as the builtin, except that to the run's own stdout or stderr it makes one write
    of the whole line (the builtin writes each argument, separator and end apart): so that
    print("Hello") reaches the executor, and the caller, as one event "Hello\n" however the
    process is scheduled. To any other file it is the builtin."""
    if file is None:
        file = sys.stdout
    if file is None or (file is not _streams[0] and file is not _streams[1]):
        return _builtin_print(*args, sep=sep, end=end, file=file, flush=flush)
    if sep is None:
        sep = " "
    elif not isinstance(sep, str):
        raise TypeError(f"sep must be None or a string, not {type(sep).__name__}")
    if end is None:
        end = "\n"
    elif not isinstance(end, str):
        raise TypeError(f"end must be None or a string, not {type(end).__name__}")
    parts = []
    try:
        for i, arg in enumerate(args):
            if i:
                parts.append(sep)
            parts.append(str(arg))
    except BaseException:
        if parts:  # what the builtin would have written before the failing argument
            file.write("".join(parts))
        raise
    parts.append(end)
    file.write("".join(parts))
    if flush:
        file.flush()


_print.__name__ = _print.__qualname__ = "print"
_print.__module__ = "builtins"
_print.__doc__ = _builtin_print.__doc__


class _Charts:
    """Saves what a program shows as PNG files in the run's directory: matplotlib's figures
    (figure-1.png, ...) at each plt.show() and, still open, at the end of the run, and PIL
    images shown (image-1.png, ...). A name the program already used is passed over."""

    def __init__(self, directory):
        self.dir = directory
        self.count = {"figure": 0, "image": 0}

    def _save(self, prefix, write, text, chart=None):
        """Creates the next free prefix-N.png and writes it with write(file), then shows it
        as an image/png display (text: its text/plain) with, when chart() gives one, its
        e2b/chart; a failure is reported on stderr and leaves no file."""
        path = None
        try:
            for _ in range(10_000):
                self.count[prefix] += 1
                path = os.path.join(self.dir, f"{prefix}-{self.count[prefix]}.png")
                try:
                    f = open(path, "xb")
                    break
                except FileExistsError:
                    path = None
            else:
                return
            with f:
                write(f)
            if _getpid() == _main_pid[0]:
                with open(path, "rb") as f:
                    png = f.read()
                data = {"image/png": png, "text/plain": text}
                described = _chart_or_none(chart) if chart is not None else None
                if described is not None:
                    data["e2b/chart"] = described
                _publish(data, None, False, _nb[0])
        except Exception as exc:  # noqa: BLE001 - the program's run goes on
            print(f"sandpit: could not save a {prefix} as an output file: {type(exc).__name__}: {exc}", file=sys.stderr)
            if path is not None:
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def save_figures(self):
        """Saves every open matplotlib figure, in the order of their numbers."""
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        if helpers is None:
            return
        for manager in sorted(helpers.Gcf.get_all_fig_managers(), key=lambda m: m.num):
            figure = manager.canvas.figure
            self._save("figure", lambda f: figure.savefig(f, format="png", bbox_inches="tight"), _safe_repr(figure),
                       lambda: _figure_chart(figure))

    def save_image(self, image):
        def write(f):
            try:
                image.save(f, format="PNG")
                return
            except (OSError, ValueError, KeyError):  # a mode PNG cannot hold ("F", "CMYK"...)
                f.seek(0)
                f.truncate()
            # As PIL's own viewers show it: in its base mode, grey ("L") or colour ("RGB").
            pil = sys.modules["PIL.Image"]
            image.convert(pil.getmodebase(image.mode)).save(f, format="PNG")
        self._save("image", write, _safe_repr(image))

    def patch_pyplot(self, pyplot):
        """plt.show() saves the open figures and closes them, as a notebook shows them."""
        def show(*args, **kwargs):
            self.save_figures()
            pyplot.close("all")
        show.__doc__ = pyplot.show.__doc__
        pyplot.show = show

    def patch_image_show(self, image_show):
        """PIL's Image.show() saves the image: a viewer first in ImageShow's list."""
        charts = self

        class SaveViewer(image_show.Viewer):
            def show(self, image, **options):
                charts.save_image(image)
                return 1

        image_show.register(SaveViewer(), order=-1)

    def install(self):
        """Patches the modules already imported (a fork's preload) and hooks the import of
        the others (a cold start imports them only if the program does)."""
        hooks = {"matplotlib.pyplot": self.patch_pyplot, "PIL.ImageShow": self.patch_image_show}
        for name in list(hooks):
            module = sys.modules.get(name)
            if module is not None:
                hooks.pop(name)(module)
        if hooks:
            sys.meta_path.insert(0, _ImportHook(hooks))


# Charts as data: a figure shown is described as E2B's code interpreter describes it (its
# "e2b/chart"), read from matplotlib's own objects after the figure was drawn (so that its tick
# labels are set): {"type": "line" | "scatter" | "bar" | "pie" | "box_and_whisker" |
# "superchart" | "unknown", "title": str | None, "elements": [...]}, with, for a plane chart,
# x_label, y_label, x_unit and y_unit (the text in the label's last brackets: "Time (s)" has
# "s"), and for a line or scatter chart x_ticks, x_tick_labels, x_scale (linear, log, symlog,
# logit, function, functionlog, asinh, datetime or categorical) and the same for y. Elements:
# {"label", "points": [[x, y], ...]} per line or scatter series; {"label", "group", "value"}
# per bar; {"label", "angle", "radius"} per pie slice (degrees, data units); {"label", "min",
# "first_quartile", "median", "third_quartile", "max", "outliers"} per box; one chart per
# Axes in a superchart. Dates are ISO 8601 text, a category its name, NaN and infinities null.

_CHART_VALUES = 200_000  # the most values a chart's elements hold: a larger figure has no chart


class _ChartTooLarge(Exception):
    pass


def _chart_or_none(make):
    """make()'s chart, or None when it has none or failed: a chart never costs the run its
    figure."""
    try:
        chart = make()
        if chart is not None:
            _dumps(chart, allow_nan=False)  # what JSON cannot hold would cost the display its PNG
        return chart
    except Exception:  # noqa: BLE001 - a figure matplotlib drew but this cannot describe
        return None


def _figure_chart(figure):
    """The e2b/chart of a drawn matplotlib figure, None when no Axes holds data."""
    axes = list(figure.get_axes())
    if not any(ax.has_data() for ax in axes):
        return None
    budget = [_CHART_VALUES]
    if len(axes) == 1:
        return _axes_chart(axes[0], budget)
    suptitle = getattr(figure, "_suptitle", None)
    title = suptitle.get_text() if suptitle is not None else ""
    return {"type": "superchart", "title": title or None, "elements": [_axes_chart(ax, budget) for ax in axes]}


def _is_rule(artist):
    """Whether artist is a straight horizontal or vertical line of two points (axhline, a
    grid or reference line), which does not make a chart a line chart."""
    if not isinstance(artist, sys.modules["matplotlib.lines"].Line2D):
        return False
    xy = artist.get_xydata()
    return len(xy) == 2 and (xy[0][0] == xy[1][0] or xy[0][1] == xy[1][1])


def _chart_kind(ax):
    """The chart type of what ax holds (see _figure_chart)."""
    lines = sys.modules["matplotlib.lines"]
    patches = sys.modules["matplotlib.patches"]
    collections = sys.modules["matplotlib.collections"]
    if len(ax.images):
        return "unknown"
    artists = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.artists)
    if not artists:
        return "unknown"
    if all(isinstance(a, lines.Line2D) for a in artists):
        return "line"
    if any(isinstance(a, patches.PathPatch) for a in artists) and \
            all(isinstance(a, (patches.PathPatch, lines.Line2D)) for a in artists):
        return "box_and_whisker"
    drawn = [a for a in artists if not _is_rule(a)]
    if drawn and all(type(a) is collections.PathCollection for a in drawn):
        return "scatter"
    if drawn and all(isinstance(a, patches.Wedge) for a in drawn):
        return "pie"
    if drawn and all(isinstance(a, patches.Rectangle) for a in drawn) and \
            any(getattr(c, "orientation", None) for c in ax.containers):
        return "bar"
    return "unknown"


def _axes_chart(ax, budget):
    kind = _chart_kind(ax)
    title = ax.get_title()
    chart = {"type": kind, "title": title or None}
    if kind in ("unknown", "pie"):
        chart["elements"] = _pie_slices(ax, budget) if kind == "pie" else []
        return chart
    x_label, y_label = ax.get_xlabel(), ax.get_ylabel()
    if kind == "bar":
        elements, horizontal = _bars(ax, budget)
    elif kind == "box_and_whisker":
        elements, horizontal = _boxes(ax, budget)
    else:
        elements, horizontal = _series(ax, kind, budget), False
    if horizontal:  # x_label names the categories, y_label the values, as E2B has them
        x_label, y_label = y_label, x_label
    chart.update(x_label=x_label or None, y_label=y_label or None, x_unit=_unit(x_label), y_unit=_unit(y_label))
    if kind in ("line", "scatter"):
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            value = _axis_value(axis)
            chart[name + "_ticks"] = [value(t, ticks=True) for t in axis.get_ticklocs()]
            chart[name + "_tick_labels"] = [t.get_text() for t in axis.get_ticklabels()]
            chart[name + "_scale"] = _axis_scale(axis)
    chart["elements"] = elements
    return chart


def _unit(label):
    """The unit a label names in its last brackets ("Time (s)", "Mass [kg]"), or None."""
    import re
    found = re.findall(r"[(\[]\s*([^()\[\]]*?)\s*[)\]]", label or "")
    return found[-1] if found and found[-1] else None


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    return get() if get is not None else getattr(axis, "converter", None)


def _period_freq(axis):
    """The frequency of pandas' time series axis (Series.plot() of a DatetimeIndex, whose
    positions are period ordinals), or None."""
    formatter = axis.get_major_formatter()
    if type(formatter).__name__ == "TimeSeries_DateFormatter" and "pandas" in sys.modules:
        return getattr(formatter, "freq", None)
    return None


def _axis_scale(axis):
    """An axis's scale as E2B names it: matplotlib's, or datetime or categorical for an axis
    of dates or of category names."""
    module = type(_converter(axis)).__module__
    if module == "matplotlib.dates" or _period_freq(axis) is not None:
        return "datetime"
    if module == "matplotlib.category":
        return "categorical"
    return axis.get_scale()


def _axis_value(axis):
    """A function giving a value in axis's data coordinates as JSON: an ISO 8601 date on an
    axis of dates, a category's name on an axis of categories (ticks stay positions), a float,
    or None for a value that is not finite."""
    scale = _axis_scale(axis)
    names = {}
    if scale == "categorical":
        mapping = getattr(getattr(axis, "units", None), "_mapping", None) or {}
        names = {float(v): str(k) for k, v in mapping.items()}
    num2date = sys.modules["matplotlib.dates"].num2date if scale == "datetime" else None
    freq = _period_freq(axis)
    if freq is not None:
        period = sys.modules["pandas"].Period

        def num2date(f):
            return period(ordinal=int(math.floor(f)), freq=freq).to_timestamp()

    def value(v, ticks=False):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        if not math.isfinite(f):
            return None
        if num2date is not None:
            try:
                return num2date(f).isoformat()
            except (ValueError, OverflowError, TypeError):
                return f
        if names and not ticks:
            return names.get(f, f)
        return f
    return value


def _spend(budget, n):
    budget[0] -= n
    if budget[0] < 0:
        raise _ChartTooLarge()


def _number(v):
    f = float(v)
    return round(f, 10) if math.isfinite(f) else None


def _series(ax, kind, budget):
    """The points of each line (a line chart) or each scatter collection."""
    x_value, y_value = _axis_value(ax.xaxis), _axis_value(ax.yaxis)
    out = []
    if kind == "line":
        drawn = [a for a in ax.lines if not _is_rule(a)] or list(ax.lines)
        for i, line in enumerate(drawn):
            xy = line.get_xydata()
            _spend(budget, 2 * len(xy))
            label = line.get_label()
            out.append({"label": f"Line {i}" if label.startswith("_") else label,
                        "points": [[x_value(x), y_value(y)] for x, y in xy]})
    else:
        for i, coll in enumerate(ax.collections):
            xy = coll.get_offsets()
            _spend(budget, 2 * len(xy))
            label = coll.get_label()
            out.append({"label": f"Series {i}" if label.startswith("_") else label,
                        "points": [[x_value(x), y_value(y)] for x, y in xy]})
    return out


def _tick_names(axis):
    """(position, label) of each of axis's labelled ticks."""
    return [(float(loc), t.get_text()) for loc, t in zip(axis.get_ticklocs(), axis.get_ticklabels()) if t.get_text()]


def _name_at(ticks, lo, hi, value):
    """The label of the tick nearest the middle of [lo, hi] among those within it, else value
    (the position) as text."""
    mid = (lo + hi) / 2
    inside = [(abs(p - mid), name) for p, name in ticks if lo - 1e-9 <= p <= hi + 1e-9]
    if inside:
        return min(inside)[1]
    return value(mid) if isinstance(value(mid), str) else f"{mid:g}"


def _bars(ax, budget):
    """A bar per bar of each bar container (bar(), barh(), hist()): its category (the tick
    label under it), its group (the container's label) and its value; and whether the bars
    are horizontal."""
    out, horizontal = [], False
    for i, container in enumerate(ax.containers):
        orientation = getattr(container, "orientation", None)
        if orientation is None:
            continue
        horizontal = orientation == "horizontal"
        axis = ax.yaxis if horizontal else ax.xaxis
        ticks, value = _tick_names(axis), _axis_value(axis)
        group = container.get_label()
        if not group or group.startswith("_"):
            group = f"Group {i}"
        _spend(budget, 3 * len(container.patches))
        for rect in container.patches:
            if horizontal:
                lo, hi, v = rect.get_y(), rect.get_y() + rect.get_height(), rect.get_width()
            else:
                lo, hi, v = rect.get_x(), rect.get_x() + rect.get_width(), rect.get_height()
            lo, hi = min(lo, hi), max(lo, hi)
            out.append({"label": _name_at(ticks, lo, hi, value), "group": group, "value": _number(v)})
    return out, horizontal


def _pie_slices(ax, budget):
    patches = sys.modules["matplotlib.patches"]
    wedges = [p for p in ax.patches if isinstance(p, patches.Wedge)]
    _spend(budget, 3 * len(wedges))
    return [{"label": w.get_label(), "angle": round(abs(float(w.theta2) - float(w.theta1)), 4), "radius": _number(w.r)}
            for w in wedges]


def _boxes(ax, budget):
    """A box per box patch of a boxplot(patch_artist=True): its quartiles from the box, its
    median from the line across it, its whiskers' ends and the outliers beside it; and whether
    the boxes are horizontal (their positions on the y axis)."""
    patches = sys.modules["matplotlib.patches"]
    boxes = [p for p in ax.patches if isinstance(p, patches.PathPatch)]
    lines = [line.get_xydata() for line in ax.lines]
    _spend(budget, 6 * len(boxes) + sum(2 * len(xy) for xy in lines))

    def extent(xy, k):
        col = xy[:, k]
        return float(col.min()), float(col.max())

    def across(box_xy, k):
        """Whether a line of two points at constant value inside the box spans its width
        along axis k (k=0: the boxes stand on the x axis)."""
        p0, p1 = extent(box_xy, k)
        v0, v1 = extent(box_xy, 1 - k)
        return any(len(xy) == 2 and xy[0][1 - k] == xy[1][1 - k] and v0 <= xy[0][1 - k] <= v1 and
                   abs(min(xy[:, k]) - p0) < 1e-9 and abs(max(xy[:, k]) - p1) < 1e-9 for xy in lines)

    shapes = [b.get_path().vertices for b in boxes]  # in data coordinates, as boxplot makes them
    horizontal = bool(shapes) and not across(shapes[0], 0) and across(shapes[0], 1)
    k = 1 if horizontal else 0  # the positions' axis
    axis = ax.yaxis if horizontal else ax.xaxis
    ticks, value = _tick_names(axis), _axis_value(axis)
    out = []
    for xy in shapes:
        p0, p1 = extent(xy, k)
        q1, q3 = extent(xy, 1 - k)
        box = {"label": _name_at(ticks, p0, p1, value), "min": q1, "first_quartile": q1, "median": None,
               "third_quartile": q3, "max": q3, "outliers": []}
        for line in lines:
            if not len(line) or not all(p0 - 1e-9 <= p <= p1 + 1e-9 for p in line[:, k]):
                continue
            vs = [float(v) for v in line[:, 1 - k]]
            if len(line) == 2 and vs[0] == vs[1] and q1 <= vs[0] <= q3:
                if line[0][k] != line[1][k]:
                    box["median"] = vs[0]
                continue
            if len(line) == 2 and line[0][k] == line[1][k]:  # a whisker
                if max(vs) <= q1:
                    box["min"] = min(box["min"], min(vs))
                elif min(vs) >= q3:
                    box["max"] = max(box["max"], max(vs))
                continue
            if len(line) == 2 and vs[0] == vs[1]:  # a cap
                continue
            box["outliers"].extend(v for v in vs if v < q1 or v > q3)
        out.append({k2: (_number(v) if isinstance(v, float) else v) for k2, v in box.items()})
    return out, horizontal


class _ImportHook:
    """The first finder on sys.meta_path: once a watched module has been executed by its own
    loader, calls its hook with the module. It finds nothing itself; it steps aside once every
    watched module has been imported."""

    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, fullname, path=None, target=None):
        hook = self.hooks.pop(fullname, None)
        if hook is None:
            return None
        if not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = getattr(spec.loader, "exec_module", None)
        if exec_module is not None:
            def run(module):
                exec_module(module)
                try:
                    hook(module)
                except Exception as exc:  # noqa: BLE001 - charts are a convenience
                    print(f"sandpit: could not hook {fullname} to save charts: {type(exc).__name__}: {exc}", file=sys.stderr)
            try:
                spec.loader.exec_module = run
            except AttributeError:
                pass
        return spec


_charts = [None]  # the run's _Charts, when charts are on


# The notebook layer: the value of a program's last expression and what it displays come back
# as MIME bundles ({"type": "result", "bytes": n} frames, see _Notebook.publish), formatted by
# IPython's own DisplayFormatter; code that is not valid Python is transformed as IPython
# transforms a cell (its cleanups: indentation, prompts; its % and ! syntax) and run with a
# shell that has its line magics. The fork server makes the shell once in its preload
# (prepare_notebook); a cold run makes it when it first needs it. Without IPython in the image,
# a value comes back as its repr() alone, display() prints, and code that is not Python stays
# the syntax error it is.


class _Notebook:
    """IPython's InteractiveShell, made once per process and bound to the program's module:
    its DisplayFormatter formats values, its display publisher sends display() calls to the
    executor, its magics run % lines. What making it changes outside the shell is undone
    (builtins' __IPYTHON__, which libraries take for a notebook front end; its atexit handler;
    __main__), except builtins' display, as in Jupyter. Raises ImportError without IPython."""

    def __init__(self):
        # Without jedi (completion, which nothing here asks for): IPython imports a third
        # faster and 5 MiB smaller. A program can still import jedi itself.
        blocked = "jedi" not in sys.modules
        if blocked:
            sys.modules["jedi"] = None
        try:
            from traitlets import ObjectName, Unicode
            from traitlets.config import Config
            from IPython.core.interactiveshell import InteractiveShell
            from IPython.core.displaypub import DisplayPublisher
            from IPython.core.formatters import BaseFormatter
        finally:
            if blocked and sys.modules.get("jedi", 0) is None:
                del sys.modules["jedi"]

        saved_main = sys.modules.get("__main__")
        config = Config()
        config.HistoryManager.enabled = False  # no SQLite file, no saving thread
        config.InteractiveShell.colors = "NoColor"
        # Its profile directory is IPYTHONDIR, which the executor points outside the home.
        shell = InteractiveShell.instance(config=config)
        builtins.__dict__.pop("__IPYTHON__", None)
        try:
            atexit.unregister(shell.atexit_operations)
        except Exception:  # noqa: BLE001 - an IPython without it
            pass
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        notebook = self

        class Publisher(DisplayPublisher):
            def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
                notebook.publish(data, metadata)

            def clear_output(self, wait=False):
                pass

        class DataFormatter(BaseFormatter):
            """e2b/data: a DataFrame's columns (see _frame_data)."""
            format_type = Unicode("e2b/data")
            print_method = ObjectName("_repr_e2b_data_")
            _return_type = dict

        data = DataFormatter(parent=shell.display_formatter)
        data.for_type_by_name("pandas.core.frame", "DataFrame", _frame_data)
        shell.display_formatter.formatters[data.format_type] = data
        shell.display_pub = Publisher(shell=shell, parent=shell)
        shell.showtraceback = self._failed  # a raising _repr_*_ becomes a note, not a traceback
        shell.system = shell.system_raw  # !cmd: subprocess on the run's own streams, no pty
        shell.register_magic_function(self._pip, "line", "pip")
        self.shell = shell
        self.notes = []
        self.left = 0  # bytes the run's displays may still take (0: no cap)
        self.hidden = ()

    def warm(self):
        """Formats a few values once, in the fork server, so that the formatters' lazily
        built state (type printers, imported helpers) is there in every child."""
        fmt = self.shell.display_formatter.format
        for value in (1, "s", [1.5, None], {"k": (1,)}):
            fmt(value)
        pandas = sys.modules.get("pandas")
        if pandas is not None:
            frame = pandas.DataFrame({"k": ["a", "b"], "v": [1, 2]})
            fmt(frame)
            fmt(frame.describe())
        self.notes.clear()

    def bind(self, module, limit):
        """Makes module the shell's user namespace (%who, %time and %timeit see its globals;
        the names it holds now are hidden from %who) and limit the bytes the displays of the
        run (or session call) may take together (0: none)."""
        shell = self.shell
        if shell.user_ns is not module.__dict__:
            shell.user_module = module
            shell.user_ns = module.__dict__
            # %who compares values: a name is hidden while it holds what it held here
            shell.user_ns_hidden = dict(module.__dict__)
        self.left = limit or 0

    def unbind(self):
        """Lets go of the module bind gave the shell, and of the references IPython took to
        it when it was imported or made during the run (as __main__)."""
        bound, empty = self.shell.user_module, types.ModuleType("__main__")
        self.shell.user_module, self.shell.user_ns, self.shell.user_ns_hidden = empty, empty.__dict__, {}
        if getattr(self.shell, "_orig_sys_modules_main_mod", None) is bound:
            self.shell._orig_sys_modules_main_mod = None
        completer = sys.modules.get("IPython.core.completer")
        if getattr(completer, "__main__", None) is bound:
            completer.__main__ = empty

    def _failed(self, exc_tuple=None, *args, **kwargs):
        exc_type, exc, _ = exc_tuple or sys.exc_info()
        where = ""
        tb = exc.__traceback__ if exc is not None else None
        while tb is not None:
            name = tb.tb_frame.f_code.co_name
            if name.startswith("_repr_") or name == "__repr__":
                where = name
            tb = tb.tb_next
        what = f"{where} raised" if where else "a display method raised"
        self.notes.append(f"{what} {getattr(exc_type, '__name__', exc_type)}: {exc}"[:1000])

    def _pip(self, line):
        """%pip install REQ...: installs through sandpit's dependency path, then makes the
        packages importable in this run."""
        words = line.split()
        # A failed install fails the program (outcome error), so that nothing after it runs
        # without the packages and no agent reads an ok outcome for it.
        if not words or words[0] != "install" or len(words) < 2 or any(w.startswith("-") for w in words[1:]):
            raise RuntimeError("sandpit: %pip takes `install` and requirements (PEP 508), without pip's options: "
                               "%pip install pandas==2.2.2 requests") from None
        try:
            paths = _call("pip_install", {"requirements": words[1:]})
        except _AgentError as exc:
            raise RuntimeError(f"sandpit: {exc}") from None
        for p in reversed(paths or []):
            if p not in sys.path:
                sys.path.insert(1, p)
        importlib = sys.modules.get("importlib")
        if importlib is not None:
            importlib.invalidate_caches()
        print(f"sandpit: installed {' '.join(words[1:])}")

    def transform(self, code):
        """code as IPython runs a cell: through the shell's transform_cell."""
        return self.shell.transform_cell(code)

    def format(self, value):
        self.notes.clear()
        data, metadata = self.shell.display_formatter.format(value)
        if "text/plain" not in data:
            data["text/plain"] = _safe_repr(value)
        return data, metadata

    def publish(self, data, metadata, main=False):
        _publish(data, metadata, main, self)


_DATA_CELLS = 100_000  # the largest DataFrame whose values go into its e2b/data


def _frame_data(frame):
    """A DataFrame's e2b/data, as E2B's code interpreter publishes it beside the frame's table:
    its columns as JSON, {name: [value, ...]} (DataFrame.to_dict(orient="list")), with dates
    and times as ISO 8601 text, NaN and NaT as null and a name that is not text as its str().
    None for a frame of more than _DATA_CELLS cells."""
    if frame.size > _DATA_CELLS:
        return None
    import datetime
    nat = getattr(sys.modules.get("pandas"), "NaT", None)

    def cell(value):
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if value is nat:  # a datetime itself
            return None
        if isinstance(value, (datetime.date, datetime.time)):
            return value.isoformat()
        return value  # what JSON cannot hold becomes its str() (see _publish)

    return {name if isinstance(name, str) else str(name): [cell(v) for v in frame.iloc[:, i].tolist()]
            for i, name in enumerate(frame.columns)}


def _safe_repr(value):
    try:
        return repr(value)
    except Exception as exc:  # noqa: BLE001 - the program's __repr__
        return f"<{type(value).__name__} object: its __repr__ raised {type(exc).__name__}>"


_nb = [None, False]  # the process's _Notebook (made at first need), and whether making it failed
_main_result = [None]  # the last expression's formatted value, sent after the open figures


_cell = [None, 0, 0]  # the module of the cell running, its display budget and its count


def _notebook():
    """The process's _Notebook, made now if need be (bound to the cell running); None
    without IPython."""
    if _nb[0] is None and not _nb[1]:
        try:
            nb = _Notebook()
        except Exception:  # noqa: BLE001 - an image without IPython: values as repr()
            _nb[1] = True
            return None
        if _cell[0] is not None:
            nb.bind(_cell[0], _left[0])
            nb.shell.execution_count = _cell[2] or 1
        _nb[0] = nb
    return _nb[0]


def prepare_notebook():
    """The fork server's preload: IPython imported and its shell made once, for every child.
    The atexit handler IPython registers at import (closing its own /dev/null) is dropped: a
    child has closed that descriptor, and the handler would fail at its exit."""
    nb = _notebook()
    if nb is None:
        return False
    nb.warm()
    io_mod = sys.modules.get("IPython.utils.io")
    devnull = getattr(io_mod, "devnull", None)
    if devnull is not None:
        atexit.unregister(devnull.close)
    return True


def _display(*objs, **kwargs):
    """display() for a run without the shell yet: makes it, then calls IPython's."""
    nb = _notebook()
    if nb is None:
        print(*objs)
        return None
    from IPython.display import display
    return display(*objs, **kwargs)


_left = [0]  # the display budget of a run without IPython


def _publish(data, metadata, main, nb=None):
    """Sends one MIME bundle to the executor as a "result" frame, after what the program
    wrote before it (the streams are read first). A bundle larger than what is left of the
    run's display budget is replaced by its text/plain cut short, with a note; binary values
    (PNG, JPEG) go as base64."""
    notes = list(nb.notes) if nb is not None else []
    if nb is not None:
        nb.notes.clear()
    bundle = {}
    for mime, value in (data or {}).items():
        if isinstance(value, (bytes, bytearray)):
            import base64
            value = base64.b64encode(value).decode("ascii")
        bundle[str(mime)] = value
    text = bundle.get("text/plain")
    if not isinstance(text, str):
        text = bundle["text/plain"] = "" if text is None else _safe_repr(text)
    left = nb.left if nb is not None else _left[0]
    sizes = {k: len(k) + 8 + (len(v) if isinstance(v, str) else _check_output(v, left or 0)) for k, v in bundle.items()}
    size = total = sum(sizes.values())
    meta = metadata if isinstance(metadata, dict) and metadata else None
    if meta is not None and _check_output(meta, 65536) > 65536:
        meta = None
    if left and size + 512 > left:
        # Its largest representations are left out until it fits (a large frame's e2b/data
        # before its table), down to its text/plain alone, cut short.
        kept = dict(bundle)
        for mime in sorted(bundle, key=sizes.get, reverse=True):
            if mime != "text/plain" and size + 512 > left:
                del kept[mime]
                size -= sizes[mime]
        if size + 512 > left:
            keep = max(min(len(text), (left - 1024) // 4, 4096), 0)
            kept, meta = {"text/plain": text[:keep]}, None
            what = f"only its text/plain is kept, cut to {keep} characters"
        else:
            what = f"{', '.join(sorted(set(bundle) - set(kept)))} left out"
        notes.append(f"this display took {total} bytes ({', '.join(sorted(bundle))}), more than the {max(left, 0)} "
                     f"left of the run's cap on displays (output_bytes); {what}")
        bundle = kept
    item = {"data": bundle, "is_main_result": bool(main)}
    if meta:
        item["metadata"] = meta
    if notes:
        item["note"] = "; ".join(notes)[:4000]
    if main and _cell[2]:
        item["execution_count"] = _cell[2]
    try:
        payload = _dumps(item, allow_nan=False, ensure_ascii=False, default=str).encode()
    except (TypeError, ValueError) as exc:
        item = {"data": {"text/plain": text[:4096]}, "is_main_result": bool(main),
                "note": f"the display's data is not JSON ({type(exc).__name__}: {exc}); only its text/plain is kept"}
        payload = _dumps(item, ensure_ascii=False).encode()
    if left:
        if nb is not None:
            nb.left = max(left - len(payload), 1)
        else:
            _left[0] = max(left - len(payload), 1)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream
            pass
    _wait_read(1)
    _wait_read(2)
    _send({"type": "result", "bytes": len(payload)}, payload)
    _await_ack()


def _compile_cell(code, filename):
    """Compiles code as the program: (body, last, transformed), last being the final
    expression statement compiled on its own (mode "eval") so that its value can be shown, or
    None when the code does not end in one, or ends in one with a ";". Code that is not valid
    Python is transformed as IPython transforms a cell (see _ipython_cell; transformed is then
    True), and linecache holds what was compiled, for tracebacks. Raises SyntaxError as
    compile() would: the transformed code's, or the code's own when IPython changed nothing."""
    import ast
    source, transformed = code, False
    try:
        # compile() itself, not ast.parse: a SyntaxError's traceback then has no frame but the
        # bootstrap's, which is dropped, as for a script
        tree = compile(code, filename, "exec", ast.PyCF_ONLY_AST)
    except SyntaxError as exc:
        error, transformed = exc, True
    if transformed:  # outside the except clause: a new SyntaxError is not printed as its sequel
        source = _ipython_cell(code) if _ipython_syntax(code) else None
        if source is None or source.rstrip("\n") == code.rstrip("\n"):
            raise error
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _quiet(source, tree.body[-1]):
        last = compile(ast.Expression(tree.body.pop().value), filename, "eval")
    return compile(tree, filename, "exec"), last, transformed


def _ipython_syntax(code):
    """Whether IPython's transform of a cell could change code (see _ipython_cell): it holds
    one of IPython's escapes (%, !, ? and the autocall's /, ',' and ';' at a line's start), a
    prompt to strip (>>>, ..., In [n]:) or an indented first line. Code with none is plain
    Python, invalid as such: its SyntaxError needs no IPython, whose import costs a cold run
    seconds under gVisor (a syntax error passed a 10 s timeout on a loaded machine)."""
    if any(c in code for c in "%!?"):
        return True
    first = True
    for line in code.splitlines():
        stripped = line.lstrip()
        if not stripped:
            continue
        if first and stripped != line:
            return True
        first = False
        if stripped.startswith((">>>", "...", "In [", "/", ",", ";")):
            return True
    return False


def _ipython_cell(code):
    """code transformed as IPython runs a cell (the shell's transform_cell: its cleanups, such
    as a common indentation or >>> prompts removed, then its % and ! syntax), with the blank
    lines it dropped at the start put back so that line numbers stay the user's; None without
    IPython, or when the transform fails."""
    nb = _notebook()
    if nb is None:
        return None
    try:
        cell = nb.transform(code)
    except Exception:  # noqa: BLE001 - the code's own SyntaxError says what is wrong
        return None
    return "\n" * (_blank_lines(code) - _blank_lines(cell)) + cell


def _blank_lines(text):
    """How many lines text starts with that are empty or hold only whitespace."""
    n = 0
    for line in text.splitlines():
        if line.strip():
            break
        n += 1
    return n


def _quiet(code, node):
    """Whether the expression statement node (the code's last) is followed by a ";"."""
    lines = code.splitlines()
    if node.end_lineno is None or node.end_lineno > len(lines):
        return False
    rest = lines[node.end_lineno - 1].encode()[node.end_col_offset:].decode(errors="replace")
    return rest.lstrip().startswith(";")


def _show_value(value):
    """Formats the last expression's value (nothing for None) and keeps it to send after the
    open figures."""
    if value is None:
        return
    # A scalar shows as its repr() in IPython too: no need to make the shell for it (a cold
    # run would import IPython for 1 + 1).
    nb = _nb[0] if type(value) in _SCALARS else _notebook()
    if nb is None:
        _main_result[0] = ({"text/plain": _safe_repr(value)}, None, None)
        return
    data, metadata = nb.format(value)
    _main_result[0] = (data, metadata, nb)


_SCALARS = (int, float, str, bool, bytes, complex)


def _send_main_result():
    pending, _main_result[0] = _main_result[0], None
    if pending is not None and _getpid() == _main_pid[0]:
        data, metadata, nb = pending
        try:
            _publish(data, metadata, True, nb)
        except OSError:
            pass  # the control line failed: the run's end says so


def _run_cell(code, filename, module, limit, count=0, plain=False):
    """Runs code in module's namespace as a notebook cell: the statements, then the last
    expression, whose value is kept for _send_main_result; with plain, as a script."""
    if plain:
        exec(compile(code, filename, "exec"), module.__dict__)
        return
    _cell[:] = [module, limit or 0, count]
    _left[0] = limit or 0
    nb = _nb[0]
    if nb is not None:
        nb.bind(module, limit)
        nb.shell.execution_count = count or 1
    body, last, transformed = _compile_cell(code, filename)
    namespace = module.__dict__
    if transformed:
        nb = _notebook()
    if transformed and "get_ipython" not in namespace:
        namespace["get_ipython"] = nb.shell.user_ns_hidden["get_ipython"] = nb.shell.get_ipython
    exec(body, namespace)
    if last is not None:
        _show_value(eval(last, namespace))


def _unbind_cell():
    """Lets go of the program's module (the cell's record, the shell's namespace), so that
    only the program holds it when it is dropped (see _drop_program)."""
    _cell[0] = None
    nb = _nb[0]
    if nb is not None:
        nb.unbind()


def _report_exception(exc, tb):
    """Sends the uncaught exception's name, message and traceback text (as printed on
    stderr) to the executor, for the result's error; False when it could not."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        item = {"name": type(exc).__name__, "value": str(exc)[:65536], "traceback": text[-262144:]}
        payload = _dumps(item, ensure_ascii=False).encode()
        _send({"type": "error", "bytes": len(payload)}, payload)
        return True
    except Exception:  # noqa: BLE001 - a str() that raises, a closed line: the stderr has it
        return False


def _print_user_traceback(exc, report=False, error_only=False):
    """Prints exc's traceback from the user's first frame on, as python3 would; with report,
    sends it to the executor too (the result's error), and with error_only there alone, as a
    Jupyter kernel does (printed still when it cannot be sent, or in a child process). An
    exception the bootstrap raised itself (a failed %pip, an agent.* call) ends at the user's
    line: the frames of the bootstrap and of IPython's magics it went through are sandpit's
    machinery, and its message says it all."""
    tb = exc.__traceback__
    # Drop the bootstrap's own frames so the traceback starts in the user's code.
    while tb is not None and _bootstrap_frame(tb):
        tb = tb.tb_next
    frames, node = [], tb
    while node is not None:
        frames.append(node)
        node = node.tb_next
    if frames and _bootstrap_frame(frames[-1]):
        while frames and (_bootstrap_frame(frames[-1]) or _ipython_frame(frames[-1])):
            frames.pop()
        if frames:
            frames[-1].tb_next = None
        else:
            tb = None
    # And the frame of print (_print) where a __str__ failed in it: the builtin has none.
    node = tb
    while node is not None and node.tb_next is not None:
        nxt = node.tb_next
        if nxt.tb_frame.f_code is _print.__code__:
            node.tb_next = nxt.tb_next
        else:
            node = nxt
    reporting = report and _getpid() == _main_pid[0]
    if reporting and error_only and _report_exception(exc, tb):
        return
    traceback.print_exception(type(exc), exc, tb)
    if reporting and not error_only:
        _report_exception(exc, tb)


def _bootstrap_frame(tb):
    """Whether traceback entry tb runs the bootstrap's own code."""
    return os.path.abspath(tb.tb_frame.f_code.co_filename) == _BOOTSTRAP


def _ipython_frame(tb):
    """Whether traceback entry tb runs IPython's code (a magic's machinery)."""
    return str(tb.tb_frame.f_globals.get("__name__")).startswith("IPython.")


def _exit_status(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _json_name(key):
    """The name json.dumps gives a dict key in JSON; TypeError or ValueError as json.dumps
    would raise for a key JSON cannot hold."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        return _dumps(key, allow_nan=False)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _check_names(d):
    """Raises ValueError naming the key when two keys of dict d become the same JSON name
    (1 and "1"): JSON would hold the name twice, and readers disagree on which value wins."""
    if all(type(k) is str for k in d):
        return
    seen = {}
    for key in d:
        name = _json_name(key)
        if name in seen:
            raise ValueError(f"the keys {seen[name]!r} and {key!r} of one dict both become the JSON "
                             f"name {_dumps(name, ensure_ascii=False)}; give them distinct names")
        seen[name] = key


def _check_output(obj, limit):
    """A lower bound of len(json.dumps(obj)), computed only until it passes limit: it lets a
    huge OUTPUT be refused before serialising it would need several times its size in memory.
    Raises ValueError for a circular reference, as json.dumps would, and for keys of one dict
    that become the same JSON name (see _check_names)."""
    size, stack, path = 0, [(obj, False)], set()
    while stack:
        o, leaving = stack.pop()
        if leaving:
            path.discard(id(o))
            continue
        if isinstance(o, str):
            size += len(o) + 2
        elif isinstance(o, (dict, list, tuple)):
            if id(o) in path:
                raise ValueError("Circular reference detected")
            path.add(id(o))
            stack.append((o, True))
            size += 2 + len(o)
            if isinstance(o, dict):
                _check_names(o)
                size += sum(len(k) + 3 for k in o if isinstance(k, str))
                o = o.values()
            stack.extend((v, False) for v in o)
        else:
            size += 1
        if limit and size > limit:
            break
    return size


_END = object()


def _json_pieces(obj, chunk=1 << 16):
    """Yields the text of json.dumps(obj, allow_nan=False, ensure_ascii=False) in pieces of
    about chunk characters, without ever holding it whole (a string is escaped a slice at a
    time). For an OUTPUT over its cap: only its start is sent. Raises as json.dumps would for
    a value JSON cannot hold."""
    stack = [[iter((obj,)), None, True]]  # [items, "}" or "]" or None, first item]
    while stack:
        frame = stack[-1]
        item = next(frame[0], _END)
        if item is _END:
            stack.pop()
            if frame[1]:
                yield frame[1]
            continue
        if frame[1]:
            if not frame[2]:
                yield ", "
            frame[2] = False
        if frame[1] == "}":
            key, item = item
            yield _dumps(_json_name(key), ensure_ascii=False) + ": "
        if isinstance(item, str):
            yield '"'
            for i in range(0, len(item), chunk):
                yield _dumps(item[i:i + chunk], ensure_ascii=False)[1:-1]
            yield '"'
        elif isinstance(item, dict):
            yield "{"
            stack.append([iter(item.items()), "}", True])
        elif isinstance(item, (list, tuple)):
            yield "["
            stack.append([iter(item), "]", True])
        else:
            yield _dumps(item, allow_nan=False)


def _send_pieces(pieces, limit):
    """Sends pieces (str) as output frames of up to _OUTPUT_PIECE bytes; stops once more than
    limit bytes are sent (0: no limit)."""
    buf, sent = bytearray(), 0
    for piece in pieces:
        buf += piece.encode()
        while len(buf) >= _OUTPUT_PIECE or (limit and sent + len(buf) > limit):
            data = bytes(buf[:_OUTPUT_PIECE])
            del buf[:_OUTPUT_PIECE]
            _send({"type": "output", "bytes": len(data)}, data)
            sent += len(data)
            if limit and sent > limit:
                return
    if buf:
        _send({"type": "output", "bytes": len(buf)}, bytes(buf))


def _send_output(namespace, limit):
    """Sends OUTPUT's JSON text, from the run's own process only; the executor measures its
    size and holds it to limit (an OUTPUT found over limit is sent only until it passes limit).
    Returns the exit status to use: 0, or 1 when OUTPUT is unusable."""
    if "OUTPUT" not in namespace or _getpid() != _main_pid[0]:
        return 0
    value = namespace["OUTPUT"]
    try:
        if limit and _check_output(value, limit) > limit:
            _send_pieces(_json_pieces(value), limit)
        else:
            _send_pieces((_dumps(value, allow_nan=False, ensure_ascii=False),), 0)
    except MemoryError:
        _report_memory_error()
        print("sandpit: OUTPUT is too large to serialise within the memory limit", file=sys.stderr)
        return 1
    except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: RecursionError, or a
        # daemon thread changing OUTPUT while it is serialised
        hint = ""
        if "numpy" in str(exc) or "int64" in str(exc) or "float64" in str(exc) or "ndarray" in str(exc):
            hint = " (a numpy value: convert it with int(x), float(x) or x.tolist())"
        elif "DataFrame" in str(exc) or "Series" in str(exc) or "Timestamp" in str(exc):
            hint = " (a pandas value: convert it with df.to_dict(orient='records'), s.tolist() or ts.isoformat())"
        print(f"sandpit: OUTPUT is not JSON-serialisable: {type(exc).__name__}: {exc}{hint}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sandpit: OUTPUT could not be returned: the control line (descriptor 3) failed: {exc}", file=sys.stderr)
        return 1
    return 0


def rehearse():
    """Walks, in a forked program still waiting for its code, the steps every run takes after
    its code arrives, on made-up input, keeping nothing: the program's own copies of the pages
    those steps write (reference counts, caches, the interpreter's state) are made now, while
    the slot is idle, instead of after the code has arrived. Each such copy-on-write fault
    costs microseconds under Linux and more under gVisor, which also faults the child's first
    read of each page. Nothing it does is seen by the run: its objects are dropped, sys.modules
    and linecache are as they were, and nothing is written outside the process. A failure only
    costs the speed-up."""
    saved_main = sys.modules.get("__main__")
    try:
        init = _loads(_dumps({"code": "print(1)", "input": {"k": [1, "v"]}, "timeout_ms": 1000,
                              "limits": {"memory_bytes": 1 << 20, "output_bytes": 1 << 20},
                              "charts": True, "paths": [], "call_bytes": 1 << 20}))
        code = init["code"]
        module = types.ModuleType("__main__")
        module.__dict__.update({"__file__": _FILE, "__builtins__": builtins, "INPUT": init.get("input"),
                                "agent": _agent_module(init.get("call_bytes"))})
        sys.modules["__main__"] = module
        linecache.cache[_FILE] = (len(code), None, code.splitlines(True), _FILE)
        with open(os.devnull, "w", encoding="utf-8") as sink:
            module.__dict__["print"] = lambda *a, **k: builtins.print(*a, file=sink, **k)
            exec(compile(code + "\nOUTPUT = {'n': 1, 'v': [1.5, 'x', None]}\n", _FILE, "exec"), module.__dict__)
            sink.write(_dumps(module.__dict__["OUTPUT"], allow_nan=False, ensure_ascii=False))
    except Exception:  # noqa: BLE001 - a rehearsal is an optimisation only
        pass
    finally:
        linecache.cache.pop(_FILE, None)
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        module = None
        gc.collect()


def main(forked=False):
    """Runs the program the executor sends. forked: this is a fork server's child, which has
    already closed every descriptor past 3 and raised its oom_score_adj as the slot's uid."""
    if not forked:
        # Only descriptors 0 to 3 belong to the run: close anything else inherited by mistake.
        os.closerange(_FD + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    os.set_inheritable(_FD, False)
    _main_pid[0] = _getpid()
    # Before the code arrives: in a forked program this is done while the slot is idle.
    _ordered_streams()
    init = _read_init()
    _apply_env(init)
    _apply_secrets(init)
    if init.get("session"):
        _session(init, oom=not forked)  # never returns
    _apply_limits(init, oom=not forked)
    threading.excepthook = _thread_excepthook
    # The run's directory is its own and removed after it: compiled modules would only be
    # taken for output files there (PYTHONDONTWRITEBYTECODE says so to the interpreters the
    # run starts; this interpreter read its environment before the run's was set).
    sys.dont_write_bytecode = True
    if init.get("charts"):
        _charts[0] = _Charts(os.getcwd())
        _charts[0].install()

    code = init["code"]
    if code.startswith("\ufeff"):  # a byte order mark, as editors save it: Python files may have one
        code = code[1:]
    try:
        # On disk too, as a script would be: multiprocessing's spawn, inspect and tracebacks
        # read it from there.
        with open(_FILE, "w", encoding="utf-8") as f:
            f.write(code)
    except OSError:
        pass
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": _FILE, "__builtins__": builtins, "INPUT": init.get("input"),
                            "agent": _agent_module(init.get("call_bytes"))})
    sys.modules["__main__"] = module
    # The run's installed dependencies come before the image's packages (a requested version
    # wins), and the run's own directory before everything, as for a script.
    sys.path[0:0] = [os.getcwd()] + list(init.get("paths") or [])
    sys.argv = [_FILE]
    linecache.cache[_FILE] = (len(code), None, code.splitlines(True), _FILE)

    if "display" not in builtins.__dict__:
        builtins.display = _display  # as in Jupyter; IPython's own once its shell is made
    if "IPython" not in sys.modules:
        sys.meta_path.insert(0, _ImportHook({"IPython": lambda m: _notebook()}))

    status, interrupted = 0, False
    try:
        _run_cell(code, _FILE, module, (init.get("limits") or {}).get("output_bytes"), plain=init.get("plain"))
    except SystemExit as exc:
        status = _exit_status(exc)
    except MemoryError as exc:
        _report_memory_error()
        _print_user_traceback(exc, report=True, error_only=init.get("traceback_in_error_only"))
        status = 1
    except BaseException as exc:  # noqa: BLE001 - the user's exception is the result
        _print_user_traceback(exc, report=True, error_only=init.get("traceback_in_error_only"))
        status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    _unbind_cell()
    program = weakref.ref(module)
    del module  # so that the program's module can become garbage (see _drop_program)
    _finish(status, program, (init.get("limits") or {}).get("output_bytes"), interrupted)


def _session(init, oom=True):
    """A session's interpreter: runs call after call in one module __main__, whose globals,
    imports and working directory persist, until the executor closes the control line (or
    kills it). Each call's init line is as a run's; after the call, OUTPUT (as the call left
    it) goes back as for a run, then {"type": "done", "status": int, "interrupted": bool,
    "call": int, "execution_count": int}. The execution count numbers the user's calls, 1 for
    the first: a call whose init line has "internal" (the daemon's own) takes none (0), and
    its code is named <sandpit> in tracebacks, a user's <call-N>. INPUT is the call's; OUTPUT
    is removed before each call. The executor interrupts a call that passes its timeout with
    SIGINT (KeyboardInterrupt in the program); SIGINT is ignored between calls, and each call
    starts with Python's own handler again. A SystemExit ends the call with its status, not the
    interpreter. oom: raise the process's oom_score_adj (a fork server's child has)."""
    _apply_limits(init, oom)
    threading.excepthook = _thread_excepthook
    sys.dont_write_bytecode = True
    _signal(signal.SIGINT, signal.SIG_IGN)
    if init.get("charts"):
        _charts[0] = _Charts(os.getcwd())
        _charts[0].install()
    module = types.ModuleType("__main__")
    module.__dict__.update({"__builtins__": builtins, "agent": _agent_module(init.get("call_bytes"))})
    sys.modules["__main__"] = module
    namespace = module.__dict__
    sys.path[0:0] = [os.getcwd()]
    sys.argv = [_FILE]
    if "display" not in builtins.__dict__:
        builtins.display = _display
    if "IPython" not in sys.modules:
        sys.meta_path.insert(0, _ImportHook({"IPython": lambda m: _notebook()}))
    calls = count = 0  # calls read; the user's calls among them (the execution count)
    while True:
        if calls:
            line = _read_line()
            if line is None:
                _os_exit(0)  # the executor ended the session
            init = _loads(line)
            _apply_env(init)
            _apply_secrets(init)
        calls += 1
        # The daemon's own call (the interpreter's start, a sandbox's environment) is not the
        # user's: it takes no number (0).
        number = 0
        if not init.get("internal"):
            count += 1
            number = count
        for p in reversed(init.get("paths") or []):
            if p not in sys.path:
                sys.path.insert(1, p)
        _memory_error[0] = False
        namespace["INPUT"] = init.get("input")
        namespace.pop("OUTPUT", None)
        code = init["code"]
        if code.startswith("\ufeff"):
            code = code[1:]
        name = f"<call-{number}>" if number else "<sandpit>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        status, interrupted = 0, False
        try:
            try:
                _signal(signal.SIGINT, signal.default_int_handler)
                _run_cell(code, name, module, (init.get("limits") or {}).get("output_bytes"), number, init.get("plain"))
            finally:
                _signal(signal.SIGINT, signal.SIG_IGN)
        except SystemExit as exc:
            status = _exit_status(exc)
        except MemoryError as exc:
            _report_memory_error()
            _print_user_traceback(exc, report=True, error_only=init.get("traceback_in_error_only"))
            status = 1
        except BaseException as exc:  # noqa: BLE001 - the user's exception is the call's result
            _print_user_traceback(exc, report=True, error_only=init.get("traceback_in_error_only"))
            status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
        try:
            if _charts[0] is not None and init.get("charts"):
                _charts[0].save_figures()
                pyplot = sys.modules.get("matplotlib.pyplot")
                if pyplot is not None:
                    pyplot.close("all")
        except Exception as exc:  # noqa: BLE001 - charts are a convenience
            print(f"sandpit: could not save the open figures: {type(exc).__name__}: {exc}", file=sys.stderr)
        _send_main_result()
        status = status or _send_output(namespace, (init.get("limits") or {}).get("output_bytes"))
        if _memory_error[0] and not status:
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not hide the status
                pass
        # What the call wrote reaches the executor before its end does.
        _wait_read(1)
        _wait_read(2)
        _send({"type": "done", "status": status, "interrupted": interrupted, "call": init.get("call", 0),
               "execution_count": number})


def _drop_program(program):
    """Lets the program's globals go, close to the interpreter's own exit, so that its open
    files are flushed and its objects' __del__ methods run while what they use is still bound.
    program is a weak reference to the program's module.

    First each global that only the module holds (an open file, an object with __del__), the
    newest first: it is freed at once, with every name defined before it still there. Then the
    module leaves sys.modules, and it, its remaining globals and everything only they hold
    become one piece of garbage, whose __del__ methods the collector runs before it clears
    anything (PEP 442): objects in reference cycles see every remaining global. If something
    still holds the module (a signal handler, say), its globals are dropped by hand."""
    module = program()
    namespace = module.__dict__
    del module
    for name in reversed(list(namespace)):
        value = namespace[name]
        # Held by the module alone: the namespace, this variable and getrefcount's argument.
        if sys.getrefcount(value) == 3 and not (name.startswith("__") and name.endswith("__")):
            del namespace[name]
        del value
    del namespace
    if sys.modules.get("__main__") is program():
        del sys.modules["__main__"]
    atexit._clear()  # they have run; they may hold the program's functions
    gc.collect()
    module = program()
    if module is not None:
        module.__dict__.clear()
        del module
        gc.collect()


def _finish(status, program, output_limit, interrupted):
    """Ends the process as the interpreter's exit would, without tearing every module down:
    waits for non-daemon threads, saves the open figures (with charts on), runs atexit
    handlers, sends OUTPUT as it then is (what a
    plain interpreter's program would have left), drops the program's globals (so its open
    files are flushed and closed, and its objects' __del__ methods run: see _drop_program),
    flushes stdout and stderr, then exits; after an uncaught KeyboardInterrupt (interrupted),
    by SIGINT, as python3 does. A MemoryError that ended a thread makes the status 1 (the run
    hit its memory limit). (Tearing down numpy, pandas and the rest takes tens of
    milliseconds and nothing of the run outlives it: its files and processes are removed
    after it.)"""
    shutdown = getattr(threading, "_shutdown", None)
    try:
        if shutdown is not None:  # an interpreter without it joins its threads at _exit
            shutdown()
        if _charts[0] is not None and _getpid() == _main_pid[0]:
            # The figures still open, as a notebook shows them; before the atexit handlers,
            # one of which is matplotlib's that closes every figure.
            _charts[0].save_figures()
        _send_main_result()
        if shutdown is not None:
            atexit._run_exitfuncs()
    except SystemExit as exc:  # sys.exit in a thread being joined or an atexit handler
        status = status or _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
        _print_user_traceback(exc)
        status = status or 1
    module = program()
    output_status = _send_output(module.__dict__, output_limit) if module is not None else 0
    del module
    status = status or output_status
    if _memory_error[0] and not status:
        print("sandpit: a thread of the program ran out of memory (MemoryError): exit status 1", file=sys.stderr)
        status = 1
    if shutdown is None:
        _exit(status)
    try:
        _drop_program(program)
    except SystemExit as exc:  # sys.exit in a __del__
        status = status or _exit_status(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
        _print_user_traceback(exc)
        status = status or 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not hide the status
            pass
    if interrupted:
        # CPython's exit after an uncaught KeyboardInterrupt: die of SIGINT (a shell then
        # sees 130), or exit 130 if the signal cannot be delivered.
        try:
            _signal(signal.SIGINT, signal.SIG_DFL)
            _kill(_getpid(), signal.SIGINT)
        except (OSError, ValueError):
            pass
        _os_exit(130)
    _os_exit(status)


if __name__ == "__main__":  # the cold start; the fork server calls main() in each child
    main()
