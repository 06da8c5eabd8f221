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
                   "sys.settrace": "installed a trace function",
                   "sys.setprofile": "installed a profiler",
                   "object.__getattr__": "inspected frames or code objects"}
_WATCHED_MODULES = ("builtins", "math", "cmath", "operator", "functools", "itertools",
                    "collections", "re", "string", "copy", "heapq", "bisect", "statistics",
                    "random", "fractions", "decimal", "sys", "os", "json", "unittest", "typing")


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


# framing: every message is one JSON list; every JSON object in it is a plain-data tag -------
def _send(fd, obj) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _read_exact(fd, n):
    data = os.read(fd, n)
    if len(data) == n or not data:
        return data or None
    parts, got = [data], len(data)
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
        raise BoundaryFailure("plain_data",
                              f"the candidate sent a {n}-byte message (limit {MAX_MESSAGE})")
    body = _read_exact(fd, n)
    return None if body is None else json.loads(body, object_hook=_untag)


# the candidate's side ------------------------------------------------------------------------
def _identities(modules):
    """``[[module, id of it in sys.modules, [[attribute, id], ...]], ...]`` for the tests' side
    to compare with its own: this process is a fork of it, so an untouched object has the same
    id on both sides. Asked only when the tests failed (touching every object costs page copies
    in a fresh fork)."""
    out = []
    for name, attrs in modules:
        m = sys.modules.get(name)
        ns = getattr(m, "__dict__", None)
        out.append([name, id(m),
                    [[k, id(ns.get(k))] for k in attrs] if isinstance(ns, dict) else []])
    return out


def _tampering(mine, theirs):
    """What differs between the tests' pristine modules ``mine`` and the candidate's report."""
    out = []
    seen = {}
    for item in theirs:
        if isinstance(item, list) and len(item) == 3 and isinstance(item[2], list):
            seen[item[0]] = (item[1], {a[0]: a[1] for a in item[2]
                                       if isinstance(a, list) and len(a) == 2})
    for name, (ident, attrs) in mine.items():
        other = seen.get(name)
        if other is None:
            continue
        if other[0] != ident:
            out.append(f"replaced sys.modules[{name!r}]")
            continue
        out.extend(f"patched {name}.{k}" for k, v in attrs.items() if other[1].get(k) != v)
    return out[:20]


def _install_guards(allowed_dirs, allowed_files, attempts):
    """An audit hook (it cannot be removed) refusing :data:`DENIED_EVENTS`, every ctypes
    event and ``open`` outside ``allowed_dirs``; it records :data:`RECORDED_EVENTS`. It uses
    only objects bound here, so patching modules afterwards does not change it."""
    getcwd, fspath, isinstance_, str_, bytes_, int_ = (os.getcwd, os.fspath, isinstance, str,
                                                       bytes, int)
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
    attempts: set[str] = set()
    me, getpid = os.getpid(), os.getpid
    for name in [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes")]:
        del sys.modules[name]  # imported by the fork server; the audit hook refuses a new import
    main = sys.modules.get("__main__")
    if main is not None:
        for name in ("ctypes", "_libc", "_prctl"):
            vars(main).pop(name, None)
    _install_guards(allowed_dirs, allowed_files, attempts)
    ns = {"__name__": "__candidate__", "__builtins__": __builtins__}
    load_error = None
    try:
        if isinstance(code, str):
            code = compile(code, "candidate.py", "exec")
        exec(code, ns)
    except BaseException as e:  # reported to the tests' side as the candidate's failure
        load_error = ["x", type(e).__name__, str(e)[:300]]
    send, recv = _send, _recv
    while True:
        if getpid() != me:  # a fork of the candidate that returned here: only the original
            os._exit(0 if load_error is None else 1)  # answers, or replies would race
        try:
            req = recv(rfd)
        except BaseException:
            req = None
        if req is None:
            os._exit(0)
        kind = req[0]
        reply: list[object]
        if load_error is not None:
            reply = list(load_error)
        elif kind == "c":
            reply = _call(ns.get(req[1]), req[2], req[3])
        elif kind == "w":
            reply = ["n", _exports(ns, req[1])]
        else:
            try:
                reply = ["i", _identities(req[1])]
            except BaseException:
                reply = ["i", []]
        reply.append(sorted(attempts))
        if getpid() != me:
            os._exit(1)
        try:
            send(wfd, reply)
        except BaseException:
            os._exit(1)


def _exports(ns, wanted):
    out = []
    for name in wanted:
        if name not in ns or name.startswith("__"):
            continue
        v = ns[name]
        if type(v).__name__ == "module":
            out.append([name, "m", v.__name__])
        elif callable(v):
            out.append([name, "f", None])
        else:
            try:
                out.append([name, "v", _tag(v)])
            except (PlainDataError, RecursionError):
                out.append([name, "o", type(v).__name__])
    return out


def _call(fn, args, kwargs):
    try:
        result = fn(*args, **kwargs)
    except BaseException as e:
        return ["e", type(e).__name__, str(e)[:300]]
    try:
        reply = ["r", _tag(result), None]
    except PlainDataError as e:
        return ["p", f"returned {e}, not plain data"]
    except RecursionError:
        return ["p", "returned a structure too deep to cross as plain data"]
    mutated = None
    for i, a in enumerate(args):
        if type(a) in (list, dict, set):
            try:
                tagged = _tag(a)
            except PlainDataError as e:
                return ["p", f"put a {e} into its argument {i + 1}, not plain data"]
            except RecursionError:
                return ["p", f"put a structure too deep to cross into its argument {i + 1}"]
            mutated = (mutated or []) + [[i, tagged]]
    reply[2] = mutated
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
        except (ValueError, TypeError, KeyError, RecursionError):
            raise BoundaryFailure(
                "plain_data", f"the candidate's process sent a malformed reply {what}") from None
        if reply is None:
            raise BoundaryFailure("candidate_exit",
                                  f"the candidate's process {self._ended()} {what}")
        if type(reply) is not list or not reply or type(reply[-1]) is not list:
            raise BoundaryFailure("plain_data",
                                  f"the candidate's process sent a malformed reply {what}")
        for note in reply.pop():
            if type(note) is str and note not in self.notes:
                self.notes.append(note)
        if reply[0] == "x" and len(reply) == 3:
            cls = str(reply[1])
            if cls in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                raise BoundaryFailure("candidate_exit",
                                      f"the candidate exited ({cls}) before the tests ran")
            raise _exception(cls, reply[2], "in the candidate's code")
        return reply

    def _ended(self):
        try:
            pid, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            return "ended"
        return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"

    def names(self, wanted):
        """{name: (kind, detail)} for each of ``wanted`` the candidate's code defines: kind "f"
        (callable), "m" (a module: detail is its name), "v" (plain data: detail is the value) or
        "o" (anything else: detail is its type's name)."""
        reply = self._exchange(["w", list(wanted)], "before the tests ran")
        try:
            return {str(name): (kind, detail) for name, kind, detail in reply[1]}
        except (TypeError, ValueError, IndexError):
            raise BoundaryFailure("plain_data",
                                  "the candidate's process sent a malformed reply") from None

    def call(self, name, args, kwargs):
        """Call the candidate's ``name`` with plain-data ``args``; its plain-data result."""
        try:
            req = ["c", name, _tag(args), _tag(kwargs)]
        except PlainDataError as e:
            raise BoundaryFailure("test_arguments", f"the tests pass a {e} to {name}(); only "
                                  "plain data crosses to the candidate") from None
        self.calls += 1
        reply = self._exchange(req, f"during {name}()")
        kind = reply[0]
        if kind == "r" and len(reply) == 3:
            result, mutated = reply[1], reply[2]
            try:
                for i, new in mutated or ():
                    orig = args[i]
                    if type(new) is not type(orig):
                        raise ValueError("a mutated argument changed type")
                    if new != orig:
                        if type(orig) is list:
                            orig[:] = new
                        else:
                            orig.clear()
                            orig.update(new)
            except (ValueError, TypeError, IndexError):
                raise BoundaryFailure("plain_data", f"{name}() sent back malformed data") from None
            return result
        if kind == "e" and len(reply) == 3:
            cls = str(reply[1])
            if cls in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                raise BoundaryFailure("candidate_exit", f"{name}() tried to exit ({cls})")
            raise _exception(cls, reply[2], f"in {name}()")
        if kind == "p" and len(reply) == 2:
            raise BoundaryFailure("plain_data", f"{name}() {reply[1]}")
        raise BoundaryFailure("plain_data",
                              f"the candidate's process sent a malformed reply during {name}()")

    def check_tampering(self) -> None:
        """Add to :attr:`notes` what the candidate patched or replaced in its own process (asked
        after the tests failed; the candidate's answer is its own word, used for the reason)."""
        mine = {}
        for name in _WATCHED_MODULES:
            m = sys.modules.get(name)
            if m is not None:
                mine[name] = (id(m), {k: id(v) for k, v in vars(m).items() if callable(v)})
        try:
            theirs = self._exchange(["i", [[k, sorted(v[1])] for k, v in mine.items()]], "")
        except Exception:
            return
        for note in _tampering(mine,
                               theirs[1] if len(theirs) == 2 and type(theirs[1]) is list else []):
            if note not in self.notes:
                self.notes.append(note)

    def proxy(self, name):
        """A function the tests call in place of the candidate's ``name``."""
        call = self.call

        def proxy(*args, **kwargs):
            return call(name, args, kwargs)
        proxy.__name__ = proxy.__qualname__ = name
        return proxy


def _exception(cls, message, where):
    """The exception the tests see for one the candidate raised: the built-in class of that name
    (from the tests' pristine builtins), else a new class carrying the name."""
    import builtins
    text = f"{message if type(message) is str else ''} ({where})"
    exc = getattr(builtins, cls, None) if cls.isidentifier() else None
    if isinstance(exc, type) and issubclass(exc, Exception):
        try:
            return exc(text)
        except Exception:
            pass
    name = cls if cls.isidentifier() else "CandidateError"
    return type(name, (Exception,), {})(text)
