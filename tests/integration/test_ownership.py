"""--uid, --gid, --file-mode and --dir-mode on a real mount, read by a real non-root user.

The kernel admits only the mounting user unless allow_other is set (and default_permissions
then checks the modes shown): a root mount with allow_other and --uid of the reader lets
that reader in, and nobody else in when the modes say so.
"""

import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import Mount, read_file, teardown_mounts

NOBODY = 65534


def as_user(uid, *cmd):
    return subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                           *cmd], capture_output=True, timeout=60)


@pytest.fixture
def open_mount(tmp_path):
    """Like the mount fixture, with the mount point in a directory every user can reach
    (pytest's own is root's alone)."""
    top = tempfile.mkdtemp(prefix="spoolfs-owner-", dir="/tmp")
    os.chmod(top, 0o755)
    mounts = []

    def make(source, *args):
        m = Mount(source, os.path.join(top, "mnt"), tmp_path / "mnt.log", args)
        mounts.append(m)
        return m

    try:
        yield make
    finally:
        try:
            teardown_mounts(mounts)
        finally:
            shutil.rmtree(top, ignore_errors=True)


def write_store(root):
    os.makedirs(os.path.join(root, "d"), exist_ok=True)
    for name, data in (("d/a.txt", b"alpha\n"), ("run.sh", b"#!/bin/sh\necho ran\n")):
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    with open(os.path.join(root, "manifest.json"), "w") as f:
        json.dump({"version": 2, "entries": [
            {"path": "d/a.txt", "size": 6, "mode": "0644"},
            {"path": "run.sh", "size": 19, "mode": "0755"},
            {"path": "d", "type": "directory", "mode": "0755"}]}, f)


def test_owner_and_modes_are_shown_and_enforced(upstream, open_mount):
    write_store(upstream.root)
    m = open_mount(upstream.url("manifest.json"), "--uid", "nobody", "--gid", str(NOBODY),
              "--file-mode", "0640", "--dir-mode", "0750", "-o", "allow_other")
    st = os.stat(m.p("d/a.txt"))
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)
    assert stat.S_IMODE(st.st_mode) == 0o440  # write bits cleared
    assert stat.S_IMODE(os.stat(m.p("run.sh")).st_mode) == 0o550
    assert stat.S_IMODE(os.stat(m.p("d")).st_mode) == 0o550
    assert os.stat(m.p("")).st_uid == NOBODY
    # The CI user (here nobody) reads and runs as the owner.
    r = as_user(NOBODY, "cat", m.p("d/a.txt"))
    assert r.returncode == 0 and r.stdout == b"alpha\n", r.stderr
    r = as_user(NOBODY, m.p("run.sh"))
    assert r.returncode == 0 and r.stdout == b"ran\n", r.stderr
    # Another user is kept out by the modes shown.
    r = as_user(NOBODY - 1, "cat", m.p("d/a.txt"))
    assert r.returncode != 0 and b"Permission denied" in r.stderr


def test_without_allow_other_only_the_mounting_user_gets_in(upstream, open_mount):
    write_store(upstream.root)
    m = open_mount(upstream.url("manifest.json"), "--uid", str(NOBODY))
    assert os.stat(m.p("d/a.txt")).st_uid == NOBODY
    assert read_file(m.p("d/a.txt")) == b"alpha\n"  # root mounted it
    r = as_user(NOBODY, "cat", m.p("d/a.txt"))
    assert r.returncode != 0 and b"Permission denied" in r.stderr


@pytest.mark.parametrize("args, message", [
    (("--uid", "no-such-user-here"), "--uid: no user 'no-such-user-here'"),
    (("--file-mode", "0888"), "--file-mode must be an octal mode"),
    (("--dir-mode", "rwx"), "--dir-mode must be an octal mode"),
])
def test_bad_owner_or_mode_is_refused(upstream, tmp_path, args, message):
    from helpers import refused_mount
    write_store(upstream.root)
    err = refused_mount(upstream.url("manifest.json"), tmp_path / "mnt", *args)
    assert message in err
