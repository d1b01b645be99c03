//! The path spec: normalized printing, the TOML form, and errors.

use proptest::prelude::*;
use tcplab_netsim::path::*;

fn prob() -> impl Strategy<Value = Prob> {
    prop_oneof![
        Just(Prob::ZERO),
        Just(Prob::ONE),
        (0..=Prob::SCALE).prop_map(|p| Prob::from_ppb(p).unwrap()),
        (0..=10_000u32).prop_map(|bp| Prob::from_ppb(bp * 100_000).unwrap()),
    ]
}

fn nonzero_prob() -> impl Strategy<Value = Prob> {
    prob().prop_filter("nonzero", |p| !p.is_zero())
}

fn duration_us() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..2_000u64,
        (0..5_000u64).prop_map(|ms| ms * 1000),
        (0..100u64).prop_map(|s| s * 1_000_000)
    ]
}

fn link_spec() -> impl Strategy<Value = LinkSpec> {
    let jitter = proptest::option::of(
        (
            1..1_000_000u64,
            prop::sample::select(vec![
                JitterDist::Uniform,
                JitterDist::Normal,
                JitterDist::Pareto,
                JitterDist::ParetoNormal,
            ]),
            any::<bool>(),
        )
            .prop_map(|(jitter_us, dist, reorder)| Jitter {
                jitter_us,
                dist,
                reorder,
            }),
    );
    let loss = prop_oneof![
        Just(Loss::None),
        nonzero_prob().prop_map(Loss::Random),
        (prob(), prob(), prob(), prob()).prop_map(|(p, r, loss_bad, loss_good)| {
            Loss::GilbertElliott {
                p,
                r,
                loss_bad,
                loss_good,
            }
        }),
    ];
    let reorder = proptest::option::of((nonzero_prob(), prob(), 1..20u32).prop_map(
        |(prob, correlation, gap)| Reorder {
            prob,
            correlation,
            gap,
        },
    ));
    let bottleneck = prop_oneof![
        Just(Bottleneck::Unlimited),
        (1..100_000_000_000u64, 0..100u32)
            .prop_map(|(bps, overhead)| Bottleneck::Rate { bps, overhead }),
        (1..5_000u64, 0..100u32).prop_map(|(m, overhead)| Bottleneck::Rate {
            bps: m * 1_000_000,
            overhead
        }),
        "[a-zA-Z0-9/._-]{1,30}".prop_map(|path| Bottleneck::Trace { path }),
    ];
    let queue = prop_oneof![
        (0..100_000u64).prop_map(QueueLimit::Packets),
        (0..1u64 << 40).prop_map(QueueLimit::Bytes),
        (0..64u64).prop_map(|k| QueueLimit::Bytes(k << 20)),
        (0..1000u32).prop_map(|x| QueueLimit::Bdp(f64::from(x) / 100.0)),
        (0.0..16.0f64).prop_map(QueueLimit::Bdp),
    ];
    let aqm = prop_oneof![
        Just(Aqm::DropTail),
        (1..1_000_000u64, 1..10_000_000u64, any::<bool>()).prop_map(
            |(target_us, interval_us, ecn)| Aqm::Codel {
                target_us,
                interval_us,
                ecn
            }
        ),
        Just(Aqm::Codel {
            target_us: CODEL_TARGET_US,
            interval_us: CODEL_INTERVAL_US,
            ecn: false
        }),
        (
            1..1_000_000u64,
            1..10_000_000u64,
            1..100_000u32,
            1..65_536u32,
            any::<bool>()
        )
            .prop_map(
                |(target_us, interval_us, quantum, flows, ecn)| Aqm::FqCodel {
                    target_us,
                    interval_us,
                    quantum,
                    flows,
                    ecn
                }
            ),
        Just(Aqm::FqCodel {
            target_us: CODEL_TARGET_US,
            interval_us: CODEL_INTERVAL_US,
            quantum: FQ_CODEL_QUANTUM,
            flows: FQ_CODEL_FLOWS,
            ecn: true
        }),
        (
            1..1_000_000u64,
            1..1_000_000u64,
            1..64u32,
            1..64u32,
            any::<bool>()
        )
            .prop_map(|(target_us, tupdate_us, alpha, beta, ecn)| Aqm::Pie {
                target_us,
                tupdate_us,
                alpha,
                beta,
                ecn
            }),
    ];
    (
        duration_us(),
        jitter,
        loss,
        prob(),
        prob(),
        reorder,
        bottleneck,
        queue,
        (
            aqm,
            proptest::option::of(prop_oneof![
                Just(Pace::Window(PaceRtt::Smoothed)),
                Just(Pace::Window(PaceRtt::Min)),
                (1..100_000_000_000u64).prop_map(Pace::Rate)
            ]),
            proptest::option::of(TXQUEUELEN_RANGE),
            proptest::option::of(
                (1..100_000_000_000u64, 1..100_000_000u64)
                    .prop_map(|(bps, burst_bytes)| Police { bps, burst_bytes }),
            ),
            proptest::option::of(
                ("[a-zA-Z0-9/._-]{1,30}", any::<bool>())
                    .prop_map(|(path, reorder)| DelayTrace { path, reorder }),
            ),
            proptest::option::of("[a-zA-Z0-9/._-]{1,30}"),
        ),
    )
        .prop_map(
            |(
                delay_us,
                jitter,
                loss,
                duplicate,
                corrupt,
                reorder,
                bottleneck,
                queue,
                (aqm, pace, txqueuelen, police, delay_trace, loss_trace),
            )| {
                let mut l = LinkSpec {
                    delay_us,
                    jitter,
                    loss,
                    duplicate,
                    corrupt,
                    reorder,
                    bottleneck,
                    queue,
                    aqm,
                    police,
                    pace,
                    delay_trace,
                    loss_trace,
                    txqueuelen,
                };
                // Keep it valid: reorder needs a delay, a bdp queue a rate.
                if l.reorder.is_some() && l.delay_us == 0 {
                    l.delay_us = 1;
                }
                if matches!(l.queue, QueueLimit::Bdp(_))
                    && !matches!(l.bottleneck, Bottleneck::Rate { .. })
                {
                    l.queue = QueueLimit::Packets(10);
                }
                l
            },
        )
}

fn path_spec() -> impl Strategy<Value = PathSpec> {
    let mtu = prop_oneof![Just(DEFAULT_MTU), MTU_RANGE];
    let seed = proptest::option::of(any::<u64>());
    (link_spec(), link_spec(), any::<bool>(), mtu, seed).prop_map(|(up, down, same, mtu, seed)| {
        PathSpec {
            down: if same { up.clone() } else { down },
            up,
            mtu,
            seed,
            schedule: Schedule::default(),
        }
    })
}

#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct Experiment {
    path: PathSpec,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn display_parses_back(spec in path_spec()) {
        prop_assert!(spec.validate().is_ok(), "{:?}", spec.validate());
        let text = spec.to_string();
        let back: PathSpec = text.parse().map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(&back, &spec, "{}", text);
        // Normalized: printing again gives the same text.
        prop_assert_eq!(back.to_string(), text);
    }

    #[test]
    fn toml_round_trips_and_agrees_with_text(spec in path_spec()) {
        let doc = toml::to_string(&Experiment { path: spec.clone() }).unwrap();
        let back: Experiment = toml::from_str(&doc).map_err(|e| TestCaseError::fail(format!("{doc}\n{e}")))?;
        prop_assert_eq!(&back.path, &spec, "{}", doc);
        // JSON, as the store might keep it.
        let json = serde_json::to_string(&spec).unwrap();
        prop_assert_eq!(serde_json::from_str::<PathSpec>(&json).unwrap(), spec);
    }

    /// Parsing never panics and errors stay on one line.
    #[test]
    fn errors_are_one_line(words in prop::collection::vec(
        prop_oneof![
            prop::sample::select(vec!["rtt", "delay", "up.delay", "down.rate", "rate", "loss",
                "gemodel", "jitter", "dist", "pareto", "reorder", "gap", "queue", "aqm", "codel",
                "target", "trace", "mtu", "seed", "up.rtt", "overhead", "txqueuelen"]).prop_map(String::from),
            "[0-9]{1,4}(\\.[0-9]{1,3})?(ms|us|s|mbit|kbit|%|p|bdp|K|B|)",
            ".{0,6}",
        ], 0..8)) {
        let text = words.join(" ");
        if let Err(e) = text.parse::<PathSpec>() {
            let message = e.to_string();
            prop_assert!(message.starts_with("path spec: "));
            prop_assert!(!message.contains('\n'), "{}", message);
        }
    }
}

#[test]
fn toml_shape_matches_the_text_grammar() {
    let doc = r#"
        [path]
        rtt = "20ms"
        rate = "100mbit"
        queue = "1bdp"
        aqm = "codel target 10ms"
        seed = 7
        [path.up]
        loss = "gemodel 1% 10%"
        jitter = "2ms dist pareto"
        [path.down]
        rate = "10mbit overhead 24"
    "#;
    let from_toml: Experiment = toml::from_str(doc).unwrap();
    let from_text: PathSpec = "rtt 20ms rate 100mbit queue 1bdp aqm codel target 10ms seed 7 \
                               up.loss gemodel 1% 10% up.jitter 2ms dist pareto \
                               down.rate 10mbit overhead 24"
        .parse()
        .unwrap();
    assert_eq!(from_toml.path, from_text);
    assert_eq!(
        toml::to_string(&from_toml).unwrap(),
        "[path]\nrtt = \"20ms\"\nqueue = \"1bdp\"\naqm = \"codel target 10ms\"\nseed = 7\n\n\
         [path.up]\njitter = \"2ms dist pareto\"\nloss = \"gemodel 1% 10%\"\nrate = \"100mbit\"\n\n\
         [path.down]\nrate = \"10mbit overhead 24\"\n"
    );
    // Numbers are accepted where the grammar takes a bare number.
    let e: Experiment = toml::from_str("[path]\nqueue = 100\nloss = 1\nmtu = 9000\n").unwrap();
    assert_eq!(e.path.up.queue, QueueLimit::Packets(100));
    assert_eq!(e.path.mtu, 9000);
}

#[test]
fn a_gap_pacer_is_a_rate_per_direction() {
    let spec: PathSpec = "rtt 10ms rate 100mbit up.pace 90mbit".parse().unwrap();
    assert_eq!(
        (spec.up.pace, spec.down.pace),
        (Some(Pace::Rate(90_000_000)), None)
    );
    assert_eq!(spec.to_string(), "rtt 10ms rate 100mbit up.pace 90mbit");
    let dynamic: PathSpec = "pace cwnd".parse().unwrap();
    assert_eq!(
        (dynamic.up.pace, dynamic.to_string().as_str()),
        (Some(Pace::Window(PaceRtt::Smoothed)), "pace cwnd")
    );
    let min: PathSpec = "up.pace cwnd/minrtt".parse().unwrap();
    assert_eq!(
        (min.up.pace, min.to_string().as_str()),
        (Some(Pace::Window(PaceRtt::Min)), "up.pace cwnd/minrtt")
    );
    let unknown = "pace cwnd/srtt"
        .parse::<PathSpec>()
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("cwnd/minrtt"), "{unknown}");
    let zero = "pace 0".parse::<PathSpec>().unwrap_err().to_string();
    assert!(zero.contains("above zero"), "{zero}");
}

#[test]
fn toml_errors_name_the_key_and_value() {
    let err = |doc: &str| toml::from_str::<Experiment>(doc).unwrap_err().to_string();
    let e = err("[path.down]\nrate = \"10 mbit\"\n");
    assert!(
        e.contains("path spec: at '10 mbit' (key down.rate): unexpected 'mbit' after the value of down.rate; a unit follows its number without a space"),
        "{e}"
    );
    let e = err("[path]\nratte = \"10mbit\"\n");
    assert!(
        e.contains("path spec: at 'ratte' (key ratte): unknown key"),
        "{e}"
    );
    let e = err("[path]\nrtt = \"20ms\"\n[path.up]\ndelay = \"5ms\"\n");
    assert!(e.contains("(key up.delay): rtt already sets"), "{e}");
    let e = err("[path]\nloss = true\n");
    assert!(
        e.contains("at 'true' (key loss): expected a string or a number"),
        "{e}"
    );
    let e = err("[path]\nrate = \"\"\n");
    assert!(e.contains("at '' (key rate): missing value"), "{e}");
    let e = err("[path]\nrtt = 20\n");
    assert!(
        e.contains("at '20' (key rtt): a duration needs a unit, as in 20ms, 20us or 20s"),
        "{e}"
    );
    let e = err("[path]\ndelay = \"2h\"\n");
    assert!(
        e.contains("at '2h' (key delay): too long; at most 1h"),
        "{e}"
    );
}

#[test]
fn trace_path_is_recorded_not_read() {
    let p: PathSpec = "rtt 40ms up.trace traces/Verizon-LTE-short.up down.trace /x/y.down"
        .parse()
        .unwrap();
    assert_eq!(
        p.up.bottleneck,
        Bottleneck::Trace {
            path: "traces/Verizon-LTE-short.up".into()
        }
    );
    assert_eq!(
        p.to_string(),
        "rtt 40ms up.trace traces/Verizon-LTE-short.up down.trace /x/y.down"
    );
}

#[test]
fn normalized_units() {
    let p: PathSpec = "delay 1.5s rate 1500kBps queue 1048576B mtu 9K loss 0.50% up.jitter 1000us"
        .parse()
        .unwrap();
    // kBps is bytes/s, as tc spells it: 12 Mbit/s.
    assert_eq!(
        p.to_string(),
        "rtt 3s up.jitter 1ms loss 0.5% rate 12mbit queue 1MiB mtu 9216"
    );
}

/// docs/paths.md shows the grammar `tcplab path-spec` prints, from the parser's key
/// table: a key added to the parser and not to its usage fails to compile, and a
/// document not regenerated fails here.
#[test]
fn the_grammar_in_the_docs_is_the_parsers() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/paths.md"))
        .expect("docs/paths.md");
    let marker = "<!-- grammar: tcplab path-spec -->\n```text\n";
    let start = doc.find(marker).expect("the grammar's marker") + marker.len();
    let end = start + doc[start..].find("```").expect("the block's end");
    assert_eq!(
        &doc[start..end],
        tcplab_netsim::path::grammar(),
        "regenerate: tcplab path-spec"
    );
    // Every key the grammar names parses.
    for spec in [
        "pace cwnd",
        "up.pace 900mbit",
        "aqm codel target 5ms interval 100ms",
        "loss gemodel 1% 10%",
    ] {
        spec.parse::<tcplab_netsim::path::PathSpec>()
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}
