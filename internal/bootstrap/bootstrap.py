# sandpit bootstrap: runs one execution's code. Started by sandpit-executor as the slot's uid
# with descriptor 3 connected to the executor. Protocol (newline-delimited JSON on fd 3):
#   executor -> bootstrap, once: {"code": str, "input": any, "limits": {...}, "timeout_ms": int}
#   bootstrap -> executor:       {"type": "output", "json": str}
#                                {"type": "output_too_large", "bytes": int}
#                                {"type": "memory_error"}
import builtins
import json
import linecache
import math
import os
import resource
import sys
import threading
import traceback
import types

_FD = 3
_FILE = "main.py"
_MEMORY_ERROR = b'{"type": "memory_error"}\n'
_BOOTSTRAP = os.path.abspath(__file__)

# Private references: user code may replace json.dumps, os.write or sys.exit; the bootstrap
# must still report its result.
_dumps, _loads = json.dumps, json.loads
_write, _read, _exit = os.write, os.read, sys.exit


def _send(obj):
    data = (_dumps(obj) + "\n").encode()
    while data:
        n = _write(_FD, data)
        data = data[n:]


def _read_init():
    chunks = []
    while True:
        chunk = _read(_FD, 1 << 20)
        if not chunk:
            raise SystemExit("sandpit bootstrap: the executor closed the control line early")
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return _loads(b"".join(chunks))


def _set_limit(kind, value):
    if value and value > 0:
        resource.setrlimit(kind, (value, value))


def _apply_limits(init):
    limits = init.get("limits") or {}
    _set_limit(resource.RLIMIT_DATA, limits.get("memory_bytes"))
    _set_limit(resource.RLIMIT_FSIZE, limits.get("file_size_bytes"))
    _set_limit(resource.RLIMIT_NOFILE, limits.get("open_files"))
    _set_limit(resource.RLIMIT_NPROC, limits.get("processes"))
    # CPU seconds: a backstop under the executor's wall-clock kill.
    _set_limit(resource.RLIMIT_CPU, math.ceil(init.get("timeout_ms", 0) / 1000) + 1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        # The kernel's OOM killer must pick the run, never the executor.
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _report_memory_error():
    try:
        _write(_FD, _MEMORY_ERROR)
    except OSError:
        pass


def _thread_excepthook(args, _previous=threading.excepthook):
    if issubclass(args.exc_type, MemoryError):
        _report_memory_error()
    _previous(args)


def _print_user_traceback(exc):
    tb = exc.__traceback__
    # Drop the bootstrap's own frames so the traceback starts in the user's code.
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == _BOOTSTRAP:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_status(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _size_at_least(obj, limit):
    """A lower bound of len(json.dumps(obj)), computed only until it passes limit: it lets a
    huge OUTPUT be refused before serialising it would need several times its size in memory.
    Raises ValueError for a circular reference, as json.dumps would."""
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
                size += sum(len(k) + 3 for k in o if isinstance(k, str))
                o = o.values()
            stack.extend((v, False) for v in o)
        else:
            size += 1
        if limit and size > limit:
            break
    return size


def _send_output(namespace, limit):
    """Sends OUTPUT as JSON; returns the exit status to use (0, or 1 when OUTPUT is unusable)."""
    if "OUTPUT" not in namespace:
        return 0
    try:
        size = _size_at_least(namespace["OUTPUT"], limit)
        if not (limit and size > limit):
            text = _dumps(namespace["OUTPUT"], allow_nan=False, ensure_ascii=False)
            size = len(text.encode("utf-8", "surrogatepass"))
        if limit and size > limit:
            _send({"type": "output_too_large", "bytes": size})
            return 0
        _send({"type": "output", "json": text})
    except MemoryError:
        text = None
        _report_memory_error()
        print("sandpit: OUTPUT is too large to serialise within the memory limit", file=sys.stderr)
        return 1
    except (TypeError, ValueError, RecursionError) as exc:
        print(f"sandpit: OUTPUT is not JSON-serialisable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sandpit: OUTPUT could not be returned: the control line (descriptor 3) failed: {exc}", file=sys.stderr)
        return 1
    return 0


def main():
    os.set_inheritable(_FD, False)
    init = _read_init()
    _apply_limits(init)
    threading.excepthook = _thread_excepthook

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
    module.__dict__.update({"__file__": _FILE, "__builtins__": builtins, "INPUT": init.get("input")})
    sys.modules["__main__"] = module
    # The run's installed dependencies come before the image's packages (a requested version
    # wins), and the run's own directory before everything, as for a script.
    sys.path[0:0] = [os.getcwd()] + list(init.get("paths") or [])
    sys.argv = [_FILE]
    linecache.cache[_FILE] = (len(code), None, code.splitlines(True), _FILE)

    limits = init.get("limits") or {}
    status = 0
    try:
        exec(compile(code, _FILE, "exec"), module.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc)
    except MemoryError as exc:
        _report_memory_error()
        _print_user_traceback(exc)
        status = 1
    except BaseException as exc:  # noqa: BLE001 - the user's exception is the result
        _print_user_traceback(exc)
        status = 1
    output_status = _send_output(module.__dict__, limits.get("output_bytes"))
    status = status or output_status
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not hide the status
            pass
    _exit(status)


main()
