"""Test helper: run tests/upstream/s3_upstream.py as a subprocess and drive it.
Same control API as client.Upstream (fault/release/clear/reset/stats/faults/
wait_for/stop; context manager), with paths "BUCKET/KEY" for objects and
"BUCKET/" for the bucket's listing requests, plus object management and a
small signing S3 client.

    from s3_client import S3Upstream
    with S3Upstream(root, verify=("AKID", "SECRET"), region="eu-west-1") as s3:
        s3.endpoint                               # http://127.0.0.1:PORT
        s3.put("bkt", "dir/a.bin", b"...", sha256="auto")   # -> {"etag", "size"}
        s3.fault("bkt/dir/a.bin", gate=True)      # any upstream.py fault option
        s3.fault("bkt/", fail_status=503, fail_count=1)     # listing requests
        s3.stats("bkt/dir/a.bin")["gets"]; s3.stats()["total_lists"]
        s3.replace("bkt", "dir/a.bin", b"new")    # new ETag; old fds keep old bytes
        st, hdrs, body = s3.get("bkt", "dir/a.bin", headers={"Range": "bytes=0-9"})
        page = s3.list("bkt", prefix="dir/", delimiter="/")  # one ListObjectsV2 page
        keys = s3.list_all("bkt")                  # follows continuation tokens
Requests are signed with `verify` credentials (and region/session token) unless
sign=False or other creds= are given.
"""

import base64
import json
import os
import sys
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from client import PYTHON, Upstream, UpstreamError, send_raw  # noqa: E402
import s3_upstream  # noqa: E402

S3_UPSTREAM = os.path.join(HERE, "s3_upstream.py")
NS = "{%s}" % s3_upstream.XMLNS

__all__ = ["S3Upstream", "UpstreamError", "parse_list", "parse_error"]


def parse_error(body):
    """S3 <Error> XML -> dict of child text ({} when not an error document)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return {}
    if root.tag != "Error":
        return {}
    return {c.tag: (c.text or "") for c in root}


def parse_list(body):
    """ListBucketResult XML -> dict: keys [(key, size, etag, lastmod)], prefixes [..],
    truncated, token (NextContinuationToken), key_count, max_keys, encoding (raw
    values: url-encoded when encoding-type=url was asked)."""
    root = ET.fromstring(body)

    def t(node, name, default=None):
        e = node.find(NS + name)
        return e.text or "" if e is not None else default

    keys = [(t(c, "Key"), int(t(c, "Size")), t(c, "ETag"), t(c, "LastModified"))
            for c in root.findall(NS + "Contents")]
    prefixes = [t(c, "Prefix") for c in root.findall(NS + "CommonPrefixes")]
    kc = t(root, "KeyCount")
    return {"keys": keys, "prefixes": prefixes, "truncated": t(root, "IsTruncated") == "true",
            "token": t(root, "NextContinuationToken"), "next_marker": t(root, "NextMarker"),
            "key_count": int(kc) if kc is not None else None,
            "max_keys": int(t(root, "MaxKeys")), "encoding": t(root, "EncodingType"),
            "prefix": t(root, "Prefix"), "delimiter": t(root, "Delimiter"),
            "name": t(root, "Name")}


def list_query(prefix=None, delimiter=None, token=None, max_keys=None, start_after=None,
               encoding_type=None):
    """The query of one ListObjectsV2 request: [(name, value)], the parameters not None."""
    q = [("list-type", "2")]
    for name, v in (("prefix", prefix), ("delimiter", delimiter),
                    ("continuation-token", token), ("max-keys", max_keys),
                    ("start-after", start_after), ("encoding-type", encoding_type)):
        if v is not None:
            q.append((name, v))
    return q


def list_pages(list_page, dedup_prefixes=False):
    """Calls list_page(continuation token or None) -> parse_list() dict, following the
    tokens until a page is not truncated -> (keys [str], prefixes [str], pages).
    dedup_prefixes: drop the prefixes an earlier page already gave."""
    keys, prefixes, token, pages = [], [], None, 0
    while True:
        p = list_page(token)
        pages += 1
        keys += [k[0] for k in p["keys"]]
        if dedup_prefixes:
            prefixes += [x for x in p["prefixes"] if x not in prefixes]
        else:
            prefixes += p["prefixes"]
        if not p["truncated"]:
            return keys, prefixes, pages
        token = p["token"]


class S3Upstream(Upstream):
    def __init__(self, root, host="127.0.0.1", port=0, region="us-east-1", verify=None,
                 session_token=None, region_error=400, public=(), max_skew=None,
                 etag="md5", tls_cert=None, tls_key=None, extra_args=(), verbose=False,
                 startup_timeout=10.0):
        """verify: (access_key, secret) enables --verify-sigv4; these creds also sign
        this helper's requests. Credentials go on the server's command line (a test
        server; keep real secrets away from it). tls_cert/tls_key: serve HTTPS."""
        self.region = region
        self.creds = tuple(verify) if verify else None
        self.session_token = session_token
        cmd = [PYTHON, S3_UPSTREAM, "--root", str(root), "--host", host, "--port", str(port),
               "--region", region, "--region-error", str(region_error), "--etag", etag]
        if verify:
            cmd += ["--verify-sigv4", "%s:%s" % tuple(verify)]
        if session_token is not None:
            cmd += ["--session-token", session_token]
        for b in public:
            cmd += ["--public", b]
        if max_skew is not None:
            cmd += ["--max-skew", str(max_skew)]
        if tls_cert:
            cmd += ["--tls-cert", str(tls_cert), "--tls-key", str(tls_key)]
        if verbose:
            cmd.append("--verbose")
        cmd += list(extra_args)
        self._start(cmd, root, host, bool(tls_cert), startup_timeout)

    @property
    def endpoint(self):
        return self.base

    def url(self, bucket, key=""):
        return self.base + "/" + urllib.parse.quote(bucket) + (
            "/" + urllib.parse.quote(key) if key else "")

    # --------------------------------------------------------- object store
    def put(self, bucket, key, data, sha256=None, checksum_sha256=None, meta=None,
            content_type=None):
        """Create or replace an object (any key). data: bytes, or a str path to copy
        with src=. sha256: "auto" | hex (x-amz-meta-sha256); checksum_sha256: "auto" |
        base64 (x-amz-checksum-sha256). Returns {"etag", "size"}."""
        body = {"bucket": bucket, "key": key, "sha256": sha256,
                "checksum_sha256": checksum_sha256, "meta": meta, "content_type": content_type}
        if isinstance(data, (bytes, bytearray)):
            body["data_b64"] = base64.b64encode(bytes(data)).decode()
        else:
            body["src"] = str(data)
        return self._ctl("POST", "put", body, timeout=60)

    replace = put

    def delete(self, bucket, key):
        return self._ctl("POST", "delete", {"bucket": bucket, "key": key})

    def age(self, bucket, prefix, seconds):
        """Makes every object of bucket whose key starts with prefix (and every multipart
        upload) that many seconds older (its LastModified)."""
        return self._ctl("POST", "age", {"bucket": bucket, "prefix": prefix,
                                         "seconds": seconds})

    def create_bucket(self, bucket):
        return self._ctl("POST", "bucket", {"bucket": bucket})

    def rescan(self):
        """Re-import files under root (new/removed files; in-place changes are seen
        on the next GET/HEAD anyway)."""
        return self._ctl("POST", "rescan", {}, timeout=60)

    def objects(self, bucket):
        return self._ctl("GET", "objects", query={"bucket": bucket})

    def uploads(self):
        """Multipart uploads neither completed nor aborted: [{"bucket", "key", "upload_id",
        "parts"}]."""
        return self._ctl("GET", "uploads")

    def lists(self):
        """Every listing request so far: [{"bucket", "method", "query", "status"}]."""
        return self._ctl("GET", "lists")

    def temp_creds(self, **control):
        """Temporary credentials (creds_endpoints.py): with keyword arguments, changes its
        settings (lifetime, web_tokens, container_token, oidc_request_token, fault,
        expire_all); returns what was issued and seen (never a secret)."""
        if control:
            return self._ctl("POST", "creds", control)
        return self._ctl("GET", "creds")

    def s3opts(self, **opts):
        """requester_pays=[buckets], owner="ACCOUNT": S3 options the server enforces."""
        return self._ctl("POST", "s3opts", opts)

    @property
    def sts_endpoint(self):
        """STS, instance metadata, container credentials and the OIDC token endpoint are
        served by the same server: creds_endpoints.py."""
        return self.base

    def auth_failures(self):
        return self._ctl("GET", "auth")

    # --------------------------------------------------------- S3 requests
    def s3_request(self, method, bucket="", key="", query=None, headers=None, body=b"",
                   sign=True, creds=None, region=None, session_token=None,
                   amz_date=None, unsigned_payload=False, raw_path=None, timeout=10):
        """One request on a fresh connection -> (status, {lower-case header: value}, body).
        query: dict or list of pairs (encoded with %20, never '+') or a raw string.
        Signed with creds (default: the verify creds) when sign is true and creds exist."""
        if raw_path is None:
            raw_path = "/" + s3_upstream.uri_encode(bucket, False)
            if key:
                raw_path += "/" + s3_upstream.uri_encode(key, False)
        if isinstance(query, str):
            raw_query = query
        elif query:
            items = query.items() if isinstance(query, dict) else query
            raw_query = "&".join(
                s3_upstream.uri_encode(str(k)) + ("" if v is None else "=" + s3_upstream.uri_encode(str(v)))
                for k, v in items)
        else:
            raw_query = ""
        hs = [("Host", "%s:%d" % (self.host, self.port))]
        hs += list((headers or {}).items())
        creds = creds or self.creds
        if sign and creds:
            ph = "UNSIGNED-PAYLOAD" if unsigned_payload else \
                s3_upstream.hashlib.sha256(body).hexdigest()
            hs, _ = s3_upstream.sign(
                method, raw_path, raw_query, hs, creds[0], creds[1], region or self.region,
                amz_date=amz_date, payload_hash=ph,
                session_token=session_token if session_token is not None else self.session_token)
        target = raw_path + ("?" + raw_query if raw_query else "")
        return send_raw(self._connection(timeout), method, target, hs, body)

    def get(self, bucket, key, headers=None, **kw):
        return self.s3_request("GET", bucket, key, headers=headers, **kw)

    def head(self, bucket, key, headers=None, **kw):
        return self.s3_request("HEAD", bucket, key, headers=headers, **kw)

    def list(self, bucket, prefix=None, delimiter=None, token=None, max_keys=None,
             start_after=None, encoding_type=None, **kw):
        """One ListObjectsV2 page -> parse_list() dict (raises UpstreamError on non-200)."""
        q = list_query(prefix, delimiter, token, max_keys, start_after, encoding_type)
        st, _, body = self.s3_request("GET", bucket, query=q, **kw)
        if st != 200:
            raise UpstreamError("ListObjectsV2 %s -> %d: %s" % (bucket, st, body[:500]))
        return parse_list(body)

    def list_all(self, bucket, prefix=None, delimiter=None, max_keys=None, **kw):
        """Follow continuation tokens; -> (keys [str], prefixes [str], pages)."""
        return list_pages(lambda token: self.list(bucket, prefix=prefix, delimiter=delimiter,
                                                  token=token, max_keys=max_keys, **kw))


def _selftest():  # pragma: no cover - manual smoke
    import tempfile
    d = tempfile.mkdtemp()
    os.makedirs(os.path.join(d, "b", "x"))
    open(os.path.join(d, "b", "x", "f"), "wb").write(b"hello")
    with S3Upstream(d, verify=("AK", "SK")) as s3:
        print(s3.list_all("b"), s3.get("b", "x/f")[0], json.dumps(s3.stats())[:200])
    time.sleep(0)


if __name__ == "__main__":
    _selftest()
