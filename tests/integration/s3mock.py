"""A small path-style S3 mock on rawhttp.RawServer: ListObjectsV2 (delimiter "/", one page,
encoding-type=url) and object GETs, for answers the project's S3 test server
(tests/upstream/s3_upstream.py) will not give: ETags with control bytes, pages that repeat
their continuation token, a listed prefix echoed back, redirects, listings held at a gate.
It verifies no signature: a signed request is answered as an unsigned one.

    s3 = S3Mock({"d/f": b"bytes", "g": (b"x", '"etag"')})   # key -> bytes or (bytes, ETag)
    s3 = S3Mock(objects, list_hook=lh, get_hook=gh)
    s3.endpoint                   # http://127.0.0.1:PORT, for --endpoint
    s3.lists(prefix=None)         # [rawhttp.Request] of ListObjectsV2, in arrival order
    s3.gets(key)                  # [rawhttp.Request] of the object key
    s3.srv                        # the RawServer (wait_for, requests, ...)
    s3.stop()

list_hook(ex, prefix, token) and get_hook(ex, key) answer a request themselves and return
True/False (keep the connection or not), or return None for the default answer: the
listing of the objects under prefix, or the object (Range, If-Match: 412 on a mismatch).
A hook may wait on a gate first (ex.wait(event)) and then return None.
listing_xml() builds a page of any content, for a hook to send with send_listing().
"""

import hashlib
import urllib.parse
from xml.sax.saxutils import escape

from rawhttp import RawServer, serve_object

BUCKET = "bkt"
LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
HTTP_DATE = "Mon, 01 Jan 2024 00:00:00 GMT"


def md5_etag(data):
    return '"%s"' % hashlib.md5(data).hexdigest()


def xml_text(s):
    """Element text: CR and LF as character references, which the XML parser returns as
    such (a literal CR LF would be normalized to LF)."""
    return escape(s, {"\r": "&#13;", "\n": "&#10;"})


def url_key(key):
    """A key as encoding-type=url gives it (AWS writes a space as "+")."""
    return urllib.parse.quote_plus(key, safe="/")


def listing_xml(prefix, objects=(), prefixes=(), truncated=False, token=None, bucket=BUCKET):
    """A ListObjectsV2 page: objects are (key, size, etag), prefixes CommonPrefixes; keys and
    prefixes are url-encoded (EncodingType url), the ETag is sent as given."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           "<Name>%s</Name><Prefix>%s</Prefix>" % (bucket, xml_text(url_key(prefix))),
           "<KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>"
           % (len(objects) + len(prefixes)),
           "<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false")]
    if token is not None:
        out.append("<NextContinuationToken>%s</NextContinuationToken>" % xml_text(token))
    out.append("<EncodingType>url</EncodingType>")
    for key, size, etag in objects:
        out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>%s</ETag>"
                   "<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
                   % (xml_text(url_key(key)), LAST_MODIFIED, xml_text(etag), size))
    for p in prefixes:
        out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>"
                   % xml_text(url_key(p)))
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def send_listing(ex, body):
    ex.send(200, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            body)
    return True


class S3Mock:
    def __init__(self, objects=(), list_hook=None, get_hook=None, bucket=BUCKET):
        self.bucket = bucket
        self.objects = {}  # key -> (bytes, etag)
        for key, v in dict(objects).items():
            self.objects[key] = v if isinstance(v, tuple) else (v, md5_etag(v))
        self.list_hook = list_hook
        self.get_hook = get_hook
        routes = {"/" + bucket: self._list, "/" + bucket + "/": self._list}
        for key in self.objects:
            routes[self.key_path(key)] = self._get
        self.srv = RawServer(routes)
        self.endpoint = "http://127.0.0.1:%d" % self.srv.port

    def key_path(self, key):
        """The request path of an object (keys are sent percent-encoded, "/" kept)."""
        return "/%s/%s" % (self.bucket, urllib.parse.quote(key, safe="/-_.~"))

    def lists(self, prefix=None):
        return [r for r in self.srv.requests() if r.path in ("/" + self.bucket,
                                                             "/" + self.bucket + "/")
                and r.query().get("list-type") == "2"
                and (prefix is None or r.query().get("prefix", "") == prefix)]

    def gets(self, key):
        return self.srv.requests(self.key_path(key))

    def entries(self, prefix):
        """(objects, prefixes) of a delimiter "/" listing of prefix."""
        objs, prefs = [], []
        for key in sorted(self.objects):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if "/" in rest:
                p = prefix + rest.split("/", 1)[0] + "/"
                if p not in prefs:
                    prefs.append(p)
            else:
                data, etag = self.objects[key]
                objs.append((key, len(data), etag))
        return objs, prefs

    def _list(self, ex):
        q = ex.req.query()
        prefix, token = q.get("prefix", ""), q.get("continuation-token")
        if self.list_hook:
            r = self.list_hook(ex, prefix, token)
            if r is not None:
                return r
        objs, prefs = self.entries(prefix)
        return send_listing(ex, listing_xml(prefix, objs, prefs, bucket=self.bucket))

    def _get(self, ex):
        key = urllib.parse.unquote(ex.req.path[len(self.bucket) + 2:])
        if self.get_hook:
            r = self.get_hook(ex, key)
            if r is not None:
                return r
        data, etag = self.objects[key]
        if ex.req.h("if-match") not in (None, etag):
            body = b"<Error><Code>PreconditionFailed</Code></Error>"
            ex.send(412, [("Content-Length", str(len(body)))], body)
            return True
        return serve_object(ex, data, [("ETag", etag), ("Last-Modified", HTTP_DATE)])

    def stop(self):
        self.srv.stop()
