#!/usr/bin/env python3
"""Writes seeds/unpack: layers of the hostile kinds the unpacker must contain (research §3.4:
traversal, absolute paths, links out of the root, hard links to outside files, whiteouts and
opaque markers, devices, duplicate and long names), each as the fuzz target reads it (a first
byte picking the compression: 0 none, 1 gzip, 2 zstd), plus an ordinary layer. The seeds are
checked in; run again to change them."""
import gzip
import io
import pathlib
import tarfile

OUT = pathlib.Path(__file__).resolve().parent / "seeds" / "unpack"


def layer(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for kind, name, extra in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            data = b""
            if kind == "file":
                data = extra or b"content"
                info.size = len(data)
                info.mode = 0o644
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = extra
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = extra
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3
            elif kind == "setuid":
                data = b"#!/bin/sh\n"
                info.size = len(data)
                info.mode = 0o4755
            t.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


seeds = {
    "ordinary": [("dir", "etc", None), ("file", "etc/motd", b"hello\n"), ("dir", "usr/bin", None),
                 ("setuid", "usr/bin/su", None), ("symlink", "bin", "usr/bin"),
                 ("hardlink", "etc/motd2", "etc/motd")],
    "traversal": [("file", "../outside/etc/passwd", b"pwned"), ("file", "a/../../x", b"x")],
    "absolute": [("file", "/outside/etc/passwd", b"pwned")],
    "symlink_out_relative": [("symlink", "etc", "../outside/etc"), ("file", "etc/passwd", b"pwned")],
    "symlink_out_absolute": [("symlink", "etc", "/"), ("file", "etc/shadow", b"pwned")],
    "hardlink_out": [("hardlink", "passwd", "../outside/etc/passwd")],
    "whiteouts": [("file", "a/b", b"1"), ("file", "a/.wh.b", None), ("dir", "c", None),
                  ("file", "c/.wh..wh..opq", None), ("file", ".wh.a", None)],
    "device": [("chr", "dev/null", None)],
    "duplicate": [("file", "x", b"1"), ("file", "x", b"2"), ("dir", "x", None)],
    "long_name": [("file", "d/" + "n" * 300, b"long"), ("symlink", "l", "t" * 5000)],
    "link_chain": [("symlink", "a", "b"), ("symlink", "b", "a"), ("file", "a/x", b"loop")],
}
OUT.mkdir(parents=True, exist_ok=True)
for name, entries in seeds.items():
    raw = layer(entries)
    (OUT / name).write_bytes(b"\x00" + raw)
(OUT / "ordinary_gzip").write_bytes(b"\x01" + gzip.compress(layer(seeds["ordinary"]), mtime=0))
print(f"{len(seeds) + 1} seeds in {OUT}")
