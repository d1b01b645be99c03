//! One way from what a user asked for to a test's [`TestParams`], for both front-ends:
//! `tcplab run`'s flags and an experiment file's `[[flow]]` keys. Each front-end gathers
//! its values, unit-parsed, into a [`TestInput`] and says how its user spells them
//! ([`Source`]); [`build`] fills in the defaults and checks every rule once, so a
//! mistake reads the same from either end but for the name of the option
//! (`-M/--set-mss 10: an MSS must be …`, `mss 10: an MSS must be …`).
//!
//! What only one front-end can get wrong stays with it: clap's conflicts between flags,
//! and the experiment file's keys that belong to one `protocol`.

use thiserror::Error;

use crate::probe::DEFAULT_IDLE_US as DEFAULT_PROBE_IDLE_US;
use crate::udp::{MAX_DATAGRAM, MIN_DATAGRAM};
use tcplab_record::units::format_duration_us;
use tcplab_record::{
    Mode, ProbeParams, SendMethod, TestEnd, TestParams, TransactionParams, Tuning, UdpParams,
};

/// Most parallel streams a test may ask for, per direction.
pub const MAX_STREAMS: u16 = 128;
/// Most UDP datagrams sent back to back.
pub const MAX_BURST: u32 = 1024;
/// A UDP payload that fits a 1500-byte MTU with IPv4 and UDP headers and room to spare,
/// like iperf3's TCP-MSS-sized default.
pub const DEFAULT_DATAGRAM: u32 = 1448;
/// Smallest sampling interval, µs (0 aside): finer would only burn the server's CPU.
pub const MIN_SAMPLE_INTERVAL_US: u64 = 100;

/// Where the values came from, which decides how an error names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `tcplab run`'s flags: `-M/--set-mss`.
    Flag,
    /// An experiment file's keys: `mss`.
    Key,
}

/// A value a rule is about; [`Setting::spelled`] is its name from either front-end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    Streams,
    ProbesAlone,
    Duration,
    Bytes,
    WriteSize,
    ReadSize,
    Mss,
    DatagramSize,
    Burst,
    ReportInterval,
    SampleInterval,
    Probe,
    Request,
    Response,
    Transactions,
    ConnectionPerTransaction,
}

impl Setting {
    /// The option as the user wrote it: the flag, or the experiment file's key.
    pub fn spelled(self, source: Source) -> &'static str {
        use Setting::*;
        match source {
            Source::Flag => match self {
                Streams => "-P/--parallel",
                ProbesAlone => "-P 0",
                Duration => "-t/--time",
                Bytes => "-n/--bytes",
                WriteSize => "-l/--length",
                ReadSize => "--read-size",
                Mss => "-M/--set-mss",
                DatagramSize => "-l/--length with --udp",
                Burst => "--burst",
                ReportInterval => "-i/--interval",
                SampleInterval => "--sample-interval",
                Probe => "--probe",
                Request => "--rr's request",
                Response => "--rr's response",
                Transactions | ConnectionPerTransaction => "--rr",
            },
            Source::Key => match self {
                Streams => "streams",
                ProbesAlone => "protocol = \"probe\"",
                Duration => "duration",
                Bytes => "bytes",
                WriteSize => "write_size",
                ReadSize => "read_size",
                Mss => "mss",
                DatagramSize => "datagram_size",
                Burst => "burst",
                ReportInterval => "interval",
                SampleInterval => "sample_interval",
                Probe => "probe",
                Request => "request",
                Response => "response",
                Transactions => "protocol = \"rr\"",
                ConnectionPerTransaction => "protocol = \"crr\"",
            },
        }
    }
}

/// Why a test cannot be built: one line that starts with the option at fault.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TestError {
    #[error("{name} {value} is not in 1..={max}")]
    OutOfRange {
        name: &'static str,
        value: u64,
        max: u64,
    },
    #[error("{name} must be between 1 byte and 4 GiB, got {value}")]
    Size { name: &'static str, value: u64 },
    #[error("{name} must be {MIN_DATAGRAM}..={MAX_DATAGRAM} bytes (a datagram's payload)")]
    DatagramSize { name: &'static str },
    #[error("{name} must be above 0")]
    Zero { name: &'static str },
    #[error(
        "{name} must be 0 (off) or at least {}",
        format_duration_us(MIN_SAMPLE_INTERVAL_US)
    )]
    SampleInterval { name: &'static str },
    /// A check shared with the server refused the option (the probes, a test's end, …);
    /// its reason quotes the value.
    #[error("{name}: {reason}")]
    Refused { name: &'static str, reason: String },
    /// The same for a reason that does not quote the value (an MSS).
    #[error("{name} {value}: {reason}")]
    RefusedValue {
        name: &'static str,
        value: u64,
        reason: String,
    },
}

/// A test as its user asked for it: sizes in bytes, times in µs, rates in bit/s, each
/// `None` where the user said nothing (and the default applies).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestInput {
    pub streams: Streams,
    pub end: Option<TestEnd>,
    pub mode: Option<Mode>,
    /// SO_SNDBUF and SO_RCVBUF at once, where `sndbuf` or `rcvbuf` do not say otherwise.
    pub window: Option<u64>,
    pub sndbuf: Option<u64>,
    pub rcvbuf: Option<u64>,
    pub write_size: Option<u64>,
    pub read_size: Option<u64>,
    pub nodelay: Option<bool>,
    pub mss: Option<u64>,
    pub cc: Option<String>,
    pub pacing_rate: Option<u64>,
    pub app_rate: Option<u64>,
    pub send_method: Option<SendMethod>,
    pub ecn: Option<bool>,
    pub sample_interval_us: Option<u64>,
    pub report_interval_us: Option<u64>,
    pub udp: Option<UdpInput>,
    pub probe: Option<ProbeInput>,
    pub transactions: Option<TransactionInput>,
}

/// How many connections carry the load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Streams {
    /// One, unless the user said otherwise.
    #[default]
    Default,
    /// This many in parallel, per direction.
    Parallel(u16),
    /// None: round-trip probes alone (`-P 0`, `protocol = "probe"`).
    ProbesAlone,
}

/// A UDP flow: its payload rate and, unless the defaults, datagram size and burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpInput {
    pub rate_bps: u64,
    pub datagram_size: Option<u64>,
    pub burst: Option<u32>,
}

/// Round-trip probes: one every `interval_us`, after `idle_us` on the idle path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeInput {
    pub interval_us: u64,
    pub idle_us: Option<u64>,
}

/// Request/response transactions (netperf's TCP_RR, or TCP_CRR with `new_connection`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransactionInput {
    /// 1 byte when not given.
    pub request: Option<u64>,
    /// The request's size when not given.
    pub response: Option<u64>,
    pub request_writes: Option<u32>,
    pub new_connection: bool,
}

/// The test `input` asks for, its defaults filled in, or the first rule it breaks named
/// as `source` spells it.
pub fn build(input: &TestInput, source: Source) -> Result<TestParams, TestError> {
    let defaults = TestParams::default();
    let end = input.end.unwrap_or(defaults.end);
    check_end(source, &end)?;
    let report_interval_us = input
        .report_interval_us
        .unwrap_or(defaults.report_interval_us);
    check_report_interval(source, report_interval_us)?;
    let sample_interval_us = input
        .sample_interval_us
        .unwrap_or(defaults.sample_interval_us);
    check_sample_interval(source, sample_interval_us)?;
    let streams = match input.streams {
        Streams::Default => defaults.streams,
        Streams::Parallel(n) => check_streams(source, n)?,
        Streams::ProbesAlone => 0,
    };
    let size = |setting, value: Option<u64>, default: u32| {
        value.map_or(Ok(default), |v| check_size(setting, source, v))
    };
    let tuning_defaults = Tuning::default();
    let tuning = Tuning {
        sndbuf: input.sndbuf.or(input.window),
        rcvbuf: input.rcvbuf.or(input.window),
        write_size: size(
            Setting::WriteSize,
            input.write_size,
            tuning_defaults.write_size,
        )?,
        read_size: size(
            Setting::ReadSize,
            input.read_size,
            tuning_defaults.read_size,
        )?,
        nodelay: input.nodelay.unwrap_or(tuning_defaults.nodelay),
        mss: input.mss.map(|m| check_mss(source, m)).transpose()?,
        cc: input.cc.clone(),
        pacing_rate: input.pacing_rate,
        app_rate: input.app_rate,
        send_method: input.send_method.unwrap_or(tuning_defaults.send_method),
        ecn: input.ecn.unwrap_or(tuning_defaults.ecn),
    };
    let udp = input
        .udp
        .map(|u| -> Result<UdpParams, TestError> {
            Ok(UdpParams {
                rate_bps: u.rate_bps,
                datagram_size: u
                    .datagram_size
                    .map_or(Ok(DEFAULT_DATAGRAM), |d| check_datagram_size(source, d))?,
                burst: u.burst.map_or(Ok(1), |b| check_burst(source, b))?,
                header: Default::default(),
            })
        })
        .transpose()?;
    let probe = input
        .probe
        .map(|p| {
            let probe = ProbeParams {
                interval_us: p.interval_us,
                idle_us: p.idle_us.unwrap_or(DEFAULT_PROBE_IDLE_US),
            };
            check_probe(source, &probe).map(|()| probe)
        })
        .transpose()?;
    let transactions = input
        .transactions
        .map(|t| -> Result<TransactionParams, TestError> {
            let request_size = size(Setting::Request, t.request, 1)?;
            Ok(TransactionParams {
                request_size,
                response_size: size(Setting::Response, t.response, request_size)?,
                request_writes: t.request_writes.unwrap_or(1),
                new_connection: t.new_connection,
            })
        })
        .transpose()?;
    let params = TestParams {
        streams,
        end,
        mode: input.mode.unwrap_or(defaults.mode),
        tuning,
        sample_interval_us,
        report_interval_us,
        udp,
        probe,
        transactions,
    };
    check_transactions(source, &params)?;
    check_probes_alone(source, &params)?;
    Ok(params)
}

/// Parallel streams: 1..=[`MAX_STREAMS`] (none is [`Streams::ProbesAlone`]).
pub fn check_streams(source: Source, streams: u16) -> Result<u16, TestError> {
    if (1..=MAX_STREAMS).contains(&streams) {
        Ok(streams)
    } else {
        Err(TestError::OutOfRange {
            name: Setting::Streams.spelled(source),
            value: streams.into(),
            max: MAX_STREAMS.into(),
        })
    }
}

/// A test's end: some time, or some bytes ([`crate::ranges::check_end`]).
pub fn check_end(source: Source, end: &TestEnd) -> Result<(), TestError> {
    let setting = match end {
        TestEnd::Duration { .. } => Setting::Duration,
        TestEnd::Bytes { .. } => Setting::Bytes,
    };
    crate::ranges::check_end(end).map_err(|reason| TestError::Refused {
        name: setting.spelled(source),
        reason,
    })
}

/// A size the engine holds in 32 bits, and not 0: a write, a read, a request, a response.
pub fn check_size(setting: Setting, source: Source, bytes: u64) -> Result<u32, TestError> {
    u32::try_from(bytes)
        .ok()
        .filter(|&b| b > 0)
        .ok_or(TestError::Size {
            name: setting.spelled(source),
            value: bytes,
        })
}

/// An MSS as Linux's TCP_MAXSEG takes it ([`crate::ranges::check_mss`]).
pub fn check_mss(source: Source, mss: u64) -> Result<u32, TestError> {
    crate::ranges::check_mss(mss).map_err(|reason| TestError::RefusedValue {
        name: Setting::Mss.spelled(source),
        value: mss,
        reason,
    })
}

/// A UDP datagram's payload: [`MIN_DATAGRAM`]..=[`MAX_DATAGRAM`] bytes.
pub fn check_datagram_size(source: Source, bytes: u64) -> Result<u32, TestError> {
    u32::try_from(bytes)
        .ok()
        .filter(|b| (MIN_DATAGRAM..=MAX_DATAGRAM).contains(b))
        .ok_or(TestError::DatagramSize {
            name: Setting::DatagramSize.spelled(source),
        })
}

/// UDP datagrams back to back: 1..=[`MAX_BURST`].
pub fn check_burst(source: Source, burst: u32) -> Result<u32, TestError> {
    if (1..=MAX_BURST).contains(&burst) {
        Ok(burst)
    } else {
        Err(TestError::OutOfRange {
            name: Setting::Burst.spelled(source),
            value: burst.into(),
            max: MAX_BURST.into(),
        })
    }
}

/// The report interval: intervals of no length would never end.
pub fn check_report_interval(source: Source, us: u64) -> Result<(), TestError> {
    if us == 0 {
        return Err(TestError::Zero {
            name: Setting::ReportInterval.spelled(source),
        });
    }
    Ok(())
}

/// The tcp_info sampling interval: 0 (off) or at least [`MIN_SAMPLE_INTERVAL_US`].
pub fn check_sample_interval(source: Source, us: u64) -> Result<(), TestError> {
    if us != 0 && us < MIN_SAMPLE_INTERVAL_US {
        return Err(TestError::SampleInterval {
            name: Setting::SampleInterval.spelled(source),
        });
    }
    Ok(())
}

/// Round-trip probes' interval and idle time ([`crate::probe::check`]).
pub fn check_probe(source: Source, probe: &ProbeParams) -> Result<(), TestError> {
    crate::probe::check(probe).map_err(|reason| TestError::Refused {
        name: Setting::Probe.spelled(source),
        reason,
    })
}

/// Transactions with the rest of the test ([`crate::transaction::check`]).
pub fn check_transactions(source: Source, params: &TestParams) -> Result<(), TestError> {
    let setting = match params.transactions {
        Some(t) if t.new_connection => Setting::ConnectionPerTransaction,
        _ => Setting::Transactions,
    };
    crate::transaction::check(params).map_err(|reason| TestError::Refused {
        name: setting.spelled(source),
        reason,
    })
}

/// A test of no streams: probes alone, for a time ([`crate::probe::check_alone`]).
pub fn check_probes_alone(source: Source, params: &TestParams) -> Result<(), TestError> {
    crate::probe::check_alone(params).map_err(|reason| TestError::Refused {
        name: Setting::ProbesAlone.spelled(source),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message from both front-ends: the flag's, and the key's.
    fn both(check: impl Fn(Source) -> Result<(), TestError>) -> (String, String) {
        let message = |source| check(source).unwrap_err().to_string();
        (message(Source::Flag), message(Source::Key))
    }

    #[test]
    fn nothing_said_is_the_defaults() {
        assert_eq!(
            build(&TestInput::default(), Source::Flag),
            Ok(TestParams::default())
        );
    }

    #[test]
    fn sndbuf_and_rcvbuf_override_the_window() {
        let input = TestInput {
            window: Some(64 << 10),
            sndbuf: Some(1 << 20),
            ..TestInput::default()
        };
        let tuning = build(&input, Source::Key).unwrap().tuning;
        assert_eq!(
            (tuning.sndbuf, tuning.rcvbuf),
            (Some(1 << 20), Some(64 << 10))
        );
    }

    #[test]
    fn parallel_streams_are_1_to_128() {
        assert_eq!(check_streams(Source::Key, 128), Ok(128));
        for bad in [0, 129] {
            assert_eq!(
                both(|s| check_streams(s, bad).map(drop)),
                (
                    format!("-P/--parallel {bad} is not in 1..=128"),
                    format!("streams {bad} is not in 1..=128")
                )
            );
        }
    }

    #[test]
    fn a_test_lasts_some_time_or_sends_some_bytes() {
        assert_eq!(
            check_end(Source::Flag, &TestEnd::Bytes { bytes: 1 }),
            Ok(())
        );
        assert_eq!(
            both(|s| check_end(s, &TestEnd::Duration { us: 0 })),
            (
                "-t/--time: a test must last longer than 0 s".into(),
                "duration: a test must last longer than 0 s".into()
            )
        );
        assert_eq!(
            both(|s| check_end(s, &TestEnd::Bytes { bytes: 0 })).1,
            "bytes: a test must send more than 0 bytes"
        );
    }

    #[test]
    fn sizes_are_1_byte_to_4_gib() {
        assert_eq!(
            check_size(Setting::WriteSize, Source::Flag, u32::MAX.into()),
            Ok(u32::MAX)
        );
        for bad in [0, 1 << 32] {
            assert_eq!(
                both(|s| check_size(Setting::WriteSize, s, bad).map(drop)),
                (
                    format!("-l/--length must be between 1 byte and 4 GiB, got {bad}"),
                    format!("write_size must be between 1 byte and 4 GiB, got {bad}")
                )
            );
        }
    }

    #[test]
    fn an_mss_is_what_linux_takes() {
        assert_eq!(check_mss(Source::Flag, 1448), Ok(1448));
        assert_eq!(
            both(|s| check_mss(s, 10).map(drop)),
            (
                "-M/--set-mss 10: an MSS must be 88..=32767 bytes (what Linux's TCP_MAXSEG takes)"
                    .into(),
                "mss 10: an MSS must be 88..=32767 bytes (what Linux's TCP_MAXSEG takes)".into()
            )
        );
    }

    #[test]
    fn a_datagram_carries_16_to_65507_bytes() {
        assert_eq!(
            check_datagram_size(Source::Key, MIN_DATAGRAM.into()),
            Ok(MIN_DATAGRAM)
        );
        assert_eq!(
            check_datagram_size(Source::Key, MAX_DATAGRAM.into()),
            Ok(MAX_DATAGRAM)
        );
        let too_big = u64::from(u32::MAX) + u64::from(MIN_DATAGRAM);
        for bad in [
            u64::from(MIN_DATAGRAM) - 1,
            u64::from(MAX_DATAGRAM) + 1,
            too_big,
        ] {
            let (flag, key) = both(|s| check_datagram_size(s, bad).map(drop));
            let rule =
                format!("must be {MIN_DATAGRAM}..={MAX_DATAGRAM} bytes (a datagram's payload)");
            assert_eq!(flag, format!("-l/--length with --udp {rule}"));
            assert_eq!(key, format!("datagram_size {rule}"));
        }
    }

    #[test]
    fn a_burst_is_1_to_1024_datagrams() {
        assert_eq!(check_burst(Source::Key, 1024), Ok(1024));
        assert_eq!(
            both(|s| check_burst(s, 0).map(drop)),
            (
                "--burst 0 is not in 1..=1024".into(),
                "burst 0 is not in 1..=1024".into()
            )
        );
        assert!(check_burst(Source::Key, 1025).is_err());
    }

    #[test]
    fn the_report_interval_is_above_0() {
        assert_eq!(check_report_interval(Source::Key, 1), Ok(()));
        assert_eq!(
            both(|s| check_report_interval(s, 0)),
            (
                "-i/--interval must be above 0".into(),
                "interval must be above 0".into()
            )
        );
    }

    #[test]
    fn sampling_is_off_or_every_100_us_at_least() {
        assert_eq!(check_sample_interval(Source::Key, 0), Ok(()));
        assert_eq!(check_sample_interval(Source::Key, 100), Ok(()));
        assert_eq!(
            both(|s| check_sample_interval(s, 99)),
            (
                "--sample-interval must be 0 (off) or at least 100 µs".into(),
                "sample_interval must be 0 (off) or at least 100 µs".into()
            )
        );
    }

    #[test]
    fn probes_keep_their_interval_and_idle_time() {
        let probe = |interval_us, idle_us| ProbeParams {
            interval_us,
            idle_us,
        };
        assert_eq!(check_probe(Source::Key, &probe(10_000, 0)), Ok(()));
        assert_eq!(
            both(|s| check_probe(s, &probe(100, 0))),
            (
                "--probe: probe interval 100 µs is outside 1.00 ms..=10.0 s".into(),
                "probe: probe interval 100 µs is outside 1.00 ms..=10.0 s".into()
            )
        );
        assert_eq!(
            both(|s| check_probe(s, &probe(1_000, 3_600_000_000))).1,
            "probe: idle probing of 3600 s exceeds 30.0 s"
        );
    }

    #[test]
    fn transactions_fit_the_rest_of_the_test() {
        let rr = |new_connection, streams| TestParams {
            streams,
            transactions: Some(TransactionParams {
                request_size: 10,
                response_size: 10,
                request_writes: 1,
                new_connection,
            }),
            ..TestParams::default()
        };
        assert_eq!(check_transactions(Source::Key, &rr(true, 1)), Ok(()));
        let (flag, key) = both(|s| check_transactions(s, &rr(true, 2)));
        assert!(
            flag.starts_with("--rr: a connection per transaction (TCP_CRR)"),
            "{flag}"
        );
        assert!(
            key.starts_with("protocol = \"crr\": a connection per"),
            "{key}"
        );
        let mut split = rr(false, 1);
        split.transactions.as_mut().unwrap().request_writes = 11;
        assert_eq!(
            both(|s| check_transactions(s, &split)).1,
            "protocol = \"rr\": a request of 10 bytes cannot be split into 11 writes (1..=10)"
        );
    }

    #[test]
    fn no_streams_is_probes_alone_for_a_time() {
        let input = |probe, end| TestInput {
            streams: Streams::ProbesAlone,
            probe,
            end: Some(end),
            ..TestInput::default()
        };
        let ten_seconds = TestEnd::Duration { us: 10_000_000 };
        let probe = Some(ProbeInput {
            interval_us: 10_000,
            idle_us: None,
        });
        let alone = build(&input(probe, ten_seconds), Source::Key).unwrap();
        assert_eq!(alone.streams, 0);
        let rule = "a test of 0 streams is probes alone: it needs probes and a duration, and no UDP or transactions";
        let bytes = TestEnd::Bytes { bytes: 1 << 20 };
        for bad in [input(None, ten_seconds), input(probe, bytes)] {
            let (flag, key) = both(|s| build(&bad, s).map(drop));
            assert_eq!(flag, format!("-P 0: {rule}"));
            assert_eq!(key, format!("protocol = \"probe\": {rule}"));
        }
    }

    #[test]
    fn left_out_parts_take_their_defaults() {
        let input = TestInput {
            udp: Some(UdpInput {
                rate_bps: 1_000_000,
                datagram_size: None,
                burst: None,
            }),
            probe: Some(ProbeInput {
                interval_us: 10_000,
                idle_us: None,
            }),
            transactions: Some(TransactionInput {
                request: Some(100),
                ..TransactionInput::default()
            }),
            ..TestInput::default()
        };
        // Transactions over UDP are refused; each part's defaults are read apart.
        let udp = build(
            &TestInput {
                transactions: None,
                ..input.clone()
            },
            Source::Key,
        )
        .unwrap();
        let udp_params = udp.udp.unwrap();
        assert_eq!(
            (udp_params.datagram_size, udp_params.burst),
            (DEFAULT_DATAGRAM, 1)
        );
        assert_eq!(udp.probe.unwrap().idle_us, DEFAULT_PROBE_IDLE_US);
        let rr = build(&TestInput { udp: None, ..input }, Source::Key)
            .unwrap()
            .transactions
            .unwrap();
        assert_eq!((rr.response_size, rr.request_writes), (100, 1));
    }
}
