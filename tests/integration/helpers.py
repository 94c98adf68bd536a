"""Helpers shared by the integration tests (plain functions; fixtures live in conftest.py)."""

import hashlib
import json
import os
import subprocess
import sys
import time

from conftest import SLOW, SPOOLFS, daemon_env, is_mounted, read_file

# A child process that reads a whole file (1 MiB reads) and prints its sha256:
# subprocess.Popen([sys.executable, "-c", READER, path], stdout=subprocess.PIPE).
READER = r"""
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb", buffering=0) as f:
    while True:
        b = f.read(1 << 20)
        if not b:
            break
        h.update(b)
print(h.hexdigest())
"""


def expected(store, path):
    """The bytes of path as the test upstream's store holds them."""
    with open(os.path.join(store.root, path), "rb") as f:
        return f.read()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def flight_records(m):
    """The mount's /.spoolfs/flights, by object name."""
    with open(m.p(".spoolfs/flights")) as f:
        return {d["name"]: d for d in (json.loads(line) for line in f if line.strip())}


def metric(m, name):
    """The value of spoolfs_NAME in the mount's /.spoolfs/stats."""
    with open(m.p(".spoolfs/stats")) as f:
        for line in f:
            if line.startswith("spoolfs_" + name + " "):
                return int(line.split()[1])
    raise AssertionError("no metric " + name)


def wait_until(pred, what, timeout=20, interval=0.01):
    """Polls pred every interval seconds until it holds; fails with what(), or what, when it
    never does within timeout seconds (times SPOOLFS_TEST_SLOWDOWN). The one wait of the
    tests: for a server's counters, poll no faster than 0.1 s (each poll is a connection)."""
    deadline = time.monotonic() + timeout * SLOW
    while not pred():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(interval)


def readlink_or_empty(path):
    """Where an fd of another process points ("" when it closed meanwhile); an O_TMPFILE
    file shows as DIR/#INODE (deleted)."""
    try:
        return os.readlink(path)
    except OSError:
        return ""


def opened_by(pid, path):
    """True when process pid holds path open."""
    try:
        return any(os.readlink("/proc/%d/fd/%s" % (pid, fd)) == path
                   for fd in os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return False


def blocked_in_read(pid):
    """True once the process sleeps in the kernel (its read is parked on the daemon)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("S", "D")
    except OSError:
        return False


def waiting_on_fuse(pid):
    """True once the process waits for a FUSE request's answer (any sleep, where the
    kernel does not name the function it sleeps in)."""
    try:
        with open("/proc/%d/wchan" % pid) as f:
            where = f.read().strip()
    except OSError:
        return False
    if where == "0":
        return blocked_in_read(pid)
    # fuse_get_req and the like: queued behind INIT or the connection's congestion limit
    return where == "request_wait_answer" or where.startswith("fuse_")


def read_until_error(path, block=128 * 1024):
    """Reads sequentially; returns (bytes read, the OSError that stopped it or None)."""
    got = bytearray()
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(block)
                if not b:
                    return bytes(got), None
                got += b
    except OSError as e:
        return bytes(got), e


def kill_first_reader(up, up_path, target, followers=5):
    """The killed-first-reader scenario. The caller has gated up_path on the upstream up
    (up.fault(up_path, gate=True)). A READER of target starts the fetch; once the
    upstream holds it at the gate, `followers` more READERs open target and park in
    their reads; the first reader is killed, the gate released -> the followers' sha256s."""
    leader = subprocess.Popen([sys.executable, "-c", READER, target], stdout=subprocess.PIPE)
    procs = []
    try:
        up.wait_for(lambda s: s["gated"] == 1, timeout=20 * SLOW, path=up_path)
        for _ in range(followers):
            procs.append(subprocess.Popen([sys.executable, "-c", READER, target],
                                          stdout=subprocess.PIPE))
        deadline = time.monotonic() + 20 * SLOW
        while not all(opened_by(p.pid, target) and blocked_in_read(p.pid) for p in procs):
            assert time.monotonic() < deadline, "followers never reached their read"
            time.sleep(0.01)
        leader.kill()
        leader.wait()
        up.release(up_path)
        return [p.communicate(timeout=60 * SLOW)[0].decode().strip() for p in procs]
    finally:
        for p in [leader] + procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def mount_with_tmpdir(mount, tmpdir, source, *args):
    """Mounts with TMPDIR=tmpdir: the session cache directory is made there, where the
    test can look at it."""
    tmpdir.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(tmpdir)
    try:
        return mount(source, *args)
    finally:
        del os.environ["TMPDIR"]


def refused_mount(url, mnt, *args):
    """Runs a mount that must be refused; returns its stderr. One that comes up after all
    is unmounted before the test fails."""
    if not os.path.exists(mnt):
        mnt.mkdir()
    proc = subprocess.Popen([SPOOLFS, "-f", url, str(mnt)] + list(args), env=daemon_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=20 * SLOW)
    except subprocess.TimeoutExpired:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        proc.kill()
        _, err = proc.communicate()
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        raise AssertionError("the mount came up: %s" % err.decode("utf-8", "replace")) from None
    assert proc.returncode != 0 and not is_mounted(str(mnt)), err
    return err.decode("utf-8", "replace")


def wait_durable(m, name, timeout=20):
    """Until the daemon says the object is recorded complete in its index."""
    wait_until(lambda: flight_records(m).get(name, {}).get("durable"),
               lambda: flight_records(m), timeout)


def keep_in_cache(store, mount, url, cache, path):
    """Reads path through a mount of url that keeps cache, and unmounts it cleanly."""
    m = mount(url, "--cache-dir", str(cache), "--keep-cache")
    assert read_file(m.p(path)) == expected(store, path)
    wait_durable(m, path)
    m.check_clean_exit()
    assert "warn" not in m.stderr(), m.stderr()  # a first fetch is not news


def sha256_file(path):
    """The sha256 of a file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def publish_tree(src, out, *args, check=True, timeout=300, compress=False, wrap=()):
    """Runs `spoolfs publish src out args...`: (exit status, stdout, stderr). A sanitizer's
    report fails the test either way; with check, so does a failed publish. Without compress,
    --no-compress: manifest version 2, which the tests written for it check and mount
    (test_publish_compress.py: version 3). wrap: a command to run it under (strace: then
    without LeakSanitizer, which cannot run under ptrace)."""
    args = list(args) + ([] if compress else ["--no-compress"])
    env = daemon_env()
    if wrap:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"  # the last one given counts
    proc = subprocess.run(list(wrap) + [SPOOLFS, "publish", str(src), str(out)] +
                          [str(a) for a in args],
                          capture_output=True, timeout=timeout * SLOW, env=env)
    err = proc.stderr.decode("utf-8", "replace")
    for mark in ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:"):
        assert mark not in err, err
    if check:
        assert proc.returncode == 0, err
    return proc.returncode, proc.stdout.decode(), err


def errno_of(fn):
    """The errno of the OSError fn() raises, or None when it raises none."""
    try:
        fn()
    except OSError as e:
        return e.errno
    return None
