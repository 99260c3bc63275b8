#!/usr/bin/env python3
"""A fake "internet" web server for the multihost bed's `web` host: the
network-on-request tests send jobs' traffic here, never to a real outside
address. Stdlib only, plus the `openssl` command line tool.

    fake_internet.py --dir D --names api.example.test,other.example.test
                     [--http-port 80] [--https-port 443]

At start it makes a throwaway CA and a server certificate for --names (one
SAN DNS entry each) in D (ca.pem, server.pem, server.key), then serves the
same routes on 0.0.0.0:80 (HTTP) and 0.0.0.0:443 (HTTPS):

    GET  /hello      200 "hello <Host header> <scheme>\\n"
    GET  /bytes?n=N  200, N bytes of "x" (N <= 64 MiB)
    POST /echo       200, the request body back
    anything else    404

Every request appends "<scheme> <client ip> <method> <path> <Host>" to
D/requests.log (flushed per line), so a test can tell what reached the
"internet" and from which address. D/ready appears once both ports listen.
SIGTERM (or SIGINT) stops it and removes D/ready.
"""
import argparse
import http.server
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse

MAX_BYTES = 64 << 20
CHUNK = 1 << 16


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_certificates(d, names):
    """A CA (ca.pem) and a server certificate it signed (server.pem/.key).
    EC P-256 keys: generated at once even on a loaded machine."""
    ca_key, ca_pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    key, csr = os.path.join(d, "server.key"), os.path.join(d, "server.csr")
    pem, ext = os.path.join(d, "server.pem"), os.path.join(d, "server.ext")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
            "-subj", "/CN=Kiln fake internet test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-new", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=" + names[0])
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=" + ",".join("DNS:" + n for n in names) + "\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-days", "2",
            "-set_serial", str(random.getrandbits(63)), "-extfile", ext, "-out", pem)
    return pem, key


class RequestLog:
    """D/requests.log, one line per request, from many handler threads."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1)

    def add(self, *fields):
        with self.lock:
            self.file.write(" ".join(fields) + "\n")
            self.file.flush()


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # One line, not a traceback: clients that hang up or fail the TLS
        # handshake are expected (proxies being tested refuse things).
        print("%s: %s" % (client_address[0], sys.exc_info()[1]), file=sys.stderr, flush=True)


def make_handler(scheme, log, tls_context):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers (and proxies) do
        timeout = 60  # a stalled client frees its thread

        def setup(self):
            # The TLS handshake happens here, on the connection's own
            # thread: a client that never finishes it blocks nobody else.
            if tls_context is not None:
                self.request.settimeout(self.timeout)
                self.request = tls_context.wrap_socket(self.request, server_side=True)
            super().setup()

        def log_request(self, code="-", size="-"):
            pass  # requests.log has them; stderr keeps errors only

        def reply(self, status, body, content_type="text/plain"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def read_body(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                parts, total = [], 0
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(parts)
                    total += size
                    if total > MAX_BYTES:
                        raise ValueError("body over 64 MiB")
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            n = int(self.headers.get("Content-Length") or 0)
            if n < 0 or n > MAX_BYTES:
                raise ValueError("body over 64 MiB")
            return self.rfile.read(n)

        def dispatch(self):
            host = self.headers.get("Host", "-")
            log.add(scheme, self.client_address[0], self.command, self.path, host)
            url = urllib.parse.urlsplit(self.path)
            if self.command == "GET" and url.path == "/hello":
                return self.reply(200, ("hello %s %s\n" % (host, scheme)).encode())
            if self.command == "GET" and url.path == "/bytes":
                try:
                    n = int(urllib.parse.parse_qs(url.query).get("n", [""])[0])
                except ValueError:
                    n = -1
                if n < 0 or n > MAX_BYTES:
                    return self.reply(400, b"n: 0 to 67108864\n")
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"x" * CHUNK
                while n > 0:  # in pieces: 64 MiB is never in memory
                    self.wfile.write(chunk[:min(n, CHUNK)])
                    n -= min(n, CHUNK)
                return None
            if self.command == "POST" and url.path == "/echo":
                try:
                    body = self.read_body()
                except ValueError as e:
                    self.close_connection = True
                    return self.reply(400, ("%s\n" % e).encode())
                return self.reply(200, body, self.headers.get("Content-Type",
                                                              "application/octet-stream"))
            # Unread bodies would be taken for the next request: close instead.
            if self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
            return self.reply(404, b"not found\n")

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = dispatch
        do_CONNECT = dispatch  # this is no proxy: logged, then 404

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--names", required=True, help="comma-separated DNS names for the certificate")
    p.add_argument("--http-port", type=int, default=80)
    p.add_argument("--https-port", type=int, default=443)
    args = p.parse_args()
    d = os.path.abspath(args.dir)
    names = [n for n in args.names.split(",") if n]
    if not names:
        p.error("--names is empty")
    os.makedirs(d, exist_ok=True)
    ready = os.path.join(d, "ready")
    if os.path.exists(ready):
        os.unlink(ready)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    pem, key = make_certificates(d, names)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pem, key)
    log = RequestLog(os.path.join(d, "requests.log"))
    # Bound and listening once constructed.
    servers = [
        Server(("0.0.0.0", args.http_port), make_handler("http", log, None)),
        Server(("0.0.0.0", args.https_port), make_handler("https", log, tls)),
    ]
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2})
               for s in servers]
    for t in threads:
        t.start()
    with open(ready + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(ready + ".tmp", ready)  # whole or absent
    print("fake internet on :%d and :%d for %s" % (args.http_port, args.https_port,
                                                  ",".join(names)), flush=True)

    while not stop.wait(0.2):
        pass
    os.unlink(ready)
    for s in servers:
        s.shutdown()
        s.server_close()
    for t in threads:
        t.join()
    print("fake internet stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
