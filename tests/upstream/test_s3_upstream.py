"""Self-tests of the S3 test upstream (s3_upstream.py) and its SigV4 verifier.
Run: /usr/bin/python3 -m pytest -q tests/upstream/test_s3_upstream.py
"""

import base64
import calendar
import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3_upstream as s3u  # noqa: E402
from s3_client import S3Upstream, parse_error, parse_list  # noqa: E402

AK = "AKIAIOSFODNN7EXAMPLE"
SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
E = s3u.EMPTY_SHA256
T2013 = calendar.timegm((2013, 5, 24, 0, 0, 0))


# ============================================================ SigV4: AWS examples
# From the S3 API reference, "Signature Calculations for the Authorization
# Header: Transferring Payload in a Single Chunk (AWS Signature Version 4)".

GET_OBJECT_CREQ = "\n".join([
    "GET", "/test.txt", "",
    "host:examplebucket.s3.amazonaws.com",
    "range:bytes=0-9",
    "x-amz-content-sha256:" + E,
    "x-amz-date:20130524T000000Z", "",
    "host;range;x-amz-content-sha256;x-amz-date", E])
GET_OBJECT_STS = ("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                  "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972")
GET_OBJECT_SIG = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"


def get_object_headers(sig=GET_OBJECT_SIG, rng="bytes=0-9", region="us-east-1", ak=AK):
    return [("Host", "examplebucket.s3.amazonaws.com"), ("Range", rng),
            ("x-amz-content-sha256", E), ("x-amz-date", "20130524T000000Z"),
            ("Authorization", "AWS4-HMAC-SHA256 Credential=%s/20130524/%s/s3/aws4_request,"
             "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=%s"
             % (ak, region, sig))]


def test_aws_get_object_example_canonical_and_signature():
    h = get_object_headers()
    creq = s3u.canonical_request("GET", "/test.txt", "", h,
                                 ["host", "range", "x-amz-content-sha256", "x-amz-date"], E)
    assert creq == GET_OBJECT_CREQ
    assert s3u.string_to_sign("20130524T000000Z", "20130524/us-east-1/s3/aws4_request",
                              creq) == GET_OBJECT_STS
    assert s3u.signature(SK, "20130524", "us-east-1", "s3", GET_OBJECT_STS) == GET_OBJECT_SIG
    d = s3u.verify("GET", "/test.txt", "", h, {AK: SK}, "us-east-1", now=T2013)
    assert d["canonical_request"] == GET_OBJECT_CREQ
    # the signer produces the documented Authorization header
    hs, det = s3u.sign("GET", "/test.txt", "", h[:2], AK, SK, "us-east-1",
                       amz_date="20130524T000000Z")
    assert det["signature"] == GET_OBJECT_SIG
    assert dict(hs)["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=" + GET_OBJECT_SIG)


@pytest.mark.parametrize("mutate,code", [
    (lambda: get_object_headers(rng="bytes=0-10"), "SignatureDoesNotMatch"),
    (lambda: get_object_headers(sig="0" * 64), "SignatureDoesNotMatch"),
    (lambda: get_object_headers(region="eu-west-1"), "AuthorizationHeaderMalformed"),
    (lambda: get_object_headers(ak="AKIDOTHER"), "InvalidAccessKeyId"),
    (lambda: get_object_headers() + [("x-amz-meta-extra", "1")], "AccessDenied"),
    (lambda: [x for x in get_object_headers() if x[0] != "x-amz-content-sha256"],
     "InvalidRequest"),
    (lambda: [x for x in get_object_headers() if x[0] != "Authorization"], "AccessDenied"),
])
def test_aws_get_object_example_rejections(mutate, code):
    with pytest.raises(s3u.S3Error) as ei:
        s3u.verify("GET", "/test.txt", "", mutate(), {AK: SK}, "us-east-1", now=T2013)
    assert ei.value.code == code
    if code == "AuthorizationHeaderMalformed":
        assert ei.value.status == 400 and ei.value.extra["Region"] == "us-east-1"


def test_wrong_secret_and_skew():
    with pytest.raises(s3u.S3Error) as ei:
        s3u.verify("GET", "/test.txt", "", get_object_headers(), {AK: SK + "x"}, "us-east-1",
                   now=T2013)
    assert ei.value.code == "SignatureDoesNotMatch" and ei.value.status == 403
    assert ei.value.extra["CanonicalRequest"] == GET_OBJECT_CREQ
    with pytest.raises(s3u.S3Error) as ei:
        s3u.verify("GET", "/test.txt", "", get_object_headers(), {AK: SK}, "us-east-1",
                   now=T2013 + 901)
    assert ei.value.code == "RequestTimeTooSkewed"
    s3u.verify("GET", "/test.txt", "", get_object_headers(), {AK: SK}, "us-east-1",
               now=T2013 - 899)


@pytest.mark.parametrize("method,path,query,extra,sign_names,payload,sig", [
    # Example: GET Bucket (List Objects)  GET ?max-keys=2&prefix=J
    ("GET", "/", "max-keys=2&prefix=J", [], (), E,
     "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
    # Example: GET Bucket Lifecycle  GET ?lifecycle
    ("GET", "/", "lifecycle", [], (), E,
     "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
    # Example: PUT Object  PUT test$file.text
    ("PUT", "/test$file.text", "",
     [("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
     ("date",), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
     "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"),
])
def test_aws_examples(method, path, query, extra, sign_names, payload, sig):
    h = [("Host", "examplebucket.s3.amazonaws.com")] + extra
    hs, det = s3u.sign(method, path, query, h, AK, SK, "us-east-1",
                       amz_date="20130524T000000Z", payload_hash=payload, signed=sign_names)
    assert det["signature"] == sig
    body_sha = payload if method == "PUT" else None
    s3u.verify(method, path, query, hs, {AK: SK}, "us-east-1", now=T2013, body_sha256=body_sha)


def test_list_example_canonical_request():
    h = [("Host", "examplebucket.s3.amazonaws.com")]
    hs, det = s3u.sign("GET", "/", "max-keys=2&prefix=J", h, AK, SK, "us-east-1",
                       amz_date="20130524T000000Z")
    assert det["canonical_request"].split("\n")[:3] == ["GET", "/", "max-keys=2&prefix=J"]
    assert det["string_to_sign"].endswith(
        "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7")


@pytest.mark.parametrize("query,sig", [
    # AWS SigV4 test suite: get-vanilla, get-vanilla-query-order-key-case
    ("", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("Param2=value2&Param1=value1",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
])
def test_sigv4_suite_vectors(query, sig):
    hs, det = s3u.sign("GET", "/", query, [("Host", "example.amazonaws.com")], "AKIDEXAMPLE",
                       "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1",
                       service="service", amz_date="20150830T123600Z",
                       add_content_sha256=False)
    assert det["signature"] == sig


def test_canonical_forms():
    # S3: decode once, encode once, no normalisation of '.', '..', '//'
    assert s3u.canonical_uri("/b/a//./../x") == "/b/a//./../x"
    assert s3u.canonical_uri("/b/sp%20ace+$%7e~") == "/b/sp%20ace%2B%24~~"
    assert s3u.canonical_uri("/b/\u00fc".encode().decode("latin-1")) != ""
    assert s3u.canonical_uri("/b/%C3%BC") == "/b/%C3%BC"
    assert s3u.canonical_query("b=2&a=&c&a=1&continuation-token=%2B%2F%3D") == \
        "a=&a=1&b=2&c=&continuation-token=%2B%2F%3D"
    assert s3u.canonical_query("prefix=a/b c") == "prefix=a%2Fb%20c"
    assert s3u.canonical_header_value(["  a   b  c ", "d"]) == "a b c,d"


# ============================================================ server fixtures

def mk(root, rel, data):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


BIG = ["d%d/s%d/k%04d" % (i % 5, i % 7, i) for i in range(2500)]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("s3root"))
    for k in BIG:
        mk(root, "big/" + k, k.encode())
    mk(root, "b/data.bin", bytes(range(256)) * 40)
    mk(root, "b/hashed.txt", b"hash me")
    for k in ("a", "b/1", "b/2", "c", "d/1", "e"):
        mk(root, "mix/" + k, k.encode())
    with open(os.path.join(root, "b.meta.json"), "w") as f:
        json.dump({"hashed.txt": {"sha256": "auto", "checksum_sha256": "auto",
                                  "meta": {"owner": "ci"}}}, f)
    with S3Upstream(root) as s3:
        yield s3


@pytest.fixture(autouse=True)
def _reset(request):
    yield
    for name in ("plain", "signed"):
        if name in request.fixturenames:
            s3 = request.getfixturevalue(name)
            s3.clear()
            s3.reset()


# ============================================================ listing

def test_list_2500_pages_at_1000(plain):
    pages = []
    token = None
    while True:
        p = plain.list("big", token=token)
        pages.append(p)
        if not p["truncated"]:
            break
        token = p["token"]
        assert "+" in token and "/" in token and token.endswith("=")
    assert [len(p["keys"]) for p in pages] == [1000, 1000, 500]
    assert [p["key_count"] for p in pages] == [1000, 1000, 500]
    assert all(p["max_keys"] == 1000 for p in pages)
    keys = [k[0] for p in pages for k in p["keys"]]
    assert keys == sorted(BIG)
    k0, size, etag, lastmod = pages[0]["keys"][0]
    assert etag == '"%s"' % hashlib.md5(k0.encode()).hexdigest() and size == len(k0)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", lastmod)
    s = plain.stats()
    assert s["total_lists"] == 3 and s["lists"]["big/"]["gets"] == 3
    assert s["total_gets"] == 0 and s["total_bytes"] == 0
    q = [r["query"] for r in plain.lists()]
    assert "continuation-token" not in q[0] and q[1]["continuation-token"] == pages[0]["token"]


def test_list_delimiter_nested(plain):
    keys, prefixes, pages = plain.list_all("big", delimiter="/")
    assert keys == [] and prefixes == ["d%d/" % i for i in range(5)] and pages == 1
    keys, prefixes, _ = plain.list_all("big", prefix="d0/", delimiter="/")
    assert keys == [] and prefixes == ["d0/s%d/" % i for i in range(7)]
    keys, prefixes, _ = plain.list_all("big", prefix="d0/s0/", delimiter="/")
    assert prefixes == [] and keys == sorted(k for k in BIG if k.startswith("d0/s0/"))
    # 2,500 objects through the delimiter walk a client would do
    found, stack = [], [""]
    while stack:
        pfx = stack.pop()
        k, p, _ = plain.list_all("big", prefix=pfx, delimiter="/", max_keys=40)
        found += k
        stack += p
    assert sorted(found) == sorted(BIG)


def test_list_paging_mixes_prefixes_and_keys(plain):
    got = []
    token = None
    while True:
        p = plain.list("mix", delimiter="/", max_keys=2, token=token)
        got.append(([k[0] for k in p["keys"]], p["prefixes"], p["key_count"]))
        if not p["truncated"]:
            break
        token = p["token"]
    assert got == [(["a"], ["b/"], 2), (["c"], ["d/"], 2), (["e"], [], 1)]
    p = plain.list("mix", start_after="b/1")
    assert [k[0] for k in p["keys"]] == ["b/2", "c", "d/1", "e"]
    # exactly max-keys left: not truncated
    p = plain.list("mix", max_keys=6)
    assert not p["truncated"] and p["token"] is None and p["key_count"] == 6


def test_list_bad_token_and_args(plain):
    p = plain.list("mix", max_keys=1)
    st, _, body = plain.s3_request("GET", "mix", query=[
        ("list-type", "2"), ("prefix", "b/"), ("continuation-token", p["token"])])
    assert st == 400 and parse_error(body)["Code"] == "InvalidArgument"
    st, _, body = plain.s3_request("GET", "mix", query=[
        ("list-type", "2"), ("continuation-token", "garbage")])
    assert st == 400 and parse_error(body)["ArgumentName"] == "continuation-token"
    st, _, body = plain.s3_request("GET", "mix", query=[("list-type", "2"), ("max-keys", "x")])
    assert st == 400
    st, _, body = plain.s3_request("GET", "mix", query=[("list-type", "2"),
                                                        ("encoding-type", "base64")])
    assert st == 400


def test_list_url_encoding_and_hostile_keys(plain):
    hostile = ["sp ace/plus+amp&lt<gt>", "a//b", "../x", "./y", "a", "a/b", "dir/",
               "ctl\x01char", "u\u00fc\u4e2d", "n" * 300 + "/f", "q?x=1#h", "pct%2F"]
    for k in hostile:
        plain.put("hostile", k, k.encode())
    p = plain.list("hostile", encoding_type="url")
    assert p["encoding"] == "url"
    raw = [k[0] for k in p["keys"]]
    assert all("\x01" not in k and " " not in k for k in raw)
    assert sorted(urllib.parse.unquote_plus(k) for k in raw) == sorted(hostile)
    assert "sp+ace/plus%2Bamp%26lt%3Cgt%3E" in raw
    p = plain.list("hostile", encoding_type="url", delimiter="/", prefix="sp ace/")
    assert p["prefix"] == "sp+ace/" and p["delimiter"] == "/"
    # without encoding-type, XML-escaped text (no control chars here)
    p = plain.list("hostile", prefix="sp ace/")
    assert [k[0] for k in p["keys"]] == ["sp ace/plus+amp&lt<gt>"]
    _, prefixes, _ = plain.list_all("hostile", delimiter="/", encoding_type="url")
    assert prefixes == ["../", "./", "a/", "dir/", "n" * 300 + "/", "sp+ace/"]
    for k in hostile:
        st, h, body = plain.get("hostile", k)
        assert (st, body) == (200, k.encode()), k
        assert h["etag"] == '"%s"' % hashlib.md5(k.encode()).hexdigest()
    assert plain.stats("hostile/a//b")["gets"] == 1


# ============================================================ objects

def test_get_range_etag_headers(plain):
    data = bytes(range(256)) * 40
    st, h, body = plain.get("b", "data.bin")
    assert st == 200 and body == data and h["etag"] == '"%s"' % hashlib.md5(data).hexdigest()
    assert h["content-type"] and h["last-modified"].endswith("GMT") and h["x-amz-request-id"]
    st, h, body = plain.get("b", "data.bin", headers={"Range": "bytes=0-9"})
    assert st == 206 and body == data[:10] and h["content-range"] == "bytes 0-9/%d" % len(data)
    st, h, body = plain.get("b", "data.bin", headers={"Range": "bytes=-5"})
    assert st == 206 and body == data[-5:]
    st, h, body = plain.get("b", "data.bin", headers={"Range": "bytes=%d-" % len(data)})
    assert st == 416 and parse_error(body)["Code"] == "InvalidRange"
    assert h["content-range"] == "bytes */%d" % len(data)
    st, h, body = plain.head("b", "data.bin")
    assert st == 200 and body == b"" and h["content-length"] == str(len(data))
    s = plain.stats("b/data.bin")
    assert s["gets"] == 4 and s["heads"] == 1 and s["statuses"] == [200, 206, 206, 416, 200]


def test_if_match_and_replace(plain):
    st, h, _ = plain.head("b", "data.bin")
    etag = h["etag"]
    st, _, body = plain.get("b", "data.bin", headers={"Range": "bytes=0-3", "If-Match": etag})
    assert st == 206
    st, h, body = plain.get("b", "data.bin", headers={"If-Match": '"0000"'})
    assert st == 412 and parse_error(body)["Code"] == "PreconditionFailed"
    r = plain.put("b", "swap.bin", b"version one")
    st, h, _ = plain.get("b", "swap.bin")
    assert h["etag"] == r["etag"]
    r2 = plain.replace("b", "swap.bin", b"version two!")
    assert r2["etag"] != r["etag"]
    st, _, body = plain.get("b", "swap.bin", headers={"If-Match": r["etag"]})
    assert st == 412
    st, _, body = plain.get("b", "swap.bin", headers={"If-Match": r2["etag"]})
    assert (st, body) == (200, b"version two!")
    p = plain.list("b", prefix="swap")
    assert p["keys"][0][2] == r2["etag"]


def test_root_file_replaced_in_place(plain):
    path = os.path.join(plain.root, "b", "inplace.txt")
    mk(plain.root, "b/inplace.txt", b"one")
    plain.rescan()
    _, h1, _ = plain.head("b", "inplace.txt")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"two!")
    os.replace(tmp, path)
    st, h2, body = plain.get("b", "inplace.txt")
    assert (st, body) == (200, b"two!") and h2["etag"] != h1["etag"]
    os.unlink(path)
    assert plain.get("b", "inplace.txt")[0] == 404


def test_metadata_sidecar_and_checksum(plain):
    data = b"hash me"
    st, h, _ = plain.get("b", "hashed.txt")
    assert h["x-amz-meta-sha256"] == hashlib.sha256(data).hexdigest()
    assert h["x-amz-meta-owner"] == "ci" and "x-amz-checksum-sha256" not in h
    st, h, _ = plain.get("b", "hashed.txt", headers={"x-amz-checksum-mode": "ENABLED"})
    assert h["x-amz-checksum-sha256"] == base64.b64encode(hashlib.sha256(data).digest()).decode()
    st, h, _ = plain.get("b", "hashed.txt", headers={"x-amz-checksum-mode": "ENABLED",
                                                      "Range": "bytes=0-1"})
    assert "x-amz-checksum-sha256" not in h
    plain.put("b", "lie.bin", b"abc", sha256="00" * 32)
    assert plain.head("b", "lie.bin")[1]["x-amz-meta-sha256"] == "00" * 32


def test_errors(plain):
    st, h, body = plain.get("nobucket", "k")
    e = parse_error(body)
    assert st == 404 and e["Code"] == "NoSuchBucket" and e["BucketName"] == "nobucket"
    assert h["content-type"] == "application/xml"
    st, _, body = plain.get("b", "missing/key")
    e = parse_error(body)
    assert st == 404 and e["Code"] == "NoSuchKey" and e["Key"] == "missing/key"
    assert e["RequestId"]
    st, _, body = plain.head("b", "missing/key")
    assert st == 404 and body == b""
    st, _, body = plain.s3_request("GET", "nobucket", query={"list-type": "2"})
    assert st == 404 and parse_error(body)["Code"] == "NoSuchBucket"
    plain.fault("b/data.bin", fail_status=403)
    st, _, body = plain.get("b", "data.bin")
    assert st == 403 and parse_error(body)["Code"] == "AccessDenied"
    plain.fault("b/", fail_status=403)
    st, _, body = plain.s3_request("GET", "b", query={"list-type": "2"})
    assert st == 403 and parse_error(body)["Code"] == "AccessDenied"
    plain.clear()
    plain.fault("b/", fail_status=503, fail_count=1)
    st, _, body = plain.s3_request("GET", "b", query={"list-type": "2"})
    assert st == 503 and parse_error(body)["Code"] == "SlowDown"
    assert plain.list("b")["keys"]
    assert plain.stats("b/")["statuses"] == [403, 503, 200]
    st, _, body = plain.s3_request("GET", "b", query="location")
    assert st == 200 and b"LocationConstraint" in body
    st, h, _ = plain.s3_request("HEAD", "b")
    assert st == 200 and h["x-amz-bucket-region"] == "us-east-1"


def test_listing_gate_and_body_faults(plain):
    plain.fault("mix/", gate=True)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("p", plain.list("mix")))
    t.start()
    plain.wait_for(lambda s: s["gated"] == 1, path="mix/")
    assert "p" not in out
    plain.release("mix/")
    t.join(5)
    assert len(out["p"]["keys"]) == 6
    plain.fault("mix/", drop_after=100)
    with pytest.raises(Exception):
        plain.list("mix")


def test_region_check_without_verification(plain):
    # no --verify-sigv4: any credentials pass, but the scope's region is checked
    st, _, body = plain.get("b", "data.bin", creds=("X", "Y"), headers={"Range": "bytes=0-0"})
    assert st == 206
    st, h, body = plain.get("b", "data.bin", creds=("X", "Y"), region="eu-west-1")
    e = parse_error(body)
    assert st == 400 and e["Code"] == "AuthorizationHeaderMalformed"
    assert e["Region"] == "us-east-1" and h["x-amz-bucket-region"] == "us-east-1"


# ============================================================ SigV4 server

@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("s3signed"))
    for i in range(1200):
        mk(root, "priv/dir %d/k+%04d" % (i % 3, i), b"x%d" % i)
    mk(root, "pub/open.txt", b"public")
    with S3Upstream(root, verify=(AK, SK), region="eu-west-1", session_token="TOKEN/+=",
                    public=["pub"]) as s3:
        yield s3


def test_signed_requests_accepted(signed):
    keys, prefixes, pages = signed.list_all("priv")
    assert len(keys) == 1200 and pages == 2  # continuation token '+/=' signed correctly
    keys, prefixes, _ = signed.list_all("priv", delimiter="/", encoding_type="url")
    assert prefixes == ["dir+%d/" % i for i in range(3)]
    st, _, body = signed.get("priv", "dir 0/k+0000", headers={"Range": "bytes=0-0"})
    assert (st, body) == (206, b"x")
    st, _, body = signed.get("priv", "dir 0/k+0000", unsigned_payload=True)
    assert st == 200
    st, h, _ = signed.s3_request("PUT", "priv", "new key", body=b"payload",
                                 headers={"x-amz-meta-sha256": "ab" * 32})
    assert st == 200
    st, h, body = signed.get("priv", "new key")
    assert body == b"payload" and h["x-amz-meta-sha256"] == "ab" * 32
    assert signed.stats()["auth_failures"] == 0


def test_put_conditional_cache_control_checksum_and_faults(signed):
    """What `spoolfs publish` to S3 relies on (tests/integration/test_publish_s3.py)."""
    ck = base64.b64encode(hashlib.sha256(b"one").digest()).decode()
    hs = {"If-None-Match": "*", "Cache-Control": "no-cache", "x-amz-checksum-sha256": ck}
    puts = signed.stats()["total_puts"]
    assert signed.s3_request("PUT", "priv", "cond", body=b"one", headers=hs)[0] == 200
    st, _, body = signed.s3_request("PUT", "priv", "cond", body=b"one", headers=hs)
    assert st == 412 and parse_error(body)["Code"] == "PreconditionFailed"
    st, h, body = signed.get("priv", "cond")
    assert body == b"one" and h["cache-control"] == "no-cache"
    assert signed.stats()["total_puts"] == puts + 1
    assert signed.stats("priv/cond")["puts"] == 1
    # A store that ignores the condition overwrites.
    signed.s3opts(ignore_if_none_match=True)
    try:
        assert signed.s3_request("PUT", "priv", "cond", body=b"one", headers=hs)[0] == 200
    finally:
        signed.s3opts(ignore_if_none_match=False)
    # A wrong checksum is refused and nothing is stored.
    st, _, body = signed.s3_request("PUT", "priv", "bad", body=b"two", headers=hs)
    assert st == 400 and parse_error(body)["Code"] == "BadDigest"
    assert "bad" not in signed.objects("priv")
    # corrupt_at flips received bytes: the signed payload hash no longer matches.
    signed.fault("priv/flip", corrupt_at=[0])
    st, _, body = signed.s3_request("PUT", "priv", "flip", body=b"one")
    assert st == 400 and parse_error(body)["Code"] == "XAmzContentSHA256Mismatch"
    assert "flip" not in signed.objects("priv")
    # A gated PUT stores nothing until it is released.
    signed.fault("priv/held", gate=True)
    done = []
    t = threading.Thread(target=lambda: done.append(
        signed.s3_request("PUT", "priv", "held", body=b"held")[0]))
    t.start()
    signed.wait_for(lambda s: s["gated"] == 1, path="priv/held")
    assert "held" not in signed.objects("priv")
    signed.release("priv/held")
    t.join(10)
    assert done == [200] and "held" in signed.objects("priv")
    signed.delete("priv", "held")
    signed.delete("priv", "cond")


def test_signed_requests_rejected(signed):
    st, _, body = signed.get("priv", "dir 0/k+0000", creds=(AK, SK + "x"))
    e = parse_error(body)
    assert st == 403 and e["Code"] == "SignatureDoesNotMatch"
    assert e["StringToSign"].startswith("AWS4-HMAC-SHA256\n")
    assert e["CanonicalRequest"].startswith("GET\n/priv/dir%200/k%2B0000\n")
    st, _, body = signed.get("priv", "dir 0/k+0000", creds=("AKIDWRONG", SK))
    assert st == 403 and parse_error(body)["Code"] == "InvalidAccessKeyId"
    st, h, body = signed.get("priv", "dir 0/k+0000", region="us-east-1")
    e = parse_error(body)
    assert st == 400 and e["Code"] == "AuthorizationHeaderMalformed" and e["Region"] == "eu-west-1"
    assert "'us-east-1' is wrong; expecting 'eu-west-1'" in e["Message"]
    st, h, body = signed.head("priv", "dir 0/k+0000", region="us-east-1")
    assert st == 400 and body == b"" and h["x-amz-bucket-region"] == "eu-west-1"
    st, _, body = signed.get("priv", "dir 0/k+0000", sign=False)
    assert st == 403 and parse_error(body)["Code"] == "AccessDenied"
    st, _, body = signed.get("priv", "dir 0/k+0000", session_token="WRONG")
    assert st == 403 and parse_error(body)["Code"] == "InvalidToken"
    old = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 3600))
    st, _, body = signed.get("priv", "dir 0/k+0000", amz_date=old)
    assert st == 403 and parse_error(body)["Code"] == "RequestTimeTooSkewed"
    st, _, body = signed.s3_request("PUT", "priv", "k", body=b"abc",
                                    headers={"x-amz-content-sha256": "0" * 64}, sign=False)
    assert st == 403
    # listing with a wrong secret; nothing served
    st, _, body = signed.s3_request("GET", "priv", query={"list-type": "2"},
                                    creds=(AK, "nope"))
    assert st == 403
    s = signed.stats()
    assert s["auth_failures"] == 9 and s["total_bytes"] == 0
    fails = signed.auth_failures()
    assert fails[0]["code"] == "SignatureDoesNotMatch" and fails[0]["canonical_request"]
    assert signed.stats("priv/dir 0/k+0000")["statuses"][:3] == [403, 403, 400]


def test_unsigned_amz_header_rejected(signed):
    # an x-amz-* header added after signing (not in SignedHeaders)
    hs, _ = s3u.sign("GET", "/priv/dir%200/k%2B0000", "",
                     [("Host", "127.0.0.1:%d" % signed.port)], AK, SK, "eu-west-1",
                     session_token="TOKEN/+=")
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", signed.port, timeout=5)
    c.putrequest("GET", "/priv/dir%200/k%2B0000", skip_host=True)
    for k, v in hs + [("x-amz-meta-late", "1")]:
        c.putheader(k, v)
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 403 and parse_error(body)["HeadersNotSigned"] == "x-amz-meta-late"


def test_public_bucket_anonymous(signed):
    st, _, body = signed.get("pub", "open.txt", sign=False)
    assert (st, body) == (200, b"public")
    st, _, body = signed.s3_request("GET", "pub", query={"list-type": "2"}, sign=False)
    assert st == 200 and parse_list(body)["keys"][0][0] == "open.txt"


def test_region_301_mode(tmp_path):
    mk(str(tmp_path), "b/k", b"v")
    with S3Upstream(tmp_path, region="ap-south-1", region_error=301) as s3:
        st, h, body = s3.get("b", "k", creds=("A", "B"), region="us-east-1")
        e = parse_error(body)
        assert st == 301 and e["Code"] == "PermanentRedirect"
        assert h["x-amz-bucket-region"] == "ap-south-1"
        st, _, body = s3.s3_request("GET", "b", query="location", creds=("A", "B"),
                                    region="us-east-1")
        assert st == 200 and b">ap-south-1<" in body


def test_cli_port_line(tmp_path):
    import subprocess
    p = subprocess.Popen([sys.executable, s3u.__file__, "--root", str(tmp_path), "--port", "0"],
                         stdout=subprocess.PIPE)
    try:
        line = p.stdout.readline().decode()
        assert line.startswith("PORT ") and int(line.split()[1]) > 0
    finally:
        p.terminate()
        assert p.wait(5) == 0
        p.stdout.close()
    bad = subprocess.run([sys.executable, s3u.__file__, "--root", str(tmp_path),
                          "--verify-sigv4", "nocolon"], capture_output=True)
    assert bad.returncode == 2


def test_xml_is_well_formed_with_quotes(plain):
    st, _, body = plain.s3_request("GET", "mix", query={"list-type": "2", "max-keys": "1"})
    assert b"<ETag>&quot;" in body
    root = ET.fromstring(body)
    assert root.tag == "{%s}ListBucketResult" % s3u.XMLNS


def delete_body(keys, quiet=True):
    return ("<Delete><Quiet>%s</Quiet>%s</Delete>" % (
        "true" if quiet else "false",
        "".join("<Object><Key>%s</Key></Object>" % s3u.xesc(k) for k in keys))).encode()


def md5_b64(body):
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def test_delete_objects_signed_checked_and_bounded(signed):
    for k in ("d/1", "d/2 & <3>"):
        signed.put("priv", k, b"x")
    body = delete_body(["d/1", "d/2 & <3>"], quiet=False)
    st, _, out = signed.s3_request("POST", "priv", query={"delete": ""}, body=body,
                                   headers={"Content-MD5": md5_b64(body + b" ")})
    assert st == 400 and parse_error(out)["Code"] == "BadDigest"
    st, _, out = signed.s3_request("POST", "priv", query={"delete": ""}, body=body)
    assert st == 400 and b"Content-MD5" in out  # S3 wants an integrity header
    many = delete_body(["k%d" % i for i in range(1001)])
    st, _, out = signed.s3_request("POST", "priv", query={"delete": ""}, body=many,
                                   headers={"Content-MD5": md5_b64(many)})
    assert st == 400 and parse_error(out)["Code"] == "MalformedXML"
    st, _, out = signed.s3_request("POST", "priv", query={"delete": ""}, body=body,
                                   headers={"Content-MD5": md5_b64(body)})
    assert st == 200 and out.count(b"<Deleted>") == 2, out
    assert "d/1" not in signed.objects("priv") and "d/2 & <3>" not in signed.objects("priv")


def test_copy_object_onto_itself_needs_replace_and_renews_last_modified(signed):
    signed.put("priv", "c/obj", b"bytes")
    signed.age("priv", "c/", 3600)
    st, h, _ = signed.s3_request("HEAD", "priv", "c/obj")
    old = h["last-modified"]
    src = {"x-amz-copy-source": "/priv/c/obj"}
    st, _, out = signed.s3_request("PUT", "priv", "c/obj", headers=src)
    assert st == 400 and parse_error(out)["Code"] == "InvalidRequest"
    st, _, out = signed.s3_request("PUT", "priv", "c/obj", headers=dict(
        src, **{"x-amz-metadata-directive": "REPLACE", "Cache-Control": "immutable"}))
    assert st == 200 and b"<CopyObjectResult>" in out, out
    st, h, body = signed.s3_request("GET", "priv", "c/obj")
    assert body == b"bytes" and h["last-modified"] != old
    assert h["cache-control"] == "immutable"
    assert signed.stats("priv/c/obj")["copies"] == 1
