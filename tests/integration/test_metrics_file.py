"""--metrics-file: the Prometheus text outside the mount, for node_exporter's textfile
collector. It parses with prometheus_client's parser, every family has HELP and TYPE, every
sample carries the mount label (escaped), histogram buckets are cumulative and end in the
count, counters never go down from one write to the next nor at the last write (unmount),
which says spoolfs_mounted 0. The file is replaced whole: no temporary file is left beside
it, and /.spoolfs/stats keeps its own text (no labels, no histograms)."""

import os
import stat
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from conftest import SLOW, SPOOLFS, read_file
from helpers import wait_until

TYPES = ("counter", "gauge", "histogram")


def parse(path):
    """{(sample name, labels without mount as a sorted tuple): value}, the families, and
    the text, of the file as it is now."""
    with open(path) as f:
        text = f.read()
    families = list(text_string_to_metric_families(text))
    samples = {}
    for fam in families:
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "mount"))
            samples[(s.name, labels)] = s.value
    return samples, families, text


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def check_format(families, text, mountpoint):
    assert families
    for fam in families:
        assert fam.type in TYPES, (fam.name, fam.type)  # "unknown" when TYPE is missing
        assert fam.documentation, fam.name
        assert "# HELP %s" % fam.name in text and "# TYPE %s" % fam.name in text, fam.name
        for s in fam.samples:
            assert s.labels.get("mount") == mountpoint, s
    for fam in (f for f in families if f.type == "histogram"):
        series = {}  # labels but le -> {"_bucket": [(le, count)], "_sum": v, "_count": v}
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            parts = series.setdefault(key, {"_bucket": []})
            suffix = s.name[len(fam.name):]
            if suffix == "_bucket":
                parts["_bucket"].append((float(s.labels["le"]), s.value))
            else:
                parts[suffix] = s.value
        for key, parts in series.items():
            buckets = sorted(parts["_bucket"])
            assert buckets and buckets[-1][0] == float("inf"), (fam.name, key)
            counts = [c for _, c in buckets]
            assert counts == sorted(counts), (fam.name, key, counts)  # cumulative
            assert counts[-1] == parts["_count"], (fam.name, key)
            assert parts["_sum"] >= 0


def check_not_decreasing(before, after, families):
    monotonic = set()
    for fam in families:
        if fam.type in ("counter", "histogram"):
            monotonic.update(s.name for s in fam.samples)
    for key, v in before.items():
        if key[0] in monotonic:
            assert key in after, key
            assert after[key] >= v, (key, v, after[key])


def test_metrics_file_is_prometheus_text_that_only_grows(store, mount, tmp_path):
    store.add("small.bin", 4096)
    store.add("big.bin", 3 << 20)
    store.add("later.bin", 200000)
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    prom = textfile / "spoolfs.prom"
    # A quote in the mountpoint: the label value escapes it. Without passthrough: an object
    # complete before its open is answered would be read by the kernel itself, and its
    # first byte never timed here.
    m = mount(store.write(), "--metrics-file", str(prom), "--metrics-interval", "1",
              "--no-passthrough", name='mnt"q')
    mountpoint = os.path.realpath(m.path)
    wait_until(lambda: prom.exists(), "the first write of the metrics file")
    assert stat.S_IMODE(os.stat(prom).st_mode) == 0o644  # a collector runs as another user

    assert read_file(m.p("small.bin")) == store.content("small.bin")
    assert read_file(m.p("big.bin")) == store.content("big.bin")
    wait_until(lambda: value(parse(prom)[0], "spoolfs_open_first_byte_seconds_count") == 2,
               lambda: parse(prom)[2])
    first, families, text = parse(prom)
    check_format(families, text, mountpoint)
    assert value(first, "spoolfs_mounted") == 1
    assert value(first, "spoolfs_upstream_requests_total") >= 2
    assert value(first, "spoolfs_upstream_request_seconds_count", code="200") >= 2
    assert value(first, "spoolfs_read_wait_seconds_count") >= 1  # a cold read waited
    assert value(first, "spoolfs_cache_misses_total") == 2

    assert read_file(m.p("later.bin")) == store.content("later.bin")
    assert read_file(m.p("small.bin")) == store.content("small.bin")
    wait_until(lambda: value(parse(prom)[0], "spoolfs_upstream_requests_total") >
               value(first, "spoolfs_upstream_requests_total"), lambda: parse(prom)[2])
    second, families, text = parse(prom)
    check_format(families, text, mountpoint)
    check_not_decreasing(first, second, families)
    assert os.listdir(textfile) == ["spoolfs.prom"]  # written beside it, then renamed

    # The mount's own file keeps its text: no labels, no histograms.
    with open(m.p(".spoolfs/stats")) as f:
        inside = f.read()
    assert "{" not in inside and "_bucket" not in inside and "spoolfs_mounted" not in inside
    assert "spoolfs_cache_misses_total 3\n" in inside

    m.check_clean_exit()
    final, families, text = parse(prom)
    check_format(families, text, mountpoint)
    check_not_decreasing(second, final, families)
    assert value(final, "spoolfs_mounted") == 0
    assert value(final, "spoolfs_cache_misses_total") == 3
    assert sum(store.up.stats(p)["gets"] for p in ("small.bin", "big.bin", "later.bin")) == \
        value(final, "spoolfs_upstream_requests_total")
    assert os.listdir(textfile) == ["spoolfs.prom"]


def test_a_metrics_file_in_a_missing_directory_is_refused(store, tmp_path):
    (tmp_path / "mnt").mkdir()
    r = subprocess.run([SPOOLFS, "-f", store.write(), str(tmp_path / "mnt"), "--metrics-file",
                        str(tmp_path / "no" / "such.prom")], capture_output=True,
                       timeout=30 * SLOW)
    assert r.returncode == 2, r.stderr
    assert b"--metrics-file" in r.stderr and b"No such file or directory" in r.stderr
