"""A manifest in a private bucket: `s3://BUCKET/PREFIX --manifest KEY`, against the test S3
server that verifies every SigV4 signature. The manifest and every object it names under
its prefix are fetched with signed requests; objects elsewhere go unsigned; a URL that
leads to another key of the bucket is refused.
"""

import json
import os
import shutil

from conftest import read_file
from client import Upstream
from helpers import publish_tree
from test_s3 import BUCKET, aws_env, failed_mount, s3_server  # noqa: F401 (fixtures)


def published_tree(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "inc").mkdir(parents=True)
    for i in range(20):
        (src / ("inc/h%02d.h" % i)).write_bytes(b"#define H%d %d\n" % (i, i) * (i + 1))
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    os.symlink("big.bin", src / "big-link")
    publish_tree(src, out)
    return src, out


def upload(s3, out, prefix):
    shutil.copytree(out, os.path.join(s3.root, BUCKET, prefix))
    s3.rescan()


def test_a_published_tree_in_a_private_bucket(s3_server, mount, tmp_path):
    s3 = s3_server()
    src, out = published_tree(tmp_path)
    upload(s3, out, "rel/v1")
    m = mount("s3://%s/rel/v1" % BUCKET, "--manifest", "manifest.json",
              "--endpoint", s3.endpoint)
    for i in range(20):
        path = "inc/h%02d.h" % i
        assert read_file(m.p(path)) == (src / path).read_bytes()
    assert read_file(m.p("big-link")) == (src / "big.bin").read_bytes()
    assert os.readlink(m.p("big-link")) == "big.bin"
    # Every request was signed and verified, and nothing was listed.
    assert s3.auth_failures() == []
    assert s3.lists() == []


def test_objects_on_another_host_are_never_signed(s3_server, mount, tmp_path):
    s3 = s3_server()
    other_root = tmp_path / "other"
    other_root.mkdir()
    (other_root / "public.bin").write_bytes(b"public bytes\n")
    other = Upstream(other_root)
    try:
        # A credential reaching this server is refused (401).
        other.fault("public.bin", no_auth=True)
        manifest = {"version": 2, "entries": [
            {"path": "public.bin", "size": 13, "url": other.url("public.bin")},
            {"path": "private.txt", "size": 8, "url": "private.txt"}]}
        os.makedirs(os.path.join(s3.root, BUCKET, "p"))
        with open(os.path.join(s3.root, BUCKET, "p", "manifest.json"), "w") as f:
            json.dump(manifest, f)
        with open(os.path.join(s3.root, BUCKET, "p", "private.txt"), "wb") as f:
            f.write(b"private\n")
        s3.rescan()
        m = mount("s3://%s/p" % BUCKET, "--manifest", "manifest.json", "--endpoint",
                  s3.endpoint)
        assert read_file(m.p("private.txt")) == b"private\n"
        assert read_file(m.p("public.bin")) == b"public bytes\n"
        assert other.stats("public.bin")["gets"] == 1
        m.unmount()
        assert "AKID" not in m.stderr()
    finally:
        other.stop()


def test_a_url_to_another_key_of_the_bucket_is_refused(s3_server, tmp_path):
    s3 = s3_server()
    os.makedirs(os.path.join(s3.root, BUCKET, "p"))
    os.makedirs(os.path.join(s3.root, BUCKET, "secret"))
    with open(os.path.join(s3.root, BUCKET, "secret", "key.pem"), "wb") as f:
        f.write(b"not yours\n")
    with open(os.path.join(s3.root, BUCKET, "p", "manifest.json"), "w") as f:
        json.dump({"version": 1, "files": [
            {"path": "k", "size": 10, "url": "../secret/key.pem"}]}, f)
    s3.rescan()
    code, err = failed_mount(tmp_path, "s3://%s/p" % BUCKET, "--manifest", "manifest.json",
                             "--endpoint", s3.endpoint)
    assert code != 0
    assert "files[0] \"k\": url leads out of the manifest's own prefix in its bucket" in err


def test_without_credentials_the_manifest_is_refused_with_one_line(s3_server, tmp_path,
                                                                  monkeypatch):
    s3 = s3_server()
    src, out = published_tree(tmp_path)
    upload(s3, out, "rel")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    code, err = failed_mount(tmp_path, "s3://%s/rel" % BUCKET, "--manifest", "manifest.json",
                             "--endpoint", s3.endpoint)
    assert code != 0
    assert "cannot fetch manifest" in err and "HTTP 403" in err
