"""Temporary credentials for the S3 test upstream (s3_upstream.py), in the same process so
that the S3 verifier accepts exactly what these endpoints issued:

  POST /                      STS (form body, Version 2011-06-15):
                                Action=AssumeRole (SigV4-signed, service "sts", by the
                                server's --verify-sigv4 keys or credentials issued here)
                                Action=AssumeRoleWithWebIdentity (unsigned; WebIdentityToken
                                one of the accepted tokens or one /_oidc/token issued for
                                audience sts.amazonaws.com)
  PUT  /latest/api/token      IMDSv2 session token (X-aws-ec2-metadata-token-ttl-seconds)
  GET  /latest/meta-data/iam/security-credentials/[ROLE]   with X-aws-ec2-metadata-token
  GET  /_creds/container      container credentials (Authorization must be the configured
                              token when one is set)
  GET  /_oidc/token?audience=A   GitHub Actions' OIDC token endpoint (Authorization:
                              Bearer <request token>) -> {"count": 1, "value": JWT}

Every issued credential expires after `lifetime` seconds (whole seconds, as STS's
Expiration is): the S3 verifier then answers 400 ExpiredToken, and 403 InvalidToken for a
wrong session token, as S3 does. Credentials never leave through the control API.

Control (JSON):
  POST /_ctl/creds  {"lifetime": S, "web_tokens": [..], "container_token": T,
                     "oidc_request_token": T, "fault": {"sts"|"imds"|"container"|"oidc": status
                     or null}, "expire_all": true, "s3_expire_all": true}
       expire_all: every credential issued so far is refused from now on (the client still
       believes in it: a clock running behind the server's).
  GET  /_ctl/creds  {"issued": [{"source", "role", "expires", "at"}], "web_tokens_seen":
                     [..], "oidc_audiences": [..], "sts_calls": [{"action", "role"}],
                     "expired_refusals": N}
"""

import hashlib
import secrets
import threading
import time
import urllib.parse

LOCK = threading.Lock()
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


class Config:
    lifetime = 3
    web_tokens = set()
    container_token = None
    oidc_request_token = None
    faults = {}


CFG = Config()
TEMP = {}             # access key -> {"secret", "token", "expires", "revoked"}
ISSUED = []           # public facts of each issue
WEB_TOKENS_SEEN = []
OIDC_ISSUED = {}      # jwt -> audience
OIDC_AUDIENCES = []
STS_CALLS = []
IMDS_TOKENS = set()
EXPIRED_REFUSALS = [0]


class CredsError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def issue(source, role=None):
    """New temporary credentials -> dict with AccessKeyId, SecretAccessKey, Token,
    Expiration (ISO) and expires (epoch)."""
    ak = "ASIA" + secrets.token_hex(8).upper()
    sk = secrets.token_urlsafe(30)
    tok = "FwoG/" + secrets.token_urlsafe(60)
    now = time.time()
    exp = int(now) + CFG.lifetime
    with LOCK:
        TEMP[ak] = {"secret": sk, "token": tok, "expires": exp, "revoked": False}
        ISSUED.append({"source": source, "role": role, "expires": exp, "at": now})
    return {"AccessKeyId": ak, "SecretAccessKey": sk, "Token": tok, "Expiration": iso(exp),
            "expires": exp}


def temp_secret(access_key):
    """(secret, session token) for an access key issued here, or None. Raises the S3
    error of an expired one (400 ExpiredToken)."""
    with LOCK:
        t = TEMP.get(access_key)
        if t is None:
            return None
        if t["revoked"] or time.time() >= t["expires"]:
            EXPIRED_REFUSALS[0] += 1
            raise CredsError(400, "ExpiredToken", "The provided token has expired.")
        return t["secret"], t["token"]


def take_fault(name):
    with LOCK:
        return CFG.faults.get(name)


def control(body):
    with LOCK:
        if "lifetime" in body:
            CFG.lifetime = int(body["lifetime"])
        if "web_tokens" in body:
            CFG.web_tokens = set(body["web_tokens"])
        if "container_token" in body:
            CFG.container_token = body["container_token"]
        if "oidc_request_token" in body:
            CFG.oidc_request_token = body["oidc_request_token"]
        for k, v in (body.get("fault") or {}).items():
            if v is None:
                CFG.faults.pop(k, None)
            else:
                CFG.faults[k] = int(v)
        if body.get("expire_all"):
            for t in TEMP.values():
                t["revoked"] = True


def snapshot():
    with LOCK:
        return {"issued": list(ISSUED), "web_tokens_seen": list(WEB_TOKENS_SEEN),
                "oidc_audiences": list(OIDC_AUDIENCES), "sts_calls": list(STS_CALLS),
                "expired_refusals": EXPIRED_REFUSALS[0]}


# ------------------------------------------------------------------ answers

def sts_error(h, status, code, message):
    body = ('<ErrorResponse xmlns="%s"><Error><Type>Sender</Type><Code>%s</Code>'
            '<Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>'
            % (STS_NS, code, message, secrets.token_hex(8))).encode()
    h._simple(status, body, "text/xml")


def sts_ok(h, action, creds, role):
    body = ('<%sResponse xmlns="%s"><%sResult><Credentials><AccessKeyId>%s</AccessKeyId>'
            '<SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken>'
            '<Expiration>%s</Expiration></Credentials><AssumedRoleUser><Arn>%s</Arn>'
            '<AssumedRoleId>AROA:spoolfs</AssumedRoleId></AssumedRoleUser></%sResult>'
            '<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>'
            % (action, STS_NS, action, creds["AccessKeyId"], creds["SecretAccessKey"],
               creds["Token"], creds["Expiration"], role, action, secrets.token_hex(8),
               action)).encode()
    h._simple(200, body, "text/xml")


def handle_sts(h, body, verify_signed):
    """POST / with a form body. verify_signed(body_sha256) checks a SigV4 signature for
    service sts (raising the S3 verifier's error)."""
    form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    action = form.get("Action", "")
    role = form.get("RoleArn", "")
    with LOCK:
        STS_CALLS.append({"action": action, "role": role,
                          "session": form.get("RoleSessionName", "")})
    fault = take_fault("sts")
    if fault:
        return sts_error(h, fault, "AccessDenied", "Not authorized to perform sts:%s" % action)
    if form.get("Version") != "2011-06-15" or not role or not form.get("RoleSessionName"):
        return sts_error(h, 400, "MissingParameter", "Version, RoleArn and RoleSessionName")
    if action == "AssumeRoleWithWebIdentity":
        tok = form.get("WebIdentityToken", "")
        with LOCK:
            WEB_TOKENS_SEEN.append(tok)
            ok = tok in CFG.web_tokens or OIDC_ISSUED.get(tok) == "sts.amazonaws.com"
        if not ok:
            return sts_error(h, 400, "InvalidIdentityToken", "Couldn't verify the token")
        return sts_ok(h, action, issue("web identity", role), role)
    if action == "AssumeRole":
        try:
            verify_signed(hashlib.sha256(body).hexdigest())
        except Exception as e:  # the verifier's S3Error, or ours
            code = getattr(e, "code", "SignatureDoesNotMatch")
            return sts_error(h, 403, code, getattr(e, "message", str(e)))
        return sts_ok(h, action, issue("assume role", role), role)
    return sts_error(h, 400, "InvalidAction", "Could not find operation %s" % action)


def creds_json(c, code=True):
    d = {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
         "Token": c["Token"], "Expiration": c["Expiration"]}
    if code:
        d.update({"Code": "Success", "Type": "AWS-HMAC", "LastUpdated": iso(time.time())})
    return d


def handle_imds(h, method, path):
    """True when path was an IMDS request (answered)."""
    if not path.startswith("/latest/"):
        return False
    fault = take_fault("imds")
    if fault:
        h._simple(fault)
        return True
    if path == "/latest/api/token":
        if method != "PUT" or not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            h._simple(400 if method == "PUT" else 405)  # IMDSv1 is not served
            return True
        n = int(h.headers.get("Content-Length") or 0)
        if n:
            h.rfile.read(n)
        tok = secrets.token_urlsafe(32)
        with LOCK:
            IMDS_TOKENS.add(tok)
        h._simple(200, tok)
        return True
    with LOCK:
        ok = h.headers.get("X-aws-ec2-metadata-token") in IMDS_TOKENS
    if not ok:
        h._simple(401)
        return True
    base = "/latest/meta-data/iam/security-credentials/"
    if path == base:
        h._simple(200, "spoolfs-test-role")
    elif path == base + "spoolfs-test-role":
        h._json(200, creds_json(issue("imds", "spoolfs-test-role")))
    else:
        h._simple(404)
    return True


def handle_container(h):
    fault = take_fault("container")
    if fault:
        return h._simple(fault)
    if CFG.container_token is not None and h.headers.get("Authorization") != CFG.container_token:
        return h._simple(403)
    c = issue("container")
    h._json(200, creds_json(c, code=False))


def handle_oidc(h, query):
    fault = take_fault("oidc")
    if fault:
        return h._simple(fault)
    if CFG.oidc_request_token is None or \
            h.headers.get("Authorization") != "Bearer " + CFG.oidc_request_token:
        return h._simple(401)
    aud = urllib.parse.parse_qs(query).get("audience", [""])[0]
    jwt = "eyJhbGciOiJSUzI1NiJ9.%s.%s" % (secrets.token_urlsafe(24), secrets.token_urlsafe(16))
    with LOCK:
        OIDC_ISSUED[jwt] = aud
        OIDC_AUDIENCES.append(aud)
    h._json(200, {"count": 1, "value": jwt})

