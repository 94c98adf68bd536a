#!/usr/bin/python3
"""Connections and HTTP/2: a cold walk of small files behind a store 10 ms away, read by
spoolfs over plain HTTP/1.1, over TLS with HTTP/1.1 and over TLS with HTTP/2 (Debian's
nginx in front of the test upstream for both TLS cases, keeping its own connections to the
upstream open), with the connections spoolfs opened and how many answers came by h2.

  sudo /usr/bin/python3 tests/bench/connections.py [--files 1000] [--runs 3]

SPOOLFS_BIN picks the binary (default build/spoolfs). Everything listens on 127.0.0.1.
Prints one row per case: median seconds (min-max), ratio to plain HTTP/1.1, requests,
connections, h2 answers. A figure, not a test: nothing here asserts a time.
"""

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPOOLFS = os.environ.get("SPOOLFS_BIN", os.path.join(ROOT, "build", "spoolfs"))
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what):
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            sys.exit("%s exited with %d" % (what, proc.returncode))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("%s never listened on %d" % (what, port))
            time.sleep(0.05)


def make_tree(store, files, dirs=10):
    """files objects of 1-3 KiB in dirs directories, a v1 manifest with sha256."""
    rnd = random.Random(7)
    per = -(-files // dirs)
    entries = []
    for i in range(files):
        rel = "d%02d/f%05d.c" % (i // per, i)
        data = rnd.randbytes(rnd.randrange(1024, 3073))
        os.makedirs(os.path.join(store, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(store, rel), "wb") as f:
            f.write(data)
        entries.append({"path": rel, "size": len(data), "url": rel,
                        "sha256": hashlib.sha256(data).hexdigest()})
    with open(os.path.join(store, "manifest.json"), "w") as f:
        json.dump({"version": 1, "files": entries}, f)
    return sorted(e["path"] for e in entries)


def start_nginx(state, name, upstream_port, cert, key, h2):
    port = free_port()
    conf = os.path.join(state, name + ".conf")
    with open(conf, "w") as f:
        f.write(
            "daemon off;\nworker_processes 1;\nuser www-data;\npid %(s)s/%(n)s.pid;\n"
            "error_log %(s)s/%(n)s.error.log;\nevents { worker_connections 1024; }\n"
            "http {\naccess_log off;\nclient_body_temp_path %(s)s/%(n)s.body;\n"
            "proxy_temp_path %(s)s/%(n)s.proxy;\nfastcgi_temp_path %(s)s/%(n)s.fastcgi;\n"
            "uwsgi_temp_path %(s)s/%(n)s.uwsgi;\nscgi_temp_path %(s)s/%(n)s.scgi;\n"
            "upstream store { server 127.0.0.1:%(up)d; keepalive 64; }\n"
            "server {\n\tlisten 127.0.0.1:%(port)d ssl%(h2)s;\n"
            "\tssl_certificate %(cert)s;\n\tssl_certificate_key %(key)s;\n"
            "\tkeepalive_requests 100000;\n"
            "\tlocation / {\n\t\tproxy_pass http://store;\n\t\tproxy_http_version 1.1;\n"
            "\t\tproxy_set_header Connection \"\";\n\t}\n}\n}\n"
            % {"s": state, "n": name, "port": port, "cert": cert, "key": key,
               "up": upstream_port, "h2": " http2" if h2 else ""})
    proc = subprocess.Popen([NGINX, "-p", state, "-e", os.path.join(state, name + ".error.log"),
                             "-c", conf], stdin=subprocess.DEVNULL)
    wait_listening(port, proc, "nginx (%s)" % name)
    return proc, port


def stats(mnt):
    with open(os.path.join(mnt, ".spoolfs/stats")) as f:
        text = f.read()
    return {k: float(v) for k, v in re.findall(r"^spoolfs_(\w+) (\S+)$", text, re.M)}


def one_run(url, names, work, extra):
    """Mounts url, reads every file in sorted order, unmounts: (seconds, stats)."""
    mnt = tempfile.mkdtemp(prefix="mnt-", dir=work)
    subprocess.run([SPOOLFS, url, mnt] + extra, check=True)
    try:
        t0 = time.monotonic()
        for rel in names:
            with open(os.path.join(mnt, rel), "rb", buffering=0) as f:
                while f.read(1 << 16):
                    pass
        wall = time.monotonic() - t0
        return wall, stats(mnt)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=False)
        os.rmdir(mnt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--delay-ms", type=int, default=10)
    args = ap.parse_args()
    if not os.access(NGINX, os.X_OK):
        sys.exit("nginx is not installed (tests/deps.sh installs it)")
    work = tempfile.mkdtemp(prefix="spoolfs-connections-", dir="/tmp")
    os.chmod(work, 0o755)  # nginx's workers run as www-data
    procs = []
    try:
        store = os.path.join(work, "store")
        names = make_tree(store, args.files)
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "1", "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                       capture_output=True)
        up_port = free_port()
        up = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests/upstream/upstream.py"),
                               "--root", store, "--port", str(up_port), "--delay-ms",
                               str(args.delay_ms)], stdout=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
        procs.append(up)
        wait_listening(up_port, up, "the test upstream")
        h1, h1_port = start_nginx(work, "tls-h1", up_port, cert, key, h2=False)
        h2, h2_port = start_nginx(work, "tls-h2", up_port, cert, key, h2=True)
        procs += [h1, h2]
        cases = [
            ("HTTP/1.1, plain", "http://127.0.0.1:%d/manifest.json" % up_port, []),
            ("HTTP/1.1 over TLS (nginx)", "https://127.0.0.1:%d/manifest.json" % h1_port,
             ["--ca-file", cert]),
            ("HTTP/2 over TLS (nginx)", "https://127.0.0.1:%d/manifest.json" % h2_port,
             ["--ca-file", cert]),
        ]
        print("%d files of 1-3 KiB, %d ms per request, read in sorted order; %d runs, "
              "median (min-max)" % (args.files, args.delay_ms, args.runs))
        print("| case | seconds | x plain | requests | connections | h2 answers |")
        print("|---|---|---|---|---|---|")
        plain = None
        for label, url, extra in cases:
            walls, last = [], {}
            for _ in range(args.runs):
                wall, last = one_run(url, names, work, extra)
                walls.append(wall)
            med = statistics.median(walls)
            plain = plain or med
            print("| %s | %.3f (%.3f-%.3f) | %.2f | %.0f | %.0f | %.0f |" % (
                label, med, min(walls), max(walls), med / plain,
                last.get("upstream_requests_total", 0),
                last.get("upstream_connections_total", 0),
                last.get("upstream_http2_responses_total", 0)), flush=True)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
