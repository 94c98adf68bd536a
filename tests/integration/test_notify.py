"""Readiness for systemd (spoolfs@.service is Type=notify): spoolfs sends STATUS= lines
while it starts, READY=1 once the mount answers, STOPPING=1 at unmount, to the datagram
socket $NOTIFY_SOCKET names, as systemd would receive them. A mount that fails never says
READY=1. A real socket, a real mount; no systemd needed."""
import os
import socket

import pytest

from conftest import SLOW, Mount, daemon_env, is_mounted


@pytest.fixture
def notify_socket(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30 * SLOW)
    yield sock, path
    sock.close()


def messages_until(sock, want):
    """Datagrams (each a dict of its lines) up to and including the one holding `want`."""
    got = []
    while True:
        data = sock.recv(4096).decode()
        fields = dict(line.split("=", 1) for line in data.splitlines() if "=" in line)
        got.append(fields)
        if want in data.splitlines():
            return got


def test_ready_comes_once_the_mount_answers_and_status_says_what_it_does(
        store, tmp_path, notify_socket):
    sock, path = notify_socket
    store.add("a.bin", 1000)
    store.add("d/b.bin", 2000)
    url = store.write()
    env = daemon_env()
    env["NOTIFY_SOCKET"] = path
    m = Mount(url, tmp_path / "mnt", tmp_path / "mnt.log", env=env)
    try:
        got = messages_until(sock, "READY=1")
        statuses = [g["STATUS"] for g in got if "STATUS" in g]
        assert statuses[0].startswith("fetching http://127.0.0.1:"), statuses
        assert statuses[-1] == "ready: 2 files, 2 directories, 3000 bytes", statuses
        # READY=1 means a reader may go: the mount is there and serves.
        assert is_mounted(m.path)
        with open(m.p("d/b.bin"), "rb") as f:
            assert f.read() == store.content("d/b.bin")
        m.check_clean_exit()
        got = messages_until(sock, "STOPPING=1")
        assert got[-1]["STATUS"] == "unmounting"
    finally:
        m.kill()


def test_a_mount_that_fails_never_says_ready(upstream, tmp_path, notify_socket):
    sock, path = notify_socket
    env = daemon_env()
    env["NOTIFY_SOCKET"] = path
    with pytest.raises(RuntimeError, match="before mounting"):
        Mount(upstream.url("missing.json"), tmp_path / "mnt", tmp_path / "mnt.log", env=env)
    sock.settimeout(0)
    sent = []
    while True:
        try:
            sent.append(sock.recv(4096).decode())
        except BlockingIOError:
            break
    assert sent and sent[0].startswith("STATUS=fetching"), sent
    assert not any("READY=1" in d.splitlines() for d in sent), sent


def test_the_unit_waits_for_readiness():
    unit = os.path.join(os.path.dirname(__file__), "..", "..", "mount-helpers",
                        "spoolfs@.service")
    with open(unit) as f:
        lines = f.read().splitlines()
    assert "Type=notify" in lines
    assert not any(line.startswith("ExecStartPost") for line in lines)
