"""A mount by an ordinary user (nobody here), through the setuid fusermount3 as libfuse does
it for non-root daemons: it mounts, its owner reads the right bytes and its /.spoolfs files,
unmounts it with fusermount3 -u, and the daemon exits 0. What needs root (passthrough, the
readahead raise) is off from the start, said in one log line each, and nothing else is
logged as wrong."""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, is_mounted
from helpers import READER, sha, wait_until

USER = "nobody"


def as_user(cmd):
    """cmd run as USER (uid and gid, no supplementary groups) with setpriv."""
    pw = pwd.getpwnam(USER)
    return ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
            "--clear-groups"] + cmd



@pytest.fixture
def user_dir():
    """A directory the user owns, under /tmp (pytest's own is root's, 0700)."""
    path = tempfile.mkdtemp(prefix="spoolfs-user-", dir="/tmp")
    pw = pwd.getpwnam(USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    yield path
    while is_mounted(os.path.join(path, "mnt")):
        subprocess.run(["umount", "-l", os.path.join(path, "mnt")], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def test_an_ordinary_user_mounts_reads_and_unmounts(store, user_dir, fuse_device_for_users):
    store.add("a.bin", 3 << 20)
    store.add("b.bin", 5000)
    url = store.write()
    mnt, cache, log = (os.path.join(user_dir, n) for n in ("mnt", "tmp", "spoolfs.log"))
    env = daemon_env()
    env.update(TMPDIR=cache, HOME=user_dir)  # the session's cache directory goes there
    subprocess.run(as_user(["mkdir", mnt, cache]), check=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(as_user([SPOOLFS, "-f", url, mnt]), env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: is_mounted(mnt) or proc.poll() is not None, lambda: open(log).read())
        assert proc.poll() is None, open(log).read()
        for path in ("a.bin", "b.bin", "a.bin"):  # the last one complete: no passthrough
            r = subprocess.run(as_user([sys.executable, "-c", READER, os.path.join(mnt, path)]),
                               capture_output=True, timeout=60 * SLOW)
            assert r.returncode == 0, r.stderr
            assert r.stdout.decode().strip() == sha(store.content(path)), path
        r = subprocess.run(as_user(["cat", os.path.join(mnt, ".spoolfs", "stats")]),
                           capture_output=True, check=True)
        assert b"spoolfs_flights_complete 2\n" in r.stdout
        assert b"spoolfs_passthrough_opens_total 0\n" in r.stdout
        # The kernel admits only the mounting user (no allow_other): root is refused too.
        with pytest.raises(PermissionError):
            os.stat(os.path.join(mnt, "a.bin"))
        subprocess.run(as_user(["fusermount3", "-u", mnt]), check=True)
        assert proc.wait(30 * SLOW) == 0, open(log).read()
    finally:
        if proc.poll() is None:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
            proc.kill()
            proc.wait()
    text = open(log).read()
    for mark in SANITIZER_MARKS:
        assert mark not in text, text
    assert not is_mounted(mnt)
    assert text.count("passthrough reads are off: they need root") == 1, text
    assert text.count("readahead stays at the kernel's default: raising it needs root") == 1, \
        text
    assert "passthrough reads are off: Operation not permitted" not in text, text
    assert ": warn:" not in text and ": error:" not in text, text
    assert os.listdir(cache) == []  # the session's cache directory went with it


def test_an_ordinary_user_refuses_its_own_files_others_may_write(store, user_dir,
                                                                 fuse_device_for_users):
    """A netrc or CA file of the user's own that group or others may write is refused as
    it is for root (another local user could add a password's host or a CA), the message
    naming the file and its mode; nothing is mounted. The same file 0600 mounts."""
    url = store.write()
    mnt = os.path.join(user_dir, "mnt")
    subprocess.run(as_user(["mkdir", mnt]), check=True)
    env = daemon_env()
    env.update(HOME=user_dir, TMPDIR=user_dir)
    for option, text, mode in (("--netrc-file", "machine 127.0.0.1 login a password b\n", 0o666),
                               ("--ca-file", "", 0o646),
                               ("--netrc-file", "", 0o620)):
        path = os.path.join(user_dir, "file")
        subprocess.run(as_user(["sh", "-c", 'umask 0; rm -f "$1"; printf %s "$2" >"$1"; '
                                'chmod "$3" "$1"', "sh", path, text, "%o" % mode]), check=True)
        r = subprocess.run(as_user([SPOOLFS, option, path, url, mnt]), env=env,
                           capture_output=True, timeout=30 * SLOW)
        err = r.stderr.decode()
        assert r.returncode != 0 and not is_mounted(mnt), err
        assert "%s %s: refused: %s is writable by group or others (uid %d, mode %04o)" % (
            option, path, path, pwd.getpwnam(USER).pw_uid, mode) in err, err
    subprocess.run(as_user(["chmod", "600", path]), check=True)
    proc = subprocess.Popen(as_user([SPOOLFS, "-f", "--netrc-file", path, url, mnt]), env=env,
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: is_mounted(mnt) or proc.poll() is not None, "the mount")
        assert proc.poll() is None, proc.stderr.read()
        subprocess.run(as_user(["fusermount3", "-u", mnt]), check=True)
        assert proc.wait(30 * SLOW) == 0
    finally:
        if proc.poll() is None:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
            proc.kill()
            proc.wait()
