"""Connections: downloads share the mount's connections. Over HTTP/1.1 a reader's requests
reuse one keep-alive connection; over https to a server that speaks HTTP/2 (Debian's nginx
with TLS and h2, in front of the test upstream) a walk's many requests at once travel as
streams of one connection. The stats count connections opened and answers by HTTP/2.
"""

import os
import re

import pytest

from conftest import read_file
from test_fleet_cache import NGINX, Server, state_dir  # noqa: F401 (fixture)
from test_proxy import free_port
from test_security import make_cert

KiB = 1 << 10


def stats(m):
    with open(m.p(".spoolfs/stats")) as f:
        text = f.read()
    return {k: float(v) for k, v in re.findall(r"^spoolfs_(\w+) (\S+)$", text, re.M)}


def small_tree(store, dirs=4, files=50):
    names = []
    for d in range(dirs):
        for i in range(files):
            names.append(store.add("d%d/f%03d.h" % (d, i), 1 * KiB + 37 * i))
    return names


def read_all(store, m, names):
    for name in names:
        assert read_file(m.p(name)) == store.content(name), name


def start_h2_nginx(state, upstream_port, cert, key):
    """nginx with TLS and HTTP/2 on 127.0.0.1, passing every request to the upstream."""
    port = free_port()
    conf = os.path.join(state, "nginx.conf")
    with open(conf, "w") as f:
        f.write(
            "daemon off;\nworker_processes 1;\nuser www-data;\npid %(s)s/nginx.pid;\n"
            "error_log %(s)s/error.log info;\nevents { worker_connections 256; }\n"
            "http {\naccess_log %(s)s/access.log;\nclient_body_temp_path %(s)s/body;\n"
            "proxy_temp_path %(s)s/proxy;\nfastcgi_temp_path %(s)s/fastcgi;\n"
            "uwsgi_temp_path %(s)s/uwsgi;\nscgi_temp_path %(s)s/scgi;\n"
            "server {\n\tlisten 127.0.0.1:%(port)d ssl http2;\n"
            "\tssl_certificate %(cert)s;\n\tssl_certificate_key %(key)s;\n"
            "\tlocation / {\n\t\tproxy_pass http://127.0.0.1:%(up)d;\n"
            "\t\tproxy_http_version 1.1;\n\t\tproxy_set_header Connection \"\";\n"
            "\t\tproxy_buffering off;\n\t}\n}\n}\n"
            % {"s": state, "port": port, "cert": cert, "key": key, "up": upstream_port})
    return Server("nginx", [NGINX, "-p", state, "-e", os.path.join(state, "error.log"),
                            "-c", conf], port, [os.path.join(state, "error.log")])


def test_a_reader_reuses_one_keep_alive_connection(store, mount):
    """One file after another, no prefetch: 100 requests, one connection (the test upstream
    keeps connections open)."""
    names = small_tree(store, dirs=2)
    m = mount(store.write(), "--prefetch-requests", "0")
    read_all(store, m, names)
    s = stats(m)
    assert s["upstream_requests_total"] >= len(names)
    assert 1 <= s["upstream_connections_total"] <= 2, s
    assert s["upstream_http2_responses_total"] == 0, s


@pytest.mark.skipif(not os.access(NGINX, os.X_OK), reason="nginx is not installed (tests/deps.sh)")
def test_a_walk_over_h2_shares_one_connection(store, mount, tmp_path, state_dir):  # noqa: F811
    """200 small files fetched from mount time by a prefetch list, 32 requests at once,
    through nginx speaking h2 over TLS, and read: every answer comes by HTTP/2, over one
    connection (a burst before the first connection's ALPN answer would otherwise open one
    per request)."""
    names = small_tree(store)
    source = store.write()
    cert, key = make_cert(state_dir)
    os.chmod(key, 0o644)  # nginx's master reads it as root; its workers never do
    nginx = start_h2_nginx(state_dir, store.up.port, cert, key)
    try:
        url = source.replace("http://127.0.0.1:%d/" % store.up.port,
                             "https://127.0.0.1:%d/" % nginx.port)
        # From mount time, a prefetch list asks for all of them, 32 at a time, before any
        # connection exists; the reader then walks them.
        listed = tmp_path / "reads.list"
        listed.write_text("".join("/%s\n" % n for n in names))
        m = mount(url, "--ca-file", cert, "--prefetch-list", str(listed))
        read_all(store, m, names)
        s = stats(m)
        assert s["upstream_requests_total"] >= len(names), s
        assert s["upstream_http2_responses_total"] >= len(names), s
        assert s["upstream_connections_total"] <= 2, s
    except AssertionError as e:
        raise AssertionError("%s\n%s" % (e, nginx.output())) from None
    finally:
        nginx.stop()
