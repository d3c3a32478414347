"""moto's S3 in server mode (ThreadedMotoServer) behind a layer that authorizes every request as S3 does: the
operation the request is, the IAM actions and resources S3 checks for it, its condition keys, and the caller's
policy judged by tests/support/iam_policy.py (moto's evaluator ignores conditions such as `s3:prefix`).

    server = PolicyEnforcingS3({"AKIAPODS": [pod_policy], "AKIAADMIN": None})   # None: not checked
    server.start()                # AWS_ENDPOINT_URL_S3=server.url for pyarrow and boto3
    ...
    server.seen                   # [Seen(operation, action, resource, context, key, decision), ...]

Callers are told apart by the access key in the SigV4 Authorization header (pyarrow's AWS SDK and boto3 both sign).
A request this layer cannot classify is refused with 501 and recorded, so a test never passes on an unjudged call.

Which action each operation needs, per the Amazon S3 API Reference (each operation's "Permissions") and the S3 user
guide ("Required permissions for Amazon S3 API operations"):
- HeadBucket: s3:ListBucket on the bucket, and the request carries no s3:prefix.
- ListObjects / ListObjectsV2: s3:ListBucket on the bucket; `prefix`, `delimiter` and `max-keys` are the condition keys
  s3:prefix, s3:delimiter and s3:max-keys when the request has them (S3 user guide, "Condition key examples").
- GetBucketLocation: s3:GetBucketLocation. ListMultipartUploads: s3:ListBucketMultipartUploads.
- GetObject and HeadObject: s3:GetObject on the object.
- PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload: s3:PutObject on the object; CopyObject and
  UploadPartCopy add s3:GetObject on the source.
- AbortMultipartUpload: s3:AbortMultipartUpload. ListParts: s3:ListMultipartUploadParts.
- DeleteObject: s3:DeleteObject; DeleteObjects (POST ?delete): s3:DeleteObject on every key it names.
- CreateBucket: s3:CreateBucket.
"""
from __future__ import annotations

import io
import re
import threading
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from urllib.parse import unquote

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server
from werkzeug.wrappers import Request as WsgiRequest

from tests.support.iam_policy import Request, decide

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


@dataclass(frozen=True)
class Seen:
    operation: str
    action: str
    resource: str
    context: dict
    access_key: str
    decision: str


def _bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def _object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def _copy_source(headers) -> str | None:
    source = headers.get("x-amz-copy-source")
    if not source:
        return None
    bucket, _, key = unquote(source.split("?", 1)[0]).lstrip("/").partition("/")
    return _object_arn(bucket, key)


def classify(method: str, path: str, args: dict, headers, body: bytes) -> tuple[str, list[tuple[str, str, dict]]]:
    """(operation, [(action, resource, condition keys), ...]) for one path-style S3 request."""
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    if not bucket:
        return "ListBuckets", [("s3:ListAllMyBuckets", "*", {})]
    if not key:
        if method == "HEAD":
            return "HeadBucket", [("s3:ListBucket", _bucket_arn(bucket), {})]
        if method == "GET" and "location" in args:
            return "GetBucketLocation", [("s3:GetBucketLocation", _bucket_arn(bucket), {})]
        if method == "GET" and "uploads" in args:
            return "ListMultipartUploads", [("s3:ListBucketMultipartUploads", _bucket_arn(bucket), {})]
        if method == "GET" and not set(args) - {"list-type", "prefix", "delimiter", "max-keys", "continuation-token",
                                                "start-after", "marker", "encoding-type", "fetch-owner"}:
            context = {f"s3:{name}": args[name] for name in ("prefix", "delimiter", "max-keys") if name in args}
            return "ListObjectsV2" if "list-type" in args else "ListObjects", [
                ("s3:ListBucket", _bucket_arn(bucket), context)]
        if method == "PUT" and not args:
            return "CreateBucket", [("s3:CreateBucket", _bucket_arn(bucket), {})]
        if method == "POST" and "delete" in args:
            keys = [element.text or "" for element in ElementTree.fromstring(body).iter()
                    if element.tag.rsplit("}", 1)[-1] == "Key"]
            return "DeleteObjects", [("s3:DeleteObject", _object_arn(bucket, k), {}) for k in keys]
        return f"unclassified {method} bucket {sorted(args)}", []
    target = _object_arn(bucket, key)
    source = _copy_source(headers)
    if method in ("GET", "HEAD") and "uploadId" in args:
        return "ListParts", [("s3:ListMultipartUploadParts", target, {})]
    if method in ("GET", "HEAD") and not set(args) - {"partNumber", "versionId", "response-content-type"}:
        return ("GetObject" if method == "GET" else "HeadObject"), [("s3:GetObject", target, {})]
    if method == "PUT" and not set(args) - {"partNumber", "uploadId"}:
        operation = ("UploadPart" if "uploadId" in args else "PutObject") + ("Copy" if source else "")
        return operation, [("s3:PutObject", target, {}), *([("s3:GetObject", source, {})] if source else [])]
    if method == "POST" and "uploads" in args:
        return "CreateMultipartUpload", [("s3:PutObject", target, {})]
    if method == "POST" and "uploadId" in args:
        return "CompleteMultipartUpload", [("s3:PutObject", target, {})]
    if method == "DELETE" and "uploadId" in args:
        return "AbortMultipartUpload", [("s3:AbortMultipartUpload", target, {})]
    if method == "DELETE" and not args:
        return "DeleteObject", [("s3:DeleteObject", target, {})]
    return f"unclassified {method} object {sorted(args)}", []


class _Enforcer:
    def __init__(self, app, policies: dict[str, list[str] | None], seen: list[Seen], lock: threading.Lock) -> None:
        self.app, self.policies, self.seen, self.lock = app, policies, seen, lock

    def __call__(self, environ, start_response):
        request = WsgiRequest(environ)
        body = request.get_data()
        # moto reads the body again from the environ: hand it a fresh stream of the same bytes.
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        match = _CREDENTIAL.search(request.headers.get("Authorization", ""))
        access_key = match.group(1) if match else ""
        operation, checks = classify(request.method, request.path, request.args.to_dict(), request.headers, body)
        policies = self.policies.get(access_key, [])
        if not checks:
            self._note(Seen(operation, "", "", {}, access_key, "Unclassified"))
            return self._refuse(start_response, "501 Not Implemented", "NotImplemented", operation, request.method)
        refused = False
        for action, resource, context in checks:
            decision = "Allow" if policies is None else decide(policies, Request(action, resource, context))
            self._note(Seen(operation, action, resource, context, access_key, decision))
            refused = refused or decision != "Allow"
        if refused:
            return self._refuse(start_response, "403 Forbidden", "AccessDenied", operation, request.method)
        return self.app(environ, start_response)

    def _note(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)

    @staticmethod
    def _refuse(start_response, status: str, code: str, operation: str, method: str):
        body = b"" if method == "HEAD" else (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{operation}: {code}"
            "</Message></Error>").encode()
        start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body]


class _QuietHandler(MotoRequestHandler):
    def log_request(self, *args, **kwargs) -> None:  # the test reads `seen`, not werkzeug's access log
        pass


class PolicyEnforcingS3(ThreadedMotoServer):
    """ThreadedMotoServer on a free loopback port, every request authorized first (see the module docstring)."""

    def __init__(self, policies: dict[str, list[str] | None]) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self.policies = policies
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def _server_entry(self) -> None:
        app = _Enforcer(DomainDispatcherApplication(create_backend_app), self.policies, self.seen, self._lock)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=_QuietHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def refused(self) -> list[Seen]:
        return [s for s in self.seen if s.decision != "Allow"]

    def as_this_machines_s3(self, monkeypatch, access_key: str, secret_key: str) -> None:
        """This process's AWS settings point at the server, as `access_key`, with nothing of the machine's own."""
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
            monkeypatch.delenv(name, raising=False)
        for name, value in {"AWS_ENDPOINT_URL_S3": self.url, "AWS_ACCESS_KEY_ID": access_key,
                            "AWS_SECRET_ACCESS_KEY": secret_key, "AWS_DEFAULT_REGION": "us-west-2",
                            "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(name, value)
