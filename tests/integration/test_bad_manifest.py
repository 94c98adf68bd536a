"""Every bad manifest is refused at mount time: non-zero exit, a message naming the entry
and the reason, and no mount left behind."""

import json
import os
import subprocess
import threading

import pytest

from conftest import SLOW, SPOOLFS, daemon_env, is_mounted

GOOD = {"path": "ok.bin", "size": 1, "url": "http://127.0.0.1:9/ok.bin"}
SHA = "ab" * 32


def entry(**kw):
    e = {"url": "http://127.0.0.1:9/x"}
    e.update(kw)
    return e


# (id, manifest text, what stderr must contain)
CASES = [
    ("malformed-json", '{"version": 1, "files": [', "manifest is not valid JSON"),
    ("unknown-version", json.dumps({"version": 4, "files": []}), "unsupported manifest version"),
    ("missing-version", json.dumps({"files": []}), "unsupported manifest version"),
    ("files-not-array", json.dumps({"version": 1, "files": {}}), '"files" is not an array'),
    ("missing-size", json.dumps({"version": 1, "files": [GOOD, entry(path="a/b")]}),
     'files[1] "a/b": size is missing'),
    ("negative-size", json.dumps({"version": 1, "files": [entry(path="neg", size=-1)]}),
     'files[0] "neg": size is negative'),
    ("fractional-size", json.dumps({"version": 1, "files": [entry(path="f", size=1.5)]}),
     'files[0] "f": size is not an integer'),
    ("string-size", json.dumps({"version": 1, "files": [entry(path="s", size="12")]}),
     'files[0] "s": size is not an integer'),
    ("short-sha256", json.dumps({"version": 1, "files": [entry(path="h", size=1, sha256="abc")]}),
     'files[0] "h": sha256 is not 64 hex digits'),
    ("non-hex-sha256", json.dumps({"version": 1, "files": [
        entry(path="h", size=1, sha256="zz" * 32)]}), 'sha256 is not 64 hex digits'),
    ("duplicate-path", json.dumps({"version": 1, "files": [
        entry(path="d/x", size=1), entry(path="d/x", size=2)]}), 'files[1] "d/x": duplicate path'),
    ("file-then-dir", json.dumps({"version": 1, "files": [
        entry(path="a", size=1), entry(path="a/b", size=1)]}), "both a file and a directory"),
    ("dir-then-file", json.dumps({"version": 1, "files": [
        entry(path="a/b", size=1), entry(path="a", size=1)]}), "both a file and a directory"),
    ("absolute-path", json.dumps({"version": 1, "files": [entry(path="/etc/passwd", size=1)]}),
     'files[0] "/etc/passwd": path is absolute'),
    ("empty-segment", json.dumps({"version": 1, "files": [entry(path="a//b", size=1)]}),
     'files[0] "a//b": path has an empty segment'),
    ("trailing-slash", json.dumps({"version": 1, "files": [entry(path="a/", size=1)]}),
     "empty segment"),
    ("dot-segment", json.dumps({"version": 1, "files": [entry(path="a/./b", size=1)]}),
     'files[0] "a/./b": path has a "." segment'),
    ("dotdot-segment", json.dumps({"version": 1, "files": [entry(path="../x", size=1)]}),
     'files[0] "../x": path has a ".." segment'),
    ("nul-in-path", '{"version":1,"files":[{"path":"a\\u0000b","size":1,"url":"http://127.0.0.1:9/x"}]}',
     "NUL"),
    # Half a surrogate pair: two JSON parsers would read two different names.
    ("lone-surrogate-in-path",
     '{"version":1,"files":[{"path":"a\\ud800b","size":1,"url":"http://127.0.0.1:9/x"}]}',
     'manifest is not valid JSON: "\\ud800" at byte 32 is half of a surrogate pair'),
    ("long-name", json.dumps({"version": 1, "files": [entry(path="d/" + "n" * 256, size=1)]}),
     "longer than 255 bytes"),
    ("empty-path", json.dumps({"version": 1, "files": [entry(path="", size=1)]}),
     "path is empty"),
    # Nothing is fetched for an empty object, so its hash is checked here.
    ("empty-object-wrong-sha256", json.dumps({"version": 1, "files": [
        entry(path="e", size=0, sha256="ab" * 32)]}),
     'files[0] "e": size is 0 but sha256 is not that of empty content'),
    # One digest is one download: its size is the first opener's.
    ("one-sha256-two-sizes", json.dumps({"version": 1, "files": [
        entry(path="a", size=1, sha256="ab" * 32), entry(path="c", size=2, sha256="AB" * 32)]}),
     'files[1] "c": another entry has the same sha256 and size 1'),
    # The mount's status directory: the store's entry would hide it from the kernel.
    ("reserved-root-name", json.dumps({"version": 1, "files": [
        entry(path=".spoolfs/stats", size=1)]}),
     'files[0] ".spoolfs/stats": path has the name of the mount\'s own status directory'),
    ("reserved-name-is-fine-below", json.dumps({"version": 1, "files": [
        entry(path="d/.spoolfs", size=1), entry(path="/x", size=1)]}),
     'files[1] "/x": path is absolute'),
    ("bad-url-scheme", json.dumps({"version": 1, "files": [
        entry(path="u", size=1, url="ftp://127.0.0.1/x")]}), 'url scheme "ftp" is not allowed'),
]


@pytest.mark.parametrize("text,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_manifest_is_refused(tmp_path, text, message):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(text)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f", str(manifest), str(mnt)], env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0
    assert message in err, err
    assert "bad manifest" in err
    assert not is_mounted(str(mnt))
    assert "AddressSanitizer" not in err and "ThreadSanitizer" not in err


def test_a_manifest_from_a_server_cannot_name_local_files(tmp_path, store, mount):
    """file: URLs would let whoever serves the manifest make the mount (a root daemon,
    perhaps with allow_other) serve any file of this machine. A local manifest may."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"local only\n")
    files = [{"path": "innocent.txt", "size": 11, "url": "file://" + str(secret)}]
    with open(os.path.join(store.root, "remote.json"), "w") as f:
        json.dump({"version": 1, "files": files}, f)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f", store.up.url("remote.json"), str(mnt)],
                          env=daemon_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0
    assert ('files[0] "innocent.txt": a file: url is allowed only in a local manifest'
            in err), err
    assert not is_mounted(str(mnt))
    local = tmp_path / "local.json"
    local.write_text(json.dumps({"version": 1, "files": files}))
    m = mount(str(local))
    with open(m.p("innocent.txt"), "rb") as f:
        assert f.read() == b"local only\n"


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_unreachable_manifest_is_refused(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f", "http://127.0.0.1:9/manifest.json", str(mnt)],
                          env=daemon_env(), capture_output=True, timeout=60)
    assert proc.returncode != 0
    assert b"cannot fetch manifest http://127.0.0.1:9/manifest.json" in proc.stderr
    assert not is_mounted(str(mnt))


def test_missing_manifest_file_is_refused(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f", str(tmp_path / "nope.json"), str(mnt)],
                          env=daemon_env(), capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"cannot read manifest" in proc.stderr


@pytest.mark.nosan
def test_usage_errors(tmp_path):
    proc = subprocess.run([SPOOLFS], capture_output=True, timeout=30)
    assert proc.returncode == 2 and b"need SOURCE and MOUNTPOINT" in proc.stderr
    proc = subprocess.run([SPOOLFS, "--help"], capture_output=True, timeout=30)
    assert proc.returncode == 0 and b"--cache-dir" in proc.stdout
    proc = subprocess.run([SPOOLFS, "--version"], capture_output=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.startswith(b"spoolfs ")


@pytest.mark.nosan
@pytest.mark.parametrize("args,message", [
    (["--retries", "-1"], "--retries must be a whole number from 1 to 1000, not '-1'"),
    (["--retries", "4294967297"], "--retries must be a whole number from 1 to 1000"),
    (["-o", "retries=0"], "--retries must be a whole number from 1 to 1000, not '0'"),
    (["--stall-timeout=-1"], "--stall-timeout must be a whole number from 1 to 86400"),
    (["--stall-timeout", "4294967297"], "--stall-timeout must be a whole number"),
    (["--stall-timeout", "3s"], "--stall-timeout must be a whole number"),
    (["--max-transfers", "-3"], "--max-transfers must be a whole number from 1 to 1024"),
    (["--cache-max-size", "-5"], "bad --cache-max-size '-5'"),
    (["--mirror", "ftp://x/"], "--mirror must be an http://, https:// or file:// URL"),
    (["--mirror", "http://127.0.0.1:9/base/?token=t"], "without a query or fragment"),
    (["--mirror=http://127.0.0.1:9/m%d/" % i for i in range(32)], "at most 31 --mirror"),
], ids=["retries-negative", "retries-wraps", "retries-zero", "stall-negative", "stall-wraps",
        "stall-unit", "transfers-negative", "cache-size-negative", "mirror-scheme",
        "mirror-query", "too-many-mirrors"])
def test_option_values_out_of_range_are_usage_errors(tmp_path, args, message):
    """fuse_opt's %u read -1 as 4294967295 and 4294967297 as 1: --stall-timeout -1 turned
    stall detection off and --retries -1 retried for ever, with no word said."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f"] + args + [str(tmp_path / "m.json"), str(mnt)],
                          env=daemon_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=30)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode != 0 and message in err, err
    assert not is_mounted(str(mnt))


def test_a_manifest_fetch_that_fails_transiently_is_tried_again(store, mount):
    """A 503 or a dropped connection while fetching the manifest is tried again, as a
    download would be (it used to fail the mount at once); a 404 is not."""
    store.add("x.bin", 1000)
    url = store.write()
    store.up.fault("manifest.json", fail_status=503, fail_count=2)
    m = mount(url)
    assert os.listdir(m.path) == ["x.bin"]
    assert store.up.stats("manifest.json")["statuses"] == [503, 503, 200]
    assert "try 3 of 6" in m.stderr()


def test_a_manifest_that_keeps_failing_fails_the_mount_after_the_retries(store, tmp_path):
    url = store.write()
    store.up.fault("manifest.json", fail_status=500, fail_count=100)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run([SPOOLFS, "-f", "--retries", "2", url, str(mnt)], env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"HTTP 500" in proc.stderr
    assert store.up.stats("manifest.json")["statuses"] == [500, 500]
    store.up.clear()
    store.up.reset()
    store.up.fault("manifest.json", fail_status=404, fail_count=100)
    proc = subprocess.run([SPOOLFS, "-f", url, str(mnt)], env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"HTTP 404" in proc.stderr
    assert store.up.stats("manifest.json")["statuses"] == [404]
    assert not is_mounted(str(mnt))


@pytest.mark.slow  # 4-13 s plain: the plain pass only (pytest.ini)
def test_a_stalled_manifest_fetch_is_dropped_and_tried_again(store, mount):
    """A manifest whose body stops is dropped after --stall-timeout and fetched again (it
    used to wait out a fixed 120 s, then fail the mount)."""
    store.add("x.bin", 1000)
    url = store.write()
    store.up.fault("manifest.json", stall_at=10)
    t = threading.Thread(target=lambda: store.up.wait_for(
        lambda st: st["gets"] >= 2, timeout=30, path="manifest.json"), daemon=True)
    t.start()

    def clear_after_the_first_try():
        t.join()
        store.up.clear()
    clearer = threading.Thread(target=clear_after_the_first_try, daemon=True)
    clearer.start()
    m = mount(url, "--stall-timeout", "1")
    assert os.listdir(m.path) == ["x.bin"]
    assert "try 2 of 6" in m.stderr()
    clearer.join(30 * SLOW)  # its request reaches the upstream before the test stops it
