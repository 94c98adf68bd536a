"""Issue 4, security: hostile paths, credentials in URLs, mount options, TLS verification."""

import hashlib
import json
import os
import re
import sqlite3
import stat
import subprocess

import pytest

from client import Upstream
from conftest import SLOW, SPOOLFS, Store, daemon_env, is_mounted, read_file
from helpers import expected, refused_mount

MiB = 1 << 20


def mount_options(path):
    """(fs type, source, options) of the mount at path, from /proc/mounts."""
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            src, mnt, fstype, opts = line.split()[:4]
            if mnt == path:
                return fstype, src, opts.split(",")
    raise AssertionError("%s is not in /proc/mounts" % path)


def tree(root):
    out = set()
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def run_spoolfs(source, mnt, *args):
    os.makedirs(mnt, exist_ok=True)
    return subprocess.run([SPOOLFS, "-f", str(source), str(mnt)] + list(args), env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60 * SLOW)


# ------------------------------------------------------------------------------ paths


@pytest.mark.parametrize("bad,why", [
    ("../x", 'path has a ".." segment'),
    ("a/../../x", 'path has a ".." segment'),
    ("/tmp/escaped-x", "path is absolute"),
])
def test_escaping_paths_are_refused(store, tmp_path, bad, why):
    store.add("ok.bin", 10)
    url = store.write(lambda m: m["files"].append({"path": bad, "size": 1, "url": "ok.bin"}))
    before = tree(tmp_path)
    cache = tmp_path / "cache"
    proc = run_spoolfs(url, tmp_path / "mnt", "--cache-dir", str(cache))
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0 and why in err and json.dumps(bad) in err, err
    assert not is_mounted(str(tmp_path / "mnt"))
    assert not os.path.exists("/tmp/escaped-x")
    # nothing appeared anywhere but the mount point and the cache dir (index only)
    after = tree(tmp_path) - before
    assert {p for p in after if not p.startswith(("mnt", "cache"))} == set(), after
    assert not os.path.exists(tmp_path / "x")
    if cache.exists():
        assert {n for n in os.listdir(cache) if not n.startswith("index.db")} <= {"spool", "lock", "leases"}
        assert not (cache / "spool").exists() or os.listdir(cache / "spool") == []


def test_odd_but_legal_names_stay_inside(store, mount, tmp_path):
    names = ["a\\b", "..x", "...", "x..", "link -> ..", ".hidden", "sp ace", "%2e%2e", "q?x#y"]
    for i, n in enumerate(names):
        store.add("d/" + n, 1000 + i)
    cache = tmp_path / "cache"
    url = store.write()
    before = tree(tmp_path)
    m = mount(url, "--cache-dir", str(cache))
    assert sorted(os.listdir(m.p("d"))) == sorted(names)
    for n in names:
        assert read_file(m.p("d/" + n)) == expected(store, "d/" + n), n
        assert os.path.islink(m.p("d/" + n)) is False
    # each name reached its own object (percent-encoded in the URL)
    for n in names:
        assert store.up.stats("d/" + n)["gets"] == 1, (n, store.up.stats("d/" + n))
    # the cache dir holds the index and spool files named by a hash of the object's
    # identity, nothing named after an object
    spool = os.listdir(cache / "spool")
    assert all(re.fullmatch(r"[0-9a-f]{64}\.spool", f) for f in spool), spool
    assert {n for n in os.listdir(cache) if n not in ("spool", "lock", "leases") and not n.startswith("index.db")} == set()
    new = tree(tmp_path) - before
    assert {p for p in new if not p.startswith(("mnt", "cache"))} == set(), new


def test_allow_other_is_off_by_default_and_files_are_read_only(store, mount):
    store.add("f.bin", 100)
    m = mount(store.write())
    fstype, src, opts = mount_options(m.path)
    assert fstype == "fuse.spoolfs", fstype
    assert "allow_other" not in opts, opts
    assert "ro" in opts, opts
    assert "nosuid" in opts and "nodev" in opts, opts
    st = os.stat(m.p("f.bin"))
    assert st.st_mode & 0o222 == 0


# ------------------------------------------------------------------------ credentials


def test_credentials_stay_out_of_logs_xattrs_and_mounts(store, mount):
    store.add("plain.bin", 3000)
    store.add("tok.bin", 2000)
    store.add("gone.bin", 1000)
    port = store.up.port
    url_secret = "http://user:secret@127.0.0.1:%d/" % port

    def mutate(man):
        for f in man["files"]:
            if f["path"] == "tok.bin":
                f["url"] = url_secret + "tok.bin?token=SECRET&x=1"
            if f["path"] == "gone.bin":
                f["url"] = url_secret + "nowhere.bin?token=SECRET"

    store.write(mutate)
    m = mount(url_secret + "manifest.json?token=SECRET", "-d", "--retries", "1")
    assert read_file(m.p("plain.bin")) == expected(store, "plain.bin")
    assert read_file(m.p("tok.bin")) == expected(store, "tok.bin")
    with pytest.raises(OSError):
        read_file(m.p("gone.bin"))  # 404: the failure is logged with its URL
    xattrs = {n: os.getxattr(m.p(n), "user.spoolfs.url").decode()
              for n in ("plain.bin", "tok.bin", "gone.bin")}
    assert xattrs["tok.bin"] == "http://127.0.0.1:%d/tok.bin" % port, xattrs
    fstype, src, opts = mount_options(m.path)
    with open("/proc/mounts") as f:
        mounts = f.read()
    m.check_clean_exit()
    log = m.stderr()
    assert "nowhere.bin" in log and "404" in log, log  # the failure was logged, with its URL
    assert "unique:" in log or "opcode" in log or "LOOKUP" in log, "not a -d log"
    for where, text in (("log", log), ("xattrs", json.dumps(xattrs)), ("/proc/mounts", mounts)):
        low = text.lower()
        assert "secret" not in low, "credential in %s:\n%s" % (where, text)
        assert "user:" not in low and "token=" not in low, "credential in %s" % where


# -------------------------------------------------------------------------------- TLS


def make_cert(dirpath):
    cert, key = os.path.join(dirpath, "cert.pem"), os.path.join(dirpath, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_store(tmp_path):
    root = tmp_path / "tls-store"
    root.mkdir()
    cert, key = make_cert(str(tmp_path))
    up = Upstream(root, tls_cert=cert, tls_key=key)
    try:
        yield Store(up), cert
    finally:
        up.stop()


def test_tls_certificate_is_verified(tls_store, mount, tmp_path):
    store, cert = tls_store
    store.add("t/obj.bin", 2 * MiB + 17)
    url = store.write()
    assert url.startswith("https://127.0.0.1:")
    proc = run_spoolfs(url, tmp_path / "refused")
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0, err
    assert "certificate" in err.lower(), err
    assert "cannot fetch manifest %s" % url in err, err
    assert not is_mounted(str(tmp_path / "refused"))
    m = mount(url, "--ca-file", cert)
    # the object comes over TLS too, and resumes over TLS after a drop
    store.up.fault("t/obj.bin", drop_at=MiB + 5)
    assert read_file(m.p("t/obj.bin")) == expected(store, "t/obj.bin")
    st = store.up.stats("t/obj.bin")
    assert st["statuses"] == [200, 206] and st["drops"] == 1, st


def test_no_cache_file_is_readable_by_others(store, mount, tmp_path):
    """The cache's index holds object keys, and keys hold URLs, which may hold credentials
    (user:password@, a presigned query): index.db and its -wal and -shm were created 0644
    in a cache directory others can enter (an admin-made /var/cache/spoolfs is 0755). Every
    file the mount makes there is its owner's alone, and stays so after unmount."""
    a = store.add("a.bin", MiB)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o755)
    m = mount(store.write(), "--cache-dir", str(cache), "--keep-cache")
    assert read_file(m.p(a)) == expected(store, a)

    def open_to_others():
        found = []
        for root, dirs, files in os.walk(cache):
            for name in files:
                mode = os.lstat(os.path.join(root, name)).st_mode
                if mode & 0o077:
                    found.append("%s %o" % (os.path.join(root, name), stat.S_IMODE(mode)))
        return found

    assert (cache / "index.db").exists()
    assert open_to_others() == []
    m.check_clean_exit()
    assert open_to_others() == []


def test_a_relative_ca_file_serves_every_object(tls_store, mount, tmp_path, monkeypatch):
    """The daemon works in "/" (libfuse's daemonising, with -f too): a relative --ca-file
    passed the manifest's fetch, made before that, then failed every object's download
    ("error setting certificate file"), every read EIO. It is made absolute at start."""
    store, cert = tls_store
    store.add("t/obj.bin", MiB)
    url = store.write()
    monkeypatch.chdir(os.path.dirname(cert))
    m = mount(url, "--ca-file", os.path.basename(cert))
    assert read_file(m.p("t/obj.bin")) == expected(store, "t/obj.bin")


def test_a_mountpoint_that_is_not_a_directory_is_refused(store, tmp_path):
    """libfuse mounted on a regular file and the command said 0: a broken mount (stat EIO,
    ls ENOTDIR). It is refused before the manifest is even fetched."""
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    err = refused_mount(store.write(), target)
    assert "not a directory" in err, err
    assert store.up.stats("manifest.json").get("gets", 0) == 0


# ------------------------------------------------------------------ secrets in argv


SECRETS = ("PASSWORD1", "SIGNATURE1", "PROXYPASS1", "MIRRORPASS1")


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def daemons_on(path):
    """pids of the spoolfs processes whose command line names path."""
    path = os.path.realpath(str(path))
    pids = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and b"spoolfs" in os.path.basename(argv[0]) and path.encode() in argv:
            pids.append(int(d))
    return pids


def secret_store(store):
    """A manifest reached with userinfo and a presigned-style query, whose objects (no sha256,
    an etag: their cache keys hold their URLs) are too. Returns the SOURCE and the extra args: a
    proxy with a password (the test upstream itself, which serves a proxied request's
    absolute URL as it would a plain one) and a mirror with one."""
    store.add("a.bin", 300 * 1024, hashed=False)
    store.add("b.bin", 2000, hashed=False)
    port = store.up.port
    base = "http://user:PASSWORD1@127.0.0.1:%d/" % port

    def mutate(man):
        for f in man["files"]:
            f["url"] = base + f["path"] + "?X-Amz-Signature=SIGNATURE1&X-Amz-Expires=60"
            f["etag"] = '"v1"'  # a key "etag:SIZE:ETAG URL", kept by --keep-cache
            store.up.fault(f["path"], etag='"v1"')

    store.write(mutate)
    source = base + "manifest.json?X-Amz-Signature=SIGNATURE1"
    return source, ["-o", "proxy=puser:PROXYPASS1@127.0.0.1:%d" % port,
                    "--mirror", "http://m:MIRRORPASS1@127.0.0.1:%d/" % port]


def assert_no_secret(text, where):
    for secret in SECRETS:
        assert secret not in text, "%s in %s:\n%s" % (secret, where, text)


def test_secrets_leave_the_daemons_command_line(store, mount, tmp_path):
    """/proc/PID/cmdline is readable by every local user for the mount's whole life."""
    source, args = secret_store(store)
    cache = tmp_path / "cache"
    m = mount(source, "--cache-dir", str(cache), "--keep-cache", *args)
    shown = cmdline(m.proc.pid)
    assert_no_secret(shown, "/proc/PID/cmdline")
    assert_no_secret(cmdline(m.serving_pid()), "the serving process's /proc/PID/cmdline")
    # Still says which mount it is, and the secrets' lengths are kept.
    assert m.path in shown and "127.0.0.1:%d/manifest.json" % store.up.port in shown, shown
    assert "proxy=%s@127.0.0.1" % ("*" * len("puser:PROXYPASS1")) in shown, shown
    assert read_file(m.p("a.bin")) == expected(store, "a.bin")
    assert read_file(m.p("b.bin")) == expected(store, "b.bin")
    url = os.getxattr(m.p("a.bin"), "user.spoolfs.url").decode()
    m.check_clean_exit()
    log = m.stderr()
    assert "held a password or a signed URL query" in log, log
    assert_no_secret(log + url, "the log or user.spoolfs.url")
    # The kept cache: its index.db keys name the objects without their secrets, nor a hash
    # of a URL with its password (a weak one could be guessed back from it offline).
    full = [hashlib.sha256(("http://user:PASSWORD1@127.0.0.1:%d/%s?X-Amz-Signature=SIGNATURE1"
                            "&X-Amz-Expires=60" % (store.up.port, p)).encode()).hexdigest()
            for p in ("a.bin", "b.bin")]
    db = sqlite3.connect(str(cache / "index.db"))
    dump = "\n".join(db.iterdump())
    db.close()
    assert "127.0.0.1:%d/a.bin#" % store.up.port in dump, dump  # the keys checked are there
    for h in full:
        assert h not in dump, dump
    for d, _, files in os.walk(cache):
        for n in files:
            with open(os.path.join(d, n), "rb") as f:
                data = f.read()
            for secret in SECRETS:
                assert secret.encode() not in data, "%s in %s" % (secret, n)
            assert b"user:" not in data, n
    # ...and still serve the next session without a request.
    store.up.reset()
    m2 = mount(source, "--cache-dir", str(cache), *args, name="again")
    assert read_file(m2.p("a.bin")) == expected(store, "a.bin")
    assert store.up.stats("a.bin").get("gets", 0) == 0


def test_passwords_with_commas_leave_the_command_line(store, mount):
    """A ',' is legal unescaped in a password: masking must not stop at it."""
    store.add("a.bin", 2000)
    port = store.up.port
    source = store.write().replace("http://", "http://alice:pa,PASSWORD1@", 1)
    m = mount(source, "--proxy", "http://bob:se,PROXYPASS1@127.0.0.1:%d" % port)
    shown = cmdline(m.proc.pid)
    assert_no_secret(shown, "/proc/PID/cmdline")
    assert_no_secret(cmdline(m.serving_pid()), "the serving process's /proc/PID/cmdline")
    assert "127.0.0.1:%d/manifest.json" % port in shown, shown
    assert read_file(m.p("a.bin")) == expected(store, "a.bin")
    m.check_clean_exit()
    assert "held a password or a signed URL query" in m.stderr(), m.stderr()


def test_secrets_leave_the_daemonised_command_line(store, tmp_path):
    """Without -f the daemon forks: the child that serves the mount hides them too."""
    source, args = secret_store(store)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([SPOOLFS, source, str(mnt)] + args, env=daemon_env(),
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=60 * SLOW)
    try:
        assert r.returncode == 0, r.stderr
        assert "held a password or a signed URL query" in r.stderr.decode(), r.stderr
        pids = daemons_on(mnt)
        # The supervisor and its serving process (doc/survive.md): neither shows a secret.
        assert len(pids) == 2, pids
        for pid in pids:
            assert_no_secret(cmdline(pid), "the daemon's /proc/PID/cmdline")
        assert read_file(mnt / "b.bin") == expected(store, "b.bin")
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        for pid in daemons_on(mnt):
            os.kill(pid, 9)


def test_netrc_file_keeps_the_password_off_the_command_line(store, mount, tmp_path):
    store.add("a.bin", 5000)
    url = store.write()
    for path in ("manifest.json", "a.bin"):
        store.up.fault(path, basic_auth="alice:NETRCPASS1")
    err = refused_mount(url, tmp_path / "none")
    assert "401" in err, err  # the upstream does require it
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login alice password NETRCPASS1\n")
    netrc.chmod(0o600)
    m = mount(url, "--netrc-file", str(netrc))
    assert read_file(m.p("a.bin")) == expected(store, "a.bin")
    assert 401 not in store.up.stats("a.bin")["statuses"]
    assert "NETRCPASS1" not in cmdline(m.proc.pid)
    assert "NETRCPASS1" not in cmdline(m.serving_pid())


def test_a_missing_netrc_file_is_refused(store, tmp_path):
    err = refused_mount(store.write(), tmp_path / "mnt", "--netrc-file", "no-such-netrc")
    # A relative path is resolved where the mount started: the line names what was looked at.
    assert re.search(r"--netrc-file /\S*/no-such-netrc: No such file", err), err


def test_a_kept_cache_of_before_forgets_keys_that_hold_secrets(store, mount, tmp_path):
    """A cache kept by a spoolfs that stored whole URLs in its keys: those rows match no
    object any more and go, with their spool files, at the next first mount; the object
    is fetched afresh."""
    source, args = secret_store(store)
    cache = tmp_path / "cache"
    m = mount(source, "--cache-dir", str(cache), "--keep-cache", *args)
    assert read_file(m.p("b.bin")) == expected(store, "b.bin")
    m.check_clean_exit()
    url = source.replace("manifest.json?X-Amz-Signature=SIGNATURE1",
                         "a.bin?X-Amz-Signature=SIGNATURE1&X-Amz-Expires=60")
    old_key = 'etag:%d:"v1" %s' % (300 * 1024, url)
    db = sqlite3.connect(str(cache / "index.db"))
    with db:
        db.execute("INSERT INTO spool_object(key, complete, size, last_used)"
                   " VALUES(?, 1, ?, 1)", (old_key, 300 * 1024))
        db.execute("INSERT INTO spool_range(key, off_start, off_end) VALUES(?, 0, ?)",
                   (old_key, 300 * 1024))
    db.close()
    old_spool = cache / "spool" / (hashlib.sha256(old_key.encode()).hexdigest() + ".spool")
    old_spool.write_bytes(expected(store, "a.bin"))
    store.up.reset()
    m = mount(source, "--cache-dir", str(cache), "--keep-cache", *args, name="again")
    assert read_file(m.p("a.bin")) == expected(store, "a.bin")
    assert read_file(m.p("b.bin")) == expected(store, "b.bin")
    assert store.up.stats("a.bin")["gets"] == 1 and store.up.stats("b.bin").get("gets", 0) == 0
    m.check_clean_exit()
    db = sqlite3.connect(str(cache / "index.db"))
    keys = [k for (k,) in db.execute("SELECT key FROM spool_object")]
    db.close()
    assert keys and not any("PASSWORD1" in k or "SIGNATURE1" in k for k in keys), keys
    assert not old_spool.exists()
