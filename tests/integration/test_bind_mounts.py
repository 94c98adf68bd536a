"""One host mount shared with job containers by bind mounts (doc/containers.md): a bind of
the mount reads the same bytes; unmounting in either order is safe (the bind first, then
the mount; or the mount lazily while a bind still holds it, which keeps the daemon serving
the bind until it goes too, then it exits cleanly); and a bind of the mount's parent made
a propagation slave, as Docker's bind-propagation=rslave makes it, sees the host mount,
its unmount and a later remount without being made again."""

import os
import subprocess

import pytest

from conftest import SANITIZER_MARKS, SLOW, Mount, is_mounted, read_file, teardown_mounts
from helpers import wait_until


def run(*cmd):
    subprocess.run(list(cmd), check=True, capture_output=True)


@pytest.fixture
def binds():
    """bind(src, dst, *changes) -> dst, bind-mounted with mount(8), then each change applied
    ("--make-shared", "-o remount,bind,ro"); every bind left is lazily unmounted after the
    test, the last made first."""
    made = []

    def bind(src, dst, *changes):
        os.makedirs(dst, exist_ok=True)
        run("mount", "--bind", str(src), str(dst))
        made.append(str(dst))
        for change in changes:
            run("mount", *change.split(), str(dst))
        return str(dst)

    yield bind
    for dst in reversed(made):
        while is_mounted(dst):
            subprocess.run(["umount", "-l", dst], capture_output=True)


def check_exited_clean(m):
    """The daemon of m exits on its own (its last mount went) with status 0, and its log has
    no warning, error or sanitizer report."""
    try:
        rc = m.proc.wait(30 * SLOW)
    finally:
        m.unmounted = True  # nothing of it is mounted any more: no fusermount3 -u
        if not m.log.closed:
            m.log.close()
    log = m.stderr()
    for mark in SANITIZER_MARKS:
        assert mark not in log, log
    assert rc == 0, "spoolfs exited with %d:\n%s" % (rc, log)
    assert ": warn:" not in log and ": error:" not in log, log  # nothing looked wrong to it


def test_a_bind_reads_the_same_bytes_and_goes_first(store, mount, tmp_path, binds):
    store.add("a.bin", 3 << 20)
    store.add("b.bin", 70000)
    m = mount(store.write())
    view = binds(m.path, tmp_path / "job", "-o remount,bind,ro")
    assert read_file(os.path.join(view, "a.bin")) == store.content("a.bin")
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    with open(os.path.join(view, ".spoolfs", "stats")) as f:
        assert "spoolfs_flights_complete 1\n" in f.read()  # the same daemon behind both
    run("umount", view)
    assert not is_mounted(view)
    assert read_file(m.p("b.bin")) == store.content("b.bin")  # the mount carries on
    m.check_clean_exit()
    assert store.up.stats("a.bin")["bytes"] == 3 << 20  # once, for both paths


def test_a_lazy_unmount_of_the_mount_leaves_the_bind_serving(store, tmp_path, binds):
    store.add("a.bin", 100000)
    store.add("later.bin", 2 << 20)
    m = Mount(store.write(), tmp_path / "mnt", tmp_path / "mnt.log")
    try:
        view = binds(m.path, tmp_path / "job")
        assert read_file(os.path.join(view, "a.bin")) == store.content("a.bin")
        # What a host does to a mount it no longer wants while containers still run.
        run("umount", "-l", m.path)
        assert not is_mounted(m.path) and is_mounted(view)
        assert m.proc.poll() is None  # the bind holds the connection: the daemon serves on
        assert read_file(os.path.join(view, "later.bin")) == store.content("later.bin")
        run("umount", view)
        check_exited_clean(m)
    finally:
        teardown_mounts([m])
    assert not is_mounted(view) and not is_mounted(m.path)


def test_an_rslave_bind_of_the_parent_follows_the_host(store, tmp_path, binds):
    """The Docker setup: the host mounts at host/store; a container binds host/ with
    bind-propagation=rslave. host/ must be a shared mount (systemd makes / one)."""
    store.add("a.bin", 200000)
    url = store.write()
    host = binds(tmp_path / "host", tmp_path / "host", "--make-shared")
    job = binds(host, tmp_path / "job", "--make-rslave")
    job_store = os.path.join(job, "store")
    mounts = []
    try:
        for round_ in range(2):  # the second: a remount on the host, the container unchanged
            m = Mount(url, os.path.join(host, "store"), tmp_path / ("mnt%d.log" % round_))
            mounts.append(m)
            wait_until(lambda: is_mounted(job_store), "the mount propagated into the bind")
            assert read_file(os.path.join(job_store, "a.bin")) == store.content("a.bin")
            m.check_clean_exit()  # fusermount3 -u on the host: gone in the bind too
            assert not is_mounted(job_store)
    finally:
        teardown_mounts(mounts)
