"""`spoolfs reload DIR` from the attacker's side (daemon/reload.c).

The PID reload signals comes from DIR/.spoolfs/stats. `nobody` makes a directory whose
stats name a process of root's (SIGUSR2's default action ends it) and gets root to reload
it: nothing may be signalled. A user may not reload another user's mount either. Root's
reload of its own mount works (test_survive.py shows the reload itself).
"""

import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import SLOW, SPOOLFS, Mount, daemon_env, teardown_mounts
from helpers import wait_until

NOBODY = 65534


def reload(mountpoint, user=None):
    r = subprocess.run([SPOOLFS, "reload", str(mountpoint)], capture_output=True,
                       stdin=subprocess.DEVNULL, env=daemon_env(), timeout=90 * SLOW,
                       user=user, group=user, extra_groups=[] if user is not None else None)
    return r.returncode, r.stdout.decode() + r.stderr.decode()


@pytest.fixture
def victim():
    """A process of root's that SIGUSR2 would end."""
    p = subprocess.Popen(["sleep", "600"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def evil():
    """A directory nobody owns, in a directory root made for the test."""
    base = tempfile.mkdtemp(prefix="spoolfs-hostile-", dir="/tmp")
    os.chmod(base, 0o755)
    d = os.path.join(base, "evil")
    os.mkdir(d)
    os.chown(d, NOBODY, NOBODY)
    yield d
    shutil.rmtree(base, ignore_errors=True)


def plant_stats(d, pid):
    """What nobody writes: a stats file naming pid as the supervisor."""
    text = ("spoolfs_supervisor_pid %d\nspoolfs_serving_pid %d\nspoolfs_reloads_total 0\n"
            "spoolfs_reloads_failed_total 0\n" % (pid, pid))
    subprocess.run(["sh", "-c", "mkdir -p '%s/.spoolfs' && cat > '%s/.spoolfs/stats'" % (d, d)],
                   input=text.encode(), check=True, user=NOBODY, group=NOBODY,
                   extra_groups=[])


def test_reload_of_a_directory_that_is_no_mount_signals_nothing(evil, victim):
    plant_stats(evil, victim.pid)
    rc, out = reload(evil)
    assert rc != 0 and "not a mount point" in out, out
    assert victim.poll() is None, "root's process was signalled"


def test_reload_of_another_kind_of_mount_signals_nothing(evil, victim, tmp_path):
    """A mount that is not spoolfs's (here a tmpfs): its files say what its owner wants."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(mnt)], check=True)
    try:
        os.mkdir(mnt / ".spoolfs")
        (mnt / ".spoolfs" / "stats").write_text(
            "spoolfs_supervisor_pid %d\nspoolfs_serving_pid %d\n" % (victim.pid, victim.pid))
        rc, out = reload(mnt)
        assert rc != 0 and "not a spoolfs mount" in out, out
        assert victim.poll() is None, "root's process was signalled"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_nobody_may_not_reload_roots_mount(store, evil, tmp_path):
    store.add("a.bin", 100)
    # where nobody can reach the mountpoint (tmp_path is root's, 0700)
    m = Mount(store.write(), os.path.join(os.path.dirname(evil), "mnt"), tmp_path / "m.log")
    try:
        before = m.serving_pid()
        rc, out = reload(m.path, user=NOBODY)
        assert rc != 0 and "only it or root may reload" in out, out
        assert m.serving_pid() == before and m.proc.poll() is None
    finally:
        teardown_mounts([m])


def test_root_reloads_its_own_mount(store, mount):
    store.add("a.bin", 100)
    m = mount(store.write())
    before = m.serving_pid()
    rc, out = reload(m.path)
    assert rc == 0 and "replaced by" in out, out
    wait_until(lambda: m.serving_pid() != before, "a new serving process")
    assert m.proc.poll() is None
    assert not any(s in out for s in ("refused", "not a"))
