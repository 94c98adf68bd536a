#!/usr/bin/python3
"""spoolfs S3 test upstream: an S3-compatible server (path-style) over the same
fault injection and request/byte accounting as upstream.py, plus an independent
AWS Signature Version 4 verifier (written from the AWS documentation, not from
the C code it checks).

Usage: s3_upstream.py --root DIR [--host 127.0.0.1] [--port 0] [--region R]
           [--region-error 400|301] [--verify-sigv4 AK:SECRET]... [--session-token T]
           [--public BUCKET]... [--max-skew SECONDS] [--etag md5|fast]
           [--tls-cert CERT.pem --tls-key KEY.pem] [--delay-ms MS] [--verbose]
Prints "PORT <n>" on stdout once listening; exits 0 on SIGTERM/SIGINT.

Buckets: every top-level directory of --root is a bucket; every regular file
below it is an object whose key is its relative path ('/'-separated). Optional
per-bucket metadata sidecar ROOT/<bucket>.meta.json (a top-level *file*):
    {"<key>" | "*": {"sha256": "auto" | "<hex>",          -> x-amz-meta-sha256
                     "checksum_sha256": "auto" | "<b64>",  -> x-amz-checksum-sha256
                     "meta": {"name": "value"},            -> x-amz-meta-name
                     "content_type": "text/plain"}}
("*" applies to every key of the bucket; a key's own entry wins per field.)
The object table is built at start and by POST /_ctl/rescan. A GET/HEAD of a
root-backed object re-stats its file, so a file replaced in place (write a temp
file + rename) is seen with its new md5 ETag without a rescan; new/removed files
need a rescan. Objects created by /_ctl/put (or S3 PUT) live in a private blob
directory, may have any key (a//b, ../x, 300-byte segments, "a" and "a/b",
"dir/" markers), replace any object of the same key, and are never touched by a
rescan.

S3 API (path-style: /BUCKET/KEY; virtual-hosted addressing is not supported):
  GET  /                                  ListBuckets
  GET  /B?list-type=2&prefix=&delimiter=&max-keys=&continuation-token=
          &start-after=&encoding-type=url&fetch-owner=   ListObjectsV2
  GET  /B?prefix=&marker=&delimiter=&max-keys=            ListObjects (v1)
  GET  /B?location                        GetBucketLocation
  HEAD /B                                 HeadBucket (x-amz-bucket-region)
  GET|HEAD /B/KEY                         Range (single), If-Match (412),
          If-None-Match (304), If-Range; ETag = quoted md5 hex; Last-Modified;
          x-amz-meta-*; x-amz-checksum-sha256 (+ x-amz-checksum-type FULL_OBJECT)
          on a full GET when the request has x-amz-checksum-mode: ENABLED
  PUT  /B  (create bucket), PUT /B/KEY (body; x-amz-meta-*, x-amz-checksum-sha256
          checked (400 BadDigest), Cache-Control kept and sent back on GET/HEAD,
          If-None-Match: * answered 412 when the key exists; counted in "puts" of the
          path and "total_puts"; faults fail_status, gate (nothing stored while gated)
          and corrupt_at (received bytes flipped before the checks) apply),
  DELETE /B/KEY
  POST /B/KEY?uploads, PUT /B/KEY?partNumber=N&uploadId=U (x-amz-checksum-sha256 checked;
          counted in "parts" of the path), POST /B/KEY?uploadId=U (CompleteMultipartUpload:
          parts ascending, ETags and checksums as uploaded, each but the last >= 5 MiB),
          DELETE /B/KEY?uploadId=U (abort), GET /B?uploads[&prefix=] (ListMultipartUploads,
          with Initiated)
  POST /B?delete                          DeleteObjects (Content-MD5 or
          x-amz-checksum-sha256 required and checked; Quiet honoured; at most 1,000 keys;
          counted in "deletes" of each key's path, "total_deletes" and "delete_requests")
  PUT  /B/KEY with x-amz-copy-source: /B2/KEY2 (URL-encoded)   CopyObject (a copy onto
          itself needs x-amz-metadata-directive: REPLACE; LastModified becomes now;
          counted in "copies" of the path; faults fail_status and gate of the path apply)
Errors are S3 XML (<Error><Code/>...</Error>): NoSuchBucket, NoSuchKey (404),
AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, RequestTimeTooSkewed,
InvalidToken (403), AuthorizationHeaderMalformed (400, with <Region> when the
credential scope names another region; --region-error 301 answers
PermanentRedirect instead), PreconditionFailed (412), InvalidRange (416),
InvalidArgument (400). HEAD errors carry no body. Region errors carry the
x-amz-bucket-region header.

Temporary credentials (creds_endpoints.py, same process): STS (POST /: AssumeRole,
AssumeRoleWithWebIdentity), IMDSv2 (/latest/...), container credentials
(/_creds/container) and GitHub's OIDC token endpoint (/_oidc/token) issue credentials that
live --creds-lifetime seconds (default 3); S3 requests signed with them are verified
against them, and answered 400 ExpiredToken once they expire (403 InvalidToken for a wrong
session token). POST /_ctl/s3opts {"requester_pays": [B], "owner": ID}: requests to B
without x-amz-request-payer: requester, or with an x-amz-expected-bucket-owner other than
ID, are 403 AccessDenied. {"ignore_if_none_match": true}: a conditional PUT overwrites
like an unconditional one (a store such as s3rver).

Authentication: a request with an AWS4-HMAC-SHA256 Authorization header always
has its credential-scope region checked against --region. With --verify-sigv4
every request must be signed (except anonymous requests to a --public bucket)
and the signature is recomputed and compared; failures are recorded (see
GET /_ctl/auth) with the server's canonical request and string to sign.

Control (never S3): everything of upstream.py's /_ctl/ API, with paths
"BUCKET/KEY" for objects and "BUCKET/" for the bucket's listing requests
(faults such as gate, fail_status, drop_after, stall_at, rate also apply to
listing responses; a fail_status answers an S3 XML error with that status):
  POST /_ctl/fault|release|clear|reset         as upstream.py
  GET  /_ctl/stats[?path=P]   {"paths": {objects}, "lists": {"B/": ...},
                               "total_gets", "total_heads", "total_bytes" (objects only),
                               "total_lists", "auth_failures"}
  GET  /_ctl/faults
  GET  /_ctl/uploads  [{"bucket", "key", "upload_id", "parts": [n...]}]: multipart uploads
                      neither completed nor aborted
  POST /_ctl/put     {"bucket", "key", one of "data_b64" | "data" (utf-8 text) | "src"
                      (a local file, copied), optional "sha256": "auto"|hex,
                      "checksum_sha256": "auto"|b64, "meta": {}, "content_type"}
                      -> {"etag", "size"}; creates the bucket if missing
  POST /_ctl/delete  {"bucket", "key"}
  POST /_ctl/age     {"bucket", "prefix", "seconds"}  every object whose key starts with
                     prefix (and every multipart upload) is made that much older
  POST /_ctl/bucket  {"bucket"}                 create (mkdir ROOT/B)
  POST /_ctl/rescan  {}                         re-import ROOT
  GET  /_ctl/objects?bucket=B                   {key: {"size","etag","source"}}
  GET  /_ctl/lists                              every listing request's parameters
  GET  /_ctl/auth                               recent auth failures (code, message,
                                                canonical request, string to sign)
"""

import argparse
import base64
import bisect
import binascii
import calendar
import datetime
import email.utils
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import upstream as up  # noqa: E402  (fault injection, stats, body pacing, Server)
import creds_endpoints as ce  # noqa: E402  (STS, IMDSv2, container, OIDC: temporary creds)

XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
ALGORITHM = "AWS4-HMAC-SHA256"
UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
MAX_KEYS = 1000


# =========================================================================== SigV4
# Written from "Signature Calculations for the Authorization Header" (AWS S3 API
# reference, sig-v4-header-based-auth) and the general SigV4 signing docs.

def uri_encode(data, encode_slash=True):
    """AWS UriEncode: every byte except A-Za-z0-9-_.~ as %XX (upper-case hex);
    '/' kept when encode_slash is False. Accepts str (UTF-8) or bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    out = []
    for b in data:
        if b in UNRESERVED or (b == 0x2F and not encode_slash):
            out.append(chr(b))
        else:
            out.append("%%%02X" % b)
    return "".join(out)


def canonical_uri(raw_path):
    """S3 canonical URI from the path as sent on the wire: percent-decode once,
    then UriEncode every byte except '/'. S3 does not normalise ('.', '..', '//'
    stay as they are) and does not double-encode."""
    path = urllib.parse.unquote_to_bytes(raw_path or "/")
    if not path.startswith(b"/"):
        path = b"/" + path
    return uri_encode(path, encode_slash=False)


def canonical_query(raw_query, exclude=("X-Amz-Signature",)):
    """Canonical query string from the raw query as sent: split on '&', name and
    value percent-decoded once ('+' is a literal plus, as SigV4 clients must send
    a space as %20), re-encoded with UriEncode, sorted by name then value; a
    parameter without a value gets "name="."""
    pairs = []
    for part in (raw_query or "").split("&"):
        if part == "":
            continue
        name, _, value = part.partition("=")
        name_b = urllib.parse.unquote_to_bytes(name)
        if name_b.decode("utf-8", "replace") in exclude:
            continue
        pairs.append((uri_encode(name_b), uri_encode(urllib.parse.unquote_to_bytes(value))))
    pairs.sort()
    return "&".join("%s=%s" % p for p in pairs)


_SPACES = re.compile(r" +")


def canonical_header_value(values):
    """Values of one header (a list, in request order): each trimmed, sequential
    spaces collapsed to one, joined with ','."""
    return ",".join(_SPACES.sub(" ", v.strip()) for v in values)


def canonical_request(method, raw_path, raw_query, headers, signed_headers, payload_hash):
    """headers: list of (name, value) as received; signed_headers: list of lower-case
    names. Returns the canonical request string (a missing signed header yields an
    empty value, so the signature then fails to match)."""
    by_name = {}
    for k, v in headers:
        by_name.setdefault(k.lower(), []).append(v)
    names = sorted(signed_headers)
    lines = ["%s:%s\n" % (n, canonical_header_value(by_name.get(n, []))) for n in names]
    return "\n".join([
        method,
        canonical_uri(raw_path),
        canonical_query(raw_query),
        "".join(lines),
        ";".join(names),
        payload_hash,
    ])


def string_to_sign(amz_date, scope, canon_req):
    return "\n".join([ALGORITHM, amz_date, scope,
                      hashlib.sha256(canon_req.encode("utf-8")).hexdigest()])


def signing_key(secret, date, region, service="s3"):
    k = hmac.new(("AWS4" + secret).encode("utf-8"), date.encode("utf-8"), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode("utf-8"), hashlib.sha256).digest()
    return k


def signature(secret, date, region, service, sts):
    return hmac.new(signing_key(secret, date, region, service), sts.encode("utf-8"),
                    hashlib.sha256).hexdigest()


def sign(method, raw_path, raw_query, headers, access_key, secret, region,
         service="s3", amz_date=None, payload_hash=EMPTY_SHA256, session_token=None,
         add_content_sha256=True, signed=None):
    """Sign a request the way an S3 client does. headers: list of (name, value)
    including Host. Adds x-amz-date, x-amz-content-sha256 (unless
    add_content_sha256 is False) and x-amz-security-token, then signs every header
    (signed=None) or host, every x-amz-* header and the names in `signed`. Returns the new header list (with
    Authorization) and the details dict (canonical_request, string_to_sign)."""
    amz_date = amz_date or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    hs = [(k, v) for k, v in headers if k.lower() not in (
        "authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token")]
    hs.append(("x-amz-date", amz_date))
    if add_content_sha256:
        hs.append(("x-amz-content-sha256", payload_hash))
    if session_token is not None:
        hs.append(("x-amz-security-token", session_token))
    if signed is None:
        names = {k.lower() for k, _ in hs}
    else:
        names = {k.lower() for k, _ in hs if k.lower() == "host" or k.lower().startswith("x-amz-")}
        names |= {n.lower() for n in signed}
    names = sorted(names)
    creq = canonical_request(method, raw_path, raw_query, hs, names, payload_hash)
    scope = "%s/%s/%s/aws4_request" % (amz_date[:8], region, service)
    sts = string_to_sign(amz_date, scope, creq)
    sig = signature(secret, amz_date[:8], region, service, sts)
    hs.append(("Authorization", "%s Credential=%s/%s,SignedHeaders=%s,Signature=%s"
               % (ALGORITHM, access_key, scope, ";".join(names), sig)))
    return hs, {"canonical_request": creq, "string_to_sign": sts, "signature": sig}


class S3Error(Exception):
    def __init__(self, status, code, message, **extra):
        super().__init__("%d %s: %s" % (status, code, message))
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra  # element name -> text (order kept)
        self.headers = []


def parse_authorization(value):
    """'AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/SERVICE/aws4_request,
    SignedHeaders=a;b, Signature=hex' -> dict, or raises S3Error (400)."""
    value = value.strip()
    alg, _, rest = value.partition(" ")
    if alg != ALGORITHM:
        raise S3Error(400, "InvalidArgument", "Unsupported Authorization Type",
                      ArgumentName="Authorization", ArgumentValue=value)
    comps = {}
    for part in rest.split(","):
        part = part.strip()
        if not part:
            continue
        k, eq, v = part.partition("=")
        if not eq or k in comps:
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; the authorization component "
                          "\"%s\" is malformed." % part)
        comps[k] = v
    for need in ("Credential", "SignedHeaders", "Signature"):
        if need not in comps:
            raise S3Error(400, "AuthorizationHeaderMalformed",
                          "The authorization header is malformed; the authorization header "
                          "requires three components: Credential, SignedHeaders, and Signature.")
    cred = comps["Credential"].split("/")
    if len(cred) != 5 or not all(cred):
        raise S3Error(400, "AuthorizationHeaderMalformed",
                      "The authorization header is malformed; the Credential is mal-formed; "
                      "expecting \"<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request\".")
    return {"access_key": cred[0], "date": cred[1], "region": cred[2], "service": cred[3],
            "terminator": cred[4], "signed_headers": comps["SignedHeaders"].split(";"),
            "signature": comps["Signature"]}


def parse_amz_date(v):
    try:
        return calendar.timegm(time.strptime(v, "%Y%m%dT%H%M%SZ"))
    except (ValueError, TypeError):
        return None


def check_region(auth, region, region_error, bucket):
    if region is None or auth["region"] == region:
        return
    if region_error == 301:
        e = S3Error(301, "PermanentRedirect",
                    "The bucket you are attempting to access must be addressed using the "
                    "specified endpoint. Please send all future requests to this endpoint.",
                    Bucket=bucket or "", Endpoint="s3.%s.amazonaws.com" % region)
    else:
        e = S3Error(400, "AuthorizationHeaderMalformed",
                    "The authorization header is malformed; the region '%s' is wrong; "
                    "expecting '%s'" % (auth["region"], region), Region=region)
    e.headers.append(("x-amz-bucket-region", region))
    raise e


def verify(method, raw_path, raw_query, headers, creds, region, session_token=None,
           now=None, max_skew=900, body_sha256=None, region_error=400, bucket=None,
           service="s3"):
    """Verify a header-signed SigV4 request. headers: list of (name, value) as
    received; creds: {access_key: secret}. Returns the details dict; raises S3Error
    with AWS's code on failure. body_sha256: hex digest of the received body when
    there is one (checked against x-amz-content-sha256)."""
    hdr = {}
    for k, v in headers:
        hdr.setdefault(k.lower(), []).append(v)
    authz = hdr.get("authorization")
    if not authz:
        raise S3Error(403, "AccessDenied", "Access Denied")
    auth = parse_authorization(authz[0])
    check_region(auth, region, region_error, bucket)
    if auth["access_key"] not in creds:
        raise S3Error(403, "InvalidAccessKeyId",
                      "The AWS Access Key Id you provided does not exist in our records.",
                      AWSAccessKeyId=auth["access_key"])
    if auth["service"] != service or auth["terminator"] != "aws4_request":
        raise S3Error(400, "AuthorizationHeaderMalformed",
                      "The authorization header is malformed; incorrect service \"%s\". This "
                      "endpoint belongs to \"%s\"." % (auth["service"], service)
                      if auth["service"] != service else
                      "The authorization header is malformed; incorrect terminal \"%s\". This "
                      "endpoint uses \"aws4_request\"." % auth["terminator"])
    if "x-amz-date" in hdr:
        amz_date = hdr["x-amz-date"][0].strip()
        t = parse_amz_date(amz_date)
    elif "date" in hdr:
        d = email.utils.parsedate_tz(hdr["date"][0])
        t = email.utils.mktime_tz(d) if d else None
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t)) if t is not None else ""
    else:
        t, amz_date = None, ""
    if t is None:
        raise S3Error(403, "AccessDenied",
                      "AWS authentication requires a valid Date or x-amz-date header")
    if auth["date"] != amz_date[:8]:
        raise S3Error(400, "AuthorizationHeaderMalformed",
                      "The authorization header is malformed; Invalid credential date. Date is "
                      "not the same as X-Amz-Date.")
    now = time.time() if now is None else now
    if abs(now - t) > max_skew:
        raise S3Error(403, "RequestTimeTooSkewed",
                      "The difference between the request time and the current time is too "
                      "large.", RequestTime=amz_date,
                      ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                      MaxAllowedSkewMilliseconds=str(max_skew * 1000))
    if "x-amz-content-sha256" not in hdr and service == "s3":
        raise S3Error(400, "InvalidRequest",
                      "Missing required header for this request: x-amz-content-sha256")
    payload = hdr["x-amz-content-sha256"][0].strip() if "x-amz-content-sha256" in hdr \
        else (body_sha256 or EMPTY_SHA256)
    if payload != "UNSIGNED-PAYLOAD":
        if not re.fullmatch(r"[0-9a-f]{64}", payload):
            raise S3Error(400, "InvalidArgument",
                          "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, "
                          "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, or a valid sha256 value.",
                          ArgumentName="x-amz-content-sha256", ArgumentValue=payload)
        actual = body_sha256 if body_sha256 is not None else EMPTY_SHA256
        if payload != actual:
            raise S3Error(400, "XAmzContentSHA256Mismatch",
                          "The provided 'x-amz-content-sha256' header does not match what "
                          "was computed.", ClientComputedContentSHA256=payload,
                          S3ComputedContentSHA256=actual)
    signed = auth["signed_headers"]
    if "host" not in signed:
        raise S3Error(403, "AccessDenied", "Host header is not signed")  # never valid
    unsigned = sorted(n for n in hdr if n.startswith("x-amz-") and n not in signed)
    if unsigned:
        raise S3Error(403, "AccessDenied",
                      "There were headers present in the request which were not signed",
                      HeadersNotSigned=", ".join(unsigned))
    if session_token is not None:
        tok = hdr.get("x-amz-security-token")
        if not tok or tok[0].strip() != session_token:
            raise S3Error(403, "InvalidToken",
                          "The provided token is malformed or otherwise invalid.")
    elif "x-amz-security-token" in hdr:
        raise S3Error(403, "InvalidToken",
                      "The provided token is malformed or otherwise invalid.")
    creq = canonical_request(method, raw_path, raw_query, headers,
                             [n.lower() for n in signed], payload)
    scope = "%s/%s/%s/%s" % (auth["date"], auth["region"], auth["service"], auth["terminator"])
    sts = string_to_sign(amz_date, scope, creq)
    want = signature(creds[auth["access_key"]], auth["date"], auth["region"], auth["service"], sts)
    details = {"canonical_request": creq, "string_to_sign": sts, "signature": want,
               "access_key": auth["access_key"]}
    if signed != sorted(set(signed)) or not hmac.compare_digest(want, auth["signature"]):
        raise S3Error(403, "SignatureDoesNotMatch",
                      "The request signature we calculated does not match the signature you "
                      "provided. Check your key and signing method.",
                      AWSAccessKeyId=auth["access_key"], StringToSign=sts,
                      SignatureProvided=auth["signature"],
                      StringToSignBytes=" ".join("%02x" % b for b in sts.encode()),
                      CanonicalRequest=creq,
                      CanonicalRequestBytes=" ".join("%02x" % b for b in creq.encode()))
    return details


# =========================================================================== store

class Obj:
    __slots__ = ("key", "path", "size", "mtime", "md5", "meta", "checksum", "ctype",
                 "source", "sig", "cache_control")

    @property
    def etag(self):
        return '"%s"' % self.md5


class Bucket:
    def __init__(self, name):
        self.name = name
        self.objs = {}
        self._keys = None

    def keys(self):
        if self._keys is None:
            self._keys = sorted(self.objs)
        return self._keys

    def put(self, o):
        if o.key not in self.objs:
            self._keys = None
        self.objs[o.key] = o

    def remove(self, key):
        if self.objs.pop(key, None) is not None:
            self._keys = None


class Config:
    root = "."
    region = "us-east-1"
    region_error = 400
    creds = {}
    session_token = None
    public = set()
    max_skew = 900
    etag_mode = "md5"
    blobdir = None
    ignore_if_none_match = False  # s3opts: write over an existing key anyway (as s3rver)
    requester_pays = set()  # buckets whose requests must say x-amz-request-payer: requester
    owner = "111122223333"  # every bucket's owner, for x-amz-expected-bucket-owner


CFG = Config()
STORE = {}
STORE_LOCK = threading.RLock()
LISTS = []          # listing requests (dicts), guarded by up.STATE.lock
PUTS = [0]          # objects stored by S3 PUT, under up.STATE.lock
DELETES = [0, 0]    # keys deleted by DeleteObjects, and its requests; under up.STATE.lock
# Multipart uploads in progress: upload id -> {"bucket", "key", "parts": {n: (etag,
# checksum, bytes)}, "spec", "initiated"}; under STORE_LOCK. MIN_PART: S3's least size of
# a part but the last.
UPLOADS = {}
MIN_PART = 5 << 20
PAYER_SEEN = [0]    # requests that said x-amz-request-payer: requester, under up.STATE.lock
AUTH_FAILS = []     # recent auth failures, guarded by up.STATE.lock
AUTH_FAIL_COUNT = [0]
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


def file_md5(path, sig):
    if CFG.etag_mode == "fast":
        return hashlib.md5(("%s:%d:%d:%d" % ((path,) + sig)).encode()).hexdigest()
    return file_digest(path, "md5").hex()


def file_digest(path, algo):
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.digest()


def stat_sig(st):
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def load_sidecar(bucket):
    p = os.path.join(CFG.root, bucket + ".meta.json")
    try:
        with open(p) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def apply_meta(o, spec):
    """spec: {"sha256", "checksum_sha256", "meta", "content_type"} (all optional)."""
    o.meta = dict(spec.get("meta") or {})
    sha = spec.get("sha256")
    if sha == "auto":
        sha = file_digest(o.path, "sha256").hex()
    if sha:
        o.meta["sha256"] = sha
    ck = spec.get("checksum_sha256")
    if ck == "auto":
        ck = base64.b64encode(file_digest(o.path, "sha256")).decode()
    o.checksum = ck or None
    o.ctype = spec.get("content_type") or "application/octet-stream"


def merged_spec(side, key):
    spec = dict(side.get("*") or {})
    spec.update(side.get(key) or {})
    return spec


def import_file(bucket, key, full, st, old, side):
    o = Obj()
    o.key, o.path, o.source = key, full, "root"
    o.sig = stat_sig(st)
    o.size = st.st_size
    o.mtime = st.st_mtime
    if old is not None and old.source == "root" and old.sig == o.sig and old.path == full:
        o.md5 = old.md5
    else:
        o.md5 = file_md5(full, o.sig)
    apply_meta(o, merged_spec(side, key))
    return o


def rescan():
    root = CFG.root
    with STORE_LOCK:
        names = set()
        for name in sorted(os.listdir(root)):
            if os.path.isdir(os.path.join(root, name)):
                names.add(name)
        for name in list(STORE):
            b = STORE[name]
            if name not in names and not any(o.source == "blob" for o in b.objs.values()):
                del STORE[name]
        for name in names:
            b = STORE.setdefault(name, Bucket(name))
            side = load_sidecar(name)
            seen = set()
            base = os.path.join(root, name)
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames.sort()
                for fn in filenames:
                    full = os.path.join(dirpath, fn)
                    try:
                        st = os.stat(full)
                    except OSError:
                        continue
                    if not os.path.isfile(full):
                        continue
                    key = os.path.relpath(full, base).replace(os.sep, "/")
                    old = b.objs.get(key)
                    if old is not None and old.source == "blob":
                        continue
                    b.put(import_file(name, key, full, st, old, side))
                    seen.add(key)
            for key in [k for k, o in b.objs.items() if o.source == "root" and k not in seen]:
                b.remove(key)


def refresh(bucket, o):
    """Re-stat a root-backed object; returns the current Obj or None if gone."""
    if o.source != "root":
        return o
    try:
        st = os.stat(o.path)
    except OSError:
        with STORE_LOCK:
            b = STORE.get(bucket)
            if b is not None and b.objs.get(o.key) is o:
                b.remove(o.key)
        return None
    if stat_sig(st) == o.sig:
        return o
    with STORE_LOCK:
        n = import_file(bucket, o.key, o.path, st, o, load_sidecar(bucket))
        b = STORE.get(bucket)
        if b is not None and b.objs.get(o.key) is o:
            b.put(n)
    return n


def create_bucket(name):
    with STORE_LOCK:
        if name not in STORE:
            os.makedirs(os.path.join(CFG.root, name), exist_ok=True)
            STORE[name] = Bucket(name)
        return STORE[name]


def put_blob(bucket, key, data=None, src=None, spec=None):
    """Store an object in the blob dir under any key. Returns the Obj."""
    fd, path = tempfile.mkstemp(dir=CFG.blobdir)
    with os.fdopen(fd, "wb") as f:
        if src is not None:
            with open(src, "rb") as s:
                shutil.copyfileobj(s, f, 1 << 20)
        else:
            f.write(data)
    st = os.stat(path)
    o = Obj()
    o.key, o.path, o.source = key, path, "blob"
    o.sig = stat_sig(st)
    o.size = st.st_size
    o.mtime = time.time()
    o.md5 = file_md5(path, o.sig)
    apply_meta(o, spec or {})
    o.cache_control = (spec or {}).get("cache_control")
    with STORE_LOCK:
        b = create_bucket(bucket)
        b.put(o)  # in-flight GETs keep their open fd of the previous version
    return o


def lookup(bucket, key):
    with STORE_LOCK:
        b = STORE.get(bucket)
        if b is None:
            return None, None
        return b, b.objs.get(key)


# =========================================================================== listing

TOKEN_MAGIC = b"\xfb\xff\xbf"  # base64 "+/+/": clients must URL-encode the token


def make_token(bucket, prefix, delim, after, is_cp):
    raw = TOKEN_MAGIC + json.dumps({"b": bucket, "p": prefix, "d": delim, "a": after,
                                    "c": is_cp}).encode()
    while len(raw) % 3 != 1:  # always ends in "=="
        raw += b" "
    return base64.b64encode(raw).decode()


def read_token(tok, bucket, prefix, delim):
    try:
        raw = base64.b64decode(tok, validate=True)
        if not raw.startswith(TOKEN_MAGIC):
            raise ValueError
        d = json.loads(raw[len(TOKEN_MAGIC):])
        if d["b"] != bucket or d["p"] != prefix or d["d"] != delim:
            raise ValueError
        return d["a"], bool(d["c"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise S3Error(400, "InvalidArgument", "The continuation token provided is incorrect",
                      ArgumentName="continuation-token", ArgumentValue=tok)


def list_page(b, prefix, delim, after, after_is_cp, max_keys):
    """Returns (contents [Obj], common_prefixes [str], truncated, last (name, is_cp))."""
    with STORE_LOCK:
        keys = b.keys()
        objs = b.objs
        i = bisect.bisect_left(keys, prefix)
        if after:
            i = max(i, bisect.bisect_right(keys, after))
        contents, cps = [], []
        last_cp = after if after_is_cp else None
        last = None
        truncated = False
        n = 0
        while i < len(keys):
            k = keys[i]
            i += 1
            if not k.startswith(prefix):
                break
            entry, is_cp = k, False
            if delim:
                j = k.find(delim, len(prefix))
                if j >= 0:
                    entry, is_cp = k[:j + len(delim)], True
                    if entry == last_cp:
                        continue
            if n >= max_keys:
                truncated = True
                break
            n += 1
            if is_cp:
                cps.append(entry)
                last_cp = entry
            else:
                contents.append(objs[k])
            last = (entry, is_cp)
        return contents, cps, truncated, last


_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def xesc(s):
    s = str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") \
        .replace('"', "&quot;")
    return _BAD_XML.sub(lambda m: "&#x%X;" % ord(m.group()), s)


def el(name, text):
    return "<%s>%s</%s>" % (name, xesc(text), name)


def iso8601(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (int(t * 1000) % 1000)


def url_enc(s):
    return urllib.parse.quote_plus(s, safe="/")


# =========================================================================== HTTP

def request_id():
    return secrets.token_hex(8).upper()


def credentials_for(authz):
    """(creds {access key: secret}, session token or None) to verify a request with: the
    temporary credentials creds_endpoints issued (expired ones raise 400 ExpiredToken), else
    the server's --verify-sigv4 keys and --session-token."""
    try:
        ak = parse_authorization(authz)["access_key"] if authz else None
    except S3Error:
        ak = None
    try:
        temp = ce.temp_secret(ak) if ak else None
    except ce.CredsError as e:
        raise S3Error(e.status, e.code, e.message, **{"Token-0": "(expired)"})
    if temp is not None:
        return {ak: temp[0]}, temp[1]
    return CFG.creds, CFG.session_token


class S3Handler(up.Handler):
    server_version = "spoolfs-test-s3/1"

    # ------------------------------------------------------------ plumbing
    def _raw(self):
        p = self.path
        if p.startswith("http://") or p.startswith("https://"):
            p = "/" + p.split("/", 3)[3] if p.count("/") >= 3 else "/"
        raw_path, _, raw_query = p.partition("?")
        return raw_path, raw_query

    def _target(self):
        """-> (bucket or "", key or "", query dict (last value wins), raw_path, raw_query)."""
        raw_path, raw_query = self._raw()
        try:
            path = urllib.parse.unquote_to_bytes(raw_path).decode("utf-8")
        except UnicodeDecodeError:
            raise S3Error(400, "InvalidURI", "Couldn't parse the specified URI.",
                          URI=raw_path)
        path = path[1:] if path.startswith("/") else path
        bucket, _, key = path.partition("/")
        q = {}
        for part in raw_query.split("&"):
            if part:
                k, _, v = part.partition("=")
                q[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
        return bucket, key, q, raw_path, raw_query

    def _send_xml_error(self, e, head=False, resource=""):
        rid = request_id()
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>%s%s%s%s%s%s</Error>'
                % (el("Code", e.code), el("Message", e.message),
                   "".join(el(k, v) for k, v in e.extra.items()),
                   el("Resource", resource) if resource and "Resource" not in e.extra else "",
                   el("RequestId", rid), el("HostId", base64.b64encode(
                       secrets.token_bytes(24)).decode())))
        body = body.encode()
        self.send_response(e.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", rid)
        for k, v in e.headers:
            self.send_header(k, v)
        if head:
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.connection.sendall(body)

    def _read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise S3Error(411, "MissingContentLength",
                          "You must provide the Content-Length HTTP header.")
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _authenticate(self, method, bucket, raw_path, raw_query, body_sha=None, q=None):
        """Region check for any SigV4 request; full verification when configured."""
        authz = self.headers.get("Authorization")
        hdrs = list(self.headers.items())
        if not CFG.creds:
            if authz and authz.strip().startswith(ALGORITHM):
                auth = parse_authorization(authz)
                if not (q is not None and "location" in q and auth["region"] == "us-east-1"):
                    check_region(auth, CFG.region, CFG.region_error, bucket)
            return
        if not authz and bucket in CFG.public and method in ("GET", "HEAD"):
            return
        region = CFG.region
        if q is not None and "location" in q and authz:
            try:
                if parse_authorization(authz)["region"] == "us-east-1":
                    region = "us-east-1"
            except S3Error:
                pass
        creds, token = credentials_for(authz)
        verify(method, raw_path, raw_query, hdrs, creds, region, token,
               max_skew=CFG.max_skew, body_sha256=body_sha, region_error=CFG.region_error,
               bucket=bucket)
        self._bucket_options(bucket)

    def _bucket_options(self, bucket):
        """--requester-pays and --expected-bucket-owner, as S3 answers them."""
        payer = self.headers.get("x-amz-request-payer")
        if payer == "requester":
            with up.STATE.lock:
                PAYER_SEEN[0] += 1
        if bucket in CFG.requester_pays and payer != "requester":
            raise S3Error(403, "AccessDenied", "Access Denied")
        owner = self.headers.get("x-amz-expected-bucket-owner")
        if owner is not None and owner != CFG.owner:
            raise S3Error(403, "AccessDenied", "Access Denied")

    def _record_auth_failure(self, e, method, raw_path, raw_query):
        with up.STATE.lock:
            AUTH_FAIL_COUNT[0] += 1
            AUTH_FAILS.append({"code": e.code, "status": e.status, "message": e.message,
                               "method": method, "path": raw_path, "query": raw_query,
                               "canonical_request": e.extra.get("CanonicalRequest"),
                               "string_to_sign": e.extra.get("StringToSign"),
                               "region": e.extra.get("Region")})
            del AUTH_FAILS[:-100]

    def _take_fail(self, rel):
        """Consume an injected fail_status for rel (as upstream.py). -> (code, retry) or None."""
        st = up.STATE
        with st.lock:
            return up.take_fail(st.faults.get(rel, {}))

    @staticmethod
    def _injected(code, retry):
        names = {400: "InvalidRequest", 403: "AccessDenied", 404: "NoSuchKey",
                 409: "OperationAborted", 500: "InternalError", 503: "SlowDown"}
        msgs = {403: "Access Denied", 500: "We encountered an internal error. Please try again.",
                503: "Please reduce your request rate."}
        e = S3Error(code, names.get(code, "InjectedError"),
                    msgs.get(code, "injected failure %d" % code))
        if retry is not None:
            e.headers.append(("Retry-After", retry))
        return e

    # ------------------------------------------------------------ control
    def _ctl(self, method, path, query):
        name = path[len(up.CTL):].strip("/")
        if method == "GET" and name == "stats" and "path" not in urllib.parse.parse_qs(query):
            st = up.STATE
            with st.lock:
                snaps = {p: st.snapshot(p) for p in st.stats}
                objs = {p: s for p, s in snaps.items() if not p.endswith("/") or "/" in p[:-1]}
                lists = {p: s for p, s in snaps.items() if p not in objs}
                out = {"paths": objs, "lists": lists,
                       "total_gets": sum(s["gets"] for s in objs.values()),
                       "total_heads": sum(s["heads"] for s in objs.values()),
                       "total_bytes": sum(s["bytes"] for s in objs.values()),
                       "total_lists": sum(s["gets"] + s["heads"] for s in lists.values()),
                       "total_puts": PUTS[0], "total_deletes": DELETES[0],
                       "delete_requests": DELETES[1],
                       "auth_failures": AUTH_FAIL_COUNT[0]}
            return self._json(200, out)
        if name == "creds":
            if method == "POST":
                ce.control(self._ctl_body())
            out = ce.snapshot()
            with up.STATE.lock:
                out["payer_seen"] = PAYER_SEEN[0]
            return self._json(200, out)
        if method == "POST" and name == "s3opts":
            body = self._ctl_body()
            with STORE_LOCK:
                if "requester_pays" in body:
                    CFG.requester_pays = set(body["requester_pays"])
                if "owner" in body:
                    CFG.owner = body["owner"]
                if "ignore_if_none_match" in body:
                    CFG.ignore_if_none_match = bool(body["ignore_if_none_match"])
            return self._json(200, {})
        if method == "GET" and name == "uploads":
            with STORE_LOCK:
                out = [{"bucket": u["bucket"], "key": u["key"], "upload_id": uid,
                        "parts": sorted(u["parts"])} for uid, u in UPLOADS.items()]
            return self._json(200, out)
        if method == "GET" and name == "lists":
            with up.STATE.lock:
                out = [dict(r) for r in LISTS]  # a request still running sets its status
            return self._json(200, out)
        if method == "GET" and name == "auth":
            with up.STATE.lock:
                out = list(AUTH_FAILS)
            return self._json(200, out)
        if method == "GET" and name == "objects":
            b = urllib.parse.parse_qs(query).get("bucket", [""])[0]
            with STORE_LOCK:
                bk = STORE.get(b)
                if bk is None:
                    return self._json(404, {"error": "no such bucket"})
                out = {k: {"size": o.size, "etag": o.etag, "source": o.source}
                       for k, o in bk.objs.items()}
            return self._json(200, out)
        if method == "POST" and name == "age":
            body = self._ctl_body()
            with STORE_LOCK:
                b = STORE.get(body["bucket"])
                for o in (b.objs.values() if b is not None else ()):
                    if o.key.startswith(body.get("prefix", "")):
                        o.mtime -= float(body["seconds"])
                for u in UPLOADS.values():
                    u["initiated"] -= float(body["seconds"])
            return self._json(200, {})
        if method == "POST" and name in ("put", "delete", "bucket", "rescan"):
            try:
                body = self._ctl_body()
            except (ValueError, json.JSONDecodeError) as e:
                return self._json(400, {"error": str(e)})
            try:
                return self._ctl_store(name, body)
            except (ValueError, KeyError, TypeError, OSError, binascii.Error) as e:
                return self._json(400, {"error": "%s: %s" % (type(e).__name__, e)})
        if method == "POST" and name == "reset":
            with up.STATE.lock:
                LISTS.clear()
                AUTH_FAILS.clear()
                AUTH_FAIL_COUNT[0] = 0
        return super()._ctl(method, path, query)

    def _ctl_store(self, name, body):
        if name == "rescan":
            rescan()
            return self._json(200, {})
        bucket = body["bucket"]
        if not isinstance(bucket, str) or not bucket or "/" in bucket or bucket in (".", ".."):
            raise ValueError("bad bucket name %r" % (bucket,))
        if name == "bucket":
            create_bucket(bucket)
            return self._json(200, {})
        key = body["key"]
        if not isinstance(key, str) or not key:
            raise ValueError("key must be a non-empty string")
        if name == "delete":
            with STORE_LOCK:
                b = STORE.get(bucket)
                if b is not None:
                    b.remove(key)
            return self._json(200, {})
        spec = {k: body.get(k) for k in ("sha256", "checksum_sha256", "meta", "content_type")}
        if "data_b64" in body:
            o = put_blob(bucket, key, data=base64.b64decode(body["data_b64"]), spec=spec)
        elif "data" in body:
            o = put_blob(bucket, key, data=body["data"].encode("utf-8"), spec=spec)
        elif "src" in body:
            o = put_blob(bucket, key, src=body["src"], spec=spec)
        else:
            raise ValueError("one of data_b64, data, src is required")
        up.log("put %s/%s %d bytes %s" % (bucket, key, o.size, o.etag))
        return self._json(200, {"etag": o.etag, "size": o.size})

    # ------------------------------------------------------------ verbs
    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_POST(self):
        raw_path, raw_query = self._raw()
        path = urllib.parse.unquote(raw_path)
        if path.startswith(up.CTL):
            return self._ctl("POST", path, raw_query)
        if path == "/":
            body = self._read_body()

            def verify_signed(sha):
                authz = self.headers.get("Authorization")
                creds, token = credentials_for(authz)
                verify("POST", raw_path, raw_query, list(self.headers.items()), creds, None,
                       token, max_skew=CFG.max_skew, body_sha256=sha, service="sts")
            return ce.handle_sts(self, body, verify_signed)
        try:
            bucket, key, q, raw_path, raw_query = self._target()
            if bucket and key and ("uploads" in q or "uploadId" in q):
                return self._multipart_post(bucket, key, q, raw_path, raw_query)
            if bucket and not key and "delete" in q:
                return self._delete_objects(bucket, raw_path, raw_query)
        except S3Error as e:
            return self._send_xml_error(e)
        self._read_body()
        self._send_xml_error(S3Error(405, "MethodNotAllowed",
                                     "The specified method is not allowed against this "
                                     "resource.", Method="POST"))

    def _dispatch(self, method):
        head = method == "HEAD"
        raw_path, raw_query = self._raw()
        plain = urllib.parse.unquote(raw_path)
        if plain.startswith(up.CTL) or plain.rstrip("/") == up.CTL.rstrip("/"):
            if method != "GET":
                return self._simple(405, head=head)
            return self._ctl("GET", plain, raw_query)
        if ce.handle_imds(self, method, plain):
            return
        if plain == "/_creds/container" and method == "GET":
            return ce.handle_container(self)
        if plain == "/_oidc/token" and method == "GET":
            return ce.handle_oidc(self, raw_query)
        if up.DELAY:  # --delay-ms: a store this far away, listings and objects alike
            time.sleep(up.DELAY)
        try:
            bucket, key, q, raw_path, raw_query = self._target()
        except S3Error as e:
            return self._send_xml_error(e, head)
        try:
            if method in ("PUT", "DELETE"):
                return self._write(method, bucket, key, q, raw_path, raw_query)
            if not bucket:
                self._authenticate(method, bucket, raw_path, raw_query)
                return self._list_buckets(head)
            if not key:
                return self._bucket_get(method, bucket, q, raw_path, raw_query)
            return self._object_get(head, bucket, key, raw_path, raw_query)
        except S3Error as e:
            if e.code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied",
                          "AuthorizationHeaderMalformed", "PermanentRedirect", "InvalidToken",
                          "RequestTimeTooSkewed", "XAmzContentSHA256Mismatch") \
                    and not getattr(e, "injected", False):
                self._record_auth_failure(e, method, raw_path, raw_query)
            up.log("%s %s -> %d %s" % (method, self.path, e.status, e.code))
            return self._send_xml_error(e, head, resource=urllib.parse.unquote(raw_path))
        except (ConnectionError, TimeoutError, OSError):
            self.close_connection = True

    # ------------------------------------------------------------ service/bucket
    def _send_xml(self, body, extra=(), head=False):
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id())
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.connection.sendall(body)

    def _list_buckets(self, head):
        with STORE_LOCK:
            names = sorted(STORE)
        items = "".join("<Bucket>%s%s</Bucket>" % (
            el("Name", n), el("CreationDate", iso8601(os.stat(os.path.join(CFG.root, n)).st_ctime
                                                      if os.path.isdir(os.path.join(CFG.root, n))
                                                      else time.time())))
            for n in names)
        self._send_xml('<ListAllMyBucketsResult xmlns="%s"><Owner><ID>spoolfs</ID>'
                       '<DisplayName>spoolfs</DisplayName></Owner><Buckets>%s</Buckets>'
                       '</ListAllMyBucketsResult>' % (XMLNS, items), head=head)

    def _bucket_get(self, method, bucket, q, raw_path, raw_query):
        if "uploads" in q:
            self._authenticate(method, bucket, raw_path, raw_query, q=q)
            prefix = q.get("prefix", "")
            with STORE_LOCK:
                ups = sorted((u["key"], uid, u["initiated"]) for uid, u in UPLOADS.items()
                             if u["bucket"] == bucket and u["key"].startswith(prefix))
            return self._send_xml(
                "<ListMultipartUploadsResult>%s%s%s</ListMultipartUploadsResult>" % (
                    el("Bucket", bucket), el("IsTruncated", "false"),
                    "".join("<Upload>%s%s%s</Upload>" % (
                        el("Key", k), el("UploadId", uid), el("Initiated", iso8601(t)))
                        for k, uid, t in ups)), head=method == "HEAD")
        return self._bucket_get_plain(method, bucket, q, raw_path, raw_query)

    def _bucket_get_plain(self, method, bucket, q, raw_path, raw_query):
        head = method == "HEAD"
        rel = bucket + "/"
        st = up.STATE
        self._count_request(rel, head, None)
        rec = {"bucket": bucket, "method": method, "query": q}
        # Logged as it arrives: a client's next request (the next page) may be answered
        # before this thread gets back from sending this one's answer.
        with st.lock:
            LISTS.append(rec)
        try:
            self._authenticate(method, bucket, raw_path, raw_query, q=q)
        except S3Error as e:
            self._status(rel, e.status)
            with st.lock:
                rec["status"] = e.status
            raise
        if not self._admit(rel):
            return
        status = None
        try:
            status = self._bucket_respond(head, bucket, q, rel)
        except S3Error as e:
            status = e.status
            self._status(rel, e.status)
            raise
        finally:
            with st.lock:
                st.stat(rel)["active"] -= 1
                rec["status"] = status

    def _bucket_respond(self, head, bucket, q, rel):
        fail = self._take_fail(rel)
        if fail is not None:
            e = self._injected(*fail)
            e.injected = True
            if e.code == "NoSuchKey":
                e = S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                            BucketName=bucket)
                e.injected = True
            raise e
        with STORE_LOCK:
            b = STORE.get(bucket)
        if b is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                          BucketName=bucket)
        region_hdr = [("x-amz-bucket-region", CFG.region)]
        if head:
            self._status(rel, 200)
            self._send_xml("", extra=region_hdr, head=True)
            return 200
        if "location" in q:
            loc = "" if CFG.region == "us-east-1" else CFG.region
            self._status(rel, 200)
            self._send_xml('<LocationConstraint xmlns="%s">%s</LocationConstraint>'
                           % (XMLNS, xesc(loc)))
            return 200
        body = self._listing(b, q)
        self._status(rel, 200)
        data = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-amz-request-id", request_id())
        for k, v in region_hdr:
            self.send_header(k, v)
        self.end_headers()
        fd = os.memfd_create("s3list")
        try:
            os.write(fd, data)
            self._send_body(rel, fd, len(data), 0, len(data))  # body faults apply
        finally:
            os.close(fd)
        return 200

    def _listing(self, b, q):
        v2 = q.get("list-type") == "2"
        if "list-type" in q and not v2:
            raise S3Error(400, "InvalidArgument", "Invalid List Type specified in Request",
                          ArgumentName="list-type", ArgumentValue=q["list-type"])
        prefix = q.get("prefix", "")
        delim = q.get("delimiter", "")
        enc = q.get("encoding-type")
        if enc is not None and enc != "url":
            raise S3Error(400, "InvalidArgument", "Invalid Encoding Method specified in Request",
                          ArgumentName="encoding-type", ArgumentValue=enc)
        mk = q.get("max-keys", str(MAX_KEYS))
        if not re.fullmatch(r"-?\d+", mk) or int(mk) < 0:
            raise S3Error(400, "InvalidArgument",
                          "Provided max-keys not an integer or within integer range",
                          ArgumentName="max-keys", ArgumentValue=mk)
        max_keys = min(int(mk), MAX_KEYS)
        enc_f = url_enc if enc == "url" else (lambda s: s)
        token = q.get("continuation-token") if v2 else None
        if v2 and "marker" in q:
            raise S3Error(400, "InvalidArgument",
                          "Marker unsupported with REST.GET.BUCKET in list-type=2",
                          ArgumentName="marker")
        if token is not None:
            after, after_cp = read_token(token, b.name, prefix, delim)
        elif v2:
            after, after_cp = q.get("start-after", ""), False
        else:
            after, after_cp = q.get("marker", ""), False
        if max_keys == 0:
            contents, cps, truncated, last = [], [], False, None
        else:
            contents, cps, truncated, last = list_page(b, prefix, delim, after, after_cp,
                                                       max_keys)
        x = ['<ListBucketResult xmlns="%s">' % XMLNS, el("Name", b.name),
             el("Prefix", enc_f(prefix))]
        if v2:
            if token is not None:
                x.append(el("ContinuationToken", token))
            if truncated:
                x.append(el("NextContinuationToken",
                            make_token(b.name, prefix, delim, last[0], last[1])))
            x.append(el("KeyCount", len(contents) + len(cps)))
        else:
            x.append(el("Marker", enc_f(after)))
            if truncated and delim:
                x.append(el("NextMarker", enc_f(last[0])))
        x.append(el("MaxKeys", max_keys))
        if delim:
            x.append(el("Delimiter", enc_f(delim)))
        if enc:
            x.append(el("EncodingType", enc))
        x.append(el("IsTruncated", "true" if truncated else "false"))
        if v2 and "start-after" in q and token is None:
            x.append(el("StartAfter", enc_f(q["start-after"])))
        owner = (not v2) or q.get("fetch-owner") == "true"
        for o in contents:
            x.append("<Contents>%s%s%s%s%s%s</Contents>" % (
                el("Key", enc_f(o.key)), el("LastModified", iso8601(o.mtime)),
                el("ETag", o.etag), el("Size", o.size),
                "<Owner><ID>spoolfs</ID><DisplayName>spoolfs</DisplayName></Owner>"
                if owner else "", el("StorageClass", "STANDARD")))
        for p in cps:
            x.append("<CommonPrefixes>%s</CommonPrefixes>" % el("Prefix", enc_f(p)))
        x.append("</ListBucketResult>")
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + "".join(x)

    # ------------------------------------------------------------ objects
    def _object_get(self, head, bucket, key, raw_path, raw_query):
        rel = bucket + "/" + key
        rng = self.headers.get("Range")
        st = up.STATE
        self._count_request(rel, head, rng)
        try:
            self._authenticate("HEAD" if head else "GET", bucket, raw_path, raw_query)
        except S3Error as e:
            self._status(rel, e.status)
            raise
        if not self._admit(rel):
            return
        try:
            self._object_respond(head, bucket, key, rel, rng)
        except S3Error as e:
            self._status(rel, e.status)
            raise
        finally:
            with st.lock:
                st.stat(rel)["active"] -= 1

    def _object_respond(self, head, bucket, key, rel, rng):
        fail = self._take_fail(rel)
        if fail is not None:
            e = self._injected(*fail)
            e.injected = True
            if e.code == "NoSuchKey":
                e.extra["Key"] = key
            raise e
        b, o = lookup(bucket, key)
        if b is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                          BucketName=bucket)
        if o is not None:
            o = refresh(bucket, o)
        if o is None:
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.", Key=key)
        try:
            fd = os.open(o.path, os.O_RDONLY)
        except OSError:
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.", Key=key)
        try:
            self._send_object(head, o, fd, rel, rng)
        finally:
            os.close(fd)

    def _send_object(self, head, o, fd, rel, rng):
        with up.STATE.lock:
            cfg = dict(up.STATE.faults.get(rel, {}))
        real_size = os.fstat(fd).st_size
        etag = cfg.get("etag") or o.etag
        lastmod = email.utils.formatdate(o.mtime, usegmt=True)
        size = cfg.get("size_lie", real_size)
        im = self._if_match(cfg)
        if im is not None and not up.etag_list_match(im, etag):
            e = S3Error(412, "PreconditionFailed",
                        "At least one of the pre-conditions you specified did not hold",
                        Condition="If-Match")
            e.headers.append(("ETag", etag))
            raise e
        inm = self.headers.get("If-None-Match")
        if inm is not None and up.etag_list_match(inm, etag):
            self._status(rel, 304)
            self.send_response(304)
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", lastmod)
            self.end_headers()
            return
        start, end, partial = 0, size, False
        if rng is not None and not cfg.get("ignore_range") and \
                up.if_range_holds(self.headers.get("If-Range"), etag, lastmod):
            r = up.parse_range(rng, size)
            if r == "416":
                e = S3Error(416, "InvalidRange", "The requested range is not satisfiable",
                            RangeRequested=rng, ActualObjectSize=str(size))
                e.headers += [("Content-Range", "bytes */%d" % size), ("ETag", etag),
                              ("Accept-Ranges", "bytes")]
                raise e
            if r is not None:
                start, end = r
                partial = True
        self._object_headers(rel, 206 if partial else 200, o.ctype, end - start, etag, lastmod)
        self.send_header("x-amz-request-id", request_id())
        for k, v in sorted(o.meta.items()):
            self.send_header("x-amz-meta-" + k, v)
        if getattr(o, "cache_control", None):
            self.send_header("Cache-Control", o.cache_control)
        if o.checksum and not partial and \
                (self.headers.get("x-amz-checksum-mode") or "").upper() == "ENABLED":
            self.send_header("x-amz-checksum-sha256", o.checksum)
            self.send_header("x-amz-checksum-type", "FULL_OBJECT")
        if partial:
            self._content_range(cfg, start, end, size)
        self.end_headers()
        if head or end == start:
            return
        self._send_body(rel, fd, real_size, start, end)

    # ------------------------------------------------------------ multipart
    def _multipart_post(self, bucket, key, q, raw_path, raw_query):
        """CreateMultipartUpload (?uploads) and CompleteMultipartUpload (?uploadId=)."""
        body = self._read_body()
        self._authenticate("POST", bucket, raw_path, raw_query,
                           body_sha=hashlib.sha256(body).hexdigest() if body else None)
        if lookup(bucket, key)[0] is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                          BucketName=bucket)
        if "uploads" in q:
            uid = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode()
            spec = {"checksum_sha256": None, "meta": {},
                    "content_type": self.headers.get("Content-Type"),
                    "cache_control": self.headers.get("Cache-Control")}
            with STORE_LOCK:
                UPLOADS[uid] = {"bucket": bucket, "key": key, "parts": {}, "spec": spec,
                                "initiated": time.time()}
            return self._send_xml(
                "<InitiateMultipartUploadResult>%s%s%s</InitiateMultipartUploadResult>"
                % (el("Bucket", bucket), el("Key", key), el("UploadId", uid)))
        uid = q["uploadId"]
        with STORE_LOCK:
            up_ = UPLOADS.get(uid)
        if up_ is None or up_["bucket"] != bucket or up_["key"] != key:
            raise S3Error(404, "NoSuchUpload", "The specified upload does not exist.",
                          UploadId=uid)
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed")
        wanted = []
        for part in root.iter():
            if part.tag.endswith("Part"):
                f = {c.tag.split("}")[-1]: (c.text or "") for c in part}
                wanted.append((int(f.get("PartNumber", "0")), f.get("ETag", "").strip(),
                               f.get("ChecksumSHA256")))
        if not wanted or [n for n, _, _ in wanted] != sorted({n for n, _, _ in wanted}):
            raise S3Error(400, "InvalidPartOrder", "The list of parts was not in ascending "
                          "order.")
        data = []
        for i, (n, etag, ck) in enumerate(wanted):
            have = up_["parts"].get(n)
            if have is None or have[0] != etag or (ck and have[1] and ck != have[1]):
                raise S3Error(400, "InvalidPart", "One or more of the specified parts could "
                              "not be found.", PartNumber=str(n))
            if i + 1 < len(wanted) and len(have[2]) < MIN_PART:
                raise S3Error(400, "EntityTooSmall", "Your proposed upload is smaller than "
                              "the minimum allowed object size.", PartNumber=str(n))
            data.append(have[2])
        o = put_blob(bucket, key, data=b"".join(data), spec=up_["spec"])
        with STORE_LOCK:
            UPLOADS.pop(uid, None)
        with up.STATE.lock:
            up.STATE.stat(bucket + "/" + key).setdefault("puts", 0)
            up.STATE.stat(bucket + "/" + key)["puts"] += 1
            PUTS[0] += 1
        return self._send_xml(
            "<CompleteMultipartUploadResult>%s%s%s</CompleteMultipartUploadResult>"
            % (el("Bucket", bucket), el("Key", key), el("ETag", o.etag)))

    def _multipart_write(self, method, bucket, key, q, body):
        """UploadPart (PUT ?partNumber=&uploadId=) and AbortMultipartUpload (DELETE)."""
        uid = q["uploadId"]
        with STORE_LOCK:
            up_ = UPLOADS.get(uid)
            if method == "DELETE" and up_ is not None:
                UPLOADS.pop(uid)
        if up_ is None or up_["bucket"] != bucket or up_["key"] != key:
            raise S3Error(404, "NoSuchUpload", "The specified upload does not exist.",
                          UploadId=uid)
        if method == "DELETE":
            return self._simple(204, b"")
        try:
            n = int(q.get("partNumber", ""))
        except ValueError:
            n = 0
        if not 1 <= n <= 10000:
            raise S3Error(400, "InvalidArgument", "Part number must be an integer between 1 "
                          "and 10000, inclusive")
        ck = self.headers.get("x-amz-checksum-sha256")
        if ck and ck != base64.b64encode(hashlib.sha256(body).digest()).decode():
            raise S3Error(400, "BadDigest", "The SHA256 you specified did not match the "
                          "calculated checksum.")
        etag = '"%s"' % hashlib.md5(body).hexdigest()
        with STORE_LOCK:
            up_["parts"][n] = (etag, ck, body)
        with up.STATE.lock:
            s = up.STATE.stat(bucket + "/" + key)
            s["parts"] = s.get("parts", 0) + 1
        return self._simple(200, b"", "application/xml", extra=[("ETag", etag)])

    # ------------------------------------------------------------ writes
    def _delete_objects(self, bucket, raw_path, raw_query):
        """DeleteObjects: <Delete><Quiet/>?<Object><Key/></Object>...</Delete>."""
        body = self._read_body()
        self._authenticate("POST", bucket, raw_path, raw_query,
                           body_sha=hashlib.sha256(body).hexdigest())
        md5 = self.headers.get("Content-MD5")
        ck = self.headers.get("x-amz-checksum-sha256")
        if not md5 and not ck:
            raise S3Error(400, "InvalidRequest", "Missing required header for this request: "
                          "Content-MD5")
        if (md5 and md5 != base64.b64encode(hashlib.md5(body).digest()).decode()) or \
                (ck and ck != base64.b64encode(hashlib.sha256(body).digest()).decode()):
            raise S3Error(400, "BadDigest", "The Content-MD5 you specified did not match what "
                          "we received.")
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed")
        ns = {"s": XMLNS} if root.tag.startswith("{") else {}
        pre = "s:" if ns else ""
        quiet = (root.findtext(pre + "Quiet", "", ns) or "").strip() == "true"
        keys = [o.findtext(pre + "Key", None, ns) for o in root.findall(pre + "Object", ns)]
        if not keys or len(keys) > 1000 or any(k is None for k in keys):
            raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed")
        b, _ = lookup(bucket, "")
        if b is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                          BucketName=bucket)
        with STORE_LOCK:
            for k in keys:
                b.remove(k)
        with up.STATE.lock:
            for k in keys:
                s = up.STATE.stat(bucket + "/" + k)
                s["deletes"] = s.get("deletes", 0) + 1
            DELETES[0] += len(keys)
            DELETES[1] += 1
        out = "" if quiet else "".join("<Deleted>%s</Deleted>" % el("Key", k)
                                       for k in keys)
        return self._send_xml('<DeleteResult xmlns="%s">%s</DeleteResult>' % (XMLNS, out))

    def _copy_object(self, bucket, key, src):
        """CopyObject: src is "/B/KEY" or "B/KEY", URL-encoded."""
        src = urllib.parse.unquote(src.split("?", 1)[0]).lstrip("/")
        sb, _, sk = src.partition("/")
        _, so = lookup(sb, sk)
        if so is not None:
            so = refresh(sb, so)
        if so is None:
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.", Key=sk)
        replace = (self.headers.get("x-amz-metadata-directive") or "COPY").upper() == \
            "REPLACE"
        if (sb, sk) == (bucket, key) and not replace:
            raise S3Error(400, "InvalidRequest", "This copy request is illegal because it is "
                          "trying to copy an object to itself without changing the object's "
                          "metadata, storage class, website redirect location or encryption "
                          "attributes.")
        with open(so.path, "rb") as f:
            data = f.read()
        spec = {"meta": {}, "sha256": None, "checksum_sha256": None,
                "content_type": self.headers.get("Content-Type") if replace else so.ctype,
                "cache_control": (self.headers.get("Cache-Control") if replace
                                  else so.cache_control)}
        o = put_blob(bucket, key, data=data, spec=spec)
        with up.STATE.lock:
            s = up.STATE.stat(bucket + "/" + key)
            s["copies"] = s.get("copies", 0) + 1
        return self._send_xml("<CopyObjectResult>%s%s</CopyObjectResult>" % (
            el("LastModified", iso8601(o.mtime)), el("ETag", o.etag)))

    def _put_faults(self, rel, body):
        """Faults of a PUT of rel, once its body is read: fail_status answers an error;
        gate holds it (counted in "gated"; nothing stored while it waits, and nothing if
        the client goes away); corrupt_at flips those bytes of the body as received, so
        the checksums must refuse it. -> the body, or None when the client went away."""
        fail = self._take_fail(rel)
        if fail is not None:
            e = self._injected(*fail)
            e.injected = True
            raise e
        if not self._gate(rel):
            self._abort()
            return None
        with up.STATE.lock:
            corrupt = list(up.STATE.faults.get(rel, {}).get("corrupt_at", ()))
        if corrupt:
            b = bytearray(body)
            for off in corrupt:
                if 0 <= off < len(b):
                    b[off] ^= 0xFF
            body = bytes(b)
        return body

    def _write(self, method, bucket, key, q, raw_path, raw_query):
        body = self._read_body() if method == "PUT" else b""
        if method == "PUT" and key:
            body = self._put_faults(bucket + "/" + key, body)
            if body is None:
                return
        body_sha = hashlib.sha256(body).hexdigest() if body else None
        self._authenticate(method, bucket, raw_path, raw_query, body_sha=body_sha)
        if not bucket:
            raise S3Error(405, "MethodNotAllowed",
                          "The specified method is not allowed against this resource.")
        if method == "PUT" and not key:
            if not BUCKET_RE.match(bucket):
                raise S3Error(400, "InvalidBucketName", "The specified bucket is not valid.",
                              BucketName=bucket)
            create_bucket(bucket)
            return self._simple(200, b"", "application/xml",
                                extra=[("Location", "/" + bucket)])
        b, o = lookup(bucket, key)
        if b is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist",
                          BucketName=bucket)
        if "uploadId" in q and key:
            return self._multipart_write(method, bucket, key, q, body)
        if method == "DELETE":
            if key:
                with STORE_LOCK:
                    b.remove(key)
            return self._simple(204, b"")
        if self.headers.get("x-amz-copy-source"):
            return self._copy_object(bucket, key, self.headers["x-amz-copy-source"])
        if (self.headers.get("x-amz-content-sha256") or "").startswith("STREAMING-"):
            raise S3Error(501, "NotImplemented",
                          "A header you provided implies functionality that is not implemented",
                          Header="x-amz-content-sha256")
        meta = {k[len("x-amz-meta-"):].lower(): v for k, v in self.headers.items()
                if k.lower().startswith("x-amz-meta-")}
        spec = {"meta": {k: v for k, v in meta.items() if k != "sha256"},
                "sha256": meta.get("sha256"),
                "checksum_sha256": self.headers.get("x-amz-checksum-sha256"),
                "content_type": self.headers.get("Content-Type"),
                "cache_control": self.headers.get("Cache-Control")}
        if spec["checksum_sha256"] and spec["checksum_sha256"] != base64.b64encode(
                hashlib.sha256(body).digest()).decode():
            raise S3Error(400, "BadDigest", "The SHA256 you specified did not match the "
                          "calculated checksum.")
        # If-None-Match: * (a conditional write): 412 when the key exists, unless the
        # server plays a store that ignores it (s3opts ignore_if_none_match, as s3rver).
        if (self.headers.get("If-None-Match") or "").strip() == "*" and o is not None \
                and not CFG.ignore_if_none_match:
            raise S3Error(412, "PreconditionFailed", "At least one of the pre-conditions "
                          "you specified did not hold", Condition="If-None-Match")
        o = put_blob(bucket, key, data=body, spec=spec)
        with up.STATE.lock:
            up.STATE.stat(bucket + "/" + key).setdefault("puts", 0)
            up.STATE.stat(bucket + "/" + key)["puts"] += 1
            PUTS[0] += 1
        return self._simple(200, b"", "application/xml", extra=[("ETag", o.etag)])


def main(argv=None):
    ap = argparse.ArgumentParser(description="spoolfs S3 test upstream")
    ap.add_argument("--root", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--region-error", type=int, choices=(301, 400), default=400)
    ap.add_argument("--verify-sigv4", action="append", default=[], metavar="AK:SECRET")
    ap.add_argument("--session-token")
    ap.add_argument("--public", action="append", default=[], metavar="BUCKET")
    ap.add_argument("--max-skew", type=int, default=900)
    ap.add_argument("--etag", choices=("md5", "fast"), default="md5")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="the certificate's private key (PEM)")
    ap.add_argument("--creds-lifetime", type=int, default=3,
                    help="seconds the temporary credentials it issues live")
    ap.add_argument("--delay-ms", type=float, default=0.0,
                    help="every S3 request (not /_ctl/) waits this long before its answer")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    if bool(a.tls_cert) != bool(a.tls_key):
        sys.stderr.write("s3_upstream: --tls-cert and --tls-key go together\n")
        return 2
    if a.tls_cert and not hasattr(up.Server, "tls"):
        sys.stderr.write("s3_upstream: this upstream.py has no TLS support\n")
        return 2
    up.VERBOSE = a.verbose
    up.DELAY = max(0.0, a.delay_ms) / 1000.0
    CFG.root = os.path.realpath(a.root)
    if not os.path.isdir(CFG.root):
        sys.stderr.write("s3_upstream: --root %s is not a directory\n" % a.root)
        return 2
    for c in a.verify_sigv4:
        ak, sep, sk = c.partition(":")
        if not sep or not ak or not sk:
            sys.stderr.write("s3_upstream: --verify-sigv4 wants ACCESS_KEY:SECRET\n")
            return 2
        CFG.creds[ak] = sk
    CFG.region = a.region
    CFG.region_error = a.region_error
    CFG.session_token = a.session_token
    CFG.public = set(a.public)
    CFG.max_skew = a.max_skew
    CFG.etag_mode = a.etag
    ce.CFG.lifetime = a.creds_lifetime
    CFG.blobdir = tempfile.mkdtemp(prefix="s3up-blobs-")
    rescan()
    up.serve(a.host, a.port, S3Handler, a.tls_cert, a.tls_key,
             cleanup=lambda: shutil.rmtree(CFG.blobdir, ignore_errors=True))


if __name__ == "__main__":
    sys.exit(main())
