#!/usr/bin/env python3
"""Writes seeds/http_request: one request per route of the registry (as on the wire: request
line, headers, empty line, body), with bodies from validator/tests/data. Run again after the
routes change; the seeds are checked in."""
import hashlib
import json
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent.parent / "validator" / "tests" / "data"
OUT = HERE / "seeds" / "http_request"


def sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def req(method, target, headers=(), body=b""):
    head = f"{method} {target}\n" + "".join(f"{k}: {v}\n" for k, v in headers)
    return head.encode() + b"\n" + body


layer = b"layer bytes"
config = b"{}"
seeds = {
    "base": req("GET", "/v2/"),
    "catalog": req("GET", "/v2/_catalog?n=2&last=a"),
    "post_monolithic": req("POST", f"/v2/r/blobs/uploads/?digest={sha(layer)}",
                           [("content-type", "application/octet-stream")], layer),
    "post_session": req("POST", "/v2/r/blobs/uploads/"),
    "patch": req("PATCH", "/v2/r/blobs/uploads/0000?state=x",
                 [("content-range", "0-10"), ("content-type", "application/octet-stream")], layer),
    "put_upload": req("PUT", f"/v2/r/blobs/uploads/0000?digest={sha(layer)}", [], layer),
    "mount": req("POST", f"/v2/s/blobs/uploads/?mount={sha(layer)}&from=r"),
    "blob_get_range": req("GET", f"/v2/r/blobs/{sha(layer)}", [("range", "bytes=2-5")]),
    "blob_head": req("HEAD", f"/v2/r/blobs/{sha(config)}"),
    "blob_delete": req("DELETE", f"/v2/r/blobs/{sha(layer)}"),
    "tags": req("GET", "/v2/r/tags/list?n=1&last=v0"),
    "referrers": req("GET", f"/v2/r/referrers/{sha(config)}?artifactType=application/x"),
    "manifest_get": req("GET", "/v2/r/manifests/v1",
                        [("accept", "application/vnd.oci.image.manifest.v1+json")]),
    "manifest_delete": req("DELETE", f"/v2/r/manifests/{sha(config)}"),
    "mirror_ns": req("GET", "/v2/library/x/manifests/latest?ns=docker.io"),
    "metrics": req("GET", "/metrics"),
    "ui": req("GET", "/ui/r/r?tag=v1"),
    "ui_search": req("GET", "/ui/search?q=pkg:/web/server@2.4"),
}
for doc in sorted((DATA / "good").glob("*.json")) + sorted((DATA / "bad").glob("*.json"))[:20]:
    body = doc.read_bytes()
    try:
        media = json.loads(body).get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
    except (ValueError, AttributeError):
        media = "application/vnd.oci.image.manifest.v1+json"
    seeds[f"put_{doc.parent.name}_{doc.stem}"] = req(
        "PUT", "/v2/r/manifests/v1?tag=v2", [("content-type", media)], body)
OUT.mkdir(parents=True, exist_ok=True)
for name, body in seeds.items():
    (OUT / name).write_bytes(body)
print(f"{len(seeds)} seeds in {OUT}")
