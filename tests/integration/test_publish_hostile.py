"""Security review, items 2 and 8: `spoolfs publish` run as root on a tree another user owns.

Written from the attacker's side. The unprivileged user (`nobody`) owns SRC_DIR and may
rename and plant symlinks in it while root's publish runs; root-only files elsewhere must
never reach the objects (which are world-readable). The walk's end is a gate
(SPOOLFS_TEST_PUBLISH_GATE, a FIFO): the attacker swaps a directory or a file after the walk
recorded it and before its file is copied. OUT_DIR is refused when others could choose
where root writes (a symlink, another user's directory, writable by others), and an object
already there is checked before it is kept.
"""

import errno
import hashlib
import json
import os
import subprocess
import traceback

import pytest

from conftest import SLOW, SPOOLFS, daemon_env
from helpers import publish_tree, wait_until

NOBODY = 65534
SECRET = b"root's secret bytes, never to be published\n"
PUBLIC = b"the attacker's public bytes, to be swapped\n"  # as long as SECRET
assert len(SECRET) == len(PUBLIC)


def as_nobody(cwd, action):
    """Runs action() in a child as uid/gid nobody, inside cwd (entered while still root: the
    directories above need not be searchable by nobody)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(cwd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            action()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the attacker's action failed"


def attacker_tree(tmp_path):
    """SRC_DIR, nobody's: a/f.txt (one object of its own), plus a root-only directory
    elsewhere holding a file of the same name and size."""
    src = tmp_path / "src"
    src.mkdir()
    os.chown(src, NOBODY, NOBODY)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "f.txt").write_bytes(SECRET)
    os.chmod(secret / "f.txt", 0o600)

    def build():
        os.mkdir("a")
        with open("a/f.txt", "wb") as f:
            f.write(PUBLIC)
        with open("top.txt", "wb") as f:
            f.write(b"stays as it was\n")

    as_nobody(src, build)
    return src, secret


def stored_bytes(out):
    """Every file's bytes under OUT (objects and anything else), by path."""
    found = {}
    for dirpath, _, files in os.walk(out):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                found[os.path.join(dirpath, name)] = f.read()
    return found


def publish_with_gate(tmp_path, src, out, at_gate):
    """Runs root's publish of src into out, and at_gate() once the walk is done and before
    any file is copied. (exit status, stderr)."""
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    env = daemon_env()
    env["SPOOLFS_TEST_PUBLISH_GATE"] = str(fifo)
    proc = subprocess.Popen([SPOOLFS, "publish", "--no-compress", str(src), str(out), "-j", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        # The publish opens the FIFO for reading at the gate: until then, opening it for
        # writing without blocking says ENXIO.
        opened = []

        def at_the_gate():
            assert proc.poll() is None, "publish ended before its gate: %r" % (
                proc.communicate()[1],)
            try:
                opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
            return bool(opened)

        wait_until(at_the_gate, "publish never reached its gate", timeout=60)
        gate = opened[0]
        try:
            at_gate()
        finally:
            os.close(gate)  # end of file: the publish goes on
        _, err = proc.communicate(timeout=120 * SLOW)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err.decode("utf-8", "replace")
    for mark in ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:"):
        assert mark not in err, err
    return proc.returncode, err


def test_the_gate_alone_changes_nothing(tmp_path):
    """The harness: with no swap at the gate, the publish is whole."""
    src, _ = attacker_tree(tmp_path)
    out = tmp_path / "out"
    rc, err = publish_with_gate(tmp_path, src, out, lambda: None)
    assert rc == 0, err
    manifest = json.loads((out / "manifest.json").read_bytes())
    assert {e["path"] for e in manifest["entries"]} == {"a", "a/f.txt", "top.txt"}


def swap_for_symlink(secret):
    os.rename("a", "a.old")
    os.symlink(str(secret), "a")


def swap_for_directory(secret):
    os.rename("a", "a.old")
    os.mkdir("a")
    with open("a/f.txt", "wb") as f:
        f.write(SECRET.upper())  # same size, other bytes


def swap_the_file(secret):
    os.rename("a/f.txt", "a/old.txt")
    with open("a/f.txt", "wb") as f:
        f.write(SECRET.upper())


def grow_the_file(secret):
    with open("a/f.txt", "ab") as f:
        f.write(b"more")


@pytest.mark.parametrize("swap,why", [
    (swap_for_symlink, "a symlink is on its path now"),
    (swap_for_directory, "is not the file the walk saw"),
    (swap_the_file, "is not the file the walk saw"),
    (grow_the_file, "changed size while it was published (%d bytes at the walk, %d now)"
     % (len(PUBLIC), len(PUBLIC) + 4)),
], ids=["directory-to-symlink", "directory-to-directory", "file-to-file", "file-grows"])
def test_a_tree_changed_after_the_walk_fails_naming_the_file(tmp_path, swap, why):
    """Item 2: `a` swapped for a symlink to a root-only directory once the walk recorded it
    put that directory's file, world-readable, into the objects. Now every file is opened
    beneath SRC_DIR through no symlink and must be the file the walk saw (st_dev, st_ino,
    size): anything else fails the publish, naming the file, and no manifest is written."""
    src, secret = attacker_tree(tmp_path)
    out = tmp_path / "out"
    rc, err = publish_with_gate(tmp_path, src, out, lambda: as_nobody(src, lambda: swap(secret)))
    assert rc == 1, err
    assert "%s/a/f.txt: %s" % (src, why) in err, err
    assert not (out / "manifest.json").exists()
    for path, data in stored_bytes(out).items():
        assert SECRET not in data and SECRET.upper() not in data, path
        assert not os.path.basename(path).startswith("tmp."), path


def test_a_symlink_in_src_is_recorded_never_followed(tmp_path):
    """A symlink nobody planted before the publish is published as a symlink: its target's
    bytes (root's) are not read."""
    src, secret = attacker_tree(tmp_path)
    as_nobody(src, lambda: os.symlink(str(secret), "link"))
    out = tmp_path / "out"
    publish_tree(src, out)
    manifest = json.loads((out / "manifest.json").read_bytes())
    link = [e for e in manifest["entries"] if e["path"] == "link"]
    assert link == [{"path": "link", "type": "symlink", "target": str(secret),
                     "mtime": link[0]["mtime"]}]
    assert not any(SECRET in data for data in stored_bytes(out).values())


def nobodys_dir(path, mode=0o755):
    path.mkdir()
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)
    return path


def small_src(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_bytes(PUBLIC)
    return src


def test_out_a_symlink_nobody_planted_is_refused(tmp_path):
    """Item 8: nobody plants OUT_DIR, as a symlink to a root-only directory, in a directory
    of theirs: root's publish must not write there."""
    src = small_src(tmp_path)
    drop = nobodys_dir(tmp_path / "drop")
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    as_nobody(drop, lambda: os.symlink(str(target), "out"))
    rc, _, err = publish_tree(src, drop / "out", check=False)
    assert rc == 1, err
    assert "%s: OUT_DIR is a symbolic link" % (drop / "out") in err, err
    assert os.listdir(target) == []


@pytest.mark.parametrize("case", ["out-nobodys", "out-writable", "above-writable",
                                  "objects-symlink", "objects-nobodys", "objects-writable"])
def test_an_out_others_could_change_is_refused(tmp_path, case):
    """Item 8: OUT_DIR, its objects/ and the directories above must be root's (or the
    user's) and writable by nobody else, or others choose where root's objects go."""
    src = small_src(tmp_path)
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if case == "out-nobodys":
        nobodys_dir(out, 0o700)
        fault = "%s is owned by uid %d" % (out, NOBODY)
    elif case == "out-writable":
        out.mkdir()
        os.chmod(out, 0o777)
        fault = "%s is writable by group or others" % out
    elif case == "above-writable":
        above = tmp_path / "shared"
        above.mkdir()
        os.chmod(above, 0o777)
        out = above / "out"
        fault = "%s is writable by group or others" % above
    elif case == "objects-symlink":
        out.mkdir()
        os.symlink(elsewhere, out / "objects")
        fault = "%s is a symbolic link" % (out / "objects")
    elif case == "objects-nobodys":
        out.mkdir()
        nobodys_dir(out / "objects")
        fault = "%s is owned by uid %d" % (out / "objects", NOBODY)
    else:
        out.mkdir()
        (out / "objects").mkdir()
        os.chmod(out / "objects", 0o777)
        fault = "%s is writable by group or others" % (out / "objects")
    rc, _, err = publish_tree(src, out, check=False)
    assert rc == 1, err
    assert "OUT_DIR refused: %s" % fault in err, err
    assert os.listdir(elsewhere) == []
    assert not (out / "manifest.json").exists()
    if case == "above-writable":  # made by this run, then taken back
        assert not out.exists()
    elif not case.startswith("objects"):
        assert os.listdir(out) == []


def object_path(out, data):
    digest = hashlib.sha256(data).hexdigest()
    return out / "objects" / digest[:2] / digest


def assert_every_object_right(out):
    for dirpath, _, files in os.walk(out / "objects"):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == name, name


@pytest.mark.parametrize("probe", [False, True], ids=["empty-store", "store-with-objects"])
def test_an_existing_object_of_the_wrong_size_is_replaced(tmp_path, probe):
    """Item 8: an object already under its name was kept without a look. One of the wrong
    size is now replaced (written anew, renamed over it), with a warning naming it."""
    src = small_src(tmp_path)
    out = tmp_path / "out"
    (out / "objects").mkdir(parents=True)
    if probe:  # a store earlier publishes wrote into: each job is hashed first
        (out / "objects" / "00").mkdir()
    obj = object_path(out, PUBLIC)
    obj.parent.mkdir(exist_ok=True)
    obj.write_bytes(PUBLIC[:-1])
    rc, stdout, err = publish_tree(src, out)
    assert "warning: %s: replaced: it held %d bytes, not %d" % (
        obj, len(PUBLIC) - 1, len(PUBLIC)) in err, err
    assert obj.read_bytes() == PUBLIC
    assert_every_object_right(out)
    # Right now: the next publish keeps it, and says nothing.
    rc, stdout, err = publish_tree(src, out)
    assert "replaced" not in err and "0 new objects" in stdout, (stdout, err)


def test_verify_existing_rehashes_and_replaces_wrong_bytes(tmp_path):
    """An object of the right size but wrong bytes passes the size check; --verify-existing
    re-hashes every object there and replaces it."""
    src = small_src(tmp_path)
    out = tmp_path / "out"
    publish_tree(src, out)
    obj = object_path(out, PUBLIC)
    obj.write_bytes(SECRET)  # same size
    rc, stdout, err = publish_tree(src, out)
    assert "replaced" not in err and obj.read_bytes() == SECRET  # sized only, as documented
    rc, stdout, err = publish_tree(src, out, "--verify-existing")
    assert "warning: %s: replaced: its bytes did not hash to its name" % obj in err, err
    assert obj.read_bytes() == PUBLIC
    assert_every_object_right(out)
