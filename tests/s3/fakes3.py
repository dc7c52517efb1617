#!/usr/bin/env python3
"""A small S3 server with scripted faults, for what a real radosgw will not do on demand: 5xx,
429 and SlowDown answers, dropped connections, short bodies, a Range ignored, a multipart
completion that fails inside its 200, listings that lie (tests/s3/t-s3-fake.sh).

Objects live in memory; signatures are not checked. Path-style only: /BUCKET/KEY. A fault is named
by a segment of the key (or of a listing's prefix):
  f503xN, f429xN, fslowxN   the first N requests on the key get 503, 429, 503 SlowDown
  f500                      every request on the key gets 500 InternalError
  fdropxN                   the first N requests: the connection is closed without an answer
  fshortxN                  the first N GETs: half the body, then the connection is closed
  fnorange                  GETs ignore Range (200 and the whole object)
  fmidxN                    the first N ranged GETs that start past byte 0: a 206 with the
                            right headers, half the body, then the connection is closed
  fflip                     ranged GETs that start past byte 0: one bit of the body flipped
  fless                     ranged GETs that start past byte 0: a well-formed 206 of half the
                            range asked for (a short answer that no transport error reveals)
  fcomplete                 the first multipart completion: 200 with an InternalError inside
  fbadpart                  every multipart completion: 200 with an InvalidPart inside
  fnotoken/, floop/, fjunk/ listings: truncated without a token, the same token again, junk
  fold                      ListMultipartUploads: the key's uploads were initiated in 2000
  fstall                    every request on the key but the initiate of a multipart upload:
                            the request (and its body) is read, then nothing is answered until
                            the client hangs up (a stopped server); logged as "stall METHOD PATH"
Usage: fakes3.py PORTFILE   (writes the port it listens on, 127.0.0.1, to PORTFILE; runs until
killed). Requests are logged to stderr.
"""
import re
import sys
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

LOCK = threading.Lock()
OBJECTS = {}   # (bucket, key) -> bytes
UPLOADS = {}   # upload id -> (bucket, key, {part: bytes})
COUNTS = {}    # (fault, key, method) -> requests seen
NEXT_ID = [0]


def fault_of(key):
    m = re.search(r"(?:^|/)(f503|f429|fslow|fdrop|fshort|fmid)x(\d+)(?:/|$)", key)
    if m:
        return m.group(1), int(m.group(2))
    for f in ("f500", "fstall", "fnorange", "fcomplete", "fbadpart", "fnotoken", "floop", "fjunk",
              "fflip", "fless"):
        if re.search(r"(?:^|/)%s(?:/|$)" % f, key):
            return f, 0
    return None, 0


def count(fault, key, method):
    with LOCK:
        n = COUNTS.get((fault, key, method), 0) + 1
        COUNTS[(fault, key, method)] = n
        return n


def err_xml(code, msg):
    return ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>%s</Message></Error>"
            % (code, msg)).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fakes3: " + (fmt % args) + "\n")

    def send(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def body(self):
        # Read once a request (do_POST reads it before injected() may); the handler serves every
        # request of a connection, so the cache is the request's, keyed by its headers.
        if getattr(self, "_body_of", None) is not self.headers:
            n = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(n) if n else b""
            self._body_of = self.headers
        return self._body

    def stall(self):
        """Answers nothing until the client hangs up (a SIGSTOPped server, but one request)."""
        self.body() if self.command in ("PUT", "POST") else None
        self.log_message("stall %s %s", self.command, self.path)
        sys.stderr.flush()
        self.close_connection = True
        try:
            self.connection.settimeout(None)
            while self.connection.recv(65536):
                pass
        except OSError:
            pass

    def parse(self):
        u = urlsplit(self.path)
        parts = u.path.lstrip("/").split("/", 1)
        bucket = unquote(parts[0])
        key = unquote(parts[1]) if len(parts) > 1 else None
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        return bucket, key, q

    def injected(self, key):
        """Answers with the key's fault if it is due; True when it did."""
        fault, n = fault_of(key or "")
        if fault is None:
            return False
        method = self.command
        if fault == "fstall":
            if method == "POST" and urlsplit(self.path).query == "uploads=":
                return False
            self.stall()
            return True
        if fault in ("f503", "f429", "fslow", "fdrop") and count(fault, key, "*") <= n:
            if fault == "fdrop":
                self.close_connection = True
                self.connection.shutdown(2)
                return True
            status, code = {"f503": (503, "ServiceUnavailable"), "f429": (429, "TooManyRequests"),
                            "fslow": (503, "SlowDown")}[fault]
            self.body() if method in ("PUT", "POST") else None
            self.send(status, err_xml(code, "injected"))
            return True
        if fault == "f500":
            self.body() if method in ("PUT", "POST") else None
            self.send(500, err_xml("InternalError", "injected, always"))
            return True
        return False

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        bucket, key, q = self.parse()
        if key is None:
            return self.list(bucket, q)
        if self.injected(key):
            return
        with LOCK:
            data = OBJECTS.get((bucket, key))
        if data is None:
            return self.send(404, err_xml("NoSuchKey", "no such key"))
        hdr = {"Last-Modified": formatdate(time.time(), usegmt=True), "ETag": "\"e\""}
        rng = self.headers.get("Range")
        fault, n = fault_of(key)
        if fault == "fshort" and self.command == "GET" and count(fault, key, "GET") <= n:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
            return
        if rng and fault != "fnorange" and self.command == "GET":
            a, b = re.match(r"bytes=(\d+)-(\d+)", rng).groups()
            a, b = int(a), min(int(b), len(data) - 1)
            if a >= len(data):
                return self.send(416, err_xml("InvalidRange", "past the end"))
            body = data[a: b + 1]
            if a > 0 and fault == "fmid" and count(fault, key, "GET") <= n:
                self.send_response(206)
                self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
                return
            if a > 0 and fault == "fflip":
                body = bytearray(body)
                body[len(body) // 2] ^= 1
                body = bytes(body)
            if a > 0 and fault == "fless":
                body = body[: max(1, len(body) // 2)]
                b = a + len(body) - 1
            hdr["Content-Range"] = "bytes %d-%d/%d" % (a, b, len(data))
            return self.send(206, body, hdr)
        if self.command == "HEAD":
            self.send_response(200)
            for k, v in hdr.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return
        self.send(200, data, hdr)

    def list(self, bucket, q):
        if "uploads" in q:
            return self.list_uploads(bucket, q)
        prefix = q.get("prefix", "")
        fault, _ = fault_of(prefix)
        if fault == "fjunk":
            return self.send(200, b"<<<&&&<Contents><Key>" + bytes(range(256)))
        with LOCK:
            keys = sorted(k for (b, k) in OBJECTS if b == bucket and k.startswith(prefix))
        tok = q.get("continuation-token", "")
        keys = [k for k in keys if k > tok]
        page, more = keys[: int(q.get("max-keys", "1000"))], None
        if len(keys) > len(page):
            more = page[-1]
        x = "".join("<Contents><Key>%s</Key><Size>%d</Size><LastModified>2026-12-02T13:30:20.000Z"
                    "</LastModified></Contents>" % (escape(k), len(OBJECTS[(bucket, k)]))
                    for k in page)
        if fault == "fnotoken":
            x += "<IsTruncated>true</IsTruncated>"
        elif fault == "floop":
            x += "<IsTruncated>true</IsTruncated><NextContinuationToken></NextContinuationToken>" \
                 if not page else "<IsTruncated>true</IsTruncated><NextContinuationToken>" \
                 "%s</NextContinuationToken>" % escape(tok or page[0])
        elif more:
            x += "<IsTruncated>true</IsTruncated><NextContinuationToken>%s</NextContinuationToken>" \
                 % escape(more)
        self.send(200, ("<ListBucketResult>%s</ListBucketResult>" % x).encode())

    def list_uploads(self, bucket, q):
        """ListMultipartUploads, in pages of max-uploads after key-marker/upload-id-marker;
        uploads of a key with a segment "fold" say they were initiated in 2000."""
        km, um = q.get("key-marker", ""), q.get("upload-id-marker", "")
        with LOCK:
            ups = sorted((k, u) for u, (b, k, _) in UPLOADS.items()
                         if b == bucket and k.startswith(q.get("prefix", "")))
        if km:
            ups = [(k, u) for k, u in ups if k > km or (um and k == km and u > um)]
        mx = int(q.get("max-uploads", "1000"))
        page = ups[:mx]
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        x = "".join("<Upload><Key>%s</Key><UploadId>%s</UploadId><Initiated>%s</Initiated>"
                    "</Upload>" % (escape(k), u, "2000-01-01T00:00:00.000Z"
                                   if re.search(r"(?:^|/)fold(?:/|$)", k) else now)
                    for k, u in page)
        if len(ups) > mx:
            x += ("<IsTruncated>true</IsTruncated><NextKeyMarker>%s</NextKeyMarker>"
                  "<NextUploadIdMarker>%s</NextUploadIdMarker>" % (escape(page[-1][0]), page[-1][1]))
        self.send(200, ("<ListMultipartUploadsResult>%s</ListMultipartUploadsResult>"
                        % x).encode())

    def do_PUT(self):
        bucket, key, q = self.parse()
        if key is None:
            self.body()
            return self.send(200)
        if self.injected(key):
            return
        data = self.body()
        with LOCK:
            if "uploadId" in q:
                up = UPLOADS.get(q["uploadId"])
                if up is None:
                    return self.send(404, err_xml("NoSuchUpload", "no such upload"))
                up[2][int(q["partNumber"])] = data
                return self.send(200, b"", {"ETag": "\"p%s\"" % q["partNumber"]})
            if self.headers.get("If-None-Match") == "*" and (bucket, key) in OBJECTS:
                return self.send(412, err_xml("PreconditionFailed", "exists"))
            OBJECTS[(bucket, key)] = data
        self.send(200, b"", {"ETag": "\"e\""})

    def do_POST(self):
        bucket, key, q = self.parse()
        data = self.body()
        if self.injected(key):
            return
        fault, _ = fault_of(key)
        with LOCK:
            if "uploads" in q:
                NEXT_ID[0] += 1
                uid = "up~%d" % NEXT_ID[0]
                UPLOADS[uid] = (bucket, key, {})
                return self.send(200, ("<InitiateMultipartUploadResult><UploadId>%s</UploadId>"
                                       "</InitiateMultipartUploadResult>" % uid).encode())
            up = UPLOADS.get(q.get("uploadId"))
            if up is None:
                return self.send(404, err_xml("NoSuchUpload", "no such upload"))
            if fault == "fbadpart" or (fault == "fcomplete" and
                                       COUNTS.setdefault(("fc", key), 0) == 0):
                COUNTS[("fc", key)] = 1
                code = "InvalidPart" if fault == "fbadpart" else "InternalError"
                return self.send(200, err_xml(code, "injected"))  # S3 streams: 200, then the error
            nums = [int(n) for n in re.findall(rb"<PartNumber>(\d+)</PartNumber>", data)]
            OBJECTS[(bucket, key)] = b"".join(up[2][n] for n in nums)
            del UPLOADS[q["uploadId"]]
        self.send(200, b"<CompleteMultipartUploadResult></CompleteMultipartUploadResult>")

    def do_DELETE(self):
        bucket, key, q = self.parse()
        if self.injected(key):
            return
        with LOCK:
            if "uploadId" in q:
                UPLOADS.pop(q["uploadId"], None)
            else:
                OBJECTS.pop((bucket, key), None)
        self.send(204)


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever()


if __name__ == "__main__":
    main()
