"""
FUSE mounts made straight from /dev/fuse (mount(2) through ctypes; no python FUSE module is
available): a dead one of any user_id, one whose daemon never answers, and one whose daemon
answers only what it is told to, holding its statfs answer on a gate. They stand for what
another program or user leaves at a mountpoint, which spoolfs must not trust.
"""
import ctypes
import errno
import os
import select
import struct
import subprocess
import threading

_libc = ctypes.CDLL(None, use_errno=True)

FUSE_GETATTR = 3
FUSE_STATFS = 17
FUSE_INIT = 26
_IN_HEADER = struct.Struct("<IIQQIIII")  # len opcode unique nodeid uid gid pid padding
_OUT_HEADER = struct.Struct("<IiQ")  # len error unique


class RawFuse:
    """A FUSE mount at path whose /dev/fuse end is self.fd (the test's to answer or not)."""

    def __init__(self, path, user_id=0, allow_other=False):
        self.path = str(path)
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        data = "fd=%d,rootmode=40000,user_id=%d,group_id=%d%s" % (
            self.fd, user_id, user_id, ",allow_other" if allow_other else "")
        if _libc.mount(b"rawfuse", self.path.encode(), b"fuse.rawfuse", 0,
                       data.encode()) != 0:
            e = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(e, os.strerror(e), self.path)
        self.statfs_held = threading.Event()
        self.statfs_release = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    def kill(self):
        """Its daemon dies: the kernel aborts the connection, and every request fails
        with ENOTCONN."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def serve(self):
        """Answers INIT and GETATTR (a directory) at once; holds each STATFS until
        statfs_release, setting statfs_held, then fails it with ENOTCONN as a dead mount
        would; fails the rest with ENOSYS."""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _reply(self, unique, error=0, body=b""):
        os.write(self.fd, _OUT_HEADER.pack(_OUT_HEADER.size + len(body), error, unique) + body)

    def _serve(self):
        while not self._stop.is_set():
            if not select.select([self.fd], [], [], 0.2)[0]:
                continue
            try:
                req = os.read(self.fd, 1 << 17)
            except OSError as e:
                if e.errno in (errno.ENODEV, errno.EBADF):
                    return
                if e.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                raise
            _, opcode, unique = _IN_HEADER.unpack_from(req)[:3]
            if opcode == FUSE_INIT:
                major, minor = struct.unpack_from("<II", req, _IN_HEADER.size)
                # fuse_init_out: major minor max_readahead flags max_background
                # congestion_threshold max_write, then zeros to its 64 bytes.
                body = struct.pack("<IIIIHHI", 7, min(minor, 26), 0, 0, 0, 0, 4096)
                self._reply(unique, 0, body.ljust(64, b"\0"))
            elif opcode == FUSE_GETATTR:
                # fuse_attr_out: attr_valid(_nsec), dummy, then fuse_attr of a directory.
                attr = struct.pack("<QQQQQQIIIIIIIIII", 1, 0, 0, 0, 0, 0, 0, 0, 0,
                                   0o40755, 2, 0, 0, 0, 4096, 0)
                self._reply(unique, 0, struct.pack("<QII", 0, 0, 0) + attr)
            elif opcode == FUSE_STATFS:
                self.statfs_held.set()
                self.statfs_release.wait()
                self._reply(unique, -errno.ENOTCONN)
            else:
                try:
                    self._reply(unique, -errno.ENOSYS)
                except OSError:
                    pass  # a request that wants no answer (FORGET)

    def close(self, *paths):
        """Ends the daemon and lazily unmounts what is left at path and paths."""
        self.statfs_release.set()
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        for p in (self.path,) + paths:
            subprocess.run(["umount", "-l", str(p)], capture_output=True)
        self.kill()
