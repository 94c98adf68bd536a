"""Issue 4: a warm mount as fast as a disk for programs that open thousands of small files
(doc/benchmarks.md, "Per-open work on a warm mount").

Directory opens: where the kernel offers FUSE_CAP_NO_OPENDIR_SUPPORT, the first OPENDIR
is answered ENOSYS and the kernel sends no OPENDIR or RELEASEDIR after it, for the whole
connection, across serving processes too. Directories that list on demand (a nested
manifest, an S3 prefix) are then listed at their first lookup or readdir; /.spoolfs still
shows its files' latest sizes. SPOOLFS_TEST_NO_OPENDIR=1 makes the daemon treat the kernel
as one without the capability (before 5.1): every directory open is a round trip, as
before. Requests are counted in the daemon's `-d` log.

Pack members pushed at their open: a member whose pack is here (and whose bytes match) when
it is opened goes into the kernel's page cache with the open, so its reads send no READ;
once per inode while the kernel keeps it (again after it forgot the inode); never while
another handle of the inode is open; never a member that does not match.

Pack spools: a pack's spool file stays open while its members are opened one after
another (it was closed at each member's release and opened again by name at the next
open); the bound on such idle spools is the unit suite's (test_flight.c).
"""

import errno
import hashlib
import json
import os
import re
import stat

import pytest

from conftest import SLOW, read_file
from helpers import flight_records, metric, readlink_or_empty, wait_until
from test_manifest_v2 import nested_manifest, v2_store
from test_s3 import BUCKET, aws_env, listings_of, mount_s3, s3_server  # noqa: F401 (fixtures)
from test_survive import kill_serving

DIRS = ["", "a", "a/b", "c"]


def requests(m, opcode):
    """How many requests of opcode the daemon read (its -d log)."""
    return len(re.findall(r"opcode: %s \(" % opcode, m.stderr()))


def small_tree(store):
    for d in DIRS[1:]:
        for i in range(3):
            store.add("%s/f%d" % (d, i), 100 + i)
    return store.write()


def listings(m):
    return {d: sorted(os.listdir(m.p(d))) for d in DIRS}


WANT = {"": ["a", "c"], "a": ["b", "f0", "f1", "f2"], "a/b": ["f0", "f1", "f2"],
        "c": ["f0", "f1", "f2"]}


def test_one_opendir_per_connection_even_across_a_new_serving_process(store, mount):
    m = mount(small_tree(store), "-d")
    for _ in range(3):
        assert listings(m) == WANT
    assert requests(m, "OPENDIR") == 1
    assert requests(m, "RELEASEDIR") == 0
    assert read_file(m.p("a/b/f1")) == store.content("a/b/f1")
    # The kernel keeps no_opendir; the new process must serve readdir without an opendir.
    kill_serving(m)
    for _ in range(2):
        assert listings(m) == WANT
    assert requests(m, "OPENDIR") == 1
    assert requests(m, "RELEASEDIR") == 0


def test_without_the_capability_every_directory_open_is_a_request(store, mount, monkeypatch):
    monkeypatch.setenv("SPOOLFS_TEST_NO_OPENDIR", "1")
    m = mount(small_tree(store), "-d")
    for _ in range(3):
        assert listings(m) == WANT
    opens = 3 * len(DIRS)
    assert requests(m, "OPENDIR") == opens
    # RELEASEDIR goes out in the background after close.
    wait_until(lambda: requests(m, "RELEASEDIR") == opens, "a RELEASEDIR never came")
    # Each new serving process decides alike, from the same INIT.
    kill_serving(m)
    assert listings(m) == WANT
    assert requests(m, "OPENDIR") == opens + len(DIRS)


def test_a_nested_manifest_is_loaded_by_its_first_readdir(upstream, mount):
    root = upstream.root
    os.makedirs(os.path.join(root, "objects"), exist_ok=True)
    deeper = nested_manifest(root, "m-deeper", [{"path": "leaf", "size": 1}])
    sub = nested_manifest(root, "m-sub", [
        {"path": "x", "type": "directory", "manifest": deeper},
        {"path": "top", "size": 2}])
    v2_store(root, [{"path": "sub", "type": "directory", "manifest": sub},
                    {"path": "plain.txt", "data": b"plain\n"}])
    m = mount(upstream.url("manifest.json"), "-d")
    assert sorted(os.listdir(m.path)) == ["plain.txt", "sub"]
    assert upstream.stats("objects/m-sub")["gets"] == 0
    # No lookup inside sub before: its readdir loads its manifest.
    assert sorted(os.listdir(m.p("sub"))) == ["top", "x"]
    assert sorted(os.listdir(m.p("sub/x"))) == ["leaf"]
    assert upstream.stats("objects/m-sub")["gets"] == 1
    assert upstream.stats("objects/m-deeper")["gets"] == 1
    assert requests(m, "OPENDIR") == 1


def test_an_s3_directory_is_listed_by_its_first_readdir_also_in_a_new_process(
        s3_server, mount):
    s3 = s3_server()
    s3.put(BUCKET, "top", b"t")
    s3.put(BUCKET, "a/x", b"ax")
    s3.put(BUCKET, "b/y", b"by")
    s3.put(BUCKET, "b/z/w", b"bzw")
    m = mount_s3(mount, s3, "s3://" + BUCKET, "-d")
    assert sorted(os.listdir(m.path)) == ["a", "b", "top"]
    assert sorted(os.listdir(m.p("a"))) == ["x"]
    kill_serving(m)
    assert sorted(os.listdir(m.p("b"))) == ["y", "z"]
    assert sorted(os.listdir(m.p("b/z"))) == ["w"]
    assert sorted(os.listdir(m.p("a"))) == ["x"]
    for prefix in ("", "a/", "b/", "b/z/"):
        assert listings_of(s3, prefix) == [200], prefix
    assert requests(m, "OPENDIR") == 1


def test_spoolfs_directory_stays_fresh_when_the_kernel_caches_listings(store, mount):
    m = mount(small_tree(store), "-d")
    stats = m.p(".spoolfs/stats")
    assert sorted(os.listdir(m.p(".spoolfs"))) == ["flights", "stats"]
    with open(stats, "rb") as f:
        first = f.read()
    assert os.stat(stats).st_size == len(first)
    assert read_file(m.p("a/f0")) == store.content("a/f0")
    with open(stats, "rb") as f:
        second = f.read()
    assert second != first
    # The listing may come from the kernel's cache; each name's attributes may not.
    entries = {e.name: e for e in os.scandir(m.p(".spoolfs"))}
    assert sorted(entries) == ["flights", "stats"]
    assert entries["stats"].stat().st_size == len(second)
    assert os.stat(stats).st_size == len(second)
    assert requests(m, "OPENDIR") == 1


def spool_fds(pid, size):
    """The serving process's fds on regular files of size bytes: {fd: target}."""
    out = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        path = "/proc/%d/fd/%s" % (pid, fd)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size == size:
            out[fd] = readlink_or_empty(path)
    return out


def test_a_pack_spool_stays_open_between_its_members_opens(upstream, mount):
    members = [("d/m%02d" % i, bytes([65 + i]) * (1000 + i)) for i in range(20)]
    v2_store(upstream.root, [], packs={"p1": members})
    size = sum(len(d) for _, d in members)
    m = mount(upstream.url("manifest.json"), "--prefetch-requests", "0")
    pid = m.serving_pid()

    def released():
        return all(r["handles"] == 0 for r in flight_records(m).values())

    assert read_file(m.p("d/m00")) == members[0][1]
    wait_until(released, "the member's RELEASE")
    held = spool_fds(pid, size)
    assert len(held) == 1, held
    for path, data in members[1:]:
        assert read_file(m.p(path)) == data
        wait_until(released, "the member's RELEASE")
        assert spool_fds(pid, size) == held  # the same fd: not closed and opened again
    assert upstream.stats("objects/p1")["gets"] == 1


def pack_mount(upstream, mount, members, lie=None):
    """A mount (-d, no walk prefetch) of one pack p1 of members, whose member `lie` is
    listed with the sha256 of other bytes."""
    v2_store(upstream.root, [], packs={"p1": members})
    if lie:
        path = os.path.join(upstream.root, "manifest.json")
        with open(path) as f:
            doc = json.load(f)
        for e in doc["entries"]:
            if e["path"] == lie:
                e["sha256"] = hashlib.sha256(b"other bytes").hexdigest()
        with open(path, "w") as f:
            json.dump(doc, f)
    return mount(upstream.url("manifest.json"), "-d", "--prefetch-requests", "0")


def pack_complete(m):
    wait_until(lambda: any(r["state"] == "complete" for r in flight_records(m).values()),
               lambda: flight_records(m))


def test_a_member_whose_pack_is_here_is_read_with_no_request(upstream, mount):
    members = [("d/m%02d" % i, bytes([65 + i]) * (3000 + 4096 * i)) for i in range(6)]
    m = pack_mount(upstream, mount, members)
    # The first open fetches the pack (its own read is the daemon's unless the pack came
    # before the open was answered).
    assert read_file(m.p("d/m00")) == members[0][1]
    pack_complete(m)
    pushed = metric(m, "members_pushed_total")
    reads = requests(m, "READ")  # reading /.spoolfs sends READs too: counted after
    for path, data in members[1:]:
        assert read_file(m.p(path)) == data
    assert requests(m, "READ") == reads
    # Pushed once per inode: the kernel still has the pages of an open again (nothing here
    # makes it drop pages or inodes between the loops).
    for path, data in members[1:]:
        assert read_file(m.p(path)) == data
    assert requests(m, "READ") == reads
    assert metric(m, "members_pushed_total") == pushed + len(members) - 1
    assert upstream.stats("objects/p1")["gets"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping the kernel's inodes needs root")
def test_a_member_is_pushed_again_once_the_kernel_forgot_its_inode(upstream, mount):
    members = [("d/m%02d" % i, bytes([65 + i]) * (3000 + 4096 * i)) for i in range(6)]
    m = pack_mount(upstream, mount, members)
    assert read_file(m.p("d/m00")) == members[0][1]
    pack_complete(m)
    for path, data in members[1:]:
        assert read_file(m.p(path)) == data
    pushed = metric(m, "members_pushed_total")
    forgets = requests(m, "FORGET") + requests(m, "BATCH_FORGET")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")
    wait_until(lambda: requests(m, "FORGET") + requests(m, "BATCH_FORGET") > forgets,
               "the kernel forgot no inode")

    # libfuse logs a FORGET before the daemon handles it: an open in between is read as a
    # request, and the next one gives the member again. Each forgotten inode is given once.
    def all_pushed_again():
        for path, data in members[1:]:
            assert read_file(m.p(path)) == data
        return metric(m, "members_pushed_total") >= pushed + len(members) - 1

    wait_until(all_pushed_again, lambda: "pushed %d, then %d" % (
        pushed, metric(m, "members_pushed_total")))
    assert metric(m, "members_pushed_total") == pushed + len(members) - 1


def test_a_member_open_twice_is_not_pushed_while_its_first_handle_may_read(upstream, mount):
    """A push waits for the inode's pending reads (the kernel locks the pages), which at the
    loop's end are never answered: no push while another handle of the inode is open."""
    members = [("d/a", b"a" * 9000), ("d/b", b"b" * 5000)]
    v2_store(upstream.root, [], packs={"p1": members})
    upstream.fault("objects/p1", gate=True)
    m = mount(upstream.url("manifest.json"), "-d", "--prefetch-requests", "0")
    first = os.open(m.p("d/a"), os.O_RDONLY)  # answered before the pack comes
    second = None
    try:
        upstream.wait_for(lambda st: st["gated"] == 1, timeout=10 * SLOW, path="objects/p1")
        upstream.release("objects/p1")
        pack_complete(m)
        second = os.open(m.p("d/a"), os.O_RDONLY)
        assert metric(m, "members_pushed_total") == 0
        reads = requests(m, "READ")
        assert os.read(second, 20000) == members[0][1]
        assert requests(m, "READ") > reads  # its pages were not given
        assert os.read(first, 20000) == members[0][1]
    finally:
        os.close(first)
        if second is not None:
            os.close(second)
    wait_until(lambda: all(r["handles"] == 0 for r in flight_records(m).values()),
               "the RELEASEs")
    # Alone now: the next open gives it (its pages may be cached already: a copy more).
    assert read_file(m.p("d/a")) == members[0][1]
    assert read_file(m.p("d/b")) == members[1][1]
    assert metric(m, "members_pushed_total") == 2


def test_a_member_that_does_not_match_is_never_pushed(upstream, mount):
    members = [("d/good", b"g" * 5000), ("d/bad", b"b" * 7000)]
    m = pack_mount(upstream, mount, members, lie="d/bad")
    assert read_file(m.p("d/good")) == members[0][1]
    pack_complete(m)
    pushed = metric(m, "members_pushed_total")
    with pytest.raises(OSError) as e:
        read_file(m.p("d/bad"))
    assert e.value.errno == errno.EIO
    assert metric(m, "members_pushed_total") == pushed
    assert metric(m, "pack_member_hash_failures_total") == 1
