"""`spoolfs publish SRC s3://BUCKET/PREFIX` (doc/publish.md), against the test S3 server that
verifies every SigV4 signature and checks x-amz-checksum-sha256 (tests/upstream/s3_upstream.py):
objects first, only those the store lacks, each PUT checked by the store; the manifest last;
a killed publish resumed; --if-absent probed, not assumed. Each tree is mounted from the
bucket and compared with its source.
"""

import base64
import errno
import glob
import hashlib
import os
import pty
import re
import signal
import tempfile
import subprocess
import sys

import pytest

from conftest import ROOT, SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, read_file
from helpers import wait_until
from test_s3 import AK, BUCKET, SECRET, aws_env, s3_server, s3rver_installed  # noqa: F401

sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
import s3rver  # noqa: E402


@pytest.fixture(autouse=True)
def own_tmpdir(tmp_path, monkeypatch):
    """Every publish stages under this test's own TMPDIR (daemon_env copies it), and none
    leaves its stage behind: an interrupted one removes it, a killed one's is swept by the
    next run."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield tmp
    assert stages(tmp) == []


def stages(tmp):
    return glob.glob(os.path.join(str(tmp), "spoolfs-publish.*"))


def make_tree(src, big=3 << 20):
    (src / "inc").mkdir(parents=True)
    for i in range(20):
        (src / ("inc/h%02d.h" % i)).write_bytes(b"#define H%d %d\n" % (i, i) * (i + 1))
    (src / "big.bin").write_bytes(os.urandom(big))
    (src / "tool").write_bytes(os.urandom(200 << 10))
    os.chmod(src / "tool", 0o755)
    os.symlink("big.bin", src / "big-link")
    (src / "empty").mkdir()


def start(s3_server, tmp_path, big=3 << 20):
    """A verifying S3 server with an empty bucket, and a tree to publish."""
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    src = tmp_path / "src"
    make_tree(src, big)
    return s3, src


# Version 2, as these tests check and mount (test_publish_compress.py: version 3).
PUBLISH = [SPOOLFS, "publish", "--no-compress"]


def publish(s3, src, dest, *args, check=True, env=None, compress=False):
    """Runs `spoolfs publish src dest --endpoint ...`: (status, stdout, stderr). Its own
    blocks written to disk go to LAST["blocks"] (wait4: no other child's are counted).
    Without compress, --no-compress (version 2, as these tests check and mount)."""
    args = list(args) + ([] if compress else ["--no-compress"])
    with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:
        proc = subprocess.Popen([SPOOLFS, "publish", str(src), dest, "--endpoint",
                                 s3.endpoint] + [str(a) for a in args], stdout=o, stderr=e,
                                env=env or daemon_env())
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            proc.returncode = 0  # reaped above: Popen must not wait for it again
        o.seek(0)
        e.seek(0)
        out, err = o.read().decode(), e.read().decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    LAST["blocks"] = usage.ru_oublock - startup_blocks()
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    if check:
        assert code == 0, err
    return code, out, err


def compare(root, src):
    """The mounted tree is the source: names, bytes, links, modes."""
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        mdir = os.path.join(root, rel)
        assert sorted(os.listdir(mdir)) == sorted(dirs + files), rel
        for f in files:
            p, m = os.path.join(dirpath, f), os.path.join(mdir, f)
            if os.path.islink(p):
                assert os.readlink(m) == os.readlink(p)
            else:
                assert read_file(m) == open(p, "rb").read(), m
                assert os.stat(m).st_mode & 0o111 == os.stat(p).st_mode & 0o111


def object_keys(s3, prefix):
    return sorted(k for k in s3.objects(BUCKET) if k.startswith(prefix + "/objects/"))


LAST = {}


def startup_blocks():
    """What the binary writes to disk doing nothing (a sanitizer's runtime may: ThreadSanitizer
    writes about 1,000 blocks at start)."""
    if "startup" not in LAST:
        proc = subprocess.Popen([SPOOLFS, "--version"], stdout=subprocess.DEVNULL,
                                env=daemon_env())
        try:
            LAST["startup"] = os.wait4(proc.pid, 0)[2].ru_oublock
        finally:
            proc.returncode = 0
    return LAST["startup"]


def puts(s3):
    return s3.stats()["total_puts"]


def test_publish_mount_republish_change(s3_server, mount, tmp_path):
    s3, src = start(s3_server, tmp_path)
    _, out, _ = publish(s3, src, "s3://%s/rel" % BUCKET)
    # The stage (in /var/tmp) got a copy of every file: more than 3 MiB, fsync'd.
    staged = LAST["blocks"]
    assert staged >= (3 << 20) // 512, staged
    keys = object_keys(s3, "rel")
    # Every object, then the manifest: one PUT each, no more.
    assert puts(s3) == len(keys) + 1, out
    assert "%d objects" % len(keys) in out
    m = mount("s3://%s/rel" % BUCKET, "--manifest", "manifest.json", "--endpoint",
              s3.endpoint)
    compare(m.p(), src)
    m.unmount()
    # Objects are immutable for every cache, the manifest is not.
    status, headers, _ = s3.head(BUCKET, keys[0], {"x-amz-checksum-mode": "ENABLED"})
    assert status == 200 and headers["cache-control"] == "public, max-age=31536000, immutable"
    # The store was given each object's sha256 to check, and keeps it.
    digest = bytes.fromhex(keys[0].rsplit("/", 1)[1])
    assert headers["x-amz-checksum-sha256"] == base64.b64encode(digest).decode()
    status, headers, _ = s3.head(BUCKET, "rel/manifest.json")
    assert status == 200 and headers["cache-control"] == "no-cache"

    # Again, unchanged: nothing but the manifest goes up, and nothing is copied into the
    # stage (the store was listed first: each file is hashed only).
    before = puts(s3)
    _, out, _ = publish(s3, src, "s3://%s/rel" % BUCKET)
    assert puts(s3) == before + 1
    assert LAST["blocks"] < staged // 8, (LAST["blocks"], staged)
    assert "0 objects" in out and "%d already there" % len(keys) in out

    # A changed file: its object alone (and the manifest).
    (src / "tool").write_bytes(os.urandom(100 << 10))
    before = puts(s3)
    _, out, _ = publish(s3, src, "s3://%s/rel" % BUCKET)
    assert puts(s3) == before + 2, out
    assert "1 objects" in out
    m = mount("s3://%s/rel" % BUCKET, "--manifest", "manifest.json", "--endpoint",
              s3.endpoint, name="mnt2")
    compare(m.p(), src)
    # Every request of all three publishes and the mounts was signed right.
    assert s3.auth_failures() == []


def test_dry_run_uploads_nothing(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    _, out, _ = publish(s3, src, "s3://%s/p" % BUCKET, "--dry-run")
    assert puts(s3) == 0
    assert "would upload s3://%s/p/objects/" % BUCKET in out
    assert "would upload s3://%s/p/manifest.json (manifest, last)" % BUCKET in out
    assert s3.objects(BUCKET) in ([], {})


def test_a_killed_publish_resumes(s3_server, mount, tmp_path):
    """A publish killed while an object's PUT is held by the server's gate stores no part of
    that object and no manifest; the rerun uploads only what is missing."""
    s3, src = start(s3_server, tmp_path)
    big = BUCKET + "/r/objects/%s" % (lambda h: h[:2] + "/" + h)(
        hashlib.sha256((src / "big.bin").read_bytes()).hexdigest())
    s3.fault(big, gate=True)
    proc = subprocess.Popen(PUBLISH + [str(src), "s3://%s/r" % BUCKET, "--endpoint",
                             s3.endpoint, "--uploads", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=daemon_env())
    try:
        # Largest first: the big file's PUT is the first, held once its body arrived.
        s3.wait_for(lambda s: s["gated"] == 1, timeout=60 * SLOW, path=big)
    finally:
        proc.kill()
        proc.communicate()
    wait_until(lambda: s3.stats(big)["gated"] == 0, "the held PUT ended")
    s3.clear(big)
    assert big.split("/", 1)[1] not in s3.objects(BUCKET)
    assert "r/manifest.json" not in s3.objects(BUCKET)
    stored = len(object_keys(s3, "r"))
    before = puts(s3)
    _, out, _ = publish(s3, src, "s3://%s/r" % BUCKET)
    total = len(object_keys(s3, "r"))
    assert puts(s3) - before == total - stored + 1
    assert "%d already there" % stored in out
    m = mount("s3://%s/r" % BUCKET, "--manifest", "manifest.json", "--endpoint", s3.endpoint)
    compare(m.p(), src)
    assert s3.auth_failures() == []


def test_an_object_removed_while_publishing_keeps_the_manifest_back(s3_server, tmp_path):
    """An object the first listing showed (so neither staged nor sent) that another's
    cleanup removes while the publish runs is found missing by the listing before the
    manifest: the manifest is not written (the old one stays), the object is named."""
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    publish(s3, src, "s3://%s/g" % BUCKET)
    old_manifest = s3.get(BUCKET, "g/manifest.json")[2]
    tool = big_key(src, "g", "tool")
    (src / "big.bin").write_bytes(os.urandom(1 << 20))
    big = BUCKET + "/" + big_key(src, "g")
    s3.fault(big, gate=True)
    proc = subprocess.Popen(PUBLISH + [str(src), "s3://%s/g" % BUCKET, "--endpoint",
                             s3.endpoint, "--uploads", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=daemon_env())
    try:
        # The new object's PUT is held: the first listing is long done. tool's object,
        # known to it, goes now.
        s3.wait_for(lambda st: st["gated"] == 1, timeout=60 * SLOW, path=big)
        s3.delete(BUCKET, tool)
        s3.release(big)
    finally:
        err = ended(proc, timeout=120)
    assert proc.returncode == 1, err
    assert tool in err and "missing from the store" in err, err
    assert s3.get(BUCKET, "g/manifest.json")[2] == old_manifest
    # The rerun sends it again, then the manifest.
    s3.clear(big)
    publish(s3, src, "s3://%s/g" % BUCKET)
    assert tool in s3.objects(BUCKET)
    assert s3.get(BUCKET, "g/manifest.json")[2] != old_manifest


def default_signals():
    """preexec_fn: SIGINT and SIGTERM at their defaults in the publish. A signal ignored here
    stays ignored across exec, and the publish keeps an inherited SIG_IGN (publish/s3.c):
    with pytest started as a background job of a script (SIGINT ignored), every SIGINT the
    tests send went unseen and each such test waited out its timeout (30-120 s) to fail."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def at_the_gate(s3, src, dest, *args, preexec_fn=default_signals):
    """A publish (its Popen, and the gate's write end) held at SPOOLFS_TEST_PUBLISH_GATE
    (publish/run.c), after its stage was made and before any file is staged."""
    fifo = os.path.join(os.environ["TMPDIR"], "..", "gate")
    os.mkfifo(fifo)
    env = daemon_env()
    env["SPOOLFS_TEST_PUBLISH_GATE"] = fifo
    proc = subprocess.Popen(PUBLISH + [str(src), dest, "--endpoint", s3.endpoint]
                            + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, preexec_fn=preexec_fn)
    gate = []

    def opened():
        # The publish opens the FIFO for reading at the gate: until then, opening it for
        # writing without blocking says ENXIO.
        assert proc.poll() is None, proc.communicate()[1]
        try:
            gate.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return True
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            return False
    try:
        wait_until(opened, "publish never reached its gate", timeout=60)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, gate[0]


def ended(proc, timeout=60):
    """A publish's stderr once it ended (killed if it does not within timeout), checked for
    a sanitizer's report."""
    try:
        _, err = proc.communicate(timeout=timeout * SLOW)
    finally:
        proc.kill()
        proc.wait()
    err = err.decode("utf-8", "replace")
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    return err


def through_the_gate(proc, gate, timeout=60):
    """Lets a publish held at its gate go on (end of file on the FIFO): as ended()."""
    os.close(gate)
    return ended(proc, timeout)


def status_field(pid, field, base=16):
    """A number of /proc/PID/status: a signal mask (SigCgt: caught, SigIgn: ignored; hex),
    or with base 10 a size in kB (RssAnon)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1], base)
    return 0


def caught(pid, sig):
    return bool(status_field(pid, "SigCgt") & (1 << (sig - 1)))


def test_a_signal_while_staging_removes_the_stage(s3_server, own_tmpdir, tmp_path):
    """SIGTERM while the tree is staged: no further file is staged, nothing is sent, the
    stage is removed, the exit status says it failed (1); the handler is there from before
    the stage was made (it was installed only for the uploads)."""
    s3, src = start(s3_server, tmp_path)
    proc, gate = at_the_gate(s3, src, "s3://%s/st" % BUCKET)
    try:
        assert len(stages(own_tmpdir)) == 1
        assert caught(proc.pid, signal.SIGTERM)
        proc.terminate()
        # The first signal is taken, and the second would kill (SA_RESETHAND).
        wait_until(lambda: not caught(proc.pid, signal.SIGTERM), "SIGTERM never taken")
    finally:
        err = through_the_gate(proc, gate)
    assert proc.returncode == 1 and "interrupted while staging" in err, err
    assert stages(own_tmpdir) == []
    assert puts(s3) == 0


def test_a_second_signal_kills_and_the_next_run_sweeps_the_stage(s3_server, own_tmpdir,
                                                                tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    proc, gate = at_the_gate(s3, src, "s3://%s/sw" % BUCKET)
    try:
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: not caught(proc.pid, signal.SIGINT), "SIGINT never taken")
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60 * SLOW)
    finally:
        through_the_gate(proc, gate)
    assert proc.returncode == -signal.SIGINT
    # Killed: its stage stays until the next publish finds its PID gone.
    assert len(stages(own_tmpdir)) == 1
    # Another user's stage, and a live process's, are never touched.
    live = own_tmpdir / ("spoolfs-publish.%d.live00" % os.getpid())
    live.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    other = own_tmpdir / ("spoolfs-publish.%d.other0" % gone.pid)
    other.mkdir()
    os.chown(other, 65534, 65534)
    publish(s3, src, "s3://%s/sw" % BUCKET)
    assert sorted(stages(own_tmpdir)) == sorted([str(live), str(other)])
    live.rmdir()
    other.rmdir()


def test_an_ignored_sigint_stays_ignored(s3_server, own_tmpdir, tmp_path):
    """A publish started with SIGINT ignored (nohup, a script's background job) keeps it
    ignored; SIGTERM is caught."""
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    proc, gate = at_the_gate(s3, src, "s3://%s/ig" % BUCKET,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert status_field(proc.pid, "SigIgn") & (1 << (signal.SIGINT - 1))
        assert not caught(proc.pid, signal.SIGINT) and caught(proc.pid, signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
    finally:
        err = through_the_gate(proc, gate, timeout=120)
    assert proc.returncode == 0, err
    assert "ig/manifest.json" in s3.objects(BUCKET)


def test_a_signal_cuts_a_held_manifest_put(s3_server, tmp_path):
    """The manifest's PUT (a blocking request) held by the store: SIGINT ends it at once,
    not when the store lets go; no manifest, exit 1."""
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    manifest = BUCKET + "/h/manifest.json"
    s3.fault(manifest, gate=True)
    proc = subprocess.Popen(PUBLISH + [str(src), "s3://%s/h" % BUCKET, "--endpoint",
                             s3.endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=daemon_env(), preexec_fn=default_signals)
    try:
        s3.wait_for(lambda st: st["gated"] == 1, timeout=60 * SLOW, path=manifest)
        proc.send_signal(signal.SIGINT)
        err = ended(proc, timeout=30)
    finally:
        proc.kill()
        s3.release(manifest)
    assert proc.returncode == 1 and "interrupted" in err, err
    wait_until(lambda: s3.stats(manifest)["gated"] == 0, "the held PUT ended")
    s3.clear(manifest)
    assert "h/manifest.json" not in s3.objects(BUCKET)


def test_a_corrupted_upload_is_refused_by_the_store(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    h = hashlib.sha256((src / "big.bin").read_bytes()).hexdigest()
    key = "c/objects/%s/%s" % (h[:2], h)
    s3.fault(BUCKET + "/" + key, corrupt_at=[1000])
    status, _, err = publish(s3, src, "s3://%s/c" % BUCKET, check=False)
    assert status == 1
    assert key in err and ("BadDigest" in err or "SHA256Mismatch" in err), err
    keys = s3.objects(BUCKET)
    assert key not in keys and "c/manifest.json" not in keys


def test_if_absent(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    publish(s3, src, "s3://%s/v1" % BUCKET, "--if-absent")
    manifest = s3.get(BUCKET, "v1/manifest.json")[2]
    # A second publisher of the same release name is refused, and the first one's stays.
    (src / "tool").write_bytes(b"another tool\n")
    status, _, err = publish(s3, src, "s3://%s/v1" % BUCKET, "--if-absent", check=False)
    assert status == 1 and "exists already" in err, err
    assert s3.get(BUCKET, "v1/manifest.json")[2] == manifest
    # A store that ignores If-None-Match is found out, and --if-absent refused on it.
    s3.s3opts(ignore_if_none_match=True)
    status, _, err = publish(s3, src, "s3://%s/v2" % BUCKET, "--if-absent", check=False)
    assert status == 1 and "does not honour If-None-Match" in err, err
    assert not [k for k in s3.objects(BUCKET) if k.startswith("v2/")]
    assert s3.auth_failures() == []


def big_key(src, prefix, name="big.bin"):
    h = hashlib.sha256((src / name).read_bytes()).hexdigest()
    return "%s/objects/%s/%s" % (prefix, h[:2], h)


def test_large_objects_go_up_in_parts(s3_server, mount, tmp_path):
    s3, src = start(s3_server, tmp_path, big=12 << 20)
    publish(s3, src, "s3://%s/mp" % BUCKET, "--part-size", "5M")
    big = big_key(src, "mp")
    # 5 + 5 + 2 MiB, each with its checksum (the server checks it), then completed.
    assert s3.stats(BUCKET + "/" + big)["parts"] == 3
    assert s3.uploads() == []
    status, headers, _ = s3.head(BUCKET, big)
    assert status == 200 and headers["cache-control"] == "public, max-age=31536000, immutable"
    assert int(headers["content-length"]) == 12 << 20
    m = mount("s3://%s/mp" % BUCKET, "--manifest", "manifest.json", "--endpoint", s3.endpoint)
    compare(m.p(), src)
    assert s3.auth_failures() == []


def anon_rss_while_parts_are_held(s3, src, prefix, part_size, uploads):
    """RssAnon of a publish whose parts' PUTs are held by the store (each begun, its body
    ready to go), in bytes; then it is stopped (SIGTERM: the upload is aborted)."""
    big = BUCKET + "/" + big_key(src, prefix)
    s3.fault(big, gate=True)
    proc = subprocess.Popen(PUBLISH + [str(src), "s3://%s/%s" % (BUCKET, prefix),
                             "--endpoint", s3.endpoint, "--part-size", part_size, "--uploads",
                             str(uploads)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=daemon_env())
    try:
        s3.wait_for(lambda st: st["gated"] >= 1, timeout=60 * SLOW, path=big)
        rss = status_field(proc.pid, "RssAnon", 10)
        proc.terminate()
        proc.communicate(timeout=60 * SLOW)
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: s3.stats(big)["gated"] == 0, "the held PUTs ended")
    s3.clear(big)
    return rss << 10


def test_parts_are_sent_from_the_file_not_held_in_memory(s3_server, tmp_path):
    """Three 16 MiB parts on the way cost no more memory than one 5 MiB part: each part
    goes up from the staged file (they were read whole into memory: 48 MiB)."""
    s3, src = start(s3_server, tmp_path, big=48 << 20)
    small = anon_rss_while_parts_are_held(s3, src, "m1", "5M", 1)
    large = anon_rss_while_parts_are_held(s3, src, "m2", "16M", 3)
    assert large - small < 16 << 20, (large, small)


def test_an_interrupted_multipart_upload_is_aborted(s3_server, mount, tmp_path):
    """SIGTERM while a part is held: the upload is aborted (no parts left in the store), no
    object and no manifest appear; the rerun publishes it all."""
    s3, src = start(s3_server, tmp_path, big=12 << 20)
    big = BUCKET + "/" + big_key(src, "k")
    s3.fault(big, gate=True, gate_skip=1)
    proc = subprocess.Popen(PUBLISH + [str(src), "s3://%s/k" % BUCKET, "--endpoint",
                             s3.endpoint, "--part-size", "5M", "--uploads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=daemon_env())
    try:
        s3.wait_for(lambda st: st["gated"] == 1, timeout=60 * SLOW, path=big)
        assert len(s3.uploads()) == 1
        proc.terminate()
    finally:
        err = ended(proc)
    assert proc.returncode == 1, err
    assert "multipart upload was aborted" in err and "interrupted" in err, err
    assert s3.uploads() == []
    assert big.split("/", 1)[1] not in s3.objects(BUCKET)
    assert "k/manifest.json" not in s3.objects(BUCKET)
    s3.clear(big)
    publish(s3, src, "s3://%s/k" % BUCKET, "--part-size", "5M")
    m = mount("s3://%s/k" % BUCKET, "--manifest", "manifest.json", "--endpoint", s3.endpoint)
    compare(m.p(), src)


def test_a_corrupted_part_is_refused(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=12 << 20)
    big = big_key(src, "cp")
    s3.fault(BUCKET + "/" + big, corrupt_at=[100])
    status, _, err = publish(s3, src, "s3://%s/cp" % BUCKET, "--part-size", "5M", check=False)
    assert status == 1
    assert "part 1" in err and "SHA256Mismatch" in err, err
    assert "multipart upload was aborted" in err, err
    assert s3.uploads() == []
    assert big not in s3.objects(BUCKET) and "cp/manifest.json" not in s3.objects(BUCKET)


def test_a_transient_failure_is_tried_again(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    big = big_key(src, "t")
    s3.fault(BUCKET + "/" + big, fail_status=503, fail_count=2)
    _, out, err = publish(s3, src, "s3://%s/t" % BUCKET)
    assert big in s3.objects(BUCKET)
    assert s3.stats(BUCKET + "/" + big)["puts"] == 1


def test_progress_on_a_terminal_only(s3_server, tmp_path):
    s3, src = start(s3_server, tmp_path, big=1 << 20)
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(PUBLISH + [str(src), "s3://%s/p" % BUCKET,
                               "--endpoint", s3.endpoint], stdout=subprocess.PIPE,
                              stderr=slave, timeout=120 * SLOW, env=daemon_env())
        os.close(slave)
        slave = None
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)
    assert proc.returncode == 0, shown
    n = len(object_keys(s3, "p"))
    assert re.search(rb"\r\S* ?spoolfs publish: %d/%d objects, .* of .*, 0 skipped, .*/s"
                     % (n, n), shown), shown
    # The summary is one line on stdout, whatever stderr is.
    assert proc.stdout.decode().count("\n") == 1
    _, _, err = publish(s3, src, "s3://%s/p" % BUCKET)
    assert "\r" not in err and "objects," not in err


def test_bad_s3_usage(s3_server, tmp_path):
    s3 = s3_server()
    src = tmp_path / "src"
    make_tree(src, big=1 << 10)
    status, _, err = publish(s3, src, "s3:///nobucket", check=False)
    assert status == 1 and "bad S3 source" in err, err
    status, _, err = publish(s3, src, str(tmp_path / "out"), check=False)
    assert status == 1 and "for an s3:// OUT_DIR" in err, err
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, "--uploads", "0", check=False)
    assert status == 2 and "--uploads takes" in err, err
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, "--part-size", "1M", check=False)
    assert status == 2 and "--part-size takes 5M to 5G" in err, err
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, "--part-size", "6G", check=False)
    assert status == 2 and "--part-size takes 5M to 5G" in err, err
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, "--uploads", "65", check=False)
    assert status == 2 and "--uploads takes 1 to 64" in err, err
    status, _, err = publish(s3, src, "s3://nosuchbucket/p", check=False)
    assert status == 1 and "NoSuchBucket" in err, err


def test_bad_credentials(s3_server, aws_env, tmp_path):  # noqa: F811 (fixture)
    """Refused credentials, or none: a clear message, the secret in none, nothing stored."""
    s3, src = start(s3_server, tmp_path, big=1 << 10)
    aws_env(AK, SECRET + "x")
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, check=False)
    assert status == 1 and "SignatureDoesNotMatch" in err, err
    assert SECRET not in err
    status, _, err = verify("s3://%s/p" % BUCKET, "--endpoint", s3.endpoint)
    assert status == 1 and "SignatureDoesNotMatch" in err, err
    aws_env("", "")
    status, _, err = publish(s3, src, "s3://%s/p" % BUCKET, check=False)
    assert status == 1 and "no S3 credentials" in err, err
    assert s3.objects(BUCKET) in ([], {})


def verify(*args, env=None):
    """Runs `spoolfs verify args...`: (status, stdout, stderr)."""
    proc = subprocess.run([SPOOLFS, "verify"] + [str(a) for a in args], capture_output=True,
                          timeout=120 * SLOW, env=env or daemon_env())
    out, err = proc.stdout.decode(), proc.stderr.decode("utf-8", "replace")
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    return proc.returncode, out, err


def test_verify_s3(s3_server, tmp_path):
    """verify finds a missing object and one of the wrong size by one listing; --deep finds
    one of the right size with the wrong bytes; nested manifests and chunk lists count."""
    s3, src = start(s3_server, tmp_path)
    for i in range(30):
        (src / "inc" / ("many%02d.h" % i)).write_bytes(b"x%d\n" % i)
    dest = "s3://%s/v" % BUCKET
    publish(s3, src, dest, "--nest-over", "10")
    status, out, err = verify(dest, "--endpoint", s3.endpoint)
    assert status == 0, out + err
    n = int(out.split(": ")[-1].split(" objects")[0])
    # Every object key, the nested manifests' and the chunk list's included.
    assert n == len(object_keys(s3, "v")), out
    lists = s3.stats()["total_lists"]
    status, out, _ = verify(dest, "--endpoint", s3.endpoint)
    assert s3.stats()["total_lists"] == lists + 1  # one listing, no HEAD or GET per object

    def key_of(name):
        h = hashlib.sha256((src / name).read_bytes()).hexdigest()
        return "v/objects/%s/%s" % (h[:2], h)
    tool, big = key_of("tool"), key_of("big.bin")
    s3.delete(BUCKET, tool)
    s3.put(BUCKET, big, b"short")
    status, out, _ = verify(dest, "--endpoint", s3.endpoint)
    assert status == 1
    assert "%s: missing" % tool[2:] in out
    assert "%s: 5 bytes, not %d" % (big[2:], 3 << 20) in out
    data = bytearray((src / "big.bin").read_bytes())
    data[12345] ^= 1
    s3.put(BUCKET, big, bytes(data))
    status, out, _ = verify(dest, "--endpoint", s3.endpoint)
    assert status == 1 and big[2:] not in out
    status, out, _ = verify(dest, "--endpoint", s3.endpoint, "--deep")
    assert status == 1
    assert "%s: its bytes do not hash to its sha256" % big[2:] in out
    assert s3.auth_failures() == []


def test_verify_local(tmp_path):
    from helpers import publish_tree
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src, big=1 << 20)
    publish_tree(src, out)
    assert verify(out)[0] == 0
    assert verify(out / "manifest.json", "--deep")[0] == 0
    obj = sorted((out / "objects").glob("*/*"))[0]
    data = obj.read_bytes()
    obj.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    status, text, _ = verify(out)
    assert status == 0
    status, text, _ = verify(out, "--deep")
    assert status == 1 and "its bytes do not hash" in text
    obj.unlink()
    status, text, _ = verify(out)
    assert status == 1 and "missing" in text
    status, _, err = verify(tmp_path / "nothing")
    assert status == 1 and "No such file" in err
    status, _, err = verify(out, "--endpoint", "http://127.0.0.1:1")
    assert status == 2 and "s3:// SOURCE" in err


def test_verify_http(tmp_path):
    """A manifest served over HTTP: a HEAD per object, each object once; --deep GETs."""
    from client import Upstream
    from helpers import publish_tree
    src, out = tmp_path / "src", tmp_path / "out"
    make_tree(src, big=1 << 20)
    publish_tree(src, out)
    objects = sorted(str(p.relative_to(out)) for p in (out / "objects").glob("*/*"))
    up = Upstream(out)
    try:
        url = up.url("manifest.json")
        status, text, err = verify(url)
        assert status == 0, text + err
        assert "%d objects checked, 0 missing, 0 wrong" % len(objects) in text
        assert all(up.stats(o)["heads"] == 1 and up.stats(o)["gets"] == 0 for o in objects)
        os.unlink(out / objects[0])
        data = bytearray((out / objects[1]).read_bytes())
        data[0] ^= 1
        (out / objects[1]).write_bytes(bytes(data))
        status, text, _ = verify(url)
        assert status == 1 and "%s: missing" % objects[0] in text, text
        assert objects[1] not in text
        status, text, _ = verify(url, "--deep")
        assert status == 1 and "%s: its bytes do not hash to its sha256" % objects[1] in text
        status, _, err = verify(up.url("nothing.json"))
        assert status == 1 and "no such manifest" in err, err
    finally:
        up.stop()


class Endpoint:
    def __init__(self, endpoint):
        self.endpoint = endpoint


@pytest.mark.slow  # s3rver starts in seconds: the plain pass only (pytest.ini)
def test_s3rver(s3rver_installed, aws_env, mount, tmp_path):
    """A third-party store: publish, mount, diff, publish again (nothing uploaded); and
    s3rver writes over a key despite If-None-Match: *, so --if-absent is refused there."""
    aws_env(s3rver.ACCESS_KEY, s3rver.SECRET)
    src = tmp_path / "src"
    make_tree(src)
    with s3rver.S3rver(buckets=[BUCKET]) as srv:
        ep = Endpoint(srv.endpoint)
        _, out, _ = publish(ep, src, "s3://%s/t" % BUCKET)
        n = int(out.split("publish: ")[1].split(" objects")[0])
        assert n > 3
        m = mount("s3://%s/t" % BUCKET, "--manifest", "manifest.json", "--endpoint",
                  srv.endpoint)
        compare(m.p(), src)
        m.unmount()
        _, out, _ = publish(ep, src, "s3://%s/t" % BUCKET)
        assert "0 objects" in out and "%d already there" % n in out
        status, _, err = publish(ep, src, "s3://%s/u" % BUCKET, "--if-absent", check=False)
        assert status == 1 and "does not honour If-None-Match" in err, err
