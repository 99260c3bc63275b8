#!/usr/bin/env python3
"""A package index on loopback for the packages-on-request tests: builds a
PEP 503 "simple" index of wheels and an npm registry of tarballs under
ROOT, then serves both over HTTP on 127.0.0.1 until killed.

    package_index.py ROOT        # prints "port N" once it listens

Every request is logged to ROOT/requests.log (one path per line), so a test
can tell whether a worker went to the index or reused its cache. The
installers run as an unprivileged user: ROOT/markers is world-writable, so
a package script that did run could leave its marker there.

python (index URL http://127.0.0.1:N/simple):
  kilntest-hello 1.0.0, 2.0.0  pure-python wheels, module kilntest_hello
  kilntest-app 1.0.0           requires kilntest-hello (any version)
  kilntest-big 1.0.0           a 3 MiB data file (over a 1 MiB set cap)
  kilntest-sdist 1.0.0         an sdist only, whose setup.py would write
                               ROOT/markers/sdist-ran: it must never run
  kilntest-slow                its index page answers after 30 s
javascript (registry http://127.0.0.1:N/npm):
  kilntest-hello 1.0.0         CommonJS
  kilntest-esm 1.0.0           an ES module only ("exports": {"import": ...})
  kilntest-scripted 1.0.0      preinstall/install/postinstall scripts that
                               would write ROOT/markers/npm-script-ran
"""
import base64
import hashlib
import http.server
import io
import json
import os
import sys
import tarfile
import time
import zipfile

ROOT = os.path.abspath(sys.argv[1])
FILES = os.path.join(ROOT, "files")


def b64(digest):
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def wheel(name, version, modules, requires=()):
    """Writes name-version-py3-none-any.whl; modules: {path: text}."""
    dist = name.replace("-", "_")
    info = "%s-%s.dist-info" % (dist, version)
    files = dict(modules)
    files[info + "/METADATA"] = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
        name, version, "".join("Requires-Dist: %s\n" % r for r in requires))
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: kiln-test\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    for path, text in files.items():
        data = text if isinstance(text, bytes) else text.encode()
        record.append("%s,sha256=%s,%d" % (path, b64(hashlib.sha256(data).digest()), len(data)))
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = "\n".join(record) + "\n"
    fname = "%s-%s-py3-none-any.whl" % (dist, version)
    with zipfile.ZipFile(os.path.join(FILES, fname), "w", zipfile.ZIP_DEFLATED) as z:
        for path, text in files.items():
            z.writestr(path, text)
    return fname


def sdist(name, version, setup_py):
    fname = "%s-%s.tar.gz" % (name.replace("-", "_"), version)
    with tarfile.open(os.path.join(FILES, fname), "w:gz") as t:
        for path, text in {"setup.py": setup_py,
                           "PKG-INFO": "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (
                               name, version)}.items():
            data = text.encode()
            info = tarfile.TarInfo("%s-%s/%s" % (name.replace("-", "_"), version, path))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return fname


def simple_page(name, fnames):
    os.makedirs(os.path.join(ROOT, "simple", name), exist_ok=True)
    links = []
    for f in fnames:
        with open(os.path.join(FILES, f), "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        links.append('<a href="../../files/%s#sha256=%s">%s</a><br>' % (f, digest, f))
    with open(os.path.join(ROOT, "simple", name, "index.html"), "w") as fh:
        fh.write("<!DOCTYPE html><html><body>\n%s\n</body></html>\n" % "\n".join(links))


def npm_package(port, name, version, package_json, files):
    """Writes the tarball and the packument (ROOT/npm/<name>)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, text in dict(files, **{"package.json": json.dumps(package_json)}).items():
            data = text.encode()
            info = tarfile.TarInfo("package/" + path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    fname = "%s-%s.tgz" % (name, version)
    with open(os.path.join(FILES, fname), "wb") as fh:
        fh.write(data)
    meta = dict(package_json)
    meta["dist"] = {
        "tarball": "http://127.0.0.1:%d/files/%s" % (port, fname),
        "shasum": hashlib.sha1(data).hexdigest(),
        "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode(),
    }
    doc = {"name": name, "dist-tags": {"latest": version}, "versions": {version: meta}}
    os.makedirs(os.path.join(ROOT, "npm"), exist_ok=True)
    with open(os.path.join(ROOT, "npm", name), "w") as fh:
        json.dump(doc, fh)


def build(port):
    os.makedirs(FILES, exist_ok=True)
    os.makedirs(os.path.join(ROOT, "markers"), exist_ok=True)
    os.chmod(os.path.join(ROOT, "markers"), 0o777)
    hello = [wheel("kilntest-hello", v, {
        "kilntest_hello/__init__.py": "VERSION = %r\n\ndef greet(who):\n    return 'hello ' + who\n" % v})
        for v in ("1.0.0", "2.0.0")]
    simple_page("kilntest-hello", hello)
    simple_page("kilntest-app", [wheel("kilntest-app", "1.0.0", {
        "kilntest_app/__init__.py":
            "import kilntest_hello\n\ndef run():\n    return kilntest_hello.greet('app')\n"},
        requires=["kilntest-hello"])])
    simple_page("kilntest-big", [wheel("kilntest-big", "1.0.0", {
        "kilntest_big/__init__.py": "",
        "kilntest_big/blob.bin": os.urandom(3 << 20)})])
    simple_page("kilntest-sdist", [sdist("kilntest-sdist", "1.0.0",
        "open(%r, 'w').write('ran')\nfrom setuptools import setup\nsetup()\n"
        % os.path.join(ROOT, "markers", "sdist-ran"))])
    script = "node -e \"require('fs').writeFileSync('%s', 'ran')\"" % os.path.join(
        ROOT, "markers", "npm-script-ran")
    npm_package(port, "kilntest-hello", "1.0.0",
                {"name": "kilntest-hello", "version": "1.0.0", "main": "index.js"},
                {"index.js": "exports.greet = (who) => 'hello ' + who;\nexports.VERSION = '1.0.0';\n"})
    npm_package(port, "kilntest-esm", "1.0.0",
                {"name": "kilntest-esm", "version": "1.0.0", "type": "module",
                 "exports": {".": {"import": "./index.js"}}},
                {"index.js": "export const shout = (s) => s.toUpperCase() + '!';\n"})
    npm_package(port, "kilntest-scripted", "1.0.0",
                {"name": "kilntest-scripted", "version": "1.0.0", "main": "index.js",
                 "scripts": {"preinstall": script, "install": script, "postinstall": script}},
                {"index.js": "module.exports = 'scripted, scripts not run';\n"})


class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=ROOT, **kwargs)

    def do_GET(self):
        with open(os.path.join(ROOT, "requests.log"), "a") as fh:
            fh.write(self.path + "\n")
        if self.path.startswith("/simple/kilntest-slow"):
            time.sleep(30)
        # npm asks for a packument by name (scoped names are not used here).
        if self.path.startswith("/npm/") and not os.path.exists(
                os.path.join(ROOT, self.path.lstrip("/"))):
            self.send_error(404)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    build(port)
    print("port %d" % port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
