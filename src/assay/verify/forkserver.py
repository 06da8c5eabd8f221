"""The sandbox fork server: a stdlib-only script that runs untrusted candidates, one per fork.

Started by :mod:`assay.verify.sandbox` as ``python -I -S forkserver.py``; never imported by assay.

Protocol (stdin/stdout of this process, length-prefixed JSON): the parent sends a config, this
server answers ``hello`` with the isolation it achieved, then answers one reply per job until
``{"stop": true}`` or end of input. Each job runs in a fresh ``fork()`` of this server, in its
own session/process group, in a private temp dir, with rlimits, a scrubbed environment and (as
root) a throwaway uid; after the job every process of that group/uid is killed before the reply
is sent, so nothing outlives a job.

Pass channel: after forking, this server writes a random nonce into a pipe the child holds; the
harness reads it only after the last test returned and writes it back on a second pipe. The nonce
did not exist when the child was forked, so it is not in the child's memory; exit tricks
(``sys.exit(0)``, ``os._exit(0)``, killing the parent, printing "PASSED") cannot produce it. A
candidate that deliberately reads the harness's pipe inside its own process could, as with any
in-process test harness; that is outside this threat model and still contained by the sandbox.
"""

import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

_boundary = None  # assay/verify/boundary.py, loaded by main()

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 38, 36
NONCE_FD, RESULT_FD, SECRET_FD = 3, 4, 5
PR_SET_DUMPABLE = 4
#: The largest test source a boundary job may carry (it travels through one pipe buffer).
SECRET_MAX = 1024 * 1024
TAIL = 4000
#: Programs up to this size are compiled here, before the fork (see :func:`_precompile`).
PRECOMPILE_MAX = 256 * 1024

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _prctl(option, arg):
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0))


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv():
    head = _read_exact(0, 4)
    if head is None:
        return None
    body = _read_exact(0, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _send(obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(1, data):]


def _mount_tmpfs(path):
    if not os.path.isdir(path):
        return False
    rc = _libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                     b"size=256m,mode=1777")
    return rc == 0


def _isolate():
    """Network and mount namespaces where the kernel allows them; what happened, as a dict."""
    info = {"root": os.geteuid() == 0, "netns": False, "mountns": False, "private_tmp": [],
            "uid_drop": False, "notes": []}
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNET | CLONE_NEWNS
    if uid != 0:
        flags |= CLONE_NEWUSER
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        info["notes"].append("unshare(net, mount) failed: " + os.strerror(ctypes.get_errno()))
        if _libc.unshare(ctypes.c_int(CLONE_NEWNET | (CLONE_NEWUSER if uid else 0))) == 0:
            info["netns"] = True
        else:
            info["notes"].append("unshare(net) failed: " + os.strerror(ctypes.get_errno()))
        return info
    if uid != 0:
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError as e:
            info["notes"].append(f"user namespace map failed: {e}")
    info["netns"] = True
    if _libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) == 0:
        info["mountns"] = True
        for p in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
            if _mount_tmpfs(p):
                info["private_tmp"].append(p)
    else:
        info["notes"].append("making / private failed: " + os.strerror(ctypes.get_errno()))
    return info


def _world_readable(path):
    """Whether a uid that is neither owner nor group could read ``path`` (every ancestor o+x)."""
    import stat
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        p = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(p)
        except OSError:
            return True  # absent entries (python311.zip) are harmless
        need = stat.S_IXOTH | (stat.S_IROTH if i == len(parts) else 0)
        if stat.S_ISDIR(st.st_mode) and (st.st_mode & need) != need:
            return False
    return True


def _expose_sys_path(info):
    """Bind-mount sys.path entries a dropped uid could not read (e.g. under /root) to a private
    path, so candidates can still import the standard library."""
    hidden = [p for p in sys.path if p and not _world_readable(p)]
    if not hidden:
        return True
    if not info["mountns"] or "/tmp" not in info["private_tmp"]:
        info["notes"].append(f"no mount namespace to expose {hidden}")
        return False
    root = "/tmp/.assay-python"
    os.makedirs(root, 0o755, exist_ok=True)
    os.chmod(root, 0o755)
    new_path = []
    for i, p in enumerate(sys.path):
        if p in hidden and os.path.isdir(p):
            dst = f"{root}/{i}"
            os.mkdir(dst, 0o755)
            if _libc.mount(p.encode(), dst.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC),
                           None) != 0:
                info["notes"].append(f"bind mount of {p} failed: "
                                     + os.strerror(ctypes.get_errno()))
                return False
            new_path.append(dst)
        else:
            new_path.append(p)
    moved = {old: new for old, new in zip(sys.path, new_path) if old != new}
    sys.path[:] = new_path
    sys.path_importer_cache.clear()
    # packages imported before the move look submodules up in their own __path__
    for mod in list(sys.modules.values()):
        paths = getattr(mod, "__path__", None)
        if not isinstance(paths, list):
            continue
        for k, entry in enumerate(paths):
            for old, new in moved.items():
                if entry == old or entry.startswith(old + os.sep):
                    paths[k] = new + entry[len(old):]
    return True


def _scan_procs():
    """(pid, ppid, uid) of every process, from /proc."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                ppid = uid = None
                for line in f:
                    if line.startswith("PPid:"):
                        ppid = int(line.split()[1])
                    elif line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        break
            out.append((int(name), ppid, uid))
        except (OSError, ValueError, IndexError):
            continue
    return out


def _descendants(root):
    procs = _scan_procs()
    kids = {}
    for pid, ppid, _ in procs:
        kids.setdefault(ppid, []).append(pid)
    out, stack = [], [root]
    while stack:
        for c in kids.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _reap():
    """Reap exited children; True while live children remain. As a child subreaper, every
    orphaned descendant is re-parented here, so no children means no descendants at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_uid(uid):
    """kill(-1, SIGKILL) from a process running as ``uid``: atomically kills every process of
    that uid (the kernel holds the task list while it signals, so a fork bomb cannot outrun it)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:
            os._exit(1)
        os._exit(0)
    os.waitpid(pid, 0)


def _cleanup(pgid, uid):
    """Kill whatever the job left: its process group, its uid (when dropped), and any other
    descendant of this server; returns how many processes survived (0 expected)."""
    if not _reap():
        return 0
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if uid is not None:
        _kill_uid(uid)
    for attempt in range(300):
        if not _reap():
            return 0
        if uid is None or attempt >= 3:
            left = _descendants(os.getpid())
            for sig in (signal.SIGSTOP, signal.SIGKILL):
                for p in left:
                    try:
                        os.kill(p, sig)
                    except OSError:
                        pass
        time.sleep(0.001 * min(attempt + 1, 10))
    return len(_descendants(os.getpid()))


def _set_limits(job):
    cpu = max(1, int(job["cpu_seconds"]))
    mem = int(job["memory_mb"]) * 1024 * 1024
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_FSIZE, (int(job["file_mb"]) * 1024 * 1024,) * 2),
        (resource.RLIMIT_NOFILE, (int(job["max_files"]),) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    if job.get("nproc") is not None:
        limits.append((resource.RLIMIT_NPROC, (int(job["nproc"]),) * 2))
    for what, value in limits:
        resource.setrlimit(what, value)


def _child(job, jobdir, uid, nonce_r, res_w, out_w, code=None, secret_r=None):
    """Runs in the forked child: confine, then run the program; never returns."""
    try:
        os.setsid()
        fds = [os.open("/dev/null", os.O_RDONLY), out_w, out_w, nonce_r, res_w]
        if secret_r is not None:
            fds.append(secret_r)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        os.closerange(len(fds), 65536)
        os.chdir(jobdir)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": jobdir, "TMPDIR": jobdir,
                           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"})
        for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        _set_limits(job)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except BaseException:
        os._exit(3)
    if job.get("mode") == "boundary":
        _harness_boundary(job, code)
    _harness(job, code)


def _precompile(program):
    """The candidate's code object, compiled in the server before forking, or None (the child
    then compiles it, and reports any error). A fresh child pays copy-on-write page faults for
    all the memory the compiler touches (about 3.5 ms of a 5 ms trivial job here); compiled
    before the fork, the child only runs it. Compiling runs none of the candidate's code, and
    the size cap bounds the time the server spends on it; anything unusual (a syntax error, a
    nesting limit) is left to the child, where it is reported as before."""
    if len(program) > PRECOMPILE_MAX:
        return None
    try:
        return compile(program, "candidate.py", "exec")
    except BaseException:
        return None


def _format_failure(exc, program):
    """A traceback like Python's, built without ``traceback.format_exc``: that one compiles each
    source line again to place its ``^^^`` markers and searches sys.path for ``candidate.py``,
    about 5 ms in a freshly forked child. Candidate lines are quoted from the program itself."""
    lines = None
    out = ["Traceback (most recent call last):\n"]
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        out.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
        if code.co_filename == "candidate.py":
            if lines is None:
                lines = program.splitlines()
            if 0 < tb.tb_lineno <= len(lines) and lines[tb.tb_lineno - 1].strip():
                out.append(f"    {lines[tb.tb_lineno - 1].strip()}\n")
        tb = tb.tb_next
    out.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(out)


def _harness(job, code=None):
    """Run the candidate and its tests in this process; write the nonce only if all returned."""
    read, write, exit_ = os.read, os.write, os._exit
    try:
        namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
        if code is None:
            code = compile(job["program"], "candidate.py", "exec")
        exec(code, namespace)
        entry = job.get("entry_point")
        if entry:
            if "check" not in namespace:
                raise NameError("the tests define no check(candidate)")
            if entry not in namespace:
                raise NameError(f"entry point {entry!r} is not defined by the candidate")
            namespace["check"](namespace[entry])
        for name in job.get("test_functions") or ():
            namespace[name]()
    except BaseException as e:
        try:
            sys.stderr.write(_format_failure(e, job["program"])[-TAIL:])
            sys.stderr.flush()
        except BaseException:
            pass
        exit_(1)
    try:
        write(RESULT_FD, read(NONCE_FD, 64))
    except BaseException:
        exit_(2)
    exit_(0)


def _free_names(code):
    """Every global name the test code (and the functions it defines) may read."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if type(k) is type(code))
    return names


def _drop_caps():
    """Drop every capability (this process may hold them in the sandbox's user namespace):
    without CAP_SYS_PTRACE it cannot read the memory of the non-dumpable tests' process."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


#: Files a candidate in the function-call modes may open besides its temp dir and the stdlib.
DEV_FILES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
#: What a candidate's notes say about it, most telling first: (guard, words in the note).
_NOTE_GUARDS = (("sandbox", ("refused", "tried to open")),
                ("pristine_tests", ("patched", "replaced", "shadowing")),
                ("separate_process", ("inspected", "installed")))


def _harness_boundary(job, code=None):
    """Function-call modes: the candidate runs in a child process; the tests run here, in a
    process no candidate code ever ran in, and read the candidate's results as plain data.

    The tests' source arrives on SECRET_FD only after that child was forked, so the candidate's
    memory never held it; this process is made non-dumpable and the child drops its
    capabilities, so the child cannot read it from here either."""
    read, write, exit_ = os.read, os.write, os._exit
    b = _boundary
    record = {}
    pid = -1
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        to_c_r, to_c_w = os.pipe()
        from_c_r, from_c_w = os.pipe()
        allowed = [os.getcwd()] + [p for p in sys.path if p and os.path.isdir(p)]
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (NONCE_FD, RESULT_FD, SECRET_FD, to_c_w, from_c_r):
                    os.close(fd)
                # dies with the tests' process (itself tied to this server), so a server
                # killed before its cleanup runs leaves no candidate behind
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _drop_caps()
            except BaseException:
                exit_(3)
            b.serve(code if code is not None else job["program"], to_c_r, from_c_w, allowed,
                    DEV_FILES)
            exit_(0)
        os.close(to_c_r)
        os.close(from_c_w)
        # A candidate that exits early must not kill the tests' process through SIGPIPE on the
        # next request: the write fails instead, and the link reports how the candidate ended.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        chunks = []
        while True:
            chunk = read(SECRET_FD, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(SECRET_FD)
        if sum(map(len, chunks)) != job.get("secret_len"):
            record = {"error": "the tests did not arrive whole from the sandbox server"}
            raise SystemExit
        link = b.Link(from_c_r, to_c_w, pid)
        import builtins
        ns = {"__name__": "__tests__", "__builtins__": builtins}
        if job.get("prompt"):
            exec(compile(job["prompt"], "prompt.py", "exec"), ns)
        tests = compile(b"".join(chunks).decode("utf-8"), "tests.py", "exec")
        entry = job.get("entry_point")
        test_functions = job.get("test_functions") or ()
        free = _free_names(tests) - set(ns) - {"check", *test_functions}
        shadow = {n for n in free if n in vars(builtins) and not n.startswith("__")}
        wanted = free - shadow
        if entry:
            wanted.add(entry)
        found = link.names(sorted(wanted | shadow))
        if entry and entry not in found:
            raise NameError(f"entry point {entry!r} is not defined by the candidate")
        for name, kind in found.items():
            if name in shadow and name != entry:
                # in one shared namespace the tests would call the candidate's version
                link.notes.append(f"defined {name}, shadowing the builtin the tests use")
            elif kind[0] == "f":
                ns[name] = link.proxy(name)
            elif kind[0] == "v":
                ns[name] = kind[1]
            elif kind[0] == "m" and isinstance(kind[1], str):
                try:  # the tests' own, pristine copy of a module the candidate imported
                    import importlib
                    ns[name] = importlib.import_module(kind[1])
                except Exception:
                    pass
        exec(tests, ns)
        if entry:
            if "check" not in ns:
                raise NameError("the tests define no check(candidate)")
            ns["check"](ns[entry])
        for name in test_functions:
            ns[name]()
    except BaseException as e:
        if "error" in record:
            pass
        elif isinstance(e, b.BoundaryFailure):
            record = {"guard": e.guard, "reason": e.reason}
        else:
            record = {"reason": f"failed: {type(e).__name__}"}
            try:
                sys.stderr.write(_format_failure(e, job["program"])[-TAIL:])
                sys.stderr.flush()
            except BaseException:
                pass
    try:
        if "reason" in record and record.get("guard") != "candidate_exit":
            link.check_tampering()
        notes = list(link.notes)
    except BaseException:
        notes = []
    if notes:
        record["notes"] = notes[:20]
        if "reason" in record and "guard" not in record:
            record["reason"] += "; the candidate " + "; ".join(notes[:3]) + \
                " (in its own process, apart from the tests)"
            record["guard"] = next((g for g, words in _NOTE_GUARDS
                                    if any(w in n for n in notes for w in words)),
                                   "separate_process")
    try:  # end the candidate's process here: left to the server, it costs a full cleanup sweep
        if pid > 0:  # (never kill(-1): that would signal every process of this uid)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except BaseException:
        pass
    try:
        if "reason" in record or "error" in record:
            write(RESULT_FD, b"G" + json.dumps(record).encode()[:8000])
            exit_(1)
        write(RESULT_FD, read(NONCE_FD, 64)
              + (b"G" + json.dumps(record).encode()[:8000] if record else b""))
    except BaseException:
        exit_(2)
    exit_(0)


def _pidns_works():
    """Whether this server may give each job its own PID namespace (needs CAP_SYS_ADMIN here:
    root, or root of the user namespace _isolate made)."""
    pid = os.fork()
    if pid == 0:
        if _libc.unshare(ctypes.c_int(CLONE_NEWPID)) != 0:
            os._exit(1)
        inner = os.fork()
        if inner == 0:
            os._exit(0 if os.getpid() == 1 else 1)
        _, st = os.waitpid(inner, 0)
        os._exit(os.waitstatus_to_exitcode(st))
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st) == 0


def _fork_in_pidns(child, parent_fds):
    """Fork a helper that unshares a PID namespace and forks the job as its init (pid 1).
    Returns (helper pid, job pid). When the job's init exits or is killed, the kernel kills
    every process left in its namespace, and a candidate there cannot see or signal anything
    outside it (its parent pid reads 0). The helper exits with the job's status (a signal N as
    128 + N)."""
    info_r, info_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        try:
            os.close(info_r)
            for fd in parent_fds:
                os.close(fd)
            if _libc.unshare(ctypes.c_int(CLONE_NEWPID)) != 0:
                os._exit(125)
            jpid = os.fork()
            if jpid == 0:
                os.close(info_w)
                child()
            os.write(info_w, str(jpid).encode())
            os.close(info_w)
            _, st = os.waitpid(jpid, 0)
            code = os.waitstatus_to_exitcode(st)
        except BaseException:
            os._exit(125)
        os._exit(code if code >= 0 else 128 - code)
    os.close(info_w)
    data = b""
    while True:
        chunk = os.read(info_r, 32)
        if not chunk:
            break
        data += chunk
    os.close(info_r)
    return helper, (int(data) if data else None)


def _run(job, base, uid_base, seq, pidns=False):
    secret_len = int(job.get("secret_len") or 0)
    if secret_len > SECRET_MAX:
        _discard_stdin(secret_len)
        job["secret_len"] = 0
        raise ValueError(f"the tests are {secret_len} bytes; "
                         f"a boundary job carries at most {SECRET_MAX}")
    jobdir = os.path.join(base, f"job{seq}")
    os.mkdir(jobdir, 0o700)
    uid = None
    if uid_base is not None:
        uid = uid_base
        os.chown(jobdir, uid, uid)
    nonce_r, nonce_w = os.pipe()
    res_r, res_w = os.pipe()
    out_r, out_w = os.pipe()
    secret_r = secret_w = None
    if job.get("mode") == "boundary":
        secret_r, secret_w = os.pipe()
        if secret_len > 65536:
            fcntl.fcntl(secret_w, fcntl.F_SETPIPE_SZ, secret_len)
    code = _precompile(job["program"])
    start = time.monotonic()
    jpid = None
    if pidns:
        pid, jpid = _fork_in_pidns(
            lambda: _child(job, jobdir, uid, nonce_r, res_w, out_w, code, secret_r),
            (nonce_w, res_r, out_r) + ((secret_w,) if secret_w is not None else ()))
    else:
        pid = os.fork()
        if pid == 0:
            _child(job, jobdir, uid, nonce_r, res_w, out_w, code, secret_r)
    _RUNNING[:] = [(jpid or pid, uid)]  # what a SIGTERM must kill before this server exits
    for fd in (nonce_r, res_w, out_w) + ((secret_r,) if secret_r is not None else ()):
        os.close(fd)
    if secret_w is not None:
        job["secret_len"] = 0  # consumed (see main's error path)
        _pass_secret(secret_len, secret_w)
    nonce = os.urandom(24).hex().encode()
    try:
        os.write(nonce_w, nonce)
    except BrokenPipeError:
        pass  # the job already exited (a fast failure): it never saw the nonce, so cannot pass
    os.close(nonce_w)
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    deadline = start + float(job["timeout"])
    tail, result, status = b"", b"", None
    open_fds = [out_r, res_r]
    timed_out = False
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        watch = open_fds + ([pidfd] if pidfd is not None else [])
        # at most 0.5 s between looks at our parent: a SIGKILLed run must not leave this
        # server and its job alive until the job's timeout
        ready, _, _ = select.select(watch, [], [], min(left, 0.05 if pidfd is None else 0.5))
        if _PARENT and os.getppid() != _PARENT[0]:
            break  # killed below as on a timeout; main's loop then sees the parent gone
        for fd in ready:
            if fd == pidfd:
                continue
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
            elif fd == out_r:
                tail = (tail + data)[-TAIL:]
            elif len(result) < 8192:
                result += data
        wpid, wstatus = os.waitpid(pid, os.WNOHANG)
        if wpid == pid:
            status = wstatus
    if status is None:
        for target in ([jpid] if jpid else []) + [pid]:
            try:  # the whole group at once: a fork bomb's children share it
                os.killpg(target, signal.SIGKILL)
            except OSError:
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
        _, status = os.waitpid(pid, 0)
    seconds = time.monotonic() - start
    left_over = _cleanup(jpid or pid, uid)
    _RUNNING.clear()
    for fd in (out_r, res_r):
        os.set_blocking(fd, False)
        try:
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                if fd == out_r:
                    tail = (tail + data)[-TAIL:]
                elif len(result) < 8192:
                    result += data
        except BlockingIOError:
            pass
        os.close(fd)
    if pidfd is not None:
        os.close(pidfd)
    _rmtree(jobdir)
    code = os.waitstatus_to_exitcode(status)
    if jpid and code > 128:
        code = 128 - code  # the helper's encoding of "killed by signal N"
    report = None
    if job.get("mode") == "boundary":  # only the tests' process holds the result pipe there
        head, sep, rest = result.partition(b"G")
        if sep:
            try:
                report = json.loads(rest)
            except ValueError:
                report = None
        result = head
    passed = (not timed_out) and code == 0 and result == nonce
    if passed:
        verdict = "passed"
    elif report and report.get("error"):  # the sandbox failed, not the candidate
        verdict = "error"
        tail = str(report["error"]).encode()
    elif timed_out:
        verdict = "timeout"
    elif code < 0:
        verdict = "killed"
    else:
        verdict = "failed"
    return {"id": job.get("id"), "status": verdict, "exit_code": code, "seconds": round(seconds, 4),
            "output_tail": tail.decode("utf-8", "replace"), "left_over": left_over,
            **({"report": report} if report else {})}


def _pass_secret(n, fd):
    """Copy the job's ``n`` secret bytes (its tests) from stdin to the tests' process, through a
    buffer that is zeroed afterwards: they never become a Python object of this server, so no
    later fork of it (a future candidate) finds them in its memory."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(0, [view[got:]])
        if not k:
            raise EOFError("the parent closed the pipe in the middle of a job's tests")
        got += k
    os.set_blocking(fd, False)
    deadline = time.monotonic() + 30.0
    try:
        sent = 0
        while sent < n:
            try:
                sent += os.write(fd, view[sent:])
            except BlockingIOError:  # a pipe smaller than asked (the user's pipe quota): the
                left = deadline - time.monotonic()  # tests' process reads it at once
                if left <= 0 or not select.select([], [fd], [], left)[1]:
                    break  # it stopped reading; it reports the tests as incomplete
    except BrokenPipeError:
        pass  # the job already ended; it fails without its tests
    finally:
        view[:] = bytes(n)
        view.release()
        os.close(fd)


def _discard_stdin(n):
    """Skip a job's ``n`` secret bytes on stdin (the job was not run), through a zeroed buffer."""
    buf = bytearray(min(n, 65536))
    while n > 0:
        k = os.readv(0, [memoryview(buf)[:min(n, len(buf))]])
        if not k:
            break
        n -= k
    buf[:] = bytes(len(buf))


def _rmtree(path):
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.rmdir(p)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _parent_alive(parent):
    """Block until a request is readable on stdin; False once this server's parent process is
    gone (it was re-parented). Not PR_SET_PDEATHSIG: that fires when the *thread* that started
    this server exits, and a warm server outlives the thread (a task runner's worker) that
    started it. Not only end of input either: a process forked from the parent after this
    server started holds a copy of the pipe, so end of input may never come."""
    while True:
        if os.getppid() != parent:
            return False
        if select.select([0], [], [], 0.5)[0]:
            return True


#: The running job's (process group, uid), for the SIGTERM handler.
_RUNNING: list[tuple[int, int | None]] = []
#: This server's parent pid (set by main): a job is killed when the parent is gone.
_PARENT: list[int] = []


def _on_sigterm(signum, frame):
    """The parent is interrupted (Ctrl-C) and will not wait for the job's timeout: kill the
    running job and everything it started (as after a timeout), then exit."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for pgid, uid in list(_RUNNING):
        _cleanup(pgid, uid)
    raise SystemExit(128 + signum)  # main's finally removes the job directories


def _load_boundary():
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boundary.py")
    spec = importlib.util.spec_from_file_location("assay_boundary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    global _boundary
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _boundary = _load_boundary()
    parent = os.getppid()
    _PARENT[:] = [parent]
    config = _recv()
    if config is None:
        return
    info = _isolate() if config.get("isolate", True) else {
        "root": os.geteuid() == 0, "netns": False, "mountns": False, "private_tmp": [],
        "uid_drop": False, "notes": ["isolate=False"]}
    uid_base = None
    if os.geteuid() == 0 and config.get("uid") is not None:
        if _expose_sys_path(info):
            uid_base = int(config["uid"])
            info["uid_drop"] = True
        else:
            info["notes"].append("kept root: a dropped uid could not import the standard library")
    info["uid"] = uid_base
    nproc = None
    if config.get("max_procs") is not None:
        if uid_base is not None:
            nproc = int(config["max_procs"])
        else:  # RLIMIT_NPROC counts every process of this uid, so leave room for the existing ones
            mine = os.getuid()
            nproc = sum(1 for _, _, u in _scan_procs() if u == mine) + int(config["max_procs"]) + 64
    info["nproc"] = nproc
    # Without a throwaway uid, a job could signal this server or leave orphans outside its
    # process group; a PID namespace per job closes both (one extra fork per job).
    info["pidns"] = uid_base is None and config.get("isolate", True) and _pidns_works()
    for name in config.get("preload") or ():
        try:
            __import__(name)
        except Exception:
            pass
    import gc
    import tempfile
    gc.collect()
    gc.freeze()  # keeps the collector from touching (and copying) inherited pages in each fork
    base = tempfile.mkdtemp(prefix="assay-sandbox-",
                            dir="/tmp" if "/tmp" in info["private_tmp"] else None)
    os.chmod(base, 0o711)
    _send({"hello": True, "isolation": info, "pid": os.getpid()})
    seq = 0
    try:
        while True:
            if not _parent_alive(parent):
                break
            job = _recv()
            if job is None or job.get("stop"):
                break
            seq += 1
            try:
                job.setdefault("nproc", nproc)
                reply = _run(job, base, uid_base, seq, info["pidns"])
            except Exception as e:  # a server-side failure is reported, never a pass
                if job.get("secret_len"):
                    _discard_stdin(int(job["secret_len"]))  # keep the protocol in step
                reply = {"id": job.get("id"), "status": "error", "exit_code": None, "seconds": 0.0,
                         "output_tail": f"sandbox error: {type(e).__name__}: {e}", "left_over": 0}
            _send(reply)
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
    finally:
        _rmtree(base)


if __name__ == "__main__":
    main()
