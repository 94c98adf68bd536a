"""The fleet caches of mount-helpers/ in front of the test upstream, as operators run them:
Debian's nginx (a caching reverse proxy with the slice module) and squid (a caching forward
proxy, given to spoolfs as --proxy). Four mounts in a row, each with a fresh cache
directory as four runners would have, read every object: whole small objects, objects
fetched whole in one request, large ones fetched in ranged 8 MiB parts, and sparse reads
of a large one. The mounts read the right bytes and the upstream sends each object's bytes
once in all.

The servers run in the foreground on 127.0.0.1 with configs derived from the shipped ones
(only the addresses, paths and logs change: each change is checked to apply), and their
state lives in a directory of the test's own. Skipped only when nginx or squid is not
installed (tests/deps.sh installs both).
"""

import hashlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from conftest import ROOT, SLOW, Mount, daemon_env, teardown_mounts
from test_proxy import PROXY_VARS, free_port

# nosan: what these check is the shipped configs of nginx and squid (each byte sent once);
# the daemon's part, whole and ranged reads, through --proxy too, runs under the sanitizers
# in test_core.py, test_chunks.py and test_proxy.py.

MiB = 1 << 20
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SQUID = shutil.which("squid") or "/usr/sbin/squid"
HELPERS = os.path.join(ROOT, "mount-helpers")
RUNNERS = 4
# Every request shape of spoolfs (see doc/fleet-cache.md): whole small objects; an object
# under 12 MiB fetched whole in one request (two slices); ranged 8 MiB parts; sparse reads.
OBJECTS = {"small.bin": 100000, "mid.bin": 10 * MiB, "big.bin": 30 * MiB,
           "sparse.bin": 20 * MiB}


def derive(shipped, changes):
    """The shipped config's text with each (pattern, replacement) applied exactly once."""
    with open(os.path.join(HELPERS, shipped)) as f:
        text = f.read()
    for pattern, replacement in changes:
        text, n = re.subn(pattern, replacement, text, flags=re.M)
        assert n == 1, "%s no longer has %r: update the test's derivation" % (shipped, pattern)
    return text


class Server:
    """A cache server in the foreground, listening on 127.0.0.1:port once started."""

    def __init__(self, name, cmd, port, log_paths):
        self.name, self.port, self.log_paths = name, port, log_paths
        self.out_path = log_paths[0] + ".out"
        self.out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20 * SLOW
        while True:
            assert self.proc.poll() is None, "%s exited:\n%s" % (name, self.output())
            assert time.monotonic() < deadline, "%s never listened:\n%s" % (name, self.output())
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)

    def output(self):
        text = ""
        for p in self.log_paths + [self.out_path]:
            if os.path.exists(p):
                with open(p, "rb") as f:
                    text += "== %s\n%s" % (p, f.read().decode(errors="replace")[-4000:])
        return text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20 * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()


@pytest.fixture
def state_dir():
    """The servers' own directory, under /tmp and not pytest's (0700) one: their workers
    run as an unprivileged user, which must reach it."""
    path = tempfile.mkdtemp(prefix="spoolfs-fleet-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_nginx(state, upstream_port):
    port = free_port()
    store = "127.0.0.1:%d" % upstream_port
    site = derive("nginx-fleet-cache.conf", [
        (r"^proxy_cache_path /var/cache/nginx/spoolfs ", "proxy_cache_path %s/cache " % state),
        (r"server store\.example\.internal:80;", "server %s;" % store),
        (r"^\tlisten 8080;", "\tlisten 127.0.0.1:%d;" % port),
        (r"allow 10\.0\.0\.0/8;", "allow 127.0.0.1;"),
        (r"proxy_set_header Host store\.example\.internal;", "proxy_set_header Host %s;" % store),
    ])
    conf = os.path.join(state, "nginx.conf")
    with open(conf, "w") as f:
        # The site file goes in http { } as conf.d files do; the rest keeps nginx to state.
        # www-data: the user of Debian's nginx workers.
        f.write("daemon off;\nworker_processes 1;\nuser %s;\npid %s/nginx.pid;\n"
                "error_log %s/error.log info;\nevents { worker_connections 256; }\n"
                "http {\naccess_log %s/access.log;\nclient_body_temp_path %s/body;\n"
                "proxy_temp_path %s/proxy;\nfastcgi_temp_path %s/fastcgi;\n"
                "uwsgi_temp_path %s/uwsgi;\nscgi_temp_path %s/scgi;\n%s\n}\n"
                % (("www-data",) + (state,) * 3 + (state,) * 5 + (site,)))
    return Server("nginx", [NGINX, "-p", state, "-e", os.path.join(state, "error.log"),
                            "-c", conf], port, [os.path.join(state, "error.log")])


def start_squid(state, upstream_port):
    port = free_port()
    conf = os.path.join(state, "squid.conf")
    text = derive("squid-fleet-cache.conf", [
        (r"^http_port 3128$", "http_port 127.0.0.1:%d" % port),
        (r"^acl runners src 10\.0\.0\.0/8$", "acl runners src 127.0.0.1/32"),
        # Memory only: the objects fit, and a disk cache would need `squid -z` first.
        (r"^cache_dir aufs .*$", ""),
    ])
    text += ("pid_filename none\ncache_log %s/cache.log\naccess_log %s/access.log\n"
             "coredump_dir %s\nshutdown_lifetime 0 seconds\n" % (state, state, state))
    with open(conf, "w") as f:
        f.write(text)
    proxy = pwd.getpwnam("proxy")  # squid's cache_effective_user on Debian
    os.chown(state, proxy.pw_uid, proxy.pw_gid)
    return Server("squid", [SQUID, "-N", "-f", conf], port,
                  [os.path.join(state, "cache.log")])


def sha_of(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def read_as_a_runner(store, m):
    """What a job does: a few sparse reads of an archive-like object (its end, one record),
    then every object read whole."""
    with open(m.p("sparse.bin"), "rb", buffering=0) as f:
        for off in (OBJECTS["sparse.bin"] - 65536, 9 * MiB + 12345):
            f.seek(off)
            assert f.read(4096) == store.content("sparse.bin")[off:off + 4096]
    for p in OBJECTS:
        assert sha_of(m.p(p)) == store.sha256(p), p


def runners_in_a_row(store, tmp_path, source, args=(), env=None):
    for i in range(RUNNERS):
        cache = tmp_path / ("cache%d" % i)  # fresh: nothing local from the runner before
        m = Mount(source, tmp_path / "mnt", tmp_path / ("mnt%d.log" % i),
                  ["--cache-dir", str(cache)] + list(args), env=env)
        try:
            read_as_a_runner(store, m)
        finally:
            teardown_mounts([m])
    for p, size in OBJECTS.items():
        st = store.up.stats(p)
        assert st["bytes"] == size, "%s: the upstream sent %d bytes of %d in %d GETs" % (
            p, st["bytes"], size, st["gets"])


def fill(store):
    for p, size in OBJECTS.items():
        store.add(p, size)
    return store.write()


@pytest.mark.nosan
@pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason="nginx is not installed (tests/deps.sh)")
def test_nginx_slices_send_each_byte_once_for_four_runners(store, tmp_path, state_dir):
    source = fill(store)
    nginx = start_nginx(state_dir, store.up.port)
    try:
        runners_in_a_row(store, tmp_path,
                         source.replace(":%d/" % store.up.port, ":%d/" % nginx.port))
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, nginx.output())) from None
    finally:
        nginx.stop()


@pytest.mark.nosan
@pytest.mark.skipif(not os.access(SQUID, os.X_OK), reason="squid is not installed (tests/deps.sh)")
def test_squid_as_proxy_sends_each_byte_once_for_four_runners(store, tmp_path, state_dir):
    source = fill(store)
    squid = start_squid(state_dir, store.up.port)
    env = daemon_env()
    for var in PROXY_VARS:  # no_proxy would send 127.0.0.1 around the proxy
        env.pop(var, None)
    try:
        runners_in_a_row(store, tmp_path, source,
                         ["--proxy", "http://127.0.0.1:%d" % squid.port], env=env)
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, squid.output())) from None
    finally:
        squid.stop()
