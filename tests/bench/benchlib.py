#!/usr/bin/python3
"""Stdlib-only helpers for tests/bench/cold_read.sh (kept out of bash where bash is clumsy).

  benchlib.py sample PID OUT [INTERVAL_S]
      Poll /proc/PID/status every INTERVAL_S (default 0.05) until PID is gone or we get
      SIGTERM/SIGINT; then write "max_vmrss_kb last_vmhwm_kb samples" to OUT.
  benchlib.py status PID FIELD        print FIELD (e.g. VmHWM) of /proc/PID/status in kB
  benchlib.py upbytes BASE_URL PATH   body bytes the test upstream served for PATH
  benchlib.py upreset BASE_URL        reset the test upstream's counters
  benchlib.py mounted PATH            exit 0 when PATH is a mount point now, else 1
  benchlib.py report RESULTS SIZE_BYTES LIMIT_MIB
      RESULTS holds lines "key value": time_us.<measure> (one per run), peak_kb,
      sampled_kb, hwm_kb, up_bytes.<measure>. Prints the summary table.
"""

import json
import os
import re
import signal
import statistics
import sys
import time
import urllib.request

# The upstream is on 127.0.0.1: a proxy from the environment must not get in the way.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def read_status(pid):
    """/proc/PID/status as {field: kB}; {} once the process is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    out[name] = int(parts[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def cmd_sample(pid, out_path, interval=0.05):
    pid = int(pid)
    interval = float(interval)
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    max_rss = hwm = samples = 0
    while not stop:
        st = read_status(pid)
        if not st:  # daemon exited (or is a zombie without memory fields)
            break
        max_rss = max(max_rss, st.get("VmRSS", 0))
        hwm = max(hwm, st.get("VmHWM", 0))
        samples += 1
        time.sleep(interval)
    # Write atomically so the shell never reads a half-written file.
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d %d\n" % (max_rss, hwm, samples))
    os.replace(tmp, out_path)
    return 0


def is_mounted(path):
    """True when path is a mount point now: /proc/self/mountinfo's fifth field, whose
    spaces, tabs, newlines and backslashes are octal escapes. The benchmarks' one copy."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == path:
                return True
    return False


def cmd_mounted(path):
    return 0 if is_mounted(path) else 1


def cmd_status(pid, field):
    print(read_status(int(pid)).get(field, 0))
    return 0


def cmd_upbytes(base, path):
    with _opener.open("%s/_ctl/stats?path=%s" % (base, path), timeout=10) as r:
        print(json.load(r)["bytes"])
    return 0


def cmd_upreset(base):
    req = urllib.request.Request(base + "/_ctl/reset", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with _opener.open(req, timeout=10) as r:
        r.read()
    return 0


def _fmt_times(us):
    s = [u / 1e6 for u in us]
    med = statistics.median(s)
    if len(s) == 1:
        return med, "%.3f" % med
    return med, "%.3f (%.3f-%.3f)" % (med, min(s), max(s))


def cmd_report(results, size, limit_mib):
    size = int(size)
    limit_mib = float(limit_mib)
    times, up, peaks, sampled, hwms = {}, {}, [], [], []
    with open(results) as f:
        for line in f:
            if not line.strip():
                continue
            key, value = line.split()
            if key.startswith("time_us."):
                times.setdefault(key[8:], []).append(int(value))
            elif key.startswith("up_bytes."):
                up.setdefault(key[9:], []).append(int(value))
            elif key == "peak_kb":
                peaks.append(int(value))
            elif key == "sampled_kb":
                sampled.append(int(value))
            elif key == "hwm_kb":
                hwms.append(int(value))

    mib = size / (1 << 20)
    rows = [  # workload, spoolfs measure, baseline measure, baseline label
        ("cold read", "spool_cold", "curl", "curl from upstream"),
        ("warm read", "spool_warm", "local", "dd of local store file"),
    ]
    head = ("workload", "spoolfs s", "baseline s", "ratio", "spoolfs MiB/s", "base MiB/s",
            "upstream MiB/run", "baseline")
    table = [head]
    for name, sm, bm, label in rows:
        if sm not in times or bm not in times:
            continue
        s_med, s_txt = _fmt_times(times[sm])
        b_med, b_txt = _fmt_times(times[bm])
        ratio = s_med / b_med if b_med > 0 else float("inf")
        upm = up.get(sm)
        up_txt = "-"
        if upm:  # MiB the upstream served per run: ~object size cold, 0 warm
            lo, hi = ("%.1f" % (b / (1 << 20)) for b in (min(upm), max(upm)))
            up_txt = lo if lo == hi else "%s-%s" % (lo, hi)
        table.append((name, s_txt, b_txt, "%.2f" % ratio,
                      "%.0f" % (mib / s_med if s_med else 0),
                      "%.0f" % (mib / b_med if b_med else 0), up_txt, label))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    runs = max((len(v) for v in times.values()), default=0)
    print("spoolfs cold/warm read benchmark: object %.0f MiB, %d run(s); "
          "times: median (min-max), wall seconds" % (mib, runs))
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) if j in (0, len(head) - 1) else c.rjust(w)
                        for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    peak_mib = max(peaks, default=0) / 1024
    print("rss per run (MiB): peak %s; sampled max %s; VmHWM %s"
          % (" ".join("%.1f" % (p / 1024) for p in peaks),
             " ".join("%.1f" % (p / 1024) for p in sampled),
             " ".join("%.1f" % (p / 1024) for p in hwms)))
    print("peak_rss_mib=%d" % round(peak_mib))
    print("limit %g MiB: %s" % (limit_mib, "within" if peak_mib <= limit_mib else "OVER"))
    return 0


def main(argv):
    cmds = {"sample": cmd_sample, "status": cmd_status, "upbytes": cmd_upbytes,
            "upreset": cmd_upreset, "report": cmd_report, "mounted": cmd_mounted}
    if len(argv) < 2 or argv[1] not in cmds:
        sys.stderr.write(__doc__)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
