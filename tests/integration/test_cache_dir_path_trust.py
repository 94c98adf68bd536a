"""Security review: sqlite opens index.db by the cache directory's path name.

fs/ checks the cache directory through an fd, but sqlite opens DIR/index.db by its text
afterwards. Anyone who may rename a directory above DIR (its owner, or anyone when it is
writable without the sticky bit) could swap in a directory of theirs in between, and the
daemon (root on CI) would parse their index.db and create -wal/-shm there. So every
directory from / down to the cache directory must be root's or the mount's user's and
writable by no one else unless sticky (sshd's StrictModes rule); otherwise the mount is
refused with one line naming the directory and what to change.
"""

import os

import pytest

from conftest import read_file
from helpers import expected, keep_in_cache, refused_mount

MiB = 1 << 20
NOBODY = 65534


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def parent_dir(tmp_path, mode, uid=0):
    parent = tmp_path / "parent"
    parent.mkdir()
    os.chmod(parent, mode)
    os.chown(parent, uid, -1)
    return parent


@pytest.mark.parametrize("exists", [True, False], ids=["existing", "missing"])
def test_a_cache_dir_under_another_users_directory_is_refused(store, tmp_path, exists):
    store.add("a.bin", 1000)
    parent = parent_dir(tmp_path, 0o755, NOBODY)
    cache = parent / "cache"
    if exists:
        cache.mkdir(mode=0o700)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert "%s is owned by uid %d, not root or uid 0" % (parent, NOBODY) in line, line
    assert "chown or chmod it" in line and str(cache) in line, line
    # Nothing created in it; a directory the mount made goes again.
    assert os.listdir(cache) == [] if exists else not cache.exists()


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757], ids=oct)
def test_a_cache_dir_under_a_writable_directory_is_refused(store, tmp_path, mode):
    store.add("a.bin", 1000)
    parent = parent_dir(tmp_path, mode)
    cache = parent / "deeper" / "cache"
    cache.mkdir(parents=True, mode=0o700)
    os.chmod(parent / "deeper", 0o755)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir", str(cache)))
    assert "%s is writable by group or others without the sticky bit" % parent in line, line
    assert os.listdir(cache) == []


def test_a_cache_dir_under_a_sticky_directory_is_used(store, mount, tmp_path):
    """/tmp and /var/tmp are 1777: others cannot rename what we made in them."""
    a = store.add("a.bin", MiB)
    cache = parent_dir(tmp_path, 0o1777) / "cache"
    m = mount(store.write(), "--cache-dir", str(cache))
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()


def test_a_cache_dir_under_root_owned_directories_is_used(store, mount, tmp_path):
    """A /var/cache/spoolfs-like path: root's 0755 all the way down."""
    a = store.add("a.bin", MiB)
    var_cache = tmp_path / "var" / "cache"
    var_cache.mkdir(parents=True)
    for d in (tmp_path / "var", var_cache):
        os.chmod(d, 0o755)
    cache = var_cache / "spoolfs"
    m = mount(store.write(), "--cache-dir", str(cache), "--keep-cache")
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()
    assert (cache / "index.db").exists()


def test_a_symlinked_cache_dir_parent_is_judged_by_its_target(store, tmp_path):
    """The rule applies to the real path: a link from a trusted place into an untrusted one
    does not make it trusted."""
    store.add("a.bin", 1000)
    parent = parent_dir(tmp_path, 0o777)
    (parent / "cache").mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(parent)
    line = one_line(refused_mount(store.write(), tmp_path / "mnt", "--cache-dir",
                                  str(link / "cache")))
    assert "%s is writable by group or others" % parent in line, line


def test_a_session_dir_under_a_writable_tmpdir_is_refused(store, tmp_path, monkeypatch):
    store.add("a.bin", 1000)
    tmp = parent_dir(tmp_path, 0o777)
    monkeypatch.setenv("TMPDIR", str(tmp))
    line = one_line(refused_mount(store.write(), tmp_path / "mnt"))
    # the run directory, made there first, refuses it before the cache directory would
    assert line.startswith("spoolfs: TMPDIR %s refused for the run directory" % tmp), line
    assert "%s is writable by group or others without the sticky bit" % tmp in line, line
    assert os.listdir(tmp) == []  # nothing made there


def test_a_session_dir_under_a_sticky_tmpdir_is_used(store, mount, tmp_path, monkeypatch):
    a = store.add("a.bin", MiB)
    tmp = parent_dir(tmp_path, 0o1777)
    monkeypatch.setenv("TMPDIR", str(tmp))
    m = mount(store.write())
    assert read_file(m.p(a)) == expected(store, a)
    m.check_clean_exit()
    assert os.listdir(tmp) == []


def test_a_schema_found_in_index_db_is_not_trusted(store, mount, tmp_path):
    """Defence in depth should a database reach index.db after all: sqlite runs with
    trusted_schema off (and SQLITE_DBCONFIG_DEFENSIVE), so a trigger found there may not
    use a virtual table (here fts5; it could be any extension's). The statement that
    records an object no longer prepares, and the mount is refused, index.db kept. Before,
    the mount came up and the trigger copied every new key into the planted table."""
    import sqlite3
    a = store.add("a.bin", MiB)
    url = store.write()
    cache = tmp_path / "cache"
    keep_in_cache(store, mount, url, cache, a)
    db = sqlite3.connect(str(cache / "index.db"))
    db.executescript("CREATE VIRTUAL TABLE planted USING fts5(k);"
                     "CREATE TRIGGER planted_copy AFTER INSERT ON spool_object"
                     " BEGIN INSERT INTO planted VALUES(new.key); END;")
    db.close()
    line = one_line(refused_mount(url, tmp_path / "mnt2", "--cache-dir", str(cache),
                                  "--keep-cache"))
    assert "cannot open the index %s/index.db" % cache in line, line
    assert "move it away" in line, line
    db = sqlite3.connect(str(cache / "index.db"))
    assert db.execute("SELECT count(*) FROM spool_object").fetchone()[0] == 1
    db.close()
