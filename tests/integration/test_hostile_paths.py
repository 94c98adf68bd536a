"""User-given paths from the attacker's side (util/trusted_path.h, doc/threat-model.md).

The daemon runs as root; the attacker is `nobody` (uid 65534), who owns a directory
("evil") or a file in a sticky directory, plants symbolic links there, and waits for root to
write or read through them. Root's own secret is `secret/victim` (0600 in a 0700
directory). Every path option must be refused with a message saying why, and the victim
must never be written, read into the log, or replaced; a directory resolved at start is held,
so a path that leads elsewhere later changes nothing.
"""

import os
import shutil
import signal
import subprocess
import tempfile
from types import SimpleNamespace

import pytest

from conftest import read_file
from helpers import refused_mount, wait_until

NOBODY = 65534
VICTIM_TEXT = "root's own secret line\n"


def as_nobody(*cmd):
    """The attacker's step: cmd as uid and gid 65534, no other group."""
    subprocess.run(list(cmd), check=True, user=NOBODY, group=NOBODY, extra_groups=[],
                   stdin=subprocess.DEVNULL, capture_output=True)


@pytest.fixture
def arena():
    """/tmp/spoolfs-hostile-X (root's, 0755) holding evil/ (nobody's, 0755), sticky/
    (root's, 1777, as /tmp), secret/ (root's, 0700) with victim (0600) and root's own
    directories made by the tests."""
    base = tempfile.mkdtemp(prefix="spoolfs-hostile-", dir="/tmp")
    os.chmod(base, 0o755)
    evil = os.path.join(base, "evil")
    os.mkdir(evil)
    os.chown(evil, NOBODY, NOBODY)
    sticky = os.path.join(base, "sticky")
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    secret = os.path.join(base, "secret")
    os.mkdir(secret, 0o700)
    victim = os.path.join(secret, "victim")
    with open(victim, "w") as f:
        f.write(VICTIM_TEXT)
    os.chmod(victim, 0o600)
    yield SimpleNamespace(base=base, evil=evil, sticky=sticky, secret=secret, victim=victim)
    shutil.rmtree(base, ignore_errors=True)


def untouched(a):
    with open(a.victim) as f:
        assert f.read() == VICTIM_TEXT, "root's file was written through the attacker's path"
    assert sorted(os.listdir(a.secret)) == ["victim"], os.listdir(a.secret)


def own_dir(a, name):
    path = os.path.join(a.base, name)
    os.mkdir(path, 0o755)
    return path


def swap_for_link(a, path):
    """After start, the directory at path moves away and a link to nobody's takes its
    name: what the path leads to later. Returns where the first one went."""
    moved = path + ".old"
    os.rename(path, moved)
    os.symlink(a.evil, path)
    return moved


# ----------------------------------------------------------------- --log-file

def test_log_file_in_nobodys_directory_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    log = os.path.join(arena.evil, "spoolfs.log")
    as_nobody("ln", "-s", arena.victim, log)
    err = refused_mount(store.write(), tmp_path / "mnt", "--log-file", log)
    assert "--log-file" in err and "owned by uid 65534" in err, err
    untouched(arena)


def test_log_file_nobody_made_first_in_a_sticky_directory_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    log = os.path.join(arena.sticky, "spoolfs.log")
    as_nobody("sh", "-c", "umask 0; : > '%s'" % log)  # to read root's log lines
    err = refused_mount(store.write(), tmp_path / "mnt", "--log-file", log)
    assert "owned by another user" in err, err
    assert os.path.getsize(log) == 0


def test_log_file_that_is_a_link_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    logs = own_dir(arena, "logs")
    os.symlink(arena.victim, os.path.join(logs, "spoolfs.log"))
    err = refused_mount(store.write(), tmp_path / "mnt", "--log-file",
                        os.path.join(logs, "spoolfs.log"))
    assert "is a symbolic link" in err, err
    untouched(arena)


def test_sigusr1_reopens_in_the_directory_held_from_start(store, mount, arena):
    store.add("a.bin", 5000)
    store.add("b.bin", 6000)
    logs = own_dir(arena, "logs")
    log = os.path.join(logs, "spoolfs.log")
    m = mount(store.write(), "--log-file", log, "--log-level", "debug")
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    moved = swap_for_link(arena, logs)
    as_nobody("ln", "-s", arena.victim, os.path.join(arena.evil, "spoolfs.log"))
    os.rename(os.path.join(moved, "spoolfs.log"), os.path.join(moved, "spoolfs.log.1"))
    m.proc.send_signal(signal.SIGUSR1)  # the supervisor passes it on
    new = os.path.join(moved, "spoolfs.log")
    wait_until(lambda: os.path.exists(new), "the log file opened again where it was")
    assert read_file(m.p("b.bin")) == store.content("b.bin")
    wait_until(lambda: "b.bin: GET" in open(new).read(), "b.bin's GET in the new file")
    untouched(arena)
    m.check_clean_exit()
    untouched(arena)


# ----------------------------------------------------------------- --metrics-file

def test_metrics_file_in_nobodys_directory_is_refused(store, arena, tmp_path):
    """On a spoolfs that accepted it, nobody could swap the directory mid-run for a link
    to root's: the next write would land there."""
    store.add("a.bin", 100)
    err = refused_mount(store.write(), tmp_path / "mnt", "--metrics-file",
                        os.path.join(arena.evil, "spoolfs.prom"))
    assert "--metrics-file" in err and "owned by uid 65534" in err, err
    assert os.listdir(arena.evil) == []


def test_metrics_are_written_in_the_directory_held_from_start(store, mount, arena):
    store.add("a.bin", 100)
    out = own_dir(arena, "metrics")
    m = mount(store.write(), "--metrics-file", os.path.join(out, "spoolfs.prom"),
              "--metrics-interval", "1")
    moved = swap_for_link(arena, out)
    first = os.stat(os.path.join(moved, "spoolfs.prom")).st_ino
    # each write is a new file renamed over the name: a new inode, where it was
    wait_until(lambda: os.stat(os.path.join(moved, "spoolfs.prom")).st_ino != first,
               "the next metrics write in the directory held from start", timeout=30)
    assert os.listdir(arena.evil) == []
    m.check_clean_exit()
    assert os.listdir(arena.evil) == []


# ----------------------------------------------------------------- --record-reads

def test_record_reads_in_nobodys_directory_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    err = refused_mount(store.write(), tmp_path / "mnt", "--record-reads",
                        os.path.join(arena.evil, "reads.txt"))
    assert "--record-reads" in err and "owned by uid 65534" in err, err


def test_record_is_written_in_the_directory_held_from_start(store, mount, arena):
    store.add("a.bin", 100)
    out = own_dir(arena, "records")
    m = mount(store.write(), "--record-reads", os.path.join(out, "reads.txt"))
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    moved = swap_for_link(arena, out)
    m.check_clean_exit()
    with open(os.path.join(moved, "reads.txt")) as f:
        assert f.read().split() == ["a.bin"]
    assert os.listdir(arena.evil) == []


# ----------------------------------------------------------------- --prefetch-list

def test_prefetch_list_planted_as_a_link_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    lst = os.path.join(arena.evil, "list.txt")
    as_nobody("ln", "-s", arena.victim, lst)
    err = refused_mount(store.write(), tmp_path / "mnt", "--prefetch-list", lst)
    assert "--prefetch-list" in err and "owned by uid 65534" in err, err
    assert "secret line" not in err
    # in a directory of root's too: the last component is never followed
    lists = own_dir(arena, "lists")
    os.symlink(arena.victim, os.path.join(lists, "list.txt"))
    err = refused_mount(store.write(), tmp_path / "mnt", "--prefetch-list",
                        os.path.join(lists, "list.txt"))
    assert "is a symbolic link" in err and "secret line" not in err, err


def test_prefetch_list_of_nobodys_in_a_sticky_directory_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    lst = os.path.join(arena.sticky, "list.txt")
    as_nobody("sh", "-c", "echo a.bin > '%s'" % lst)
    err = refused_mount(store.write(), tmp_path / "mnt", "--prefetch-list", lst)
    assert "owned by another user" in err, err


def test_bad_prefetch_lines_are_logged_by_number_never_by_content(store, mount, arena):
    store.add("a.bin", 100)
    lists = own_dir(arena, "lists")
    lst = os.path.join(lists, "list.txt")
    with open(lst, "w") as f:
        f.write("a.bin\nno/such/TOKEN-3f1e9a-not-for-the-log\n")
    m = mount(store.write(), "--prefetch-list", lst)
    wait_until(lambda: "line 2: not in the source" in m.stderr(), "the bad line in the log")
    assert "TOKEN-3f1e9a" not in m.stderr()
    m.check_clean_exit()
    assert "TOKEN-3f1e9a" not in m.stderr()


# ----------------------------------------------------------------- --netrc-file, --ca-file

def test_netrc_of_nobodys_is_refused(store, arena, tmp_path):
    """A password file another user wrote would send root's requests their credentials
    (or a link to root's netrc would be read from the attacker's name for it)."""
    store.add("a.bin", 100)
    netrc = os.path.join(arena.evil, "netrc")
    as_nobody("sh", "-c", "echo 'machine 127.0.0.1 login x password y' > '%s'" % netrc)
    err = refused_mount(store.write(), tmp_path / "mnt", "--netrc-file", netrc)
    assert "--netrc-file" in err and "owned by uid 65534" in err, err
    netrc = os.path.join(arena.sticky, "netrc")
    as_nobody("sh", "-c", "echo 'machine 127.0.0.1 login x password y' > '%s'" % netrc)
    err = refused_mount(store.write(), tmp_path / "mnt", "--netrc-file", netrc)
    assert "owned by another user" in err, err


def test_ca_file_others_may_write_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    certs = own_dir(arena, "certs")
    ca = os.path.join(certs, "ca.pem")
    with open(ca, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\n")
    os.chmod(ca, 0o666)
    err = refused_mount(store.write(), tmp_path / "mnt", "--ca-file", ca)
    assert "--ca-file" in err and "writable by group or others" in err, err


# ----------------------------------------------------------------- cache and run directories

def test_cache_dir_under_nobodys_directory_is_refused(store, arena, tmp_path):
    store.add("a.bin", 100)
    err = refused_mount(store.write(), tmp_path / "mnt", "--cache-dir",
                        os.path.join(arena.evil, "cache"))
    assert "owned by uid 65534" in err, err


def test_run_directory_in_nobodys_tmpdir_is_refused(store, arena, tmp_path):
    """The namespace database is opened by its path in the run directory: in nobody's
    TMPDIR, nobody could rename it away and put their own in its place."""
    store.add("a.bin", 100)
    os.environ["TMPDIR"] = arena.evil
    try:
        err = refused_mount(store.write(), tmp_path / "mnt")
    finally:
        del os.environ["TMPDIR"]
    assert "refused for the run directory" in err and "owned by uid 65534" in err, err
    assert os.listdir(arena.evil) == []
