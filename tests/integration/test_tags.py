"""Release tags (doc/publish.md "Release names"): `spoolfs publish --tag NAME` writes a
pointer beside the manifest, after it; a mount of the pointer (a local path, http, or a
manifest key in a bucket) serves exactly the release it names, checked by size and sha256,
for the whole session (a retag or a reload changes nothing), logs it and `spoolfs status`
shows it; a pointer with a wrong digest, or one naming another pointer, is refused; hostile
tag names are refused by publish; gc keeps what every tag names, whatever --keep-last says,
and refuses a tag it cannot account for.
"""

import hashlib
import json
import os
import subprocess

from client import Upstream
from conftest import SLOW, SPOOLFS, read_file
from test_gc import DAY, age, keys, run, trees
from test_publish_s3 import compare
from test_s3 import AK, BUCKET, SECRET, aws_env, failed_mount, s3_server  # noqa: F401


def sha(data):
    return hashlib.sha256(data).hexdigest()


def pointer(out, name):
    with open(os.path.join(out, name), "rb") as f:
        return json.loads(f.read())


def status(m):
    r = subprocess.run([SPOOLFS, "status", m.path], capture_output=True, text=True,
                       timeout=30 * SLOW)
    assert r.returncode == 0, r.stderr
    return r.stdout


def two_tagged_releases(tmp_path):
    """r1 (tree a) then r2 (tree b), each published with --tag latest: latest names r2."""
    src, o = trees(tmp_path)
    out = tmp_path / "out"
    run("publish", src["a"], out, "--manifest", "r1.json", "--tag", "latest", check=0)
    _, text, _ = run("publish", src["b"], out, "--manifest", "r2.json", "--tag", "latest",
                     "--tag", "stable", check=0)
    assert "tagged %s/latest: r2.json" % out in text, text
    return src, o, out


def test_latest_mounts_the_second_release_for_the_whole_session(tmp_path, mount):
    src, o, out = two_tagged_releases(tmp_path)
    r2 = (out / "r2.json").read_bytes()
    assert pointer(out, "latest") == {"spoolfs_tag": 1, "manifest": "r2.json",
                                      "sha256": sha(r2), "size": len(r2)}
    assert pointer(out, "stable") == pointer(out, "latest")
    m = mount(str(out / "latest"))
    compare(m.p(), src["b"])
    line = "serving r2.json (sha256 %s) via tag latest" % sha(r2)
    assert line in m.stderr()
    assert "release: r2.json (sha256 %s) via tag latest" % sha(r2) in status(m)
    assert "# release r2.json sha256 %s tag latest" % sha(r2) in \
        read_file(m.p(".spoolfs/stats")).decode()
    # Retagged to the first release meanwhile: this session still serves the second,
    # also once a new serving process has taken over (it keeps the session's snapshot).
    run("publish", src["a"], out, "--manifest", "r1.json", "--tag", "latest", check=0)
    assert pointer(out, "latest")["manifest"] == "r1.json"
    r = subprocess.run([SPOOLFS, "reload", m.path], capture_output=True, text=True,
                       timeout=90 * SLOW)
    assert r.returncode == 0, r.stderr
    compare(m.p(), src["b"])
    assert "release: r2.json (sha256 %s) via tag latest" % sha(r2) in status(m)
    # A new mount of the tag serves the first release now; a manifest by its own name
    # mounts as before and names no release.
    m1 = mount(str(out / "latest"), name="mnt1")
    compare(m1.p(), src["a"])
    m2 = mount(str(out / "r2.json"), name="mnt2")
    compare(m2.p(), src["b"])
    assert "release:" not in status(m2)


def test_over_http_a_wrong_sha256_or_size_is_refused(tmp_path, mount):
    src, o, out = two_tagged_releases(tmp_path)
    up = Upstream(out)
    m = mount(up.url("latest"))
    compare(m.p(), src["b"])
    r2 = (out / "r2.json").read_bytes()
    p = pointer(out, "latest")
    p["sha256"] = sha(r2 + b" ")
    (out / "latest").write_text(json.dumps(p))
    code, err = failed_mount(tmp_path, up.url("latest"))
    assert code != 0
    assert ("tag latest names r2.json with sha256 %s (%d bytes), but r2.json has sha256 %s"
            % (p["sha256"], len(r2), sha(r2))) in err, err
    # The size too: a manifest rewritten since it was tagged is not this release.
    p = pointer(out, "stable")
    p["size"] += 1
    (out / "stable").write_text(json.dumps(p))
    code, err = failed_mount(tmp_path, str(out / "stable"))
    assert code != 0 and "tag stable names r2.json" in err, err
    # A pointer naming a manifest that is not there.
    (out / "gone").write_text(json.dumps(dict(p, manifest="r9.json")))
    code, err = failed_mount(tmp_path, up.url("gone"))
    assert code != 0 and "tag gone: cannot fetch manifest" in err and "r9.json" in err, err


def test_a_pointer_to_a_pointer_is_refused(tmp_path):
    src, o, out = two_tagged_releases(tmp_path)
    inner = (out / "latest").read_bytes()
    (out / "inner.json").write_bytes(inner)
    (out / "outer").write_text(json.dumps({"spoolfs_tag": 1, "manifest": "inner.json",
                                           "sha256": sha(inner), "size": len(inner)}))
    code, err = failed_mount(tmp_path, str(out / "outer"))
    assert code != 0
    assert "tag outer names inner.json, which is a release tag itself, not a manifest" in err
    # A pointer this binary cannot take: its own message, not the manifest loader's.
    (out / "odd").write_text(json.dumps({"spoolfs_tag": 2, "manifest": "r2.json"}))
    code, err = failed_mount(tmp_path, str(out / "odd"))
    assert code != 0 and "a release tag this binary cannot take" in err, err
    (out / "odd").write_text(json.dumps({"spoolfs_tag": 1, "manifest": "../r2.json",
                                         "sha256": "0" * 64, "size": 1}))
    code, err = failed_mount(tmp_path, str(out / "odd"))
    assert code != 0 and '"manifest" is not a plain name' in err, err


def test_hostile_tag_names_are_refused_by_publish(tmp_path):
    src, o = trees(tmp_path)
    out = tmp_path / "out"
    for bad in ("../evil", "a/b", ".hidden", "x.json", "objects", "", "a b", "a..b",
                "tag\n", "x" * 201, "caf\u00e9"):
        status_, _, err = run("publish", src["a"], out, "--manifest", "r1.json", "--tag", bad)
        assert status_ == 2, (bad, err)
        assert "--tag" in err and "a tag is 1 to 200 of A-Z a-z 0-9 . _ -" in err, err
    # A manifest name a pointer cannot hold (or gc would not count) with a tag.
    for bad in ("release 1.json", "release-1"):
        status_, _, err = run("publish", src["a"], out, "--manifest", bad, "--tag", "latest")
        assert status_ == 2 and "--tag needs a --manifest NAME" in err, err
    assert not out.exists()  # refused before anything was written
    run("publish", src["a"], out, "--manifest", "r1.json", "--tag", "x" * 200, check=0)
    assert pointer(out, "x" * 200)["manifest"] == "r1.json"


def test_gc_keeps_what_a_tag_names_whatever_keep_last_says(tmp_path):
    src, o, out = two_tagged_releases(tmp_path)
    # latest goes back to the first release, which stays the older one.
    run("publish", src["a"], out, "--manifest", "r1.json", "--tag", "latest", check=0)
    age(out, 2 * DAY)
    age(out / "r1.json", 3 * DAY)
    before = keys(out)
    _, text, _ = run("gc", out, "--keep-last", "1", "--dry-run", check=0)
    assert "tag %s/latest: r1.json (kept)" % out in text, text
    assert "tag %s/stable: r2.json (kept)" % out in text, text
    _, text, _ = run("gc", out, "--keep-last", "1", "--grace", "0", check=0)
    assert keys(out) == before, text
    assert "deleted 0 manifests and 0 objects" in text, text
    run("verify", out, "--manifest", "r1.json", check=0)
    # Once no tag names it, --keep-last 1 drops it (tags themselves are never deleted).
    run("publish", src["b"], out, "--manifest", "r2.json", "--tag", "latest", check=0)
    age(out / "r2.json", DAY)
    _, text, _ = run("gc", out, "--keep-last", "1", "--grace", "0", check=0)
    assert keys(out) == before - {"r1.json", o["one"]}, text
    assert {"latest", "stable"} <= keys(out)


def test_gc_refuses_a_tag_it_cannot_account_for(tmp_path):
    src, o, out = two_tagged_releases(tmp_path)
    age(out, 2 * DAY)
    before = keys(out)
    p = pointer(out, "latest")
    (out / "broken").write_text(json.dumps(dict(p, manifest="r9.json")))
    _, _, err = run("gc", out, "--keep-last", "1", "--grace", "0", check=1)
    assert "%s/broken: the release tag names r9.json, which is not there: refusing to" \
        " delete anything" % out in err, err
    (out / "broken").write_text("not json")
    _, _, err = run("gc", out, "--keep-last", "1", "--grace", "0", check=1)
    assert "%s/broken: neither a manifest (*.json) nor a release tag" % out in err, err
    (out / "broken").write_text(json.dumps(dict(p, extra="x")))
    _, _, err = run("gc", out, "--keep-last", "1", "--grace", "0", check=1)
    assert "a field this binary does not know: refusing to delete anything" in err, err
    os.unlink(out / "broken")
    assert keys(out) == before


def test_s3_tags_mount_and_gc(s3_server, tmp_path, mount):
    s3 = s3_server()
    s3.create_bucket(BUCKET)
    src, o = trees(tmp_path)
    dest = "s3://%s/p" % BUCKET
    ep = ("--endpoint", s3.endpoint)
    for tree, name in (("a", "r1.json"), ("b", "r2.json")):
        _, text, _ = run("publish", src[tree], dest, "--manifest", name, "--tag", "latest",
                         *ep, check=0)
        assert "tagged %s/latest: %s" % (dest, name) in text, text
    code, hdrs, body = s3.get(BUCKET, "p/latest")
    assert code == 200 and hdrs.get("cache-control") == "no-cache", hdrs
    _, _, r2 = s3.get(BUCKET, "p/r2.json")
    assert json.loads(body) == {"spoolfs_tag": 1, "manifest": "r2.json", "sha256": sha(r2),
                                "size": len(r2)}
    m = mount(dest, "--manifest", "latest", *ep)
    compare(m.p(), src["b"])
    assert "serving r2.json (sha256 %s) via tag latest" % sha(r2) in m.stderr()
    # Retagged to the first release (by a publish of it), which stays the older one.
    _, text, _ = run("publish", src["a"], dest, "--manifest", "r1.json", "--tag", "latest",
                     "--dry-run", *ep, check=0)
    assert "would tag %s/latest: r1.json" % dest in text, text
    run("publish", src["a"], dest, "--manifest", "r1.json", "--tag", "latest", *ep, check=0)
    s3.age(BUCKET, "p/", 2 * DAY)
    s3.age(BUCKET, "p/r1.json", DAY)
    _, text, _ = run("gc", dest, "--keep-last", "1", "--grace", "0", *ep, check=0)
    assert "deleted 0 manifests and 0 objects" in text, text
    compare(m.p(), src["b"])  # the session's release, whatever the tag says now
    m1 = mount(dest, "--manifest", "latest", *ep, name="mnt1")
    compare(m1.p(), src["a"])
    assert s3.auth_failures() == []
