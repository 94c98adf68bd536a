"""Self-tests of the temporary credentials the S3 test upstream issues
(creds_endpoints.py): STS, IMDSv2, container credentials, GitHub's OIDC token endpoint,
and S3's answers to expired or wrong credentials.
Run: /usr/bin/python3 -m pytest -q tests/upstream/test_creds_endpoints.py
"""

import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3_upstream as s3u  # noqa: E402
from s3_client import S3Upstream, parse_error  # noqa: E402

AK = "AKIDCREDSSELFTEST01"
SK = "self/test+secret=0123456789"
NS = "{https://sts.amazonaws.com/doc/2011-06-15/}"


@pytest.fixture
def srv(tmp_path):
    (tmp_path / "bkt").mkdir()
    (tmp_path / "bkt" / "o.txt").write_bytes(b"object")
    s = S3Upstream(tmp_path, verify=(AK, SK), extra_args=["--creds-lifetime", "2"])
    s.temp_creds(web_tokens=["web-tok"], container_token="ctok", oidc_request_token="gh")
    yield s
    s.stop()


def http(method, url, headers=None, data=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sts_creds(body):
    root = ET.fromstring(body)
    c = root.find(".//%sCredentials" % NS)
    return {k: c.find(NS + k).text for k in
            ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}


def web_identity(srv, token="web-tok"):
    form = urllib.parse.urlencode({"Action": "AssumeRoleWithWebIdentity",
                                   "Version": "2011-06-15", "RoleArn": "arn:aws:iam::1:role/r",
                                   "RoleSessionName": "t", "WebIdentityToken": token})
    return http("POST", srv.endpoint + "/", data=form.encode())


def get_with(srv, c):
    return srv.s3_request("GET", "bkt", "o.txt", creds=(c["AccessKeyId"], c["SecretAccessKey"]),
                          session_token=c["SessionToken"])


def test_web_identity_creds_work_then_expire(srv):
    st, body = web_identity(srv)
    assert st == 200
    c = sts_creds(body)
    assert c["AccessKeyId"].startswith("ASIA")
    st, _, got = get_with(srv, c)
    assert (st, got) == (200, b"object")
    # a wrong session token is InvalidToken, as S3 answers
    st, _, err = get_with(srv, dict(c, SessionToken="nope"))
    assert st == 403 and parse_error(err)["Code"] == "InvalidToken"
    deadline = time.time() + 10
    while time.time() < deadline:
        st, _, err = get_with(srv, c)
        if st != 200:
            break
        time.sleep(0.2)
    assert st == 400 and parse_error(err)["Code"] == "ExpiredToken"
    assert srv.temp_creds()["expired_refusals"] >= 1


def test_web_identity_refuses_unknown_tokens_and_faults(srv):
    st, body = web_identity(srv, "other")
    assert st == 400 and b"InvalidIdentityToken" in body
    srv.temp_creds(fault={"sts": 403})
    st, body = web_identity(srv)
    assert st == 403 and b"<ErrorResponse" in body and b"AccessDenied" in body
    srv.temp_creds(fault={"sts": None})
    assert web_identity(srv)[0] == 200


def test_expire_all_revokes_what_was_issued(srv):
    c = sts_creds(web_identity(srv)[1])
    srv.temp_creds(lifetime=3600, expire_all=True)
    st, _, err = get_with(srv, c)
    assert st == 400 and parse_error(err)["Code"] == "ExpiredToken"
    c2 = sts_creds(web_identity(srv)[1])
    assert get_with(srv, c2)[0] == 200


def test_imdsv2_only(srv):
    base = srv.endpoint + "/latest/"
    assert http("GET", base + "meta-data/iam/security-credentials/")[0] == 401  # no IMDSv1
    st, tok = http("PUT", base + "api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert st == 200
    h = {"X-aws-ec2-metadata-token": tok.decode()}
    st, role = http("GET", base + "meta-data/iam/security-credentials/", h)
    assert (st, role) == (200, b"spoolfs-test-role")
    st, doc = http("GET", base + "meta-data/iam/security-credentials/spoolfs-test-role", h)
    d = json.loads(doc)
    assert d["Code"] == "Success"
    assert get_with(srv, dict(d, SessionToken=d["Token"]))[0] == 200


def test_container_and_oidc(srv):
    url = srv.endpoint + "/_creds/container"
    assert http("GET", url, {"Authorization": "wrong"})[0] == 403
    st, doc = http("GET", url, {"Authorization": "ctok"})
    d = json.loads(doc)
    assert get_with(srv, dict(d, SessionToken=d["Token"]))[0] == 200
    oidc = srv.endpoint + "/_oidc/token?api-version=2.0&audience=sts.amazonaws.com"
    assert http("GET", oidc)[0] == 401
    st, doc = http("GET", oidc, {"Authorization": "Bearer gh"})
    jwt = json.loads(doc)["value"]
    assert web_identity(srv, jwt)[0] == 200
    assert srv.temp_creds()["oidc_audiences"] == ["sts.amazonaws.com"]


def test_assume_role_is_signed(srv):
    form = urllib.parse.urlencode({"Action": "AssumeRole", "Version": "2011-06-15",
                                   "RoleArn": "arn:aws:iam::1:role/r",
                                   "RoleSessionName": "t"}).encode()
    h, _ = s3u.sign("POST", "/", "", [("Host", srv.endpoint.split("//")[1])], AK, SK,
                    "us-east-1", service="sts", payload_hash=hashlib.sha256(form).hexdigest(),
                    add_content_sha256=False)
    hdrs = dict(h)
    hdrs.pop("Host", None)
    hdrs.pop("host", None)
    st, body = http("POST", srv.endpoint + "/", hdrs, form)
    assert st == 200, body
    st, body = http("POST", srv.endpoint + "/", {}, form)  # unsigned
    assert st == 403 and b"AccessDenied" in body
