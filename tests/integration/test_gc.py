"""`spoolfs gc OUT_DIR|s3://BUCKET/PREFIX` (doc/publish.md "Garbage collection"): what no
kept manifest reaches and is older than --grace goes, nothing else; a manifest gc cannot
read wholly stops it before it deletes anything; and the two races with a publish: a
manifest written while gc runs (gc lists again and re-marks just before deleting), and an
old object nobody named that a publish names again (publish refreshes it, and gc takes
ages from its last listing). Local OUT_DIRs and the verifying S3 test server.
"""

import hashlib
import os
import subprocess
import threading
import time

from conftest import SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, read_file
from test_publish_s3 import compare
from test_s3 import AK, BUCKET, SECRET, aws_env, s3_server  # noqa: F401

DAY = 24 * 3600


def run(*args, env=None, check=None):
    """spoolfs ARGS -> (status, stdout, stderr)."""
    r = subprocess.run([SPOOLFS] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env or daemon_env(), timeout=120 * SLOW)
    out, err = r.stdout.decode(), r.stderr.decode("utf-8", "replace")
    for mark in SANITIZER_MARKS:
        assert mark not in err, err
    if check is not None:
        assert r.returncode == check, out + err
    return r.returncode, out, err


def sha(data):
    return hashlib.sha256(data).hexdigest()


def obj(h):
    return "objects/%s/%s" % (h[:2], h)


def trees(tmp_path):
    """Two releases sharing a file: a (one.bin, shared.bin) and b (two.bin, shared.bin),
    and c (orphan.bin only). Files of 100 KiB: each its own object."""
    data = {n: os.urandom(100 << 10) for n in ("one", "two", "shared", "orphan")}
    out = {}
    for name, files in (("a", ("one", "shared")), ("b", ("two", "shared")),
                        ("c", ("orphan",))):
        d = tmp_path / name
        d.mkdir()
        for f in files:
            (d / (f + ".bin")).write_bytes(data[f])
        out[name] = d
    return out, {n: obj(sha(b)) for n, b in data.items()}


def age(path, seconds):
    """Makes every file under path (or path itself) seconds older than now."""
    t = time.time() - seconds
    if os.path.isfile(path):
        os.utime(path, (t, t))
        return
    for dirpath, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(dirpath, f), (t, t))


def keys(out):
    found = set()
    for dirpath, _, files in os.walk(out):
        for f in files:
            found.add(os.path.relpath(os.path.join(dirpath, f), out))
    return found


def two_releases(tmp_path):
    src, o = trees(tmp_path)
    out = tmp_path / "out"
    run("publish", "--no-compress", src["a"], out, "--manifest", "r1.json", check=0)
    run("publish", "--no-compress", src["b"], out, "--manifest", "r2.json", check=0)
    age(out, 2 * DAY)
    age(out / "r1.json", 3 * DAY)  # the older release
    return src, o, out


def test_local_keep_last_drops_only_what_the_dropped_release_alone_names(tmp_path):
    src, o, out = two_releases(tmp_path)
    before = keys(out)
    # Within the grace, nothing goes: neither the dropped manifest nor its objects.
    _, text, _ = run("gc", out, "--keep-last", "1", "--grace", "4d", check=0)
    assert keys(out) == before, text
    assert "deleted 0 manifests and 0 objects" in text
    # After it: the dropped release's manifest and its own object, nothing else.
    _, text, _ = run("gc", out, "--keep-last", "1", check=0)
    assert keys(out) == before - {"r1.json", o["one"]}, text
    assert "deleted 1 manifests and 1 objects" in text
    run("verify", out, "--manifest", "r2.json", check=0)
    # Every manifest kept (no --keep-*): nothing more to delete.
    _, text, _ = run("gc", out, "--grace", "0", check=0)
    assert keys(out) == before - {"r1.json", o["one"]}, text


def test_local_keep_by_name_and_by_age(tmp_path):
    src, o, out = two_releases(tmp_path)
    before = keys(out)
    run("gc", out, "--keep", "r1.json", "--grace", "1h", check=0)
    assert keys(out) == before - {"r2.json", o["two"]}
    status, _, err = run("gc", out, "--keep", "r9.json", check=1)
    assert "r9.json: --keep names no manifest there" in err
    run("gc", out, "--keep-newer-than", "1h", "--keep-last", "0", "--grace", "1h", check=0)
    assert keys(out) == set()  # r1 was 3 days old: nothing is kept


def test_local_dry_run_deletes_nothing_and_counts_bytes(tmp_path):
    src, o, out = two_releases(tmp_path)
    before = keys(out)
    _, text, _ = run("gc", out, "--keep-last", "1", "--dry-run", check=0)
    assert keys(out) == before
    assert "would delete %s/%s (%d bytes)" % (out, o["one"], 100 << 10) in text, text
    r1 = os.path.getsize(out / "r1.json")
    assert "would delete 1 manifests and 1 objects, %d bytes" % ((100 << 10) + r1) in text


def test_local_a_manifest_gc_cannot_read_wholly_stops_it(tmp_path):
    src, o, out = two_releases(tmp_path)
    run("publish", "--no-compress", src["c"], out, "--manifest", "r0.json", check=0)
    os.unlink(out / "r0.json")
    age(out, 2 * DAY)
    before = keys(out)
    good = (out / "r2.json").read_text()
    # A field of a newer format may name objects (here the orphan): gc must not guess.
    for text, why in (
            (good.replace('"path":', '"frame_table":"%s","path":' % o["orphan"], 1),
             'has a field it does not know: "frame_table"'),
            (good.replace('"entries":[', '"frames":["%s"],"entries":[' % o["orphan"], 1),
             'a field it does not know: "frames"'),
            (good.replace('"version":2', '"version":4', 1), "manifest version 4"),
            ('{"tag": "r2.json"}', "not a manifest"),
            (good.replace('"url":"objects/', '"url":"./objects/', 1), "not a plain key"),
            (good.replace('"url":"objects/', '"url":"https://cdn.example/p/objects/', 1),
             "not a plain key"),
            (good[:len(good) // 2], "not valid JSON")):
        (out / "r2.json").write_text(text)
        age(out / "r2.json", 2 * DAY)
        _, _, err = run("gc", out, "--grace", "0")
        assert keys(out) == before, err
        # (A URL is named with the manifest's objects, not with its manifest.)
        assert ("%s/r2.json: " % out in err or "a kept manifest names" in err) and \
            why in err, err
        assert "refusing to delete anything" in err
    # Whole again: the orphan goes.
    (out / "r2.json").write_text(good)
    run("gc", out, "--grace", "0", check=0)
    assert keys(out) == before - {o["orphan"]}


def gate_env(tmp_path):
    fifo = tmp_path / "gc.gate"
    os.mkfifo(fifo)
    env = daemon_env()
    env["SPOOLFS_TEST_GC_GATE"] = str(fifo)
    return fifo, env


def gated_gc(args, env):
    """Starts gc, which waits at its gate (after its first mark) until it is opened."""
    res = {}
    t = threading.Thread(target=lambda: res.update(r=run(*args, env=env)))
    t.start()
    return t, res


def open_gate(fifo):
    with open(fifo, "w"):
        pass


def test_local_a_manifest_written_while_gc_runs_keeps_its_objects(tmp_path):
    """The orphan is younger than half the grace (publish does not refresh it): only gc's
    second look at the manifests keeps it."""
    src, o, out = two_releases(tmp_path)
    run("publish", "--no-compress", src["c"], out, "--manifest", "r0.json", check=0)
    os.unlink(out / "r0.json")
    age(out / o["orphan"], 2 * 3600)
    fifo, env = gate_env(tmp_path)
    # Opening the FIFO for writing waits until gc opens it: gc has marked by then.
    t, res = gated_gc(("gc", out, "--grace", "1h"), env)
    with open(fifo, "w"):
        run("publish", "--no-compress", src["c"], out, "--manifest", "r3.json", check=0)
    t.join(120 * SLOW)
    assert res["r"][0] == 0, res
    assert o["orphan"] in keys(out), res
    run("verify", out, "--manifest", "r3.json", check=0)


def test_local_publish_refreshes_an_old_object_it_names_again(tmp_path):
    src, o, out = two_releases(tmp_path)
    run("publish", "--no-compress", src["c"], out, "--manifest", "r0.json", check=0)
    os.unlink(out / "r0.json")
    age(out, 2 * DAY)
    run("publish", "--no-compress", src["c"], out, "--manifest", "r3.json", check=0)
    assert os.stat(out / o["orphan"]).st_mtime > time.time() - 3600
    # Younger than half the grace: left as it is (no write per object every publish).
    young = time.time() - 3600
    os.utime(out / o["orphan"], (young, young))
    run("publish", "--no-compress", src["c"], out, "--manifest", "r3.json", check=0)
    assert abs(os.stat(out / o["orphan"]).st_mtime - young) < 1
    _, text, _ = run("gc", out, "--keep-last", "1", check=0)
    assert o["orphan"] in keys(out) and o["shared"] not in keys(out), text


def test_local_a_mount_of_the_kept_release_loses_nothing(tmp_path, mount):
    src, o, out = two_releases(tmp_path)
    m = mount(str(out / "r2.json"))
    fifo, env = gate_env(tmp_path)
    t, res = gated_gc(("gc", out, "--keep-last", "1", "--grace", "0"), env)
    with open(fifo, "w"):
        # gc has marked and waits: the mount reads half its files now, half after.
        assert read_file(m.p("two.bin")) == (src["b"] / "two.bin").read_bytes()
    t.join(120 * SLOW)
    assert res["r"][0] == 0, res
    assert "r1.json" not in keys(out)
    compare(m.p(), src["b"])


# ------------------------------------------------------------------------------- S3

def s3_two_releases(s3_server, tmp_path, prefix="p"):
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    src, o = trees(tmp_path)
    dest = "s3://%s/%s" % (BUCKET, prefix)
    for tree, name in (("a", "r1.json"), ("b", "r2.json")):
        run("publish", "--no-compress", src[tree], dest, "--endpoint", s3.endpoint,
            "--manifest", name, check=0)
    s3.age(BUCKET, prefix + "/", 2 * DAY)
    s3.age(BUCKET, prefix + "/r1.json", DAY)
    return s3, src, o, dest


def s3_keys(s3, prefix="p"):
    return {k[len(prefix) + 1:] for k in s3.objects(BUCKET) if k.startswith(prefix + "/")}


def test_s3_keep_last_deletes_in_batches_and_the_mount_reads_the_rest(s3_server, tmp_path,
                                                                        mount):
    s3, src, o, dest = s3_two_releases(s3_server, tmp_path)
    before = s3_keys(s3)
    ep = ("--endpoint", s3.endpoint)
    _, text, _ = run("gc", dest, "--keep-last", "1", "--dry-run", *ep, check=0)
    assert s3_keys(s3) == before and s3.stats()["total_deletes"] == 0
    assert "would delete %s/%s (%d bytes)" % (dest, o["one"], 100 << 10) in text, text
    _, text, _ = run("gc", dest, "--keep-last", "1", *ep, check=0)
    assert s3_keys(s3) == before - {"r1.json", o["one"]}, text
    assert s3.stats()["total_deletes"] == 2  # one DeleteObjects per kind: 2 keys
    run("verify", dest, "--manifest", "r2.json", *ep, check=0)
    m = mount(dest, "--manifest", "r2.json", "--endpoint", s3.endpoint)
    compare(m.p(), src["b"])
    assert s3.auth_failures() == []


def test_s3_a_corrupt_manifest_stops_gc(s3_server, tmp_path):
    s3, src, o, dest = s3_two_releases(s3_server, tmp_path)
    s3.put(BUCKET, "p/r0.json", b'{"version":2,"entries":[')
    s3.age(BUCKET, "p/", 2 * DAY)
    before = s3_keys(s3)
    _, _, err = run("gc", dest, "--keep-last", "1", "--grace", "0", "--endpoint", s3.endpoint,
                    check=1)
    assert "%s/r0.json: not valid JSON: refusing to delete anything" % dest in err, err
    assert s3_keys(s3) == before and s3.stats()["total_deletes"] == 0


def test_s3_an_old_object_a_publish_names_again_is_not_deleted(s3_server, tmp_path):
    """The orphan is older than the grace; a publish names it again and is held before its
    manifest's PUT; gc runs whole meanwhile: no manifest names the orphan, but the publish
    refreshed it (a copy onto itself), so gc's listing shows it young."""
    s3, src, o, dest = s3_two_releases(s3_server, tmp_path)
    ep = ("--endpoint", s3.endpoint)
    run("publish", "--no-compress", src["c"], dest, "--manifest", "r0.json", *ep, check=0)
    s3.delete(BUCKET, "p/r0.json")
    s3.age(BUCKET, "p/", 2 * DAY)
    held = BUCKET + "/p/r3.json"
    s3.fault(held, gate=True)
    res = {}
    t = threading.Thread(target=lambda: res.update(
        r=run("publish", "--no-compress", src["c"], dest, "--manifest", "r3.json", *ep)))
    t.start()
    try:
        s3.wait_for(lambda st: st["gated"] == 1, timeout=60 * SLOW, path=held)
        _, text, _ = run("gc", dest, *ep, check=0)
    finally:
        s3.release(held)
        t.join(120 * SLOW)
    assert res["r"][0] == 0, res
    assert o["orphan"] in s3_keys(s3), text
    run("verify", dest, "--manifest", "r3.json", *ep, check=0)
    assert s3.stats(BUCKET + "/p/" + o["orphan"]).get("copies") == 1
    assert s3.auth_failures() == []


def test_s3_a_manifest_written_while_gc_runs_keeps_its_objects(s3_server, tmp_path):
    s3, src, o, dest = s3_two_releases(s3_server, tmp_path)
    ep = ("--endpoint", s3.endpoint)
    run("publish", "--no-compress", src["c"], dest, "--manifest", "r0.json", *ep, check=0)
    s3.delete(BUCKET, "p/r0.json")
    s3.age(BUCKET, "p/" + o["orphan"], 2 * 3600)  # not refreshed: younger than 12 h
    fifo, env = gate_env(tmp_path)
    t, res = gated_gc(("gc", dest, "--grace", "1h") + ep, env)
    with open(fifo, "w"):
        run("publish", "--no-compress", src["c"], dest, "--manifest", "r3.json", *ep, check=0)
    t.join(120 * SLOW)
    assert res["r"][0] == 0, res
    assert o["orphan"] in s3_keys(s3), res
    run("verify", dest, "--manifest", "r3.json", *ep, check=0)


def test_s3_stale_multipart_uploads_are_aborted(s3_server, tmp_path):
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    def begin(key):
        status, _, body = s3.s3_request("POST", BUCKET, key, query={"uploads": ""})
        assert status == 200, body

    begin("p/objects/ab/old")
    begin("other/objects/ab/old")  # another prefix's: not gc's
    s3.age(BUCKET, "nothing/", 2 * DAY)  # ages every upload
    begin("p/objects/cd/new")  # within the grace: a publish may be sending it
    _, text, _ = run("gc", "s3://%s/p" % BUCKET, "--endpoint", s3.endpoint, check=0)
    left = sorted(u["key"] for u in s3.uploads())
    assert left == ["other/objects/ab/old", "p/objects/cd/new"], text
    assert "1 stale multipart uploads aborted" in text


def test_local_an_out_dir_others_could_redirect_is_refused(tmp_path):
    src, o, out = two_releases(tmp_path)
    before = keys(out)
    os.chmod(out, 0o777)
    _, _, err = run("gc", out, "--keep-last", "1", "--grace", "0", check=1)
    assert "%s is writable by group or others" % out in err, err
    assert keys(out) == before


def test_s3_deletes_go_1000_keys_a_request(s3_server, tmp_path):
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    src = tmp_path / "many"
    src.mkdir()
    for i in range(1001):
        (src / ("f%04d" % i)).write_bytes(b"%d" % i)
    dest = "s3://%s/m" % BUCKET
    ep = ("--endpoint", s3.endpoint)
    run("publish", "--no-compress", src, dest, "--pack-under", "0", *ep, check=0)
    s3.delete(BUCKET, "m/manifest.json")
    s3.age(BUCKET, "m/", 2 * DAY)
    assert len(s3_keys(s3, "m")) == 1001  # one object a file
    _, text, _ = run("gc", dest, *ep, check=0)
    assert s3_keys(s3, "m") == set(), text
    st = s3.stats()
    assert st["total_deletes"] == 1001 and st["delete_requests"] == 2, st
