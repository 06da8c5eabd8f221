"""The plain-data boundary between a candidate's process and the process that runs its tests.

Standard library only: the sandbox fork server loads this file by path; assay imports it too.

The candidate's code runs in its own process (:func:`serve`); the tests run in a pristine process
that calls the candidate's functions through proxies (:class:`Link`). Arguments, return values and
mutated arguments cross a pipe as tagged JSON, so the tests only ever hold objects of the exact
built-in types None, bool, int, float, complex, str, bytes, list, tuple, dict, set and frozenset:
an object that lies about equality, a subclassed ``int``, a patched ``math`` or ``builtins``
cannot reach them.

Example:
    >>> decode(encode({(1, "a"): [1.5, None, b"x", {2, 3}]}))
    {(1, 'a'): [1.5, None, b'x', {2, 3}]}
    >>> class Liar:
    ...     def __eq__(self, other):
    ...         return True
    >>> encode(Liar())
    Traceback (most recent call last):
    ...
    assay.verify.boundary.PlainDataError: Liar
"""

from __future__ import annotations

import json
import os
import struct
import sys

#: Largest message either side accepts (a candidate could otherwise exhaust the tests' memory).
MAX_MESSAGE = 64 * 1024 * 1024
_SMALL = 1 << 62  # ints beyond this travel as hex: JSON's decimal digits are capped at 4300

#: Audit events refused in the candidate's process: ways to reach memory, the tests' process,
#: or files through another program (a started program would not carry the open() guard).
DENIED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
    "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "os.symlink",
    "os.link", "pty.spawn", "os.forkpty",
})
#: Audit events recorded (not refused) as attempts: inspection that finds nothing useful here.
RECORDED_EVENTS = {"sys._getframe": "inspected stack frames (sys._getframe)",
                   "sys.settrace": "installed a trace function", "sys.setprofile": "installed a profiler",
                   "object.__getattr__": "inspected frames or code objects"}
_WATCHED_MODULES = ("builtins", "math", "cmath", "operator", "functools", "itertools", "collections",
                    "re", "string", "copy", "heapq", "bisect", "statistics", "random", "fractions",
                    "decimal", "sys", "os", "json", "unittest", "typing")


class PlainDataError(TypeError):
    """A value that is not plain data; the message is the offending type's name."""


class BoundaryFailure(Exception):
    """The tests' side stopped a candidate: ``guard`` names the guard, ``reason`` the effect."""

    def __init__(self, guard: str, reason: str) -> None:
        super().__init__(reason)
        self.guard = guard
        self.reason = reason


# plain data ----------------------------------------------------------------------------------
def _tag(v, depth=0):
    t = type(v)
    if depth > 200:
        raise PlainDataError("a structure nested deeper than 200 levels")
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -_SMALL < v < _SMALL else {"x": format(v, "x")}
    if t is float:
        return {"g": repr(v)} if v != v or v in (float("inf"), float("-inf")) else v
    if t is list:
        return [_tag(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [_tag(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[_tag(k, depth + 1), _tag(x, depth + 1)] for k, x in v.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "f": [_tag(x, depth + 1) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [repr(v.real), repr(v.imag)]}
    raise PlainDataError(t.__name__)


def _untag(obj):
    if len(obj) != 1:
        raise ValueError("malformed plain data")
    (k, v), = obj.items()
    if k == "t":
        return tuple(v)
    if k == "d":
        return {a: b for a, b in v}
    if k == "s":
        return set(v)
    if k == "f":
        return frozenset(v)
    if k == "b":
        return bytes.fromhex(v)
    if k == "x":
        return int(v, 16)
    if k == "g":
        return float(v)
    if k == "c":
        return complex(float(v[0]), float(v[1]))
    raise ValueError(f"malformed plain data: tag {k!r}")


def encode(value) -> str:
    """``value`` as tagged JSON; :class:`PlainDataError` (naming the type) if any part of it is
    not one of the exact plain types (subclasses are refused: they can override ``__eq__``).

    Example:
        >>> encode((1, [2.0]))
        '{"t":[1,[2.0]]}'
    """
    return json.dumps(_tag(value), separators=(",", ":"))


def decode(text: str):
    """The value :func:`encode` wrote; only exact built-in types can come out of it.

    Example:
        >>> decode('{"t":[1,{"x":"ff"}]}')
        (1, 255)
    """
    return json.loads(text, object_hook=_untag)


# framing -------------------------------------------------------------------------------------
def _send(fd, obj) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd, n):
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n > MAX_MESSAGE:
        raise BoundaryFailure("plain_data", f"the candidate sent a {n}-byte message (limit {MAX_MESSAGE})")
    body = _read_exact(fd, n)
    return None if body is None else json.loads(body)


# the candidate's side ------------------------------------------------------------------------
def _snapshot():
    """Identity of every callable in the watched modules, and of each loaded module."""
    mods = sys.modules
    snap = {"modules": {k: id(v) for k, v in mods.items()}}
    for name in _WATCHED_MODULES:
        m = mods.get(name)
        if m is not None:
            snap[name] = {k: id(v) for k, v in vars(m).items() if callable(v)}
    return snap


def _tampering(before):
    """What the candidate changed in its own process (the tests never see it)."""
    out = []
    mods = sys.modules
    for name, ident in before["modules"].items():
        if id(mods.get(name)) != ident:
            out.append(f"replaced sys.modules[{name!r}]")
    for name in _WATCHED_MODULES:
        attrs = before.get(name)
        m = mods.get(name)
        if attrs is None or m is None:
            continue
        ns = vars(m)
        for k, ident in attrs.items():
            if id(ns.get(k)) != ident:
                out.append(f"patched {name}.{k}")
    return out[:20]


def _install_guards(allowed_dirs, allowed_files, attempts):
    """An audit hook (it cannot be removed) refusing :data:`DENIED_EVENTS`, every ctypes
    event and ``open`` outside ``allowed_dirs``; it records :data:`RECORDED_EVENTS`. It uses
    only objects bound here, so patching modules afterwards does not change it."""
    getcwd, fspath, isinstance_, str_, bytes_, int_ = os.getcwd, os.fspath, isinstance, str, bytes, int
    denied, recorded, perm = DENIED_EVENTS, RECORDED_EVENTS, PermissionError
    dirs = tuple(d.rstrip("/") + "/" for d in allowed_dirs)
    files = frozenset(allowed_files)

    def normal(path):
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        parts = []
        for part in path.split("/"):
            if part in ("", "."):
                continue
            if part == "..":
                if parts:
                    parts.pop()
            else:
                parts.append(part)
        return "/" + "/".join(parts)

    def hook(event, args):
        if event == "open":
            path = args[0]
            if isinstance_(path, int_):
                return
            path = fspath(path)
            if isinstance_(path, bytes_):
                path = path.decode("utf-8", "surrogateescape")
            if not isinstance_(path, str_):
                return
            full = normal(path)
            if full in files or (full + "/").startswith(dirs) and "/../" not in full:
                return
            attempts.add(f"tried to open {full} (outside its sandbox)")
            raise perm(f"the sandbox refuses to open {full}")
        if event in denied or event.startswith("ctypes.") or (
                event == "import" and args[0].split(".")[0] in ("ctypes", "_ctypes")):
            what = args[0] if event == "import" else event
            attempts.add(f"{'imported' if event == 'import' else 'called'} {what} (refused)")
            raise perm(f"the sandbox refuses {what}")
        note = recorded.get(event)
        if note is not None and (event != "object.__getattr__" or args[1] in (
                "tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "__code__", "f_locals")):
            attempts.add(note)

    sys.addaudithook(hook)


def serve(code, rfd: int, wfd: int, allowed_dirs=(), allowed_files=()) -> None:
    """Run the candidate's ``code`` (source or code object), then answer the tests' requests
    on ``rfd``/``wfd`` until end of input. Runs in the candidate's own process; never returns.
    """
    attempts = set()
    for name in [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[name]  # imported by the fork server; the audit hook refuses a new import
    main = sys.modules.get("__main__")
    if main is not None:
        for name in ("ctypes", "_libc", "_prctl"):
            vars(main).pop(name, None)
    before = _snapshot()
    _install_guards(allowed_dirs, allowed_files, attempts)
    ns = {"__name__": "__candidate__", "__builtins__": __builtins__}
    load_error = None
    try:
        if isinstance(code, str):
            code = compile(code, "candidate.py", "exec")
        exec(code, ns)
    except BaseException as e:  # reported to the tests' side as the candidate's failure
        load_error = {"x": type(e).__name__, "s": str(e)[:300]}
    send, recv, tag = _send, _recv, _tag
    while True:
        try:
            req = recv(rfd)
        except BaseException:
            req = None
        if req is None:
            os._exit(0)
        if load_error is not None:
            reply = dict(load_error)
        elif "w" in req:
            names = {}
            for name in req["w"]:
                if name not in ns or name.startswith("__"):
                    continue
                v = ns[name]
                if type(v).__name__ == "module":
                    names[name] = ["m", v.__name__]
                elif callable(v):
                    names[name] = ["f"]
                else:
                    try:
                        names[name] = ["v", tag(v)]
                    except (PlainDataError, RecursionError):
                        names[name] = ["o", type(v).__name__]
            reply = {"n": names}
        else:
            reply = _call(ns, req, tag)
        try:
            reply["t"] = _tampering(before)
        except BaseException:
            reply["t"] = ["broke the sandbox's own bookkeeping"]
        reply["a"] = sorted(attempts)
        try:
            send(wfd, reply)
        except BaseException:
            os._exit(1)


def _call(ns, req, tag):
    fn = ns.get(req["c"])
    try:
        args = decode(req["a"])
        kwargs = decode(req["k"])
        result = fn(*args, **kwargs)
    except BaseException as e:
        return {"e": type(e).__name__, "s": str(e)[:300]}
    try:
        reply = {"r": json.dumps(tag(result), separators=(",", ":"))}
    except PlainDataError as e:
        return {"p": f"returned {e}, not plain data"}
    except RecursionError:
        return {"p": "returned a structure too deep to cross as plain data"}
    mutated = {}
    for i, a in enumerate(args):
        if type(a) in (list, dict, set):
            try:
                mutated[str(i)] = json.dumps(tag(a), separators=(",", ":"))
            except PlainDataError as e:
                return {"p": f"put a {e} into its argument {i + 1}, not plain data"}
    if mutated:
        reply["m"] = mutated
    return reply


# the tests' side -----------------------------------------------------------------------------
class Link:
    """The tests' end of the pipe to the candidate's process ``pid``.

    ``notes`` collects what the candidate was seen doing (tampering, refused calls).
    """

    def __init__(self, rfd: int, wfd: int, pid: int) -> None:
        self.rfd, self.wfd, self.pid = rfd, wfd, pid
        self.notes: list[str] = []
        self.calls = 0

    def _exchange(self, req, what):
        try:
            _send(self.wfd, req)
            reply = _recv(self.rfd)
        except BoundaryFailure:
            raise
        except OSError:
            reply = None
        except ValueError:
            raise BoundaryFailure("plain_data", f"the candidate's process sent a malformed reply {what}") from None
        if reply is None:
            raise BoundaryFailure("candidate_exit", f"the candidate's process {self._ended()} {what}")
        if not isinstance(reply, dict):
            raise BoundaryFailure("plain_data", f"the candidate's process sent a malformed reply {what}")
        for note in list(reply.get("t") or ()) + list(reply.get("a") or ()):
            if isinstance(note, str) and note not in self.notes:
                self.notes.append(note)
        if "x" in reply:
            cls = str(reply["x"])
            if cls in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                raise BoundaryFailure("candidate_exit", f"the candidate exited ({cls}) before the tests ran")
            raise _exception(cls, reply.get("s"), "in the candidate's code")
        return reply

    def _ended(self):
        try:
            pid, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            return "ended"
        return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def names(self, wanted):
        """{name: ("f",) | ("m", module) | ("v", value) | ("o", type name)} for each of
        ``wanted`` the candidate's code defines."""
        reply = self._exchange({"w": list(wanted)}, "before the tests ran")
        out = {}
        names = reply.get("n")
        if not isinstance(names, dict):
            raise BoundaryFailure("plain_data", "the candidate's process sent a malformed reply")
        for name, kind in names.items():
            if kind[0] == "v":
                out[name] = ("v", _untag_tree(kind[1]))
            else:
                out[name] = tuple(kind)
        return out

    def call(self, name, args, kwargs):
        """Call the candidate's ``name`` with plain-data ``args``; its plain-data result."""
        try:
            req = {"c": name, "a": encode(args), "k": encode(kwargs)}
        except PlainDataError as e:
            raise BoundaryFailure("test_arguments", f"the tests pass a {e} to {name}(); only plain data "
                                  "crosses to the candidate") from None
        self.calls += 1
        reply = self._exchange(req, f"during {name}()")
        if "e" in reply:
            cls = str(reply["e"])
            if cls in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                raise BoundaryFailure("candidate_exit", f"{name}() tried to exit ({cls})")
            raise _exception(cls, reply.get("s"), f"in {name}()")
        if "p" in reply:
            raise BoundaryFailure("plain_data", f"{name}() {reply['p']}")
        try:
            result = decode(reply["r"])
            for i, text in (reply.get("m") or {}).items():
                orig, new = args[int(i)], decode(text)
                if type(new) is not type(orig):
                    raise ValueError("mutated argument changed type")
                if new != orig:
                    if type(orig) is list:
                        orig[:] = new
                    else:
                        orig.clear()
                        orig.update(new)
        except (KeyError, ValueError, TypeError, IndexError, RecursionError):
            raise BoundaryFailure("plain_data", f"{name}() sent back malformed data") from None
        return result

    def proxy(self, name):
        """A function the tests call in place of the candidate's ``name``."""
        call = self.call

        def proxy(*args, **kwargs):
            return call(name, args, kwargs)
        proxy.__name__ = proxy.__qualname__ = name
        return proxy


def _untag_tree(obj):
    """Untag an already parsed JSON tree (values sent inside a reply)."""
    return json.loads(json.dumps(obj), object_hook=_untag)


def _exception(cls, message, where):
    """The exception the tests see for one the candidate raised: the built-in class of that name
    (from the tests' pristine builtins), else a new class carrying the name."""
    import builtins
    text = f"{message or ''} ({where})"
    exc = getattr(builtins, cls, None) if cls.isidentifier() else None
    if isinstance(exc, type) and issubclass(exc, Exception) and exc is not BoundaryFailure:
        try:
            return exc(text)
        except Exception:
            pass
    name = cls if cls.isidentifier() else "CandidateError"
    return type(name, (Exception,), {})(text)
