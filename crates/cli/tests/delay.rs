//! The one-way delay of a flow's own packets across the emulator (`path.up.delay`,
//! `path.up.flow_delays`) against its independent reference: captures on both ends'
//! TUN devices, where the kernel hands each packet to the emulator and takes it back,
//! stamped by the kernel.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use support::*;
use tcplab_record::DelayQuantiles;
use tcplab_sys::netns::privileged_or_skip;

/// 20 Mbit/s and a 1-BDP queue (50 KB, 20 ms at the link's rate): cubic fills it, so the
/// delays spread from the path's 10 ms one way to 30 ms.
const PATH: &str = "rtt 20ms rate 20mbit queue 1bdp";

/// Each data packet of the flow to server port `port` in a capture: (kernel time, s;
/// first sequence number, raw; payload bytes).
fn data_packets(pcap: &Path, port: u16) -> Vec<(f64, u32, u32)> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(pcap)
        .args(["-Y", &format!("tcp.dstport == {port} && tcp.len > 0")])
        .args([
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "tcp.seq_raw",
        ])
        .args(["-e", "tcp.len"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// Per wire segment of `mss` bytes, the time from its (GSO) packet on the sender's side
/// to the (coalesced) packet that carried it on the receiver's, µs, sorted. Segments
/// sent twice (retransmitted) are left out: which copy arrived is not known.
fn captured_delays(sent: &[(f64, u32, u32)], received: &[(f64, u32, u32)], mss: u32) -> Vec<f64> {
    // Each segment's time in a capture, `None` where it was there twice.
    let times = |packets: &[(f64, u32, u32)]| {
        let mut times: BTreeMap<u32, Option<f64>> = BTreeMap::new();
        for &(t, seq, len) in packets {
            for k in 0..len.div_ceil(mss) {
                times
                    .entry(seq.wrapping_add(k * mss))
                    .and_modify(|e| *e = None)
                    .or_insert(Some(t));
            }
        }
        times
    };
    let (first_sent, arrived) = (times(sent), times(received));
    let mut delays: Vec<f64> = first_sent
        .iter()
        .filter_map(|(seq, sent)| Some((arrived.get(seq)?.as_ref()? - sent.as_ref()?) * 1e6))
        .collect();
    delays.sort_by(f64::total_cmp);
    delays
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The bar: the emulator's p50 and p95 of the data flow's one-way delay lie within the
/// captures' own, which add the hosts' hand-over to and from the emulator (its read
/// comes one wake-up after the packet, tens of µs): the emulator's no more than 0.1 ms
/// above (the histogram's three digits are 30 µs at 30 ms) and no more than 1 ms below.
/// It counts the packets the captures carried and the retransmissions. A
/// machine whose load delays the emulator's reads is one of three tries.
#[test]
fn one_way_delays_agree_with_captures_of_both_ends() {
    if !privileged_or_skip("delay_vs_capture") || !tshark_or_skip("delay_vs_capture") {
        return;
    }
    let _machine = alone();
    let mut n = 0;
    one_of_three_tries("one-way delay against the captures", || {
        n += 1;
        let name = lab_name("owd", n);
        let dir = tempfile::tempdir().unwrap();
        let lab = emulator_lab(&name, PATH);
        let (server_ns, client_ns) = (format!("{name}-server"), format!("{name}-client"));
        let sender = Capture::start(&client_ns, &dir.path().join("sent.pcapng"));
        let receiver = Capture::start(&server_ns, &dir.path().join("received.pcapng"));
        let mut server = serve_in(&server_ns, &client_ns);
        let out = tcplab()
            .args(["--netns", &client_ns, "run", "10.77.0.1", "-t", "2"])
            .args(["-C", "cubic", "--json"])
            .output()
            .unwrap();
        let _ = server.kill();
        let _ = server.wait();
        let (sent_pcap, sent_lost) = sender.stop();
        let (received_pcap, received_lost) = receiver.stop();
        let run = run_through(lab, &out);
        let up = &run.path.as_ref().unwrap().up;
        let flow = &run.flows[0];
        let port: u16 = flow
            .server_addr
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let name = format!("tcp {} > {}", flow.client_addr, flow.server_addr);
        let measured: DelayQuantiles = up
            .flow_delays
            .iter()
            .find(|f| f.flow == name)
            .unwrap_or_else(|| panic!("no delays of {name}: {:?}", up.flow_delays))
            .delay;
        let captured = captured_delays(
            &data_packets(&sent_pcap, port),
            &data_packets(&received_pcap, port),
            flow.mss,
        );
        // The delay over time holds the same packets: its largest is the largest.
        let all = up.delay.expect("the direction's delays");
        let largest = up.delay_series.iter().map(|s| s.max_us).fold(0.0, f64::max);
        assert!(
            (largest - all.max_us).abs() <= all.max_us * 2e-3,
            "over time {largest} µs, all {} µs",
            all.max_us
        );
        let (p50, p95) = (quantile(&captured, 0.5), quantile(&captured, 0.95));
        let seen = format!(
            "emulator p50 {:.0} p95 {:.0} µs over {} packets; captures p50 {p50:.0} p95 \
             {p95:.0} µs over {} segments (lost {sent_lost}/{received_lost}); {} retransmits",
            measured.p50_us,
            measured.p95_us,
            measured.packets,
            captured.len(),
            flow.retransmits
        );
        println!("{seen}");
        // What load cannot explain: the delays span the queue (the first packets find it
        // empty), every time.
        assert!(
            (9_000.0..12_000.0).contains(&captured[0]) && (25_000.0..31_500.0).contains(&p95),
            "{seen}"
        );
        // Each retransmission is written again, and leaves its segment's two copies out
        // of the captures' count.
        let extra = measured.packets.checked_sub(captured.len() as u64);
        assert!(
            extra.is_some_and(|e| e <= 2 * flow.retransmits + 20),
            "{seen}"
        );
        let within = |emulator: f64, capture: f64| {
            emulator <= capture + 100.0 && emulator >= capture - 1000.0
        };
        if sent_lost + received_lost > 0
            || !within(measured.p50_us, p50)
            || !within(measured.p95_us, p95)
        {
            return Err(seen);
        }
        Ok(())
    });
}
