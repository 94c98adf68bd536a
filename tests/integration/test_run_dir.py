"""A mount's run directory (doc/survive.md) does not outlive it, however it ends.

The supervisor removes it at unmount. When every process of a mount is killed (kill -9 of
the supervisor too, the OOM killer taking the whole cgroup) nobody is left to; the next
mount of the same user in the same TMPDIR removes it, because no process holds its lock.
A live mount's directory, another user's, a symlink, one without a lock (an older
spoolfs's, or one being made) and one whose lock is not a plain file of ours are never
touched.
"""

import os
import signal
import subprocess

from conftest import SPOOLFS, Mount, daemon_env, is_mounted, read_file
from helpers import expected, wait_until


def run_dirs(tmpdir):
    return sorted(n for n in os.listdir(tmpdir) if n.startswith("spoolfs-run."))


def mount_in(tmpdir, source, path, log, *args):
    env = daemon_env()
    env["TMPDIR"] = str(tmpdir)
    return Mount(source, path, log, args, env=env)


def gone(pid):
    """True once pid has exited (a zombie has closed its files already)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def serving_named(m):
    """The PID /.spoolfs/stats names as serving, or None."""
    with open(m.p(".spoolfs/stats")) as f:
        for line in f:
            if line.startswith("spoolfs_serving_pid "):
                return int(line.split()[-1])
    return None


def kill_whole(m):
    """Both processes of m die, the serving one first so the supervisor starts no other."""
    serving = m.serving_pid()
    m.proc.send_signal(signal.SIGSTOP)
    os.kill(serving, signal.SIGKILL)
    m.proc.kill()
    m.proc.wait()
    wait_until(lambda: gone(serving), "the serving process never exited")
    subprocess.run(["fusermount3", "-u", "-z", m.path], check=False)
    m.unmounted = True
    m.log.close()


def test_a_mount_killed_whole_leaves_its_run_dir_to_the_next_mount(store, tmp_path):
    rel = store.add("a.bin", 64 << 10)
    url = store.write()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    mounts = []
    try:
        first = mount_in(tmpdir, url, tmp_path / "mnt1", tmp_path / "mnt1.log")
        mounts.append(first)
        assert read_file(first.p(rel)) == expected(store, rel)
        (left,) = run_dirs(tmpdir)
        kill_whole(first)
        assert not is_mounted(first.path)
        assert run_dirs(tmpdir) == [left], "the killed mount's run directory is already gone"

        second = mount_in(tmpdir, url, tmp_path / "mnt2", tmp_path / "mnt2.log")
        mounts.append(second)
        now = run_dirs(tmpdir)
        assert left not in now, "the next mount left the dead mount's run directory"
        assert len(now) == 1
        assert "removed %s/%s" % (tmpdir, left) in second.stderr()
        assert read_file(second.p(rel)) == expected(store, rel)
        assert second.unmount() == 0
        assert run_dirs(tmpdir) == []
    finally:
        for m in mounts:
            if not m.unmounted:
                m.kill()


def test_live_foreign_and_unlocked_run_dirs_are_left_alone(store, tmp_path):
    rel = store.add("a.bin", 64 << 10)
    url = store.write()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    # Another user's, with a lock nobody holds.
    foreign = tmpdir / "spoolfs-run.other"
    foreign.mkdir(mode=0o700)
    (foreign / "lock").write_bytes(b"")
    os.chown(foreign / "lock", 65534, 65534)
    os.chown(foreign, 65534, 65534)
    # A symlink to a directory of ours with a free lock: the link is not followed.
    target = tmp_path / "target"
    target.mkdir()
    (target / "lock").write_bytes(b"")
    (target / "keep").write_bytes(b"kept")
    os.symlink(target, tmpdir / "spoolfs-run.link")
    # An older spoolfs's, with no lock to tell whether it lives.
    older = tmpdir / "spoolfs-run.older"
    older.mkdir(mode=0o700)
    (older / "namespace.db").write_bytes(b"")
    # Ours, but its lock is no plain file of ours, or is not made yet.
    odd = {"spoolfs-run.fifo": lambda lock: os.mkfifo(lock),
           "spoolfs-run.symlock": lambda lock: os.symlink(target / "lock", lock),
           "spoolfs-run.making": lambda lock: (lock.parent / "lock.new").write_bytes(b""),
           "spoolfs-run.foreignlock": lambda lock: (lock.write_bytes(b""),
                                                     os.chown(lock, 65534, 65534))}
    for name, make in odd.items():
        (tmpdir / name).mkdir(mode=0o700)
        make(tmpdir / name / "lock")
    left_alone = ["spoolfs-run.other", "spoolfs-run.link", "spoolfs-run.older"] + list(odd)
    mounts = []
    try:
        first = mount_in(tmpdir, url, tmp_path / "mnt1", tmp_path / "mnt1.log")
        mounts.append(first)
        (mine,) = set(run_dirs(tmpdir)) - set(left_alone)
        # Its serving process replaced, then its supervisor killed: the new serving
        # process serves on, and holds the lock alone.
        serving = first.serving_pid()
        os.kill(serving, signal.SIGKILL)
        wait_until(lambda: first.serving_pid() not in (serving, first.proc.pid),
                   "no new serving process")
        serving = first.serving_pid()
        # It serves (not only started): the supervisor's death cannot end it half-made.
        wait_until(lambda: serving_named(first) == serving, "the new process never served")
        first.proc.kill()
        first.proc.wait()
        assert read_file(first.p(rel)) == expected(store, rel)

        second = mount_in(tmpdir, url, tmp_path / "mnt2", tmp_path / "mnt2.log")
        mounts.append(second)
        now = run_dirs(tmpdir)
        for kept in [mine] + left_alone:
            assert kept in now, kept + " was removed"
        assert (target / "keep").read_bytes() == b"kept"
        assert (older / "namespace.db").exists()
        assert "removed" not in second.stderr()
        # The live mount still serves from its own directory.
        assert read_file(first.p(rel)) == expected(store, rel)
        assert second.unmount() == 0

        # Unmounted with no supervisor left to remove it: the next mount does.
        subprocess.run(["fusermount3", "-u", first.path], check=True)
        wait_until(lambda: gone(serving), "the serving process outlived its unmount")
        first.unmounted = True
        first.log.close()
        assert mine in run_dirs(tmpdir)
        third = mount_in(tmpdir, url, tmp_path / "mnt3", tmp_path / "mnt3.log")
        mounts.append(third)
        assert "removed %s/%s" % (tmpdir, mine) in third.stderr()
        assert third.unmount() == 0
        assert run_dirs(tmpdir) == sorted(left_alone)
    finally:
        for m in mounts:
            if not m.unmounted:
                m.kill()


def test_a_start_refused_late_stops_every_step_begun(store, tmp_path):
    """daemon/main.c's steps[]: a start that fails stops, in reverse, every step begun. A
    --mirror directory that cannot be opened is refused (a usage error, status 2) after the
    run directory, the ledger, the counters, the cache directory and the namespace were
    made: the refused mount leaves no run directory in its TMPDIR, and no mount."""
    store.add("a.bin", 10)
    url = store.write()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = daemon_env()
    env["TMPDIR"] = str(tmpdir)
    proc = subprocess.run([SPOOLFS, "-f", url, str(mnt), "--mirror",
                           "file://%s/" % (tmp_path / "no-such-dir")],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "cannot open its directory" in err, err
    assert not is_mounted(str(mnt))
    assert run_dirs(tmpdir) == []
