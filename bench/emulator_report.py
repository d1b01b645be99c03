#!/usr/bin/env python3
"""Helpers for bench/emulator.sh: read iperf3 -J and `tcplab lab show --json`, poll the
lab's link counters, ping with microsecond resolution, and print the final report.

Every measurement is appended as one JSON object per line to RESULTS (results.jsonl);
`report` reads them all back and prints the Markdown table and summary lines.

  emulator_report.py iperf RESULTS FILE key=value...       # goodput, retransmits, MSS
  emulator_report.py show RESULTS FILE key=value...        # lateness and link counters
  emulator_report.py edge BIN LAB                          # "t_ns up_bytes down_bytes"
  emulator_report.py linkrate RESULTS EDGE1 EDGE2 key=value...
  emulator_report.py ping RESULTS DEST COUNT INTERVAL key=value...   (inside the netns)
  emulator_report.py record RESULTS key=value...
  emulator_report.py report RESULTS REPS DUR [SECTIONS]     # SECTIONS e.g. 24; default 1234
"""

import json
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import time


def kv(args):
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def append(results, rec):
    with open(results, "a") as f:
        f.write(json.dumps(rec) + "\n")


def cmd_iperf(results, path, *extra):
    rec = kv(extra)
    try:
        d = json.load(open(path))
        if "error" in d:
            raise ValueError(d["error"])
        end = d["end"]
        rec.update(
            recv_bps=end["sum_received"]["bits_per_second"],
            recv_secs=end["sum_received"]["seconds"],
            recv_bytes=end["sum_received"]["bytes"],
            send_bps=end["sum_sent"]["bits_per_second"],
            retrans=end["sum_sent"].get("retransmits", 0),
            mss=d["start"].get("tcp_mss_default"),
        )
    except Exception as e:  # a failed run is recorded, not fatal
        rec["error"] = f"iperf3: {e}"
        print(f"warning: {path}: {e}", file=sys.stderr)
    append(results, rec)


def cmd_show(results, path, *extra):
    rec = kv(extra)
    d = json.load(open(path))
    for dirn in ("up", "down"):
        lat = d[dirn]["lateness"]
        link = d[dirn]["links"][0] if d[dirn]["links"] else {}
        rec[dirn] = {
            "lat_packets": lat["packets"],
            "lat_p50_us": lat["p50_us"],
            "lat_p99_us": lat["p99_us"],
            "lat_max_us": lat["max_us"],
            "per_packet": d[dirn].get("per_packet"),
            "delivered_bytes": link.get("delivered_bytes"),
            "dropped_loss": link.get("dropped_loss"),
            "dropped_queue": link.get("dropped_queue"),
            "max_queue_bytes": link.get("max_queue_bytes"),
            "write_errors": d[dirn].get("write_errors"),
        }
    # CPU the emulator daemon used since `lab up` (both directions, all threads), in cores.
    try:
        pid = d["lab"]["pid"]
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        rec["daemon_cores"] = cpu_s / (time.time() - d["lab"]["created_unix_us"] / 1e6)
    except Exception:
        pass
    append(results, rec)


def show_doc(binary, lab):
    out = subprocess.run(
        [binary, "lab", "show", lab, "--json"], capture_output=True, text=True, check=True
    ).stdout
    d = json.loads(out)
    return d["up"]["links"][0]["delivered_bytes"], d["down"]["links"][0]["delivered_bytes"]


def cmd_edge(binary, lab):
    """The daemon publishes its counters every 20 ms, so a single `lab show` can be up to
    20 ms stale. Poll until the up counter changes and time the change: the publish
    happened between the previous and this answer, so the timestamp is their midpoint
    (uncertainty ±½ of one `lab show` call, a few ms)."""
    t_prev = time.monotonic_ns()
    first, _ = show_doc(binary, lab)
    give_up = t_prev + 1_500_000_000
    while time.monotonic_ns() < give_up:
        t0 = time.monotonic_ns()
        up, down = show_doc(binary, lab)
        t1 = time.monotonic_ns()
        if up != first:
            print(f"{(t_prev + t1) // 2} {up} {down} {t1 - t_prev}")
            return
        t_prev = t0
    raise SystemExit(f"edge: lab {lab}: up counters did not change for 1.5 s (transfer over?)")


def cmd_linkrate(results, e1, e2, *extra):
    rec = kv(extra)
    try:
        t1, up1, _, w1 = map(int, open(e1).read().split())
        t2, up2, _, w2 = map(int, open(e2).read().split())
        secs = (t2 - t1) / 1e9
        rec.update(link_bps=(up2 - up1) * 8 / secs, link_secs=secs, link_uncert_ms=(w1 + w2) / 2e6)
    except Exception as e:
        rec["error"] = f"link counters: {e}"
        print(f"warning: {e1} {e2}: {e}", file=sys.stderr)
    append(results, rec)


# ---- ping -------------------------------------------------------------------------------
# iputils ping prints a 20 ms RTT as "time=20.1 ms": 100 µs resolution, useless for a
# 50 µs bar. This pinger does what ping does (ICMP echo, the kernel of the far namespace
# answers, send time read just before sendto, receive time = the kernel's SO_TIMESTAMPNS
# on the reply) and keeps nanoseconds. Same clock (CLOCK_REALTIME) as ping.

SO_TIMESTAMPNS = 35


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def cmd_ping(results, dest, count, interval, *extra):
    count, interval = int(count), float(interval)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    ident = os.getpid() & 0xFFFF
    sent, rtts = {}, []
    seq, nxt = 0, time.monotonic()
    last_send = None
    while True:
        now = time.monotonic()
        if seq < count and now >= nxt:
            hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            payload = b"tcplab-bench".ljust(56, b".")
            pkt = struct.pack("!BBHHH", 8, 0, checksum(hdr + payload), ident, seq) + payload
            sent[seq] = time.time_ns()
            s.sendto(pkt, (dest, 0))
            seq += 1
            nxt += interval
            last_send = time.monotonic()
            continue
        if seq >= count and (len(rtts) == count or now - last_send > 1.0):
            break
        wait = max(0.0, min(nxt - now, 0.05)) if seq < count else 0.05
        r, _, _ = select.select([s], [], [], wait)
        if not r:
            continue
        data, anc, _, _ = s.recvmsg(2048, 256)
        ihl = (data[0] & 0x0F) * 4
        typ, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if typ != 0 or rid != ident or rseq not in sent:
            continue
        ts = None
        for level, ctype, cdata in anc:
            if level == socket.SOL_SOCKET and ctype == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", cdata[:16])
                ts = sec * 1_000_000_000 + nsec
        if ts is None:
            ts = time.time_ns()
        rtts.append((ts - sent.pop(rseq)) / 1000.0)
    rec = kv(extra)
    rec.update(sent=count, received=len(rtts), rtt_us=rtts)
    append(results, rec)


def cmd_record(results, *extra):
    append(results, kv(extra))


# ---- report -----------------------------------------------------------------------------


def pct(vals, q):
    v = sorted(vals)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def med(vals):
    vals = [v for v in vals if v == v]
    return statistics.median(vals) if vals else float("nan")


def fmt(vals, f="{:.2f}"):
    return " ".join(f.format(v) for v in vals)


def cmd_report(results, reps, dur, sections="1234"):
    recs = [json.loads(line) for line in open(results)]
    by = lambda sec, **kw: [
        r for r in recs if r.get("sec") == sec and all(r.get(k) == v for k, v in kw.items())
    ]
    summary = []
    loads = [r["load1"] for r in by("load")]
    print(f"Emulator bench: {reps} repetitions interleaved, iperf3 runs of {dur} s. "
          f"1-min load average during the run (2 cores, shared): {fmt(loads)}.\n")

    # 1. throughput
    if "1" in sections:
        print("### 1. Single TCP stream throughput (iperf3 receiver, Gbit/s)\n")
        print("| variant | median | runs (in order) | retransmits (median) | emulator daemon CPU, cores |\n|---|---|---|---|---|")
        names = [
            ("veth", "raw veth pair"),
            ("tun", "tun_forward pass-through, offloads"),
            ("tun_seg", "tun_forward segmenting and re-coalescing, no delay"),
            ("lab_rtt", "lab `rtt 20ms` (MTU 1500)"),
            ("lab_rtt5", "lab `rtt 5ms`"),
            ("lab_rate", "lab `rtt 20ms rate 1gbit queue 1bdp` (per-packet)"),
            ("lab_10g_1ms", "lab `rtt 1ms rate 10gbit queue 1bdp` (per-packet)"),
            ("lab_10g_5ms", "lab `rtt 5ms rate 10gbit queue 1bdp` (per-packet)"),
            ("lab_10g", "lab `rtt 20ms rate 10gbit queue 1bdp` (per-packet)"),
            ("lab_loss", "lab `rtt 20ms loss 0.01%` (per-packet)"),
        ]
        tput = {}
        for key, label in names:
            rs = by("tput", variant=key)
            if not rs:
                tput[key] = float("nan")
                continue
            vals = [r.get("recv_bps", float("nan")) / 1e9 for r in rs]
            tput[key] = med(vals)
            rt = med([r.get("retrans", float("nan")) for r in rs])
            cpu = med([r.get("daemon_cores", float("nan")) for r in by("tputshow", variant=key)])
            cpus = f"{cpu:.2f}" if cpu == cpu else "-"
            print(f"| {label} | {tput[key]:.2f} | {fmt(vals)} | {rt:.0f} | {cpus} |")
        ratio = tput["lab_rtt"] / tput["tun"]
        summary.append(
            f"- throughput: lab rtt 20ms (delay only) {tput['lab_rtt']:.2f} Gbit/s "
            f"= {ratio:.2f} × the TUN forwarder (bar ≥ 0.9: {'PASS' if ratio >= 0.9 else 'MISS'}), "
            f"{tput['lab_rtt'] / tput['veth']:.2f} × veth; per-packet 1gbit lab {tput['lab_rate']:.3f} Gbit/s; "
            f"per packet at 10gbit {tput['lab_10g']:.2f} and with 0.01 % loss {tput['lab_loss']:.2f} Gbit/s "
            f"(bar ≥ 8: {'PASS' if min(tput['lab_10g'], tput['lab_loss']) >= 8 else 'MISS'})")

    # 2. delay error
    if "2" in sections:
        print("\n### 2. Delay error\n")
        print("Emulator lateness (`lab show --json`, cumulative since `lab up`, read at the end of the load), µs; "
              "median over repetitions of each percentile:\n")
        print("| lab, condition | dir | packets | p50 | p99 | max | p99 runs | load goodput Gbit/s | daemon CPU, cores |\n|---|---|---|---|---|---|---|---|---|")
        worst_p99 = 0.0
        for cond, label in [
            ("rate_load", "`rtt 20ms rate 1gbit queue 1bdp`, iperf3 full load"),
            ("ping_idle", "`rtt 20ms`, idle, ping only"),
            ("ping_load", "`rtt 20ms`, iperf3 --fq-rate 1G + ping"),
        ]:
            rs = by("lat", cond=cond)
            gp = med([r.get("recv_bps", float("nan")) / 1e9 for r in by("latload", cond=cond)]) if cond != "ping_idle" else float("nan")
            for dirn in ("up", "down"):
                p50 = med([r[dirn]["lat_p50_us"] for r in rs])
                p99s = [r[dirn]["lat_p99_us"] for r in rs]
                p99 = med(p99s)
                mx = med([r[dirn]["lat_max_us"] for r in rs])
                n = med([r[dirn]["lat_packets"] for r in rs])
                if cond != "ping_idle":
                    worst_p99 = max(worst_p99, p99)
                gps = f"{gp:.3f}" if gp == gp else "-"
                cpu = med([r.get("daemon_cores", float("nan")) for r in rs])
                print(f"| {label} | {dirn} | {n:.0f} | {p50:.1f} | {p99:.1f} | {mx:.0f} | {fmt(p99s, '{:.0f}')} | {gps} | {cpu:.2f} |")
        rl = by("lat", cond="rate_load")
        rl_p99 = max(med([r[d]["lat_p99_us"] for r in rl]) for d in ("up", "down"))
        summary.append(
            f"- delay error under 1 Gbit/s load (lab lateness, worse direction, rated lab): p99 {rl_p99:.1f} µs "
            f"(bar ≤ 50: {'PASS' if rl_p99 <= 50 else 'MISS'}); worst p99 of all loaded labs {worst_p99:.1f} µs")

        print("\nIndependent check: ICMP echo RTT − 20 ms (µs; 300 pings every 10 ms, kernel receive "
              "timestamps; includes BOTH directions' lateness plus the kernel/TUN path), and iputils "
              "`ping -i 0.01 -c 300 -q` summary run alongside:\n")
        print("| condition | received | p50 | p90 | p99 | max | p99 runs | iputils min/avg/max (same offset) |\n|---|---|---|---|---|---|---|---|")
        pings = {}
        for cond, label in [("ping_fwd", "baseline: idle tun_forward, no delay (RTT − 0)"),
                            ("ping_idle", "idle lab `rtt 20ms`"), ("ping_load", "lab `rtt 20ms` under ~1 Gbit/s iperf3")]:
            base = 0 if cond == "ping_fwd" else 20000
            rs = by("ping", cond=cond)
            allr = [x - base for r in rs for x in r["rtt_us"]]
            per = [pct([x - base for x in r["rtt_us"]], 0.99) for r in rs]
            recv = sum(r["received"] for r in rs)
            sent = sum(r["sent"] for r in rs)
            ip = by("iputils", cond=cond)
            ipt = "; ".join(f"{r['min'] - base:.0f}/{r['avg'] - base:.0f}/{r['max'] - base:.0f}" for r in ip) or "-"
            pings[cond] = (pct(allr, 0.5), pct(allr, 0.99))
            print(f"| {label} | {recv}/{sent} | {pct(allr, .5):.1f} | {pct(allr, .9):.1f} | {pct(allr, .99):.1f} | "
                  f"{max(allr) if allr else float('nan'):.0f} | {fmt(per, '{:.0f}')} | {ipt} |")
        summary.append(
            f"- ping RTT − 20 ms (pooled over repetitions; the tun_forward baseline RTT is p50 {pings['ping_fwd'][0]:.1f} / p99 {pings['ping_fwd'][1]:.1f} µs): idle p50 {pings['ping_idle'][0]:.1f} / p99 {pings['ping_idle'][1]:.1f} µs, "
            f"under load p50 {pings['ping_load'][0]:.1f} / p99 {pings['ping_load'][1]:.1f} µs (two emulator passes + kernel path)")

    # 3. rate accuracy
    if "3" in sections:
        print("\n### 3. Rate accuracy (lab `rate R queue 1bdp rtt 10ms`)\n")
        print("Expected goodput = R × MSS/(MSS+52) with the MSS iperf3 reports (IP+TCP+timestamps = 52 B, "
              "MTU 1500, link overhead 0). Link rate = `up.links[0].delivered_bytes` × 8 / time between two "
              "counter publishes in steady state.\n")
        print("| rate | MSS | expected goodput Mbit/s | goodput Mbit/s (median) | goodput error | runs error % | "
              "link rate Mbit/s | link error | runs error % | retransmits | queue drops |\n|---|---|---|---|---|---|---|---|---|---|---|")
        worst = 0.0
        for rate, bps in [("10mbit", 10e6), ("100mbit", 100e6), ("1gbit", 1e9)]:
            rs = by("rate", rate=rate)
            mss = med([r.get("mss") or float("nan") for r in rs])
            m = mss if mss == mss else 1448
            exp = bps * m / (m + 52)
            gerr = [(r.get("recv_bps", float("nan")) / exp - 1) * 100 for r in rs]
            lerr = [(r.get("link_bps", float("nan")) / bps - 1) * 100 for r in rs]
            g = med([r.get("recv_bps", float("nan")) for r in rs])
            lk = med([r.get("link_bps", float("nan")) for r in rs])
            ge, le = med(gerr), med(lerr)
            worst = max(worst, abs(ge), abs(le))
            rt = med([r.get("retrans", float("nan")) for r in rs])
            dq = med([r["up"]["dropped_queue"] for r in rs if "up" in r])
            print(f"| {rate} | {mss:.0f} | {exp / 1e6:.2f} | {g / 1e6:.2f} | {ge:+.2f} % | {fmt(gerr, '{:+.2f}')} | "
                  f"{lk / 1e6:.2f} | {le:+.2f} % | {fmt(lerr, '{:+.2f}')} | {rt:.0f} | {dq:.0f} |")
        summary.append(f"- rate accuracy 10mbit..1gbit: worst median error {worst:.2f} % (bar ±1 %: {'PASS' if worst <= 1 else 'MISS'})")

    # 4. up/down time
    if "4" in sections:
        print("\n### 4. `lab up --path \"rtt 20ms\"` + `lab down` time (ms)\n")
        rs = by("updown")
        tot = [r["up_ms"] + r["down_ms"] for r in rs]
        print("| | median | min | max | cycles |\n|---|---|---|---|---|")
        for label, vals in [("up", [r["up_ms"] for r in rs]), ("down", [r["down_ms"] for r in rs]), ("up + down", tot)]:
            print(f"| {label} | {med(vals):.1f} | {min(vals):.1f} | {max(vals):.1f} | {len(vals)} |")
        summary.append(f"- lab up + down: median {med(tot):.1f} ms over {len(tot)} cycles (bar ≤ 150: {'PASS' if med(tot) <= 150 else 'MISS'})")

    print("\nSummary:\n")
    print("\n".join(summary))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "iperf": cmd_iperf,
        "show": cmd_show,
        "edge": cmd_edge,
        "linkrate": cmd_linkrate,
        "ping": cmd_ping,
        "record": cmd_record,
        "report": cmd_report,
    }[cmd](*args)


if __name__ == "__main__":
    main()
