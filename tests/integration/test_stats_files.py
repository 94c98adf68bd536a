"""The /.spoolfs files under allow_other: building their content is the only thing that takes
the flight table's lock on a user's behalf, so only an open builds it (never stat, lookup or
readdir), and --stats-mode lets the mount's owner keep the files to itself."""

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import Mount, SLOW, read_file, teardown_mounts
from helpers import refused_mount
from test_observe import metrics
from test_survive import kill_serving

NOBODY = 65534
SNAPSHOTS = "spoolfs_virtual_snapshots_total"


def test_stat_builds_no_snapshot_and_an_open_builds_one(store, mount):
    store.add("a.bin", 4096)
    m = mount(store.write())
    stats, flights = m.p(".spoolfs/stats"), m.p(".spoolfs/flights")
    before = metrics(m)
    assert SNAPSHOTS in before, "no %s in /.spoolfs/stats" % SNAPSHOTS
    # What `ls -l`, `find` and a monitoring loop do, as any user could with allow_other.
    for _ in range(200):
        os.stat(stats)
        os.stat(flights)
    assert sorted(os.listdir(m.p(".spoolfs"))) == ["flights", "stats"]
    subprocess.run(["ls", "-la", m.p(".spoolfs")], check=True, capture_output=True)
    after = metrics(m)
    # The second read of stats is the one open since: 400 stats built nothing.
    assert after[SNAPSHOTS] == before[SNAPSHOTS] + 1, (before[SNAPSHOTS], after[SNAPSHOTS])


def test_a_read_gets_the_snapshot_its_open_built(store, mount):
    store.add("a.bin", 65536)
    m = mount(store.write())
    flights = m.p(".spoolfs/flights")
    with open(flights, "rb", buffering=0) as f:
        read_file(m.p("a.bin"))  # a flight that did not exist when f was opened
        assert f.read() == b""
    with open(flights, "rb", buffering=0) as f:
        assert b'"name":"a.bin"' in f.read()
    # stat shows the latest snapshot's size, 0 before one (nothing is built for it), yet
    # readers that read to EOF get all, and an open file's own size is its snapshot's.
    assert os.stat(m.p(".spoolfs/stats")).st_size == 0
    out = subprocess.run(["cat", m.p(".spoolfs/stats")], check=True, capture_output=True).stdout
    assert b"spoolfs_flights_complete 1\n" in out
    fd = os.open(m.p(".spoolfs/stats"), os.O_RDONLY)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, 0, os.SEEK_SET)
        data = b""
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        assert end == len(data) > 0
    finally:
        os.close(fd)


def test_stat_shows_the_latest_snapshots_size_and_the_mounts_start(store, mount):
    """`ls -l /.spoolfs` shows each file as its latest read had it, not size 0, and the
    mount's start as its time, not 1970, kept by a serving process that replaced another."""
    store.add("a.bin", 100)
    t0 = int(time.time())
    m = mount(store.write())
    t1 = time.time()
    names = ("", "stats", "flights")
    started = {n: os.stat(m.p(".spoolfs/" + n)).st_mtime for n in names}
    assert all(t0 <= t <= t1 for t in started.values()), (t0, started, t1)
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    for name in ("stats", "flights"):
        data = read_file(m.p(".spoolfs/" + name))
        assert os.stat(m.p(".spoolfs/" + name)).st_size == len(data) > 0, name
    kill_serving(m)
    assert {n: os.stat(m.p(".spoolfs/" + n)).st_mtime for n in names} == started


def as_nobody(path):
    """Reads path as uid/gid 65534 with no supplementary groups: 0, or the errno."""
    code = ("import sys\n"
            "try:\n"
            "    open(sys.argv[1], 'rb').read()\n"
            "except OSError as e:\n"
            "    sys.exit(e.errno)\n")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    r = subprocess.run([python, "-c", code, path], user=NOBODY, group=NOBODY,
                       extra_groups=[], capture_output=True, timeout=30 * SLOW)
    return r.returncode


@pytest.fixture
def shared_dir():
    """A directory every user can walk into (pytest's tmp_path is root's alone)."""
    d = tempfile.mkdtemp(prefix="spoolfs-stats-")
    os.chmod(d, 0o755)
    mounts = []
    yield d, mounts
    try:
        teardown_mounts(mounts)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_stats_mode_keeps_the_files_to_the_mount_owner(store, shared_dir):
    d, mounts = shared_dir
    store.add("a.bin", 4096)
    url = store.write()
    open_mount = Mount(url, os.path.join(d, "open"), os.path.join(d, "open.log"),
                       ["-o", "allow_other"])
    mounts.append(open_mount)
    private = Mount(url, os.path.join(d, "private"), os.path.join(d, "private.log"),
                    ["-o", "allow_other", "--stats-mode", "0400"])
    mounts.append(private)
    fstab_form = Mount(url, os.path.join(d, "fstab"), os.path.join(d, "fstab.log"),
                       ["-o", "allow_other,stats_mode=0440"])
    mounts.append(fstab_form)

    # By default (as before) any user may read them.
    assert os.stat(open_mount.p(".spoolfs/stats")).st_mode & 0o777 == 0o444
    assert as_nobody(open_mount.p(".spoolfs/stats")) == 0
    for name in ("stats", "flights"):
        assert os.stat(private.p(".spoolfs/" + name)).st_mode & 0o777 == 0o400
        assert os.stat(fstab_form.p(".spoolfs/" + name)).st_mode & 0o777 == 0o440
        # The kernel refuses (default_permissions): another user cannot make a snapshot.
        assert as_nobody(private.p(".spoolfs/" + name)) == errno.EACCES
        assert as_nobody(fstab_form.p(".spoolfs/" + name)) == errno.EACCES
    # The mount itself is open to that user: only the stats files are kept.
    assert as_nobody(private.p("a.bin")) == 0
    # The owner still reads them.
    assert "spoolfs_flights_complete" in open(private.p(".spoolfs/stats")).read()


@pytest.mark.parametrize("mode", ["0644", "0555", "1444", "abc", "0400x", "", "-0400"])
def test_a_bad_stats_mode_is_refused(store, tmp_path, mode):
    store.add("a.bin", 1)
    err = refused_mount(store.write(), tmp_path / "mnt", "--stats-mode", mode)
    assert "--stats-mode must be octal read bits" in err and "'%s'" % mode in err, err
