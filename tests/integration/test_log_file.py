"""--log-file: lines go to the file (timestamped, mode 0600) instead of stderr, and
SIGUSR1 opens the path again, as logrotate's rename-then-signal scheme needs; SIGUSR1
never ends a mount, with or without a log file."""
import os
import re
import signal
import stat
import subprocess

from conftest import SLOW, SPOOLFS, read_file
from helpers import opened_by, wait_until

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z spoolfs\[\d+\]: (debug|info|warn|error): ")


def text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def test_log_file_gets_the_lines_and_sigusr1_reopens_it(store, mount, tmp_path):
    store.add("a.bin", 5000)
    store.add("b.bin", 6000)
    log = tmp_path / "spoolfs.log"
    m = mount(store.write(), "--log-file", str(log), "--log-level", "debug")
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    wait_until(lambda: "a.bin: GET" in text(log), "a.bin's GET in the log file")
    lines = text(log).splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    assert "a.bin: GET" not in m.stderr()  # the file instead of stderr

    os.rename(log, str(log) + ".1")  # what logrotate does, then it signals
    m.proc.send_signal(signal.SIGUSR1)
    # The supervisor (m.proc) opens the path again, which creates the file, and only then
    # passes the signal on: the new file says nothing of the serving process, whose lines
    # go to the renamed file until it has opened the path too (logrotate's delaycompress
    # keeps that file for them). Wait for the serving process's own descriptor.
    serving = m.serving_pid()
    wait_until(lambda: opened_by(serving, str(log)) and not opened_by(serving, str(log) + ".1"),
             "the serving process's log file opened again")
    assert read_file(m.p("b.bin")) == store.content("b.bin")
    wait_until(lambda: "b.bin: GET" in text(log), "b.bin's GET in the new file")
    assert "b.bin: GET" not in text(str(log) + ".1")
    assert m.proc.poll() is None


def test_sigusr1_never_ends_a_mount(store, mount):
    store.add("a.bin", 100)
    m = mount(store.write())
    m.proc.send_signal(signal.SIGUSR1)
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    assert m.proc.poll() is None


def test_an_unwritable_log_file_fails_the_mount_clearly(store, tmp_path):
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([SPOOLFS, "-f", store.write(), str(tmp_path / "mnt"), "--log-file",
                        str(tmp_path / "no" / "such" / "dir.log")],
                       capture_output=True, timeout=30 * SLOW)
    assert r.returncode == 2
    assert b"--log-file" in r.stderr and b"No such file or directory" in r.stderr
