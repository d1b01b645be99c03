//! The tracker in virtual time: samples and lookups in, lifecycles and counters out.

use super::*;
use tcplab_record::tcpinfo::TCP_INFO_LEN;
use tcplab_record::{Direction, HostMeta, Limit};

const T0: i64 = 1_000_000;
const MS: i64 = 1_000;

fn config() -> WatchConfig {
    WatchConfig {
        t0_us: T0,
        sample_interval_us: 10_000,
        report_interval_us: 1_000_000,
        keep: true,
        announced: false,
    }
}

fn key(port: u16, cookie: u64) -> SocketKey {
    SocketKey {
        local: SocketAddr::from(([10, 0, 0, 1], 5201)),
        remote: SocketAddr::from(([10, 0, 0, 2], port)),
        interface: 0,
        cookie,
    }
}

/// A sender's sample: `acked` bytes acknowledged, the congestion window full.
fn sample(key: SocketKey, t_us: i64, state: TcpState, acked: u64) -> SocketSample {
    let info = TcpInfo {
        valid_len: TCP_INFO_LEN as u32,
        snd_mss: 1448,
        snd_cwnd: 10,
        unacked: 10,
        snd_wnd: 1 << 20,
        rtt: 20_000,
        min_rtt: 19_000,
        bytes_acked: acked,
        bytes_sent: acked,
        total_retrans: (acked / 100_000) as u32,
        ..TcpInfo::default()
    };
    SocketSample {
        key,
        state,
        t_us,
        uid: 0,
        inode: 1,
        recv_queue: 0,
        send_queue: 0,
        tcp_info: Some(info),
        congestion: CongestionName::new("cubic"),
        bbr: None,
        skmem: None,
        cgroup_id: Some(1),
    }
}

fn mini(key: SocketKey, t_us: i64, state: TcpState) -> SocketSample {
    SocketSample {
        tcp_info: None,
        congestion: None,
        inode: 0,
        ..sample(key, t_us, state, 0)
    }
}

fn watch_all(_: &SocketSample) -> Admit {
    Admit::Watch(Some(Process {
        pid: 42,
        comm: "curl".into(),
    }))
}

fn events(tracker: &mut Tracker) -> Vec<WatchEvent> {
    tracker.events().collect()
}

#[test]
fn a_connection_found_open_then_gone_from_a_dump_keeps_its_last_counters() {
    let mut t = Tracker::new(config());
    let k = key(40000, 7);
    t.dump(
        T0,
        &[sample(k, T0, TcpState::Established, 1000)],
        &mut watch_all,
    );
    assert_eq!(events(&mut t), vec![WatchEvent::Opened(0)]);
    let c = t.connection(0).unwrap();
    assert!(
        !c.opened,
        "found open at the first dump, with bytes already acked"
    );
    assert_eq!(t.next_wakeup(), T0 + 10 * MS);
    t.dump(
        T0 + 10 * MS,
        &[sample(k, T0 + 10 * MS, TcpState::Established, 500_000)],
        &mut watch_all,
    );
    t.dump(T0 + 20 * MS, &[], &mut watch_all);
    let ev = events(&mut t);
    assert_eq!(ev.len(), 2, "{ev:?}");
    let WatchEvent::Interval(last) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert_eq!((last.start_us, last.end_us), (0, 10_000));
    assert_eq!(last.acked_bytes, 499_000);
    assert_eq!(last.retransmits, 5);
    assert_eq!(ev[1], WatchEvent::Closed(0));
    let ended = &t.ended()[0];
    let w = ended.watched(T0);
    assert!(w.closed);
    assert_eq!((w.start_us, w.end_us), (0, 10_000));
    assert_eq!(w.counters.bytes_acked, 500_000);
    assert_eq!(w.counters.min_rtt_us, 19_000);
    assert_eq!((w.pid, w.comm.as_deref()), (Some(42), Some("curl")));
    // The window was full in every sample: the 10 ms between them were cwnd's.
    assert_eq!(w.counters.limited_us, 10_000);
    assert_eq!(w.counters.limits.dominant(), Limit::Cwnd);
    let id = ended.id;
    let samples = t.take_samples();
    assert_eq!(samples.len(), 2);
    assert!(samples.iter().all(|s| s.flow == id));
    assert_eq!(samples[1].t_us, 10_000);
    assert!(t.take_samples().is_empty(), "taken once");
}

#[test]
fn a_connection_shorter_than_a_sample_interval_is_caught_by_its_state_changes() {
    // Sampled every 100 ms; the connection lives 3 ms between two dumps.
    let mut t = Tracker::new(WatchConfig {
        sample_interval_us: 100_000,
        ..config()
    });
    t.dump(T0, &[], &mut watch_all);
    let k = key(40001, 9);
    // ESTABLISHED, then FIN_WAIT1 with everything acknowledged, then TIME_WAIT.
    t.looked_up(
        &[sample(k, T0 + 10 * MS, TcpState::Established, 0)],
        &[],
        &mut watch_all,
    );
    assert!(t.connection(0).unwrap().opened);
    t.looked_up(
        &[sample(k, T0 + 12 * MS, TcpState::FinWait1, 10_240)],
        &[],
        &mut watch_all,
    );
    // Closing: looked up every CLOSING_POLL_US until gone.
    assert_eq!(t.next_wakeup(), T0);
    assert_eq!(t.closing_due(T0 + 12 * MS), vec![k]);
    assert!(t.closing_due(T0 + 12 * MS + 500).is_empty());
    assert_eq!(t.next_wakeup(), T0 + 13 * MS);
    t.looked_up(
        &[mini(k, T0 + 13 * MS, TcpState::TimeWait)],
        &[],
        &mut watch_all,
    );
    let ev = events(&mut t);
    assert_eq!(ev.first(), Some(&WatchEvent::Opened(0)));
    assert_eq!(ev.last(), Some(&WatchEvent::Closed(0)));
    let w = t.ended()[0].watched(T0);
    assert_eq!(w.counters.bytes_acked, 10_240);
    assert_eq!(w.last_state, TcpState::FinWait1);
    assert_eq!((w.start_us, w.end_us), (10_000, 12_000));
    // Nothing closing any more: the next wake-up is the next dump.
    assert_eq!(t.next_wakeup(), T0 + 100 * MS);
    // A later dump does not bring it back, nor does the same socket's lookup.
    t.looked_up(
        &[sample(k, T0 + 14 * MS, TcpState::FinWait1, 10_240)],
        &[],
        &mut watch_all,
    );
    t.dump(T0 + 100 * MS, &[], &mut watch_all);
    assert!(events(&mut t).is_empty());
    assert_eq!(t.ended().len(), 1);
}

#[test]
fn a_lookup_that_finds_the_tuple_gone_closes_the_connection() {
    let mut t = Tracker::new(config());
    let k = key(40002, 11);
    t.dump(
        T0,
        &[sample(k, T0, TcpState::Established, 0)],
        &mut watch_all,
    );
    t.looked_up(&[], &[SocketKey::tuple(k.local, k.remote)], &mut watch_all);
    assert_eq!(t.ended().len(), 1);
    // An unknown tuple gone is nothing.
    t.looked_up(
        &[],
        &[SocketKey::tuple(k.local, key(1, 0).remote)],
        &mut watch_all,
    );
    assert_eq!(t.ended().len(), 1);
}

#[test]
fn sockets_the_shell_ignores_are_asked_about_once_and_handshakes_not_yet() {
    let mut t = Tracker::new(config());
    let asked = std::cell::Cell::new(0);
    let mut ignore = |_: &SocketSample| {
        asked.set(asked.get() + 1);
        Admit::Ignore
    };
    let k = key(40003, 12);
    t.dump(T0, &[sample(k, T0, TcpState::SynSent, 0)], &mut ignore);
    t.dump(
        T0 + 10 * MS,
        &[sample(k, T0 + 10 * MS, TcpState::Established, 0)],
        &mut ignore,
    );
    t.dump(
        T0 + 20 * MS,
        &[sample(k, T0 + 20 * MS, TcpState::Established, 9)],
        &mut ignore,
    );
    assert_eq!(asked.get(), 1);
    assert!(!t.any());
    // A timewait socket never seen with tcp_info is counted as missed.
    t.dump(
        T0 + 30 * MS,
        &[mini(key(40004, 13), T0 + 30 * MS, TcpState::TimeWait)],
        &mut ignore,
    );
    assert_eq!(t.missed(), 1);
}

#[test]
fn report_ticks_cut_every_open_connection_and_finish_cuts_the_rest() {
    let mut t = Tracker::new(WatchConfig {
        report_interval_us: 100_000,
        ..config()
    });
    let (a, b) = (key(40005, 20), key(40006, 21));
    for step in 0..=15 {
        let now = T0 + step * 10 * MS;
        let acked = step as u64 * 10_000;
        t.dump(
            now,
            &[
                sample(a, now, TcpState::Established, acked),
                sample(b, now, TcpState::Established, 2 * acked),
            ],
            &mut watch_all,
        );
        t.advance(now);
    }
    t.finish();
    let intervals: Vec<IntervalRecord> = events(&mut t)
        .into_iter()
        .filter_map(|e| match e {
            WatchEvent::Interval(i) => Some(i),
            _ => None,
        })
        .collect();
    let of = |flow: u32| -> Vec<(u64, u64, u64)> {
        intervals
            .iter()
            .filter(|i| i.flow == flow)
            .map(|i| (i.start_us, i.end_us, i.acked_bytes))
            .collect()
    };
    assert_eq!(
        of(0),
        vec![(0, 100_000, 100_000), (100_000, 150_000, 50_000)]
    );
    assert_eq!(
        of(1),
        vec![(0, 100_000, 200_000), (100_000, 150_000, 100_000)]
    );
    // Still open at the end: kept, not closed.
    assert_eq!(t.ended().len(), 2);
    assert!(t.ended().iter().all(|c| !c.closed));
}

#[test]
fn missed_dump_ticks_are_skipped_not_caught_up() {
    let mut t = Tracker::new(config());
    t.dump(T0 + 35 * MS, &[], &mut watch_all);
    assert_eq!(t.sample_due(T0 + 44 * MS), None);
    assert_eq!(t.sample_due(T0 + 45 * MS), Some(SampleRead::Dump));
}

#[test]
fn with_the_tracepoint_ticks_look_the_open_connections_up_and_dump_now_and_then() {
    let mut t = Tracker::new(WatchConfig {
        announced: true,
        ..config()
    });
    // The first tick dumps: what was open before the watch is announced by nothing.
    assert_eq!(t.sample_due(T0), Some(SampleRead::Dump));
    let (a, b) = (key(40001, 1), key(40002, 2));
    t.dump(
        T0,
        &[sample(a, T0, TcpState::Established, 0)],
        &mut watch_all,
    );
    // One opens: the tracepoint's lookup announces it.
    t.looked_up(
        &[sample(b, T0 + 3 * MS, TcpState::Established, 0)],
        &[],
        &mut watch_all,
    );
    assert_eq!(t.sample_due(T0 + 9 * MS), None);
    let tick = T0 + 10 * MS;
    assert_eq!(t.sample_due(tick), Some(SampleRead::Lookup(vec![a, b])));
    // b is gone: the lookup closes it, a is sampled.
    t.sampled(
        tick,
        &[sample(a, tick, TcpState::Established, 5_000)],
        &[b],
        &mut watch_all,
    );
    let a_samples = t.take_samples().iter().filter(|s| s.flow == 0).count();
    assert_eq!(a_samples, 2);
    assert_eq!(t.open_now(), 1);
    assert_eq!(t.sample_due(tick + 5 * MS), None);
    assert_eq!(
        t.sample_due(tick + 10 * MS),
        Some(SampleRead::Lookup(vec![a]))
    );
    // A dump again once DISCOVERY_DUMP_US has passed since the last.
    assert_eq!(t.sample_due(T0 + DISCOVERY_DUMP_US), Some(SampleRead::Dump));
}

#[test]
fn with_the_tracepoint_many_open_connections_are_dumped_and_without_it_always() {
    let many: Vec<SocketSample> = (0..=LOOKUP_AT_MOST as u16)
        .map(|i| {
            sample(
                key(41000 + i, 100 + u64::from(i)),
                T0,
                TcpState::Established,
                0,
            )
        })
        .collect();
    let mut announced = Tracker::new(WatchConfig {
        announced: true,
        ..config()
    });
    announced.dump(T0, &many, &mut watch_all);
    assert_eq!(announced.sample_due(T0 + 10 * MS), Some(SampleRead::Dump));
    let mut polling = Tracker::new(config());
    polling.dump(T0, &many[..1], &mut watch_all);
    assert_eq!(polling.sample_due(T0 + 10 * MS), Some(SampleRead::Dump));
}

#[test]
fn state_changes_parse_from_trace_lines_of_both_families() {
    let v4 = "  curl-1234  [001] b..1.  5123.456789: inet_sock_set_state: family=AF_INET \
              protocol=IPPROTO_TCP sport=40000 dport=443 saddr=10.0.0.1 daddr=10.0.0.2 \
              saddrv6=::ffff:10.0.0.1 daddrv6=::ffff:10.0.0.2 oldstate=TCP_SYN_SENT \
              newstate=TCP_ESTABLISHED";
    let c = parse_state_change(v4).unwrap();
    assert_eq!(c.t_us, 5_123_456_789);
    assert_eq!(c.local, "10.0.0.1:40000".parse().unwrap());
    assert_eq!(c.remote, "10.0.0.2:443".parse().unwrap());
    assert_eq!(c.new, TcpState::Established);
    assert_eq!(c.key().cookie, SocketKey::NO_COOKIE);
    let v6 = "<idle>-0 [000] ..s2. 7.000001: inet_sock_set_state: family=AF_INET6 \
              protocol=IPPROTO_TCP sport=443 dport=50000 saddr=0.0.0.0 daddr=0.0.0.0 \
              saddrv6=2001:db8::1 daddrv6=2001:db8::2 oldstate=TCP_LISTEN \
              newstate=TCP_NEW_SYN_RECV";
    let c = parse_state_change(v6).unwrap();
    assert_eq!(c.local, "[2001:db8::1]:443".parse().unwrap());
    assert_eq!(c.new, TcpState::SynRecv);
    let sctp = v4.replace("IPPROTO_TCP", "IPPROTO_SCTP");
    assert_eq!(parse_state_change(&sctp), None);
    assert_eq!(parse_state_change("# tracer: nop"), None);
}

#[test]
fn a_socket_whose_owner_is_not_known_yet_is_asked_about_again() {
    let mut t = Tracker::new(config());
    let k = key(40007, 30);
    let mut later = |_: &SocketSample| Admit::Later;
    t.looked_up(&[sample(k, T0, TcpState::Established, 0)], &[], &mut later);
    assert!(!t.any());
    t.dump(
        T0 + 10 * MS,
        &[sample(k, T0 + 10 * MS, TcpState::Established, 5)],
        &mut watch_all,
    );
    assert_eq!(events(&mut t), vec![WatchEvent::Opened(0)]);
    assert_eq!(t.connection(0).unwrap().process.as_ref().unwrap().pid, 42);
}

#[test]
fn a_process_read_later_is_kept_and_a_socket_without_inode_waits_for_one() {
    let mut t = Tracker::new(config());
    let mut unknown = |_: &SocketSample| Admit::Watch(None);
    let orphan = SocketSample {
        inode: 0,
        ..sample(key(40009, 41), T0, TcpState::Established, 9)
    };
    t.dump(
        T0,
        &[sample(key(40008, 40), T0, TcpState::Established, 0), orphan],
        &mut unknown,
    );
    assert_eq!(t.unowned(T0), vec![(0, 1)]);
    assert!(t.unowned(T0 + 1).is_empty());
    t.set_process(
        0,
        Process {
            pid: 7,
            comm: "sshd".into(),
        },
    );
    assert!(t.unowned(T0).is_empty());
    assert_eq!(
        t.connection(0).unwrap().process.as_ref().unwrap().comm,
        "sshd"
    );
}

#[test]
fn payload_leaves_out_the_syn_and_the_fin() {
    // A client that sent 10 240 bytes, all acknowledged with its SYN and FIN.
    let sent = TcpInfo {
        bytes_acked: 10_242,
        bytes_sent: 10_240,
        ..TcpInfo::default()
    };
    assert_eq!(payload(&sent, TcpState::FinWait2), (10_240, 0));
    // Half of it acknowledged, a segment retransmitted: the SYN stays in, as nothing
    // tells it apart from data until all data is acknowledged.
    let half = TcpInfo {
        bytes_acked: 5_121,
        bytes_sent: 11_688,
        bytes_retrans: 1_448,
        ..TcpInfo::default()
    };
    assert_eq!(payload(&half, TcpState::Established), (5_121, 0));
    // A server past the client's FIN.
    let server = TcpInfo {
        bytes_received: 10_241,
        ..TcpInfo::default()
    };
    assert_eq!(payload(&server, TcpState::LastAck), (0, 10_240));
    assert_eq!(payload(&server, TcpState::Established), (0, 10_241));
}

#[test]
fn without_keep_an_ended_connection_is_dropped_once_its_events_are_read() {
    let mut t = Tracker::new(WatchConfig {
        keep: false,
        ..config()
    });
    let k = key(40010, 50);
    t.dump(
        T0,
        &[sample(k, T0, TcpState::Established, 0)],
        &mut watch_all,
    );
    t.dump(T0 + 10 * MS, &[], &mut watch_all);
    let ev = events(&mut t);
    assert_eq!(ev.last(), Some(&WatchEvent::Closed(0)));
    // Read while its events are: still there.
    assert!(t.connection(0).unwrap().closed);
    assert!(events(&mut t).is_empty());
    assert!(t.connection(0).is_none());
    assert!(t.ended().is_empty());
    t.finish();
    assert_eq!(t.counts(), (1, 0));
}

fn meta() -> WatchMeta {
    WatchMeta {
        started_unix_us: 0,
        tool_version: "0".into(),
        host: HostMeta::default(),
        label: None,
        tags: Vec::new(),
        filter: "--port 5201".into(),
        tracepoint: true,
        duration_us: 1_000_000,
        interrupted: false,
    }
}

/// The receiving end of `k`: its 4-tuple reversed, `received` bytes in.
fn receiving(k: SocketKey, cookie: u64, t_us: i64, received: u64) -> SocketSample {
    let mut s = sample(
        SocketKey {
            local: k.remote,
            remote: k.local,
            interface: 0,
            cookie,
        },
        t_us,
        TcpState::Established,
        0,
    );
    let info = s.tcp_info.as_mut().unwrap();
    (info.bytes_received, info.unacked) = (received, 0);
    s
}

#[test]
fn both_ends_of_a_connection_are_one_flow_and_a_lone_receiver_its_server() {
    let mut t = Tracker::new(config());
    let (both, alone) = (key(40011, 60), key(40012, 62));
    for step in 0..3 {
        let now = T0 + step * 10 * MS;
        let acked = step as u64 * 1448;
        t.dump(
            now,
            &[
                sample(both, now, TcpState::Established, acked),
                receiving(both, 61, now, acked),
                receiving(alone, 63, now, 2 * acked),
            ],
            &mut watch_all,
        );
    }
    t.finish();
    let intervals = events(&mut t)
        .into_iter()
        .filter_map(|e| match e {
            WatchEvent::Interval(i) => Some(i),
            _ => None,
        })
        .collect();
    let samples = t.take_samples();
    let run = run_record(&t, intervals, samples, meta());
    assert_eq!(run.kind(), tcplab_record::RunKind::Watch);
    assert_eq!(run.flows.len(), 2);
    let pair = &run.flows[0];
    assert_eq!(pair.client_addr, both.local.to_string());
    assert_eq!(pair.server_addr, both.remote.to_string());
    assert_eq!((pair.sent_bytes, pair.received_bytes), (2 * 1448, 2 * 1448));
    assert_eq!((pair.samples, pair.receiver_samples), (3, 3));
    let w = pair.watched.as_ref().unwrap();
    assert_eq!(
        (w.end, w.peer.as_ref().unwrap().end),
        (Host::Client, Host::Server)
    );
    assert_eq!(w.peer.as_ref().unwrap().cookie, 61);
    // The lone receiver (its socket at `alone.remote`): the flow comes up from its
    // peer, unwatched.
    let lone = &run.flows[1];
    assert_eq!(lone.client_addr, alone.local.to_string());
    assert_eq!(lone.server_addr, alone.remote.to_string());
    assert_eq!((lone.sent_bytes, lone.received_bytes), (4 * 1448, 4 * 1448));
    assert_eq!((lone.samples, lone.receiver_samples), (0, 3));
    assert_eq!(lone.watched.as_ref().unwrap().end, Host::Server);
    assert!(run.flows.iter().all(|f| f.direction == Direction::Up));
    let hosts = |flow: u32, host: Host| {
        run.samples
            .iter()
            .filter(|s| s.flow == flow && s.host == host)
            .count()
    };
    assert_eq!((hosts(0, Host::Client), hosts(0, Host::Server)), (3, 3));
    assert_eq!((hosts(1, Host::Client), hosts(1, Host::Server)), (0, 3));
    // One interval per flow, the sender's where there is one.
    let of = |flow: u32| run.intervals.iter().filter(|i| i.flow == flow).count();
    assert_eq!((of(0), of(1)), (1, 1));
    assert_eq!(
        run.intervals
            .iter()
            .find(|i| i.flow == 1)
            .unwrap()
            .received_bytes,
        4 * 1448
    );
    // The run's throughput counts the pair once.
    assert_eq!(run.summary.received_bytes, 6 * 1448);
    assert_eq!(run.summary.dominant_limit, Some(Limit::Cwnd));
}

/// A receiver whose last sample counts the sender's FIN in its bytes while its state
/// still shows FIN_WAIT2 (sock_diag fills the two apart): the flow received the data
/// the sender sent before its FIN, no more.
#[test]
fn a_fin_counted_before_the_state_shows_it_is_not_payload() {
    let mut t = Tracker::new(config());
    let k = key(40014, 64);
    for step in 0..3 {
        let now = T0 + step * 10 * MS;
        let data = step as u64 * 1448;
        let mut receiver = receiving(k, 65, now, data + u64::from(step == 2));
        if step == 2 {
            receiver.state = TcpState::FinWait2;
        }
        let sender_state = if step == 2 {
            TcpState::FinWait1
        } else {
            TcpState::Established
        };
        t.dump(
            now,
            &[sample(k, now, sender_state, data), receiver],
            &mut watch_all,
        );
    }
    t.finish();
    let samples = t.take_samples();
    let run = run_record(&t, Vec::new(), samples, meta());
    let flow = &run.flows[0];
    assert_eq!((flow.sent_bytes, flow.received_bytes), (2 * 1448, 2 * 1448));
}

#[test]
fn an_ipv6_socket_s_v4_mapped_end_pairs_with_its_ipv4_peer() {
    let mut t = Tracker::new(config());
    let client = key(40013, 70);
    let mapped = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => SocketAddr::new(v4.ip().to_ipv6_mapped().into(), v4.port()),
        v6 => v6,
    };
    for step in 0..3 {
        let now = T0 + step * 10 * MS;
        let acked = step as u64 * 1448;
        let mut server = receiving(client, 71, now, acked);
        server.key.local = mapped(server.key.local);
        server.key.remote = mapped(server.key.remote);
        t.dump(
            now,
            &[sample(client, now, TcpState::Established, acked), server],
            &mut watch_all,
        );
    }
    t.finish();
    let samples = t.take_samples();
    let run = run_record(&t, Vec::new(), samples, meta());
    assert_eq!(run.flows.len(), 1);
    let w = run.flows[0].watched.as_ref().unwrap();
    assert_eq!(w.peer.as_ref().unwrap().cookie, 71);
}

/// A server's socket is seen before the server accepts it: its `Opened` waits for the
/// process the shell reads later, or says none once it waited long enough, or comes
/// before its `Closed` if it ends first.
#[test]
fn an_opening_waits_for_its_process_for_a_while() {
    let mut t = Tracker::new(config());
    let mut unknown = |_: &SocketSample| Admit::Watch(None);
    let (accepted, foreign, brief) = (key(40010, 50), key(40011, 51), key(40012, 52));
    t.dump(
        T0,
        &[
            SocketSample {
                inode: 0,
                ..sample(accepted, T0, TcpState::Established, 0)
            },
            sample(foreign, T0, TcpState::Established, 0),
            sample(brief, T0, TcpState::Established, 0),
        ],
        &mut unknown,
    );
    t.advance(T0);
    assert_eq!(events(&mut t), vec![], "each waits for its process");
    t.dump(
        T0 + 10 * MS,
        &[
            sample(accepted, T0 + 10 * MS, TcpState::Established, 10),
            sample(foreign, T0 + 10 * MS, TcpState::Established, 10),
            sample(brief, T0 + 10 * MS, TcpState::TimeWait, 10),
        ],
        &mut unknown,
    );
    let ended = events(&mut t);
    assert_eq!(ended.first(), Some(&WatchEvent::Opened(2)), "{ended:?}");
    assert_eq!(ended.last(), Some(&WatchEvent::Closed(2)), "{ended:?}");
    t.set_process(
        0,
        Process {
            pid: 8,
            comm: "python3".into(),
        },
    );
    t.advance(T0 + 10 * MS);
    assert_eq!(events(&mut t), vec![WatchEvent::Opened(0)]);
    t.advance(T0 + OPENED_WAITS_FOR_PROCESS_US - 1);
    assert_eq!(events(&mut t), vec![]);
    t.advance(T0 + OPENED_WAITS_FOR_PROCESS_US);
    assert_eq!(events(&mut t), vec![WatchEvent::Opened(1)]);
    assert!(t.connection(1).unwrap().process.is_none());
}
