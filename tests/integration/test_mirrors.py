"""--mirror: the manifest's objects are also on other bases; a failed fetch tries the next."""

import errno
import threading

from client import Upstream
from conftest import SLOW, read_file
from helpers import expected, read_until_error

MiB = 1 << 20


def test_reads_go_on_when_the_first_upstream_dies(store, mount):
    a = store.add("dir/a.bin", 3 * MiB)
    b = store.add("dir/b.bin", 3 * MiB)
    url = store.write()
    with Upstream(store.root) as mirror:
        m = mount(url, "--mirror", mirror.url(""), "--retries", "4")
        assert read_file(m.p(a)) == expected(store, a)
        assert mirror.stats(a)["gets"] == 0  # the first upstream serves while it is up
        store.up.stop()
        assert read_file(m.p(b)) == expected(store, b)
        assert mirror.stats(b)["gets"] >= 1
        assert read_file(m.p(a)) == expected(store, a)  # still local
        assert mirror.stats(a)["gets"] == 0


def test_a_download_cut_mid_object_finishes_from_the_mirror(store, mount):
    size = 16 * MiB
    c = store.add("c.bin", size)
    url = store.write()
    with Upstream(store.root) as mirror:
        m = mount(url, "-o", "mirror=%s" % mirror.url(""), "--stall-timeout", "2")
        store.up.fault(c, rate=4 * MiB)
        result = {}
        t = threading.Thread(target=lambda: result.update(data=read_file(m.p(c))))
        t.start()
        store.up.wait_for(lambda s: s["bytes"] >= 2 * MiB, timeout=30 * SLOW, path=c)
        sent_first = store.up.stats(c)["bytes"]
        store.up.stop()
        t.join(60 * SLOW)
        assert result.get("data") == expected(store, c)
        # the mirror sent only what the first upstream had not (no full refetch)
        assert sent_first + mirror.stats(c)["bytes"] <= size + MiB


def test_a_mirror_without_the_object_sends_the_download_back(store, mount):
    """A mirror not yet synced answers 404: the object goes on from the manifest's URL
    (it used to fail with EIO there, though the first upstream was fine)."""
    size = 3 * MiB
    o = store.add("o.bin", size)
    url = store.write()
    with Upstream(store.root) as mirror:
        m = mount(url, "--mirror", mirror.url(""))
        store.up.fault(o, drop_at=[MiB + 17])  # once: the next try goes to the mirror
        mirror.fault(o, fail_status=404)
        assert read_file(m.p(o)) == expected(store, o)
        assert mirror.stats(o)["statuses"] == [404]
        assert store.up.stats(o)["gets"] == 2


def test_an_object_every_url_refuses_fails_once_each_refused(store, mount):
    o = store.add("gone.bin", MiB, hashed=False)
    url = store.write()
    with Upstream(store.root) as one, Upstream(store.root) as two:
        m = mount(url, "--mirror", one.url(""), "--mirror", two.url(""))
        for up in (store.up, one, two):
            up.fault(o, fail_status=404)
        got, err = read_until_error(m.p(o))
        assert got == b"" and err is not None and err.errno == errno.EIO, err
        for up in (store.up, one, two):
            assert up.stats(o)["statuses"] == [404]
