"""The source tree's layering: each folder includes headers only from itself and the
folders before it in LAYERS, so no two folders depend on each other, and only fs/ and
daemon/ (the binary) include FUSE. A folder's private headers (`*_i.h`) are included only
inside it. No mount: these read source text only."""
import os
import re

from conftest import ROOT

LAYERS = ["util", "index", "fetch/http", "fetch/cache", "fetch/s3", "fetch/source",
          "fetch/engine", "fetch/prefetch", "publish", "fs", "daemon"]
# The one way down from daemon/ into fs/: the session embeds the options and the daemon's
# state (fs/session.h), whose fields only daemon/ reads, bar the few fs/ files that say so.
SESSION_MEMBERS = {("fs", "session.h"): {"daemon/options.h", "daemon/state.h"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)


def sources():
    for layer in LAYERS:
        folder = os.path.join(ROOT, layer)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith((".c", ".h")):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    yield layer, name, f.read()


def test_every_source_folder_is_in_a_layer():
    known = set(LAYERS)
    for top in ("util", "index", "fetch", "fs", "publish", "daemon"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            rel = os.path.relpath(dirpath, ROOT)
            if any(f.endswith((".c", ".h")) for f in files):
                assert rel in known, "%s holds sources but is in no layer of test_layout.py" % rel


def test_folders_include_only_earlier_layers():
    bad = []
    for layer, name, text in sources():
        allowed = LAYERS[: LAYERS.index(layer) + 1]
        for kind, header in INCLUDE.findall(text):
            if kind != '"':
                continue
            folder = os.path.dirname(header)
            if folder not in allowed and header not in SESSION_MEMBERS.get((layer, name), ()):
                bad.append("%s/%s includes %s" % (layer, name, header))
    assert not bad, "includes against the layering:\n" + "\n".join(bad)


def test_private_headers_stay_in_their_folder():
    bad = []
    for layer, name, text in sources():
        for kind, header in INCLUDE.findall(text):
            if header.endswith("_i.h") and os.path.dirname(header) != layer:
                bad.append("%s/%s includes %s" % (layer, name, header))
    assert not bad, "\n".join(bad)


def test_only_fs_includes_fuse():
    bad = [
        "%s/%s" % (layer, name)
        for layer, name, text in sources()
        if layer not in ("fs", "daemon") and any("fuse" in header for _, header in INCLUDE.findall(text))
    ]
    assert not bad, "FUSE headers outside fs/ and daemon/: %s" % bad
