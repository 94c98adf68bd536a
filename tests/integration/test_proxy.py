"""Reads through a real forward proxy (Debian's tinyproxy) on 127.0.0.1.

The proxy runs in the foreground with a config of the test's own (its port, its access log)
and is stopped at teardown. Each test asserts both ends: the proxy's log lists the object
URLs, and the test upstream counted the requests and bytes.

conftest's daemon_env() strips http_proxy & co. These tests set the variables they mean
explicitly and remove no_proxy/NO_PROXY, which would make libcurl bypass the proxy for
127.0.0.1.
"""

import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import SLOW, Mount, daemon_env, read_file, teardown_mounts

MiB = 1 << 20
TINYPROXY = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
              "all_proxy", "no_proxy", "NO_PROXY")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    def __init__(self, tmp_path):
        self.log_path = tmp_path / "tinyproxy.log"
        conf = tmp_path / "tinyproxy.conf"
        for _ in range(5):
            self.port = free_port()
            conf.write_text(
                "Port %d\nListen 127.0.0.1\nTimeout 60\nLogFile \"%s\"\nLogLevel Info\n"
                "PidFile \"%s\"\nMaxClients 100\nAllow 127.0.0.1\nDisableViaHeader Yes\n"
                % (self.port, self.log_path, tmp_path / "tinyproxy.pid"))
            self.out = open(tmp_path / "tinyproxy.out", "wb")
            # -d: stay in the foreground, so the fixture owns the process.
            self.proc = subprocess.Popen([TINYPROXY, "-d", "-c", str(conf)],
                                         stdin=subprocess.DEVNULL, stdout=self.out,
                                         stderr=subprocess.STDOUT)
            if self._wait_listening():
                self.url = "http://127.0.0.1:%d" % self.port
                return
            self.stop()  # the port was taken in between: try another
        raise RuntimeError("tinyproxy did not start:\n%s" % self.output())

    def _wait_listening(self):
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def output(self):
        text = ""
        for p in (self.log_path, self.out.name):
            if os.path.exists(p):
                with open(p, "rb") as f:
                    text += f.read().decode(errors="replace")
        return text

    def requests(self):
        """The URLs of the requests the proxy forwarded, in order."""
        if not os.path.exists(self.log_path):
            return []
        with open(self.log_path, "rb") as f:
            text = f.read().decode(errors="replace")
        return re.findall(r"Request \(file descriptor \d+\): GET (\S+) HTTP/", text)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.out.close()


@pytest.fixture
def proxy(tmp_path):
    if not os.access(TINYPROXY, os.X_OK):
        pytest.skip("tinyproxy is not installed (apt-get install tinyproxy; tests/deps.sh)")
    p = Proxy(tmp_path)
    yield p
    p.stop()


@pytest.fixture
def proxied_mount(tmp_path):
    """mount(source, env_extra, *args) -> Mount with exactly the proxy variables given."""
    mounts = []

    def make(source, env_extra, *args):
        env = daemon_env()
        for var in PROXY_VARS:
            env.pop(var, None)
        env.update(env_extra)
        m = Mount(source, tmp_path / "mnt", tmp_path / "mnt.log", args, env=env)
        mounts.append(m)
        return m

    yield make
    teardown_mounts(mounts)


def check_went_through_proxy(store, proxy, m, paths):
    for p in paths:
        assert read_file(m.p(p)) == store.content(p)
    seen = proxy.requests()
    for p in ["manifest.json"] + list(paths):
        assert store.up.url(p) in seen, "%s not in the proxy's log: %r" % (p, seen)
        st = store.up.stats(p)
        assert st["gets"] >= 1, st
    for p in paths:
        assert store.up.stats(p)["bytes"] == len(store.content(p))
    # Every request the daemon sent went through the proxy.
    total = store.up.stats()["total_gets"]
    assert len(seen) == total, (seen, total)
    with open(m.p(".spoolfs/stats")) as f:
        stats = dict(line.split() for line in f if line.strip() and not line.startswith("#"))
    assert int(stats["spoolfs_upstream_requests_total"]) == total - 1  # minus the manifest
    assert int(stats["spoolfs_upstream_bytes_total"]) == sum(len(store.content(p))
                                                            for p in paths)


def test_http_proxy_variable(store, proxy, proxied_mount):
    paths = [store.add("a/one.bin", 2 * MiB), store.add("two.txt", 5000, hashed=False)]
    m = proxied_mount(store.write(), {"http_proxy": proxy.url})
    check_went_through_proxy(store, proxy, m, paths)


def test_proxy_option(store, proxy, proxied_mount):
    paths = [store.add("a/one.bin", 2 * MiB), store.add("b/three.bin", 300 * 1024)]
    m = proxied_mount(store.write(), {}, "--proxy", proxy.url)
    check_went_through_proxy(store, proxy, m, paths)


def test_proxy_mount_option(store, proxy, proxied_mount):
    paths = [store.add("x.bin", MiB)]
    m = proxied_mount(store.write(), {}, "-o", "proxy=" + proxy.url)
    check_went_through_proxy(store, proxy, m, paths)


def test_proxy_option_overrides_http_proxy_variable(store, proxy, proxied_mount):
    paths = [store.add("x.bin", MiB)]
    # The variable names a port where nothing listens: only --proxy can make this work.
    m = proxied_mount(store.write(), {"http_proxy": "http://127.0.0.1:%d" % free_port()},
                      "--proxy", proxy.url)
    check_went_through_proxy(store, proxy, m, paths)


def test_without_proxy_nothing_goes_through_it(store, proxy, proxied_mount):
    paths = [store.add("x.bin", MiB)]
    m = proxied_mount(store.write(), {})
    assert read_file(m.p(paths[0])) == store.content(paths[0])
    assert proxy.requests() == []
    assert store.up.stats(paths[0])["gets"] == 1


def test_proxy_option_overrides_no_proxy_variable(store, proxy, proxied_mount):
    paths = [store.add("x.bin", MiB)]
    m = proxied_mount(store.write(), {"no_proxy": "127.0.0.1,localhost",
                                      "NO_PROXY": "127.0.0.1,localhost"},
                      "--proxy", proxy.url)
    check_went_through_proxy(store, proxy, m, paths)
