//! The kernel's own events of a test's sockets (`--trace-events`): what the tcp
//! tracepoints said, each on the run's time base and attributed to a flow and an end.
//! tcp_probe fires on every segment a socket receives, before the kernel processes it
//! (so it shows the state the previous segment left); tcp_retransmit_skb on every
//! retransmission, which may carry several segments; tcp_cong_state_set on every change
//! of the congestion state; tcp_rcvbuf_grow when the receive buffer auto-tunes up.
//! Pure: the trace text is parsed and attributed here, the I/O lives in `tcplab-sys`.

use serde::Serialize;

use tcplab_record::events::{CaState, EventRecord, KernelEvent};
use tcplab_record::{Host, SampleRecord};

/// The tracepoints a test enables, as tracefs names them (`events/tcp/NAME`).
pub const TRACEPOINTS: [&str; 4] = [
    "tcp_probe",
    "tcp_retransmit_skb",
    "tcp_cong_state_set",
    "tcp_rcvbuf_grow",
];

/// The filter each tracepoint gets: the test's data connections, both ends, are the
/// ones with the server's data port on either side.
pub fn port_filter(data_port: u16) -> String {
    format!("sport == {data_port} || dport == {data_port}")
}

/// A trace line's event with the socket's ports, before it is attributed to a flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceLine {
    /// The trace clock (CLOCK_MONOTONIC) in µs.
    pub at_us: i64,
    pub sport: u16,
    pub dport: u16,
    pub event: KernelEvent,
}

/// Parses one line of a tracefs instance's text output (`trace_pipe`), as
/// `COMM-PID [CPU] FLAGS SECONDS.MICROS: EVENT: key=value …`. `None` for anything else
/// (comments, other events, lines a kernel of another version prints differently).
pub fn parse_line(line: &str) -> Option<TraceLine> {
    let at = line.find(": tcp_")?;
    let at_us = parse_line_time(&line[..at])?;
    let rest = &line[at + 2..];
    let (name, fields) = rest.split_once(": ")?;
    let field = |key: &str| {
        fields
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    };
    let int = |key: &str| -> Option<u32> {
        let text = field(key)?;
        match text.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        }
    };
    let port_of = |key: &str| field(key)?.rsplit_once(':')?.1.parse().ok();
    let ports = || -> Option<(u16, u16)> {
        Some((field("sport")?.parse().ok()?, field("dport")?.parse().ok()?))
    };
    let ((sport, dport), event) = match name {
        "tcp_probe" => (
            (port_of("src")?, port_of("dest")?),
            KernelEvent::Probe {
                data_len: int("data_len")?,
                snd_nxt: int("snd_nxt")?,
                snd_una: int("snd_una")?,
                snd_cwnd: int("snd_cwnd")?,
                ssthresh: int("ssthresh")?,
                snd_wnd: int("snd_wnd")?,
                srtt_us: int("srtt")?,
                rcv_wnd: int("rcv_wnd")?,
            },
        ),
        // An attempt that failed (err ≠ 0: the skb still in the host's queue, no
        // memory) sent nothing.
        "tcp_retransmit_skb" if field("err").is_none_or(|err| err == "0") => {
            (ports()?, KernelEvent::Retransmit)
        }
        "tcp_cong_state_set" => (
            ports()?,
            KernelEvent::CongState {
                state: CaState::from_kernel(u8::try_from(int("cong_state")?).ok()?)?,
            },
        ),
        "tcp_rcvbuf_grow" => (
            ports()?,
            KernelEvent::RcvbufGrow {
                rcvbuf: int("rcvbuf")?,
                rcv_ssthresh: int("rcv_ssthresh")?,
                window_clamp: int("window_clamp")?,
                rcv_wnd: int("rcv_wnd")?,
            },
        ),
        _ => return None,
    };
    Some(TraceLine {
        at_us,
        sport,
        dport,
        event,
    })
}

/// The time of a trace line from its head (`COMM-PID [CPU] FLAGS SECONDS.MICROS`), µs.
pub fn parse_line_time(head: &str) -> Option<i64> {
    parse_seconds(head.split_whitespace().last()?)
}

/// `SECONDS.MICROS` as the trace prints its timestamps, in µs.
fn parse_seconds(text: &str) -> Option<i64> {
    let (seconds, micros) = text.split_once('.')?;
    if micros.len() != 6 {
        return None;
    }
    Some(seconds.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?)
}

/// How a test's sockets are told apart: the server's data port, and each flow's port
/// at the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestPorts {
    pub data_port: u16,
    /// `(flow, the client's port)`.
    pub flows: Vec<(u32, u16)>,
}

impl TestPorts {
    /// The flow and end a line belongs to, with its time on the test's time base;
    /// `None` for another test's socket that shares the data port, and for what came
    /// before the test's start (`t0_us`): its connections' setup, which a client
    /// sees acknowledged before it starts the test (a lost SYN or intro and its
    /// retransmission), so that the events begin where the counters do.
    pub fn attribute(&self, line: TraceLine, t0_us: i64) -> Option<EventRecord> {
        if line.at_us < t0_us {
            return None;
        }
        let (host, client_port) = if line.sport == self.data_port {
            (Host::Server, line.dport)
        } else if line.dport == self.data_port {
            (Host::Client, line.sport)
        } else {
            return None;
        };
        let flow = self.flows.iter().find(|(_, port)| *port == client_port)?.0;
        Some(line.record(flow, host, t0_us))
    }
}

/// How watched connections' sockets are told apart (`shell --record --trace-events`):
/// each flow's port at its client (the end that sent more) and at its server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionPorts {
    /// `(flow, the client's port, the server's port)`.
    pub flows: Vec<(u32, u16, u16)>,
}

impl ConnectionPorts {
    /// The flow and end a line belongs to, on the watch's time base (`t0_us`); `None`
    /// for another socket's, and for what came before the watch.
    pub fn attribute(&self, line: TraceLine, t0_us: i64) -> Option<EventRecord> {
        if line.at_us < t0_us {
            return None;
        }
        let (flow, host) = self.flows.iter().find_map(|&(flow, client, server)| {
            match (line.sport, line.dport) {
                (s, d) if s == client && d == server => Some((flow, Host::Client)),
                (s, d) if s == server && d == client => Some((flow, Host::Server)),
                _ => None,
            }
        })?;
        Some(line.record(flow, host, t0_us))
    }
}

impl TraceLine {
    /// The line as flow `flow`'s event at `host`, on the time base `t0_us`.
    fn record(self, flow: u32, host: Host, t0_us: i64) -> EventRecord {
        EventRecord {
            flow,
            host,
            t_us: self.at_us - t0_us,
            event: self.event,
        }
    }
}

/// What the kernel's events say of the senders' congestion control.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KernelEpisodes {
    /// tcp_retransmit_skb events (one skb each, perhaps several segments).
    pub retransmit_events: u64,
    /// Entries into the recovery state: fast retransmit, cwnd cut.
    pub fast_recoveries: u64,
    /// Entries into the loss state: a retransmission timeout, cwnd to its floor.
    pub timeouts: u64,
    /// Entries into the CWR state: cwnd cut for an ECN mark (or a local congestion).
    pub ecn_reductions: u64,
    /// The longest time a sender's peer advertised a zero window.
    pub longest_zero_window: Option<ZeroWindow>,
}

impl KernelEpisodes {
    /// Times a congestion control cut cwnd.
    pub fn cwnd_cuts(&self) -> u64 {
        self.fast_recoveries + self.timeouts + self.ecn_reductions
    }
}

/// A span in which a sender could send nothing: its peer's window was 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ZeroWindow {
    pub flow: u32,
    /// When the window closed, µs since t0.
    pub at_us: i64,
    pub lasted_us: i64,
}

/// The episodes of the senders' sockets, each named by its flow and end. A probe shows
/// the state before its segment is processed, so a window its probe shows closed was
/// closed by the previous probe's segment, and opened again by the segment before the
/// first probe that shows it open.
pub fn kernel_episodes(events: &[EventRecord], senders: &[(u32, Host)]) -> KernelEpisodes {
    let mut episodes = KernelEpisodes::default();
    for &(flow, host) in senders {
        let mine = || {
            events
                .iter()
                .filter(move |e| e.flow == flow && e.host == host)
        };
        for e in mine() {
            match e.event {
                KernelEvent::Retransmit => episodes.retransmit_events += 1,
                KernelEvent::CongState { state } => match state {
                    CaState::Recovery => episodes.fast_recoveries += 1,
                    CaState::Loss => episodes.timeouts += 1,
                    CaState::Cwr => episodes.ecn_reductions += 1,
                    CaState::Open | CaState::Disorder => {}
                },
                KernelEvent::Probe { .. } | KernelEvent::RcvbufGrow { .. } => {}
            }
        }
        let windows: Vec<(i64, u32)> = mine()
            .filter_map(|e| match e.event {
                KernelEvent::Probe { snd_wnd, .. } => Some((e.t_us, snd_wnd)),
                _ => None,
            })
            .collect();
        let mut closed_at = None;
        for pair in windows.windows(2) {
            let [(before, _), (_, window)] = [pair[0], pair[1]];
            match (closed_at, window) {
                (None, 0) => closed_at = Some(before),
                (Some(at), w) if w > 0 => {
                    episodes.note_zero_window(flow, at, before);
                    closed_at = None;
                }
                _ => {}
            }
        }
        if let (Some(at), Some(&(end, _))) = (closed_at, windows.last()) {
            episodes.note_zero_window(flow, at, end);
        }
    }
    episodes
}

impl KernelEpisodes {
    fn note_zero_window(&mut self, flow: u32, at_us: i64, until_us: i64) {
        let span = ZeroWindow {
            flow,
            at_us,
            lasted_us: until_us - at_us,
        };
        if self
            .longest_zero_window
            .is_none_or(|longest| span.lasted_us > longest.lasted_us)
        {
            self.longest_zero_window = Some(span);
        }
    }
}

/// How often tcp_info samples and the kernel's events agree on cwnd: for each sample of
/// an end that has probe events, whether the first tcp_probe after it — which shows the
/// state the sample read, the kernel having processed nothing in between — has the
/// sample's cwnd. `(agreeing, compared)`.
pub fn cwnd_agreement(samples: &[SampleRecord], events: &[EventRecord]) -> (usize, usize) {
    // Each socket's probes in time order (events are), found once.
    let mut probes: std::collections::HashMap<(u32, Host), Vec<(i64, u32)>> = Default::default();
    for e in events {
        if let KernelEvent::Probe { snd_cwnd, .. } = e.event {
            probes
                .entry((e.flow, e.host))
                .or_default()
                .push((e.t_us, snd_cwnd));
        }
    }
    let mut agreeing = 0;
    let mut compared = 0;
    for sample in samples {
        let Some(mine) = probes.get(&(sample.flow, sample.host)) else {
            continue;
        };
        let next = mine.partition_point(|&(t, _)| t < sample.t_us);
        if let Some(&(_, cwnd)) = mine.get(next) {
            compared += 1;
            agreeing += usize::from(cwnd == sample.info.snd_cwnd);
        }
    }
    (agreeing, compared)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: &str = "          tcplab-4121    [001] ..s2.  8123.456789: tcp_probe: \
        family=AF_INET src=10.77.1.1:40312 dest=10.77.0.1:39001 mark=0x0 data_len=0 \
        snd_nxt=0x5a1b2c3d snd_una=0x5a1b0000 snd_cwnd=42 ssthresh=2147483647 \
        snd_wnd=64256 srtt=20154 rcv_wnd=65280 sock_cookie=2f skbaddr=00000000a1b2c3d4 \
        skaddr=00000000deadbeef";

    #[test]
    fn a_probe_line_gives_its_time_ports_and_state() {
        let line = parse_line(PROBE).unwrap();
        assert_eq!(line.at_us, 8_123_456_789);
        assert_eq!((line.sport, line.dport), (40312, 39001));
        assert_eq!(
            line.event,
            KernelEvent::Probe {
                data_len: 0,
                snd_nxt: 0x5a1b2c3d,
                snd_una: 0x5a1b0000,
                snd_cwnd: 42,
                ssthresh: 2147483647,
                snd_wnd: 64256,
                srtt_us: 20154,
                rcv_wnd: 65280,
            }
        );
    }

    #[test]
    fn ipv6_addresses_keep_their_ports() {
        let v6 = PROBE.replace("10.77.1.1:40312", "[fd00:77:1::1]:40312");
        assert_eq!(parse_line(&v6).unwrap().sport, 40312);
    }

    #[test]
    fn the_other_events_parse() {
        let retransmit = "  <idle>-0 [000] ..s2. 10.000001: tcp_retransmit_skb: skbaddr=0000 \
            skaddr=0000 family=AF_INET sport=39001 dport=40312 saddr=10.77.0.1 \
            daddr=10.77.1.1 saddrv6=::ffff:10.77.0.1 daddrv6=::ffff:10.77.1.1 \
            state=TCP_ESTABLISHED err=0";
        let line = parse_line(retransmit).unwrap();
        assert_eq!(
            (line.at_us, line.sport, line.event),
            (10_000_001, 39001, KernelEvent::Retransmit)
        );
        let state = "  tcplab-9 [000] ..s2. 11.500000: tcp_cong_state_set: family=AF_INET \
            sport=40312 dport=39001 saddr=10.77.1.1 daddr=10.77.0.1 saddrv6=::1 daddrv6=::1 \
            cong_state=3";
        assert_eq!(
            parse_line(state).unwrap().event,
            KernelEvent::CongState {
                state: CaState::Recovery
            }
        );
        let grow = "  tcplab-9 [000] ..... 12.000000: tcp_rcvbuf_grow: time=20000 rtt_us=20100 \
            copied=131072 inq=0 space=65536 ooo=0 scaling_ratio=200 rcvbuf=262144 \
            rcv_ssthresh=131072 window_clamp=196608 rcv_wnd=131072 family=AF_INET \
            sport=39001 dport=40312 saddr=10.77.0.1 daddr=10.77.1.1 saddrv6=::1 daddrv6=::1 \
            skaddr=0000 sock_cookie=3";
        assert_eq!(
            parse_line(grow).unwrap().event,
            KernelEvent::RcvbufGrow {
                rcvbuf: 262144,
                rcv_ssthresh: 131072,
                window_clamp: 196608,
                rcv_wnd: 131072,
            }
        );
    }

    #[test]
    fn other_lines_are_skipped() {
        for line in [
            "# tracer: nop",
            "",
            "  bash-1 [000] ..... 1.000000: sched_switch: prev_comm=bash",
            &PROBE.replace("snd_cwnd=42", "snd_cwnd=x"),
            &PROBE.replace("8123.456789:", "8123.4567:"),
            &PROBE
                .replace("cong", "x")
                .replace("tcp_probe", "tcp_cong_state_set"),
            "  x-1 [000] ..s2. 10.000001: tcp_retransmit_skb: sport=1 dport=2 err=-16",
        ] {
            assert_eq!(parse_line(line), None, "{line}");
        }
    }

    #[test]
    fn events_are_attributed_by_port_to_their_flow_and_end() {
        let ports = TestPorts {
            data_port: 39001,
            flows: vec![(0, 40312), (1, 40314)],
        };
        let at = |sport, dport| TraceLine {
            at_us: 5_000_250,
            sport,
            dport,
            event: KernelEvent::Retransmit,
        };
        let client = ports.attribute(at(40314, 39001), 5_000_000).unwrap();
        assert_eq!(
            (client.flow, client.host, client.t_us),
            (1, Host::Client, 250)
        );
        let server = ports.attribute(at(39001, 40312), 5_000_000).unwrap();
        assert_eq!((server.flow, server.host), (0, Host::Server));
        // Another lab's test on the same data port, from a port this test has not.
        assert_eq!(ports.attribute(at(39001, 50000), 5_000_000), None);
        assert_eq!(ports.attribute(at(1, 2), 5_000_000), None);
        // The setup's, before the test's start: a retransmitted intro is not the test's.
        assert_eq!(ports.attribute(at(40314, 39001), 5_000_251), None);
        assert!(ports.attribute(at(40314, 39001), 5_000_250).is_some());
    }

    #[test]
    fn watched_connections_events_are_attributed_by_both_ports() {
        // Two connections to one server port, and one to another.
        let ports = ConnectionPorts {
            flows: vec![(0, 8000, 40312), (1, 40314, 8000), (2, 40316, 22)],
        };
        let at = |sport, dport| TraceLine {
            at_us: 5_000_250,
            sport,
            dport,
            event: KernelEvent::Retransmit,
        };
        let t0 = 5_000_000;
        let of = |line| ports.attribute(line, t0).map(|e| (e.flow, e.host, e.t_us));
        assert_eq!(of(at(8000, 40312)), Some((0, Host::Client, 250)));
        assert_eq!(of(at(40312, 8000)), Some((0, Host::Server, 250)));
        assert_eq!(of(at(8000, 40314)), Some((1, Host::Server, 250)));
        assert_eq!(of(at(22, 40316)), Some((2, Host::Server, 250)));
        // Another socket on a watched port, and one of a watched pair's ports crossed.
        assert_eq!(of(at(8000, 50000)), None);
        assert_eq!(of(at(40316, 8000)), None);
        // Before the watch began.
        assert_eq!(ports.attribute(at(8000, 40312), 5_000_251), None);
    }

    #[test]
    fn events_serialize_with_their_kind() {
        let record = EventRecord {
            flow: 0,
            host: Host::Client,
            t_us: 7,
            event: KernelEvent::CongState {
                state: CaState::Loss,
            },
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["kind"], "cong_state");
        assert_eq!(json["state"], "loss");
        assert_eq!(serde_json::from_value::<EventRecord>(json).unwrap(), record);
    }

    fn event(t_us: i64, event: KernelEvent) -> EventRecord {
        EventRecord {
            flow: 0,
            host: Host::Client,
            t_us,
            event,
        }
    }

    fn window_probe(t_us: i64, snd_wnd: u32) -> EventRecord {
        event(t_us, KernelEvent::window_probe(10, 0, snd_wnd))
    }

    #[test]
    fn episodes_count_each_entry_into_a_state_of_the_senders_only() {
        let state = |t, state| event(t, KernelEvent::CongState { state });
        let mut events = vec![
            state(1, CaState::Disorder),
            state(2, CaState::Recovery),
            event(3, KernelEvent::Retransmit),
            state(4, CaState::Open),
            state(5, CaState::Recovery),
            event(6, KernelEvent::Retransmit),
            state(7, CaState::Loss),
            event(8, KernelEvent::Retransmit),
            state(9, CaState::Cwr),
        ];
        // The receiver's socket is no sender here.
        let mut receiver = state(10, CaState::Recovery);
        receiver.host = Host::Server;
        events.push(receiver);
        let e = kernel_episodes(&events, &[(0, Host::Client)]);
        assert_eq!(
            (
                e.retransmit_events,
                e.fast_recoveries,
                e.timeouts,
                e.ecn_reductions
            ),
            (3, 2, 1, 1)
        );
        assert_eq!(e.cwnd_cuts(), 4);
        assert_eq!(e.longest_zero_window, None);
    }

    #[test]
    fn a_zero_window_lasts_from_the_segment_that_closed_it_to_the_one_that_opened_it() {
        // The probe at 200 shows the window the segment at 100 closed; the one at 900
        // shows what the segment at 800 opened. A shorter stall later, and one open at
        // the end of the trace.
        let events = [
            window_probe(0, 65_535),
            window_probe(100, 4_096),
            window_probe(200, 0),
            window_probe(500, 0),
            window_probe(800, 0),
            window_probe(900, 8_192),
            window_probe(1_000, 0),
            window_probe(1_100, 65_535),
            window_probe(1_900, 65_535),
            window_probe(2_000, 0),
            window_probe(2_050, 0),
        ];
        let e = kernel_episodes(&events, &[(0, Host::Client)]);
        assert_eq!(
            e.longest_zero_window,
            Some(ZeroWindow {
                flow: 0,
                at_us: 100,
                lasted_us: 700,
            })
        );
    }

    #[test]
    fn cwnd_agreement_reads_the_first_probe_after_each_sample() {
        let mut sample = SampleRecord {
            flow: 0,
            host: Host::Client,
            t_us: 100,
            info: Default::default(),
            bbr: None,
            skmem: None,
        };
        sample.info.snd_cwnd = 10;
        let probe = |t_us, snd_cwnd| event(t_us, KernelEvent::window_probe(snd_cwnd, 0, 0));
        let later = SampleRecord {
            t_us: 300,
            ..sample.clone()
        };
        let unmatched = SampleRecord {
            t_us: 900,
            ..sample.clone()
        };
        let events = [probe(50, 9), probe(150, 10), probe(400, 11)];
        assert_eq!(cwnd_agreement(&[sample, later, unmatched], &events), (1, 2));
    }
}
