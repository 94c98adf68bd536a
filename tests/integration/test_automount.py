"""An fstab line with x-systemd.automount: mounted on first access, unmounted when idle
(doc/automount.md). systemd is not PID 1 here (nor in most containers), so the automount
unit's autofs trigger and idle timer cannot run; the test does the rest of the sequence as
systemd does: systemd-fstab-generator turns the line into units, the .mount unit's command
mounts (what the first access starts: `mount WHAT WHERE -t TYPE -o OPTIONS`), a read, the
idle expiry's `umount WHERE` and the daemon's exit, then the next access's mount, a fresh
session that fetches again."""

import configparser
import os
import subprocess

import pytest

from conftest import SLOW
from test_mounting import (assert_ready_and_backgrounded, assert_unmounts_cleanly,  # noqa: F401
                           mnt, on_std_path, run_mount)

GENERATOR = "/usr/lib/systemd/system-generators/systemd-fstab-generator"


def unit(path):
    """A unit file's sections; a key given twice keeps its last value."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(path)
    return parser


@pytest.mark.skipif(not os.access(GENERATOR, os.X_OK), reason="no systemd-fstab-generator")
def test_an_automount_line_mounts_on_access_and_unmounts_when_idle(store, mnt, tmp_path,
                                                                   on_std_path):
    store.add("tools/a.bin", 1 << 20)
    url = store.write()
    fstab = tmp_path / "fstab"
    fstab.write_text("%s %s fuse.spoolfs ro,_netdev,allow_other,noauto,x-systemd.automount,"
                     "x-systemd.idle-timeout=10min 0 0\n" % (url, mnt))
    dirs = [tmp_path / d for d in ("normal", "early", "late")]
    for d in dirs:
        d.mkdir()
    r = subprocess.run([GENERATOR] + [str(d) for d in dirs], capture_output=True, text=True,
                       env=dict(os.environ, SYSTEMD_FSTAB=str(fstab)), timeout=30 * SLOW)
    assert r.returncode == 0, r.stderr
    name = subprocess.run(["systemd-escape", "--path", str(mnt)], capture_output=True,
                          text=True, check=True).stdout.strip()
    auto = unit(dirs[0] / (name + ".automount"))["Automount"]
    assert auto["Where"] == str(mnt) and auto["TimeoutIdleSec"] == "10min"
    # At boot the automount is pulled in (a network filesystem: by remote-fs.target), never
    # the mount itself: noauto keeps it for the first access.
    assert (dirs[0] / "remote-fs.target.requires" / (name + ".automount")).exists()
    assert not (dirs[0] / "remote-fs.target.requires" / (name + ".mount")).exists()
    m = unit(dirs[0] / (name + ".mount"))["Mount"]
    assert (m["What"], m["Where"], m["Type"]) == (url, str(mnt), "fuse.spoolfs")
    command = ["mount", m["What"], m["Where"], "-t", m["Type"], "-o", m["Options"]]

    # The first access: systemd starts the .mount unit, which returns once spoolfs answers.
    r = run_mount(command)
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "tools/a.bin")
    # Idle for TimeoutIdleSec: systemd stops the .mount unit with umount.
    assert_unmounts_cleanly(mnt, ["umount"])
    # The next access mounts again: a new session, which fetches the object again.
    r = run_mount(command)
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "tools/a.bin")
    assert store.up.stats("tools/a.bin")["bytes"] == 2 << 20
    assert_unmounts_cleanly(mnt, ["umount"])
