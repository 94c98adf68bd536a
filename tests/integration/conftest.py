"""Fixtures for integration tests: a real test upstream on 127.0.0.1 and real mounts.

Every mount is unmounted at teardown, even when the test failed: `fusermount3 -u`, then a
lazy unmount, then TERM, then KILL. The daemon must exit 0 after a clean unmount and its
stderr must carry no sanitizer report.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "upstream"))

from client import Upstream  # noqa: E402
import mkstore  # noqa: E402

SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
# Sanitizer builds run several times slower: scale every wait.
SLOW = float(os.environ.get("SPOOLFS_TEST_SLOWDOWN", "1"))
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer",
                   "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer")


def daemon_env():
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "halt_on_error=1:detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    env.setdefault("TSAN_OPTIONS", "halt_on_error=1:second_deadlock_stack=1")
    env.setdefault("LSAN_OPTIONS", "suppressions=" + os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "lsan.supp"))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        env.pop(var, None)
    return env


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return True
    return False


class Mount:
    """One spoolfs daemon in the foreground, mounted on `path`."""

    def __init__(self, source, path, log_path, args=(), timeout=20.0, env=None):
        self.path = str(path)
        self.log_path = str(log_path)
        os.makedirs(self.path, exist_ok=True)
        self.log = open(self.log_path, "wb")
        cmd = [SPOOLFS, "-f", str(source), self.path] + list(args)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     env=daemon_env() if env is None else env)
        self.unmounted = False
        deadline = time.monotonic() + timeout * SLOW
        while not is_mounted(self.path):
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError("spoolfs exited with %d before mounting:\n%s"
                                   % (self.proc.returncode, self.stderr()))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("spoolfs did not mount in time:\n" + self.stderr())
            time.sleep(0.01)

    def p(self, rel=""):
        return os.path.join(self.path, rel)

    def kill_daemons(self):
        """Both processes die (a dead mount, as a killed daemon left before there were
        two): the supervisor is stopped so that it starts no other, its serving process
        killed, then the supervisor, whose exit closes the device's last descriptor."""
        os.listdir(self.path)  # INIT answered: the kill lands on a mount that served
        serving = self.serving_pid()
        self.proc.send_signal(signal.SIGSTOP)
        if serving != self.proc.pid:
            os.kill(serving, signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()

    def serving_pid(self, timeout=20.0):
        """The process serving the mount: the supervisor's (m.proc's) one child
        (doc/survive.md); m.proc itself when it runs none."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            try:
                with open("/proc/%d/task/%d/children" % (self.proc.pid, self.proc.pid)) as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                children = []
            if children:
                return children[0]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return self.proc.pid
            time.sleep(0.01)

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def unmount(self, timeout=30.0):
        """Clean unmount; returns the daemon's exit code."""
        if self.unmounted:
            return self.proc.returncode
        subprocess.run(["fusermount3", "-u", self.path], check=True)
        try:
            rc = self.proc.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self.unmounted = True
        self.log.close()
        return rc

    def kill(self):
        subprocess.run(["fusermount3", "-u", "-z", self.path], stderr=subprocess.DEVNULL)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(5 * SLOW)
            except subprocess.TimeoutExpired:
                pass
        self.unmounted = True
        if not self.log.closed:
            self.log.close()

    def check_clean_exit(self):
        rc = self.unmount()
        log = self.stderr()
        for mark in SANITIZER_MARKS:
            assert mark not in log, "sanitizer report in daemon log:\n" + log
        assert rc == 0, "spoolfs exited with %d:\n%s" % (rc, log)
        assert not is_mounted(self.path)


@pytest.fixture
def upstream(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    up = Upstream(root)
    yield up
    up.stop()


class Store:
    """Objects on the upstream, and the expected bytes of each."""

    def __init__(self, upstream):
        self.up = upstream
        self.root = upstream.root
        self.specs = {}
        self.no_hash = set()
        self.extra = []

    def add(self, path, size, hashed=True):
        self.specs[path] = size
        if not hashed:
            self.no_hash.add(path)
        return path

    def write(self, mutate=None):
        specs = ["%s:%d" % (p, s) for p, s in self.specs.items()]
        manifest = mkstore.make_store(self.root, specs, no_hash=tuple(self.no_hash))
        if mutate:
            mutate(manifest)
            with open(os.path.join(self.root, "manifest.json"), "w") as f:
                json.dump(manifest, f)
        return self.up.url("manifest.json")

    def content(self, path):
        return mkstore.content(path, self.specs[path])

    def sha256(self, path):
        return hashlib.sha256(self.content(path)).hexdigest()


@pytest.fixture
def store(upstream):
    return Store(upstream)


@pytest.fixture
def mount(tmp_path):
    """mount(source, *args) -> Mount; every mount is torn down after the test."""
    mounts = []

    def make(source, *args, name="mnt"):
        m = Mount(source, tmp_path / name, tmp_path / (name + ".log"), args)
        mounts.append(m)
        return m

    yield make
    teardown_mounts(mounts)


def teardown_mounts(mounts):
    """Checks each mount still up for a clean exit; always unmounts them all, then
    raises the first failure."""
    failed = []
    for m in mounts:
        if m.unmounted:
            continue
        try:
            m.check_clean_exit()
        except BaseException as e:  # always unmount the rest
            failed.append(e)
            m.kill()
    if failed:
        raise failed[0]


def read_file(path, block=1 << 20):
    with open(path, "rb", buffering=0) as f:
        chunks = []
        while True:
            b = f.read(block)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


@pytest.fixture
def servers():
    """servers(factory, *args) -> factory(*args), a started test server stopped after the test
    (after the mounts, when this fixture is requested before mount)."""
    started = []

    def start(factory, *args, **kw):
        started.append(factory(*args, **kw))
        return started[-1]

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def fuse_device_for_users():
    """/dev/fuse as Debian's udev rule makes it, 0666 (libfuse opens it before it asks
    fusermount3 to mount), for the test's length: container runtimes often pass it 0600."""
    mode = os.stat("/dev/fuse").st_mode & 0o777
    if mode != 0o666:
        os.chmod("/dev/fuse", 0o666)
    yield
    if mode != 0o666:
        os.chmod("/dev/fuse", mode)
