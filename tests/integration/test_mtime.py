"""Times of entries their source gives none (issue 20): never 1970. A manifest entry without
"mtime" is as old as the manifest (its Last-Modified, or a local file's mtime), or the mount
when nothing says; a listed bucket's objects keep their LastModified, its directories and
root show the mount."""

import json
import os
import time

from rawhttp import RawServer, manifest, static
from test_s3 import BUCKET, aws_env, mount_s3, s3_server  # noqa: F401 (fixtures)

MANIFEST_TIME = 1700000000  # 2023-11-14
GIVEN = 1600000000          # an entry's own mtime


def entries():
    return [{"path": "dir/old.bin", "size": 1, "url": "x", "mtime": GIVEN},
            {"path": "dir/plain.bin", "size": 1, "url": "x"},
            {"path": "dated/only.bin", "size": 1, "url": "x", "mtime": GIVEN}]


def check_tree(m, default):
    assert os.stat(m.p("dir/old.bin")).st_mtime == GIVEN
    assert os.stat(m.p("dir/plain.bin")).st_mtime == default
    # A directory is as new as the newest thing below it.
    assert os.stat(m.p("dir")).st_mtime == max(GIVEN, default)
    assert os.stat(m.p("dated")).st_mtime == GIVEN
    assert os.stat(m.p("")).st_mtime == max(GIVEN, default)


def test_an_http_manifest_dates_entries_by_its_last_modified(upstream, mount):
    path = os.path.join(upstream.root, "manifest.json")
    with open(path, "w") as f:
        json.dump({"version": 1, "files": entries()}, f)
    os.utime(path, (MANIFEST_TIME, MANIFEST_TIME))  # the upstream's Last-Modified
    m = mount(upstream.url("manifest.json"))
    check_tree(m, MANIFEST_TIME)


def test_a_local_manifest_dates_entries_by_its_mtime(tmp_path, mount):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"version": 1, "files": entries()}))
    os.utime(path, (MANIFEST_TIME, MANIFEST_TIME))
    m = mount(str(path))
    check_tree(m, MANIFEST_TIME)


def test_a_manifest_without_last_modified_dates_entries_by_the_mount(mount, servers):
    srv = servers(RawServer, {"/manifest.json": static(manifest(entries()))})
    before = int(time.time())
    m = mount(srv.url("manifest.json"))
    after = int(time.time())
    t = os.stat(m.p("dir/plain.bin")).st_mtime
    assert before <= t <= after, (before, t, after)
    check_tree(m, t)


def test_a_bucket_keeps_last_modified_and_dates_directories_by_the_mount(s3_server, mount):
    s3 = s3_server()
    for key in ("top.bin", "sub/deep.bin"):
        p = os.path.join(s3.root, BUCKET, key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b"x")
        os.utime(p, (GIVEN, GIVEN))
    s3.rescan()
    before = int(time.time())
    m = mount_s3(mount, s3)
    after = int(time.time())
    assert os.stat(m.p("top.bin")).st_mtime == GIVEN
    assert os.stat(m.p("sub/deep.bin")).st_mtime == GIVEN
    for d in ("", "sub"):
        assert before <= os.stat(m.p(d)).st_mtime <= after, d
