"""A sandbox for the sample check's child: it loads a failing sample again, user code with whatever side effects
`__getitem__` has (a file append, a database insert, an HTTP request, a read from a shared stream). Nothing it does
may reach the world the training sees, so before it loads anything the child (single-threaded: fork copies only the
calling thread, which new user namespaces require) enters

- new user, mount and network namespaces (unshare), mapped to its own uid and gid, so it is the same user;
- a read-only view of every mount (mount_setattr with AT_RECURSIVE, else a read-only remount of each mount);
- a network namespace with no interface up: no connection leaves it, not even to loopback;
- and of the descriptors it inherited from the training, the regular files stay readable only (reopened read-only at
  the same offset, so the dataset's own open files still load) and everything else (sockets, pipes, streams shared
  with the workers) is closed: a read from a shared stream would take an item from the training.

What is not covered, and says so in docs/security.md: shared writable memory maps (`multiprocessing.Value`, a
tensor in shared memory) and Unix sockets reached by path. Where the kernel refuses any step, `enter` raises
`Unavailable` and the sample is not loaded: the check says "not verified" with the reason.

A load that fails inside the sandbox may fail because of it (a write refused, no network, a closed handle): such
an error is never read as the sample's (`refused_by_sandbox`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (a syscall added after the unified table)
ST_RDONLY = 1
# What a sandbox refuses: a write to a read-only file system or through a handle reopened read-only, a closed
# handle, no network (no route, no address, no name resolution), a file of another user the sandbox cannot read
SANDBOX_ERRNOS = {
    errno.EROFS, errno.EBADF, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL,
    errno.ECONNREFUSED, errno.EAFNOSUPPORT, errno.EACCES, errno.EPERM, errno.ENOTCONN, errno.EPIPE,
}  # fmt: skip
_SANDBOX_WORDS = ("read-only file system", "readonly database", "name resolution", "name or service not known",
                  "network is unreachable", "bad file descriptor")  # fmt: skip
_LOCKED_FLAGS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                 "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}  # fmt: skip
DESCRIPTION = "in new user, mount and network namespaces: every file read-only, no network"


class Unavailable(Exception):
    """The kernel refused a step of the sandbox: nothing may be loaded."""


def enter(keep: set[int]) -> list[str]:
    """Enter the sandbox (in the forked child only); what was done, for the report. Raises Unavailable."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0:
        raise Unavailable(f"new namespaces were refused: {os.strerror(ctypes.get_errno())}")
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        raise Unavailable(f"the user namespace could not map uid {uid}: {exc.strerror}") from exc
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise Unavailable(f"the mounts could not be made private: {os.strerror(ctypes.get_errno())}")
    _read_only(libc)
    for path in ("/", os.getcwd(), "/tmp", "/dev/shm"):
        try:
            writable = not os.statvfs(path).f_flag & ST_RDONLY
        except OSError:  # noqa: S112 - not there: nothing to write to
            continue
        if writable:
            raise Unavailable(f"{path} stayed writable")
    reopened, closed = _tame_descriptors(keep)
    done = [DESCRIPTION]
    if reopened or closed:
        done.append(f"of the handles it inherited, {reopened} files reopened read-only and {closed} others closed")
    return done


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def _read_only(libc: ctypes.CDLL) -> None:
    """Every mount of the new namespace read-only: one call on kernels with mount_setattr (5.12+), else each mount
    remounted read-only keeping the flags a user namespace may not drop (nosuid, nodev, noexec, atime)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError as exc:
        raise Unavailable(f"the mounts could not be listed: {exc.strerror}") from exc
    for fields in mounts:
        point, options = fields[4], fields[5].split(",")
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in options:
            flags |= _LOCKED_FLAGS.get(option, 0)
        path = point.replace("\\040", " ").encode()
        if libc.mount(None, path, None, flags, None) != 0 and ctypes.get_errno() not in (errno.ENOENT, errno.EACCES):
            raise Unavailable(f"{point} could not be made read-only: {os.strerror(ctypes.get_errno())}")


def _tame_descriptors(keep: set[int]) -> tuple[int, int]:
    """(regular files reopened read-only, other descriptors closed); fds 0-2 and `keep` are left alone."""
    reopened = closed = 0
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError as exc:
        raise Unavailable(f"the inherited handles could not be listed: {exc.strerror}") from exc
    for fd in fds:
        if fd <= 2 or fd in keep:
            continue
        try:
            info = os.fstat(fd)
        except OSError:  # noqa: S112 - the listing's own descriptor, already closed
            continue
        if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
            if _writable(fd):
                _reopen_read_only(fd)
                reopened += 1
            continue
        if stat.S_ISCHR(info.st_mode) and _is_null(info):
            continue
        os.close(fd)
        closed += 1
    return reopened, closed


def _writable(fd: int) -> bool:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY


def _reopen_read_only(fd: int) -> None:
    offset = os.lseek(fd, 0, os.SEEK_CUR) if not stat.S_ISDIR(os.fstat(fd).st_mode) else 0
    try:
        new = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(fd)  # cannot be read either (a file opened write-only, mode 0200): closed
        return
    os.lseek(new, offset, os.SEEK_SET)
    os.dup2(new, fd, inheritable=os.get_inheritable(fd))
    os.close(new)


def _is_null(info: os.stat_result) -> bool:
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return info.st_rdev == null.st_rdev


def refused_by_sandbox(exc: BaseException) -> str | None:
    """Why this error may be the sandbox's doing, not the sample's (its cause chain is searched), or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in SANDBOX_ERRNOS:
            return f"{errno.errorcode.get(current.errno or 0, current.errno)} ({current.strerror})"
        text = str(current).lower()
        word = next((w for w in _SANDBOX_WORDS if w in text), None)
        if word is not None:
            return word
        current = current.__cause__ or current.__context__
    return None
