"""Security review, item 3: the cache directory's trust.

The daemon runs as root on CI machines where other users' jobs run. Run with --cache-dir on
a directory another user owned (mode 0777), spoolfs created its `lock` at the target of a
symbolic link planted there. Now a cache directory must be the mount's user's own and
writable by nobody else, and nothing found in it that is a link or another user's file is
ever opened, created, written or deleted through.
"""

import os

import pytest

from conftest import is_mounted, read_file
from helpers import expected, keep_in_cache, refused_mount

MiB = 1 << 20
NOBODY = 65534
VICTIM_TEXT = b"the victim's own bytes\n"


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def make_victim(tmp_path):
    """A file outside the cache directory that root's daemon must never write or truncate."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    victim = outside / "victim"
    victim.write_bytes(VICTIM_TEXT)
    os.utime(victim, (1000000000, 1000000000))
    return victim


def assert_untouched(victim):
    st = os.stat(victim)
    assert victim.read_bytes() == VICTIM_TEXT
    assert st.st_mtime == 1000000000 and st.st_uid == 0 and st.st_mode & 0o777 == 0o644


# 0700 and someone else's is refused too: that user could still plant names in it.
@pytest.mark.parametrize("mode", [0o777, 0o700], ids=oct)
def test_a_cache_dir_of_another_user_is_refused(store, tmp_path, mode):
    store.add("a.bin", 1000)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    os.chmod(theirs, mode)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(theirs)))
    assert str(theirs) in line and "owned by another user" in line, line
    assert os.listdir(theirs) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777, 0o720], ids=oct)
def test_a_cache_dir_others_may_write_in_is_refused(store, tmp_path, mode):
    store.add("a.bin", 1000)
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, mode)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert str(cache) in line and "writable by group or others" in line, line
    assert os.listdir(cache) == []


def test_a_cache_dir_that_is_a_symbolic_link_is_refused(store, tmp_path):
    store.add("a.bin", 1000)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    for given in (str(link), str(link) + "/"):
        line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", given))
        assert str(link) in line and "symbolic link" in line, line
    assert os.listdir(real) == []


def test_a_missing_cache_dir_is_made_private(store, mount, tmp_path):
    a = store.add("a.bin", MiB)
    cache = tmp_path / "new-cache"
    m = mount(store.write(), "--cache-dir", str(cache))
    st = os.lstat(cache)
    assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()
    assert not cache.exists()


# Every name the daemon opens in a cache directory. A planted entry refuses the mount, naming
# it: each may hold what an earlier session kept, so it is the operator's to remove.
PLANTED = ["lock", "index.db", "index.db-wal", "index.db-shm", "index.db-journal", "leases"]


@pytest.mark.parametrize("name", PLANTED)
@pytest.mark.parametrize("victim_exists", [True, False], ids=["victim", "no-victim"])
def test_a_planted_symbolic_link_is_never_followed(store, tmp_path, name, victim_exists):
    store.add("a.bin", MiB)
    victim = make_victim(tmp_path)
    if not victim_exists:
        victim = victim.with_name("created-by-root")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / name).symlink_to(victim)
    err = refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache), "--keep-cache")
    line = one_line(err)
    assert "%s/%s" % (cache, name) in line and "symbolic link" in line, line
    if victim_exists:
        assert_untouched(victim)
    else:
        assert not os.path.lexists(victim)
    # Nothing lost: the planted link is left for the operator, and nothing else was made.
    assert os.path.islink(cache / name)


@pytest.mark.parametrize("name", PLANTED)
def test_another_users_planted_file_is_never_used(store, tmp_path, name):
    """A regular file of another user's (an index.db sqlite would open by name, with its own
    sidecars) is refused as well: its contents are theirs to choose."""
    store.add("a.bin", MiB)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    planted = cache / name
    planted.write_bytes(b"")
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o666)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert "%s/%s" % (cache, name) in line and "owned by another user" in line, line
    st = os.lstat(planted)
    assert st.st_uid == NOBODY and st.st_size == 0 and st.st_mode & 0o777 == 0o666


@pytest.mark.parametrize("name", ["lock", "index.db", "leases"])
def test_a_planted_hard_link_is_never_used(store, tmp_path, name):
    """Root's own file under a second name in the cache directory: an empty one would have
    become the index, written through to wherever its other name is."""
    store.add("a.bin", MiB)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"")
    os.chmod(victim, 0o600)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.link(victim, cache / name)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert "%s/%s" % (cache, name) in line and "hard link" in line, line
    assert victim.read_bytes() == b""


def test_a_planted_spool_directory_link_is_refused(store, tmp_path):
    store.add("a.bin", MiB)
    outside = tmp_path / "outside"
    outside.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / "spool").symlink_to(outside)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert "%s/spool" % cache in line and "symbolic link" in line, line
    assert os.listdir(outside) == []


def kept_spool(store, mount, tmp_path):
    """A cache directory holding one complete object from a first session: (cache, object,
    its spool file's path)."""
    a = store.add("a.bin", MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    spools = os.listdir(cache / "spool")
    assert len(spools) == 1, spools
    return url, cache, a, cache / "spool" / spools[0]


def test_a_planted_spool_file_link_is_replaced_not_followed(store, mount, tmp_path):
    """The records say the spool is complete; its name now is a link to a file of the same
    size. The object is fetched again into a new file of ours, the victim untouched."""
    url, cache, a, spool = kept_spool(store, mount, tmp_path)
    victim = make_victim(tmp_path)
    victim.write_bytes(b"v" * MiB)
    os.utime(victim, (1000000000, 1000000000))
    spool.unlink()
    spool.symlink_to(victim)
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()
    assert victim.read_bytes() == b"v" * MiB and os.stat(victim).st_mtime == 1000000000
    assert not os.path.islink(spool) and os.lstat(spool).st_uid == 0


def test_another_users_spool_file_is_replaced_not_used(store, mount, tmp_path):
    """A spool file of another user's, with the right size and seal time, is not served."""
    url, cache, a, spool = kept_spool(store, mount, tmp_path)
    st = os.stat(spool)
    spool.write_bytes(b"x" * st.st_size)
    os.utime(spool, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.chown(spool, NOBODY, NOBODY)
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", name="mnt2")
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()
    assert os.lstat(spool).st_uid == 0


def test_cleanup_deletes_nothing_outside(store, mount, tmp_path):
    """At unmount the last mount deletes its files by name through the directory it opened:
    a link planted in the spool directory goes itself, and a cache directory moved away and
    replaced by a link to another directory leads the clean-up nowhere."""
    a = store.add("a.bin", MiB)
    outside = tmp_path / "outside"
    (outside / "spool").mkdir(parents=True)
    kept = ["index.db", "index.db-wal", "index.db-shm", "lock", "leases", "spool/x.spool",
            "precious"]
    for name in kept:
        (outside / name).write_bytes(b"keep me")
    cache = tmp_path / "cache"
    m = mount(store.write(), "--cache-dir", str(cache))
    assert read_file(m.p(a)) == expected(store, a)
    (cache / "spool" / "evil").symlink_to(outside)
    (cache / "spool" / "evil-file").symlink_to(outside / "precious")
    moved = tmp_path / "moved"
    os.rename(cache, moved)
    cache.symlink_to(outside)
    m.check_clean_exit()
    for name in kept:
        assert (outside / name).read_bytes() == b"keep me", name
    # What the session made went, through the directory it held; the link it never used.
    assert os.listdir(moved) == []
    assert os.path.islink(cache)


def test_cleanup_of_a_session_directory_deletes_nothing_outside(store, mount, tmp_path,
                                                                  monkeypatch):
    """Without --cache-dir the session's own directory (mkdtemp, 0700) is cleaned the same
    way: a link found in its spool directory goes itself."""
    a = store.add("a.bin", MiB)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    m = mount(store.write())
    assert read_file(m.p(a)) == expected(store, a)
    # In the mount's run directory (doc/survive.md), both made 0700.
    (run,) = os.listdir(tmp)
    (name,) = [n for n in os.listdir(tmp / run) if n.startswith("spoolfs-")]
    session = os.path.join(run, name)
    for d in (run, session):
        st = os.lstat(tmp / d)
        assert st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()
    (tmp / session / "spool" / "evil").symlink_to(outside)
    (tmp / session / "spool" / "evil-file").symlink_to(outside / "precious")
    m.check_clean_exit()
    assert os.listdir(outside) == ["precious"]
    assert (outside / "precious").read_bytes() == b"keep me"
    assert os.listdir(tmp) == []


def test_two_mounts_still_share_a_private_cache_dir(store, mount, tmp_path):
    a = store.add("a.bin", MiB)
    url = store.write()
    cache = tmp_path / "cache"
    m1 = mount(url, "--cache-dir", str(cache))
    m2 = mount(url, "--cache-dir", str(cache), name="mnt2")
    assert read_file(m1.p(a)) == expected(store, a)
    assert read_file(m2.p(a)) == expected(store, a)
    m1.check_clean_exit()
    assert (cache / "lock").exists() and not is_mounted(m1.path)
    m2.check_clean_exit()
    # The directory goes with the mount that made it; its files with the last one out.
    assert os.listdir(cache) == []
