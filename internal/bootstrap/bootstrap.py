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


def _send(obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        n = os.write(_FD, data)
        data = data[n:]


def _read_init():
    chunks = []
    while True:
        chunk = os.read(_FD, 1 << 20)
        if not chunk:
            raise SystemExit("sandpit bootstrap: the executor closed the control line early")
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return json.loads(b"".join(chunks))


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
        os.write(_FD, _MEMORY_ERROR)
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


def _send_output(namespace, limit):
    if "OUTPUT" not in namespace:
        return 0
    try:
        text = json.dumps(namespace["OUTPUT"], allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        print(f"sandpit: OUTPUT is not JSON-serialisable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    size = len(text.encode("utf-8", "surrogatepass"))
    if limit and size > limit:
        _send({"type": "output_too_large", "bytes": size})
        return 0
    _send({"type": "output", "json": text})
    return 0


def main():
    os.set_inheritable(_FD, False)
    init = _read_init()
    _apply_limits(init)
    threading.excepthook = _thread_excepthook

    code = init["code"]
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": _FILE, "__builtins__": builtins, "INPUT": init.get("input")})
    sys.modules["__main__"] = module
    sys.path.insert(0, os.getcwd())
    sys.argv = [_FILE]
    linecache.cache[_FILE] = (len(code), None, code.splitlines(True), _FILE)

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
    if status == 0:
        status = _send_output(module.__dict__, (init.get("limits") or {}).get("output_bytes"))
    else:
        _send_output(module.__dict__, (init.get("limits") or {}).get("output_bytes"))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not hide the status
            pass
    sys.exit(status)


main()
