use super::*;
use crate::path::PaceRtt;

/// The parking lot: the long flow's hosts src and dst at the ends of a chain of three
/// routers and two bottlenecks, a host at r1 and one at r2 for the one-hop flows.
const PARKING_LOT: &str = r#"
host = [{ name = "src" }, { name = "dst" }, { name = "x1" }, { name = "x2" }]
router = [{ name = "r1" }, { name = "r2" }, { name = "r3" }]
link = [
    { between = ["src", "r1"], path = "rtt 2ms" },
    { name = "b1", between = ["r1", "r2"], path = "rtt 10ms rate 100mbit" },
    { name = "b2", between = ["r2", "r3"], path = "rtt 10ms rate 100mbit" },
    { between = ["r3", "dst"], path = "rtt 2ms" },
    { between = ["x1", "r1"], path = "rtt 2ms" },
    { between = ["x2", "r2"], path = "rtt 2ms" },
]
"#;

/// The long flow's way through the parking lot, over both bottlenecks.
const LONG_FLOW_THERE: [&str; 4] = ["src>r1", "r1>r2", "r2>r3", "r3>dst"];

fn names(t: &Topology, hops: &[Hop]) -> Vec<String> {
    hops.iter()
        .map(|&h| {
            let (a, b) = t.hop_ends(h);
            format!("{}>{}", t.nodes[a].name, t.nodes[b].name)
        })
        .collect()
}

/// The route from host `from` to host `to`, as `a>b` per link.
fn way(t: &Topology, from: &str, to: &str) -> Vec<String> {
    names(t, t.route(t.node(from).unwrap(), t.node(to).unwrap()))
}

fn err(text: &str) -> String {
    text.parse::<Topology>().unwrap_err().to_string()
}

#[test]
fn every_host_reaches_every_other_by_the_shortest_way_through_routers() {
    let t: Topology = PARKING_LOT.parse().unwrap();
    let id = |n: &str| t.node(n).unwrap();
    assert_eq!(way(&t, "src", "dst"), LONG_FLOW_THERE);
    assert_eq!(
        way(&t, "dst", "src"),
        ["dst>r3", "r3>r2", "r2>r1", "r1>src"]
    );
    assert_eq!(way(&t, "x1", "x2"), ["x1>r1", "r1>r2", "r2>x2"]);
    // Every ordered pair of the four hosts has one.
    let hosts: Vec<_> = t.hosts().collect();
    assert_eq!(hosts.len(), 4);
    for &a in &hosts {
        for &b in hosts.iter().filter(|&&b| b != a) {
            let hops = t.route(a, b);
            assert_eq!(t.hop_ends(hops[0]).0, a);
            assert_eq!(t.hop_ends(*hops.last().unwrap()).1, b);
            assert!(hops
                .windows(2)
                .all(|w| t.hop_ends(w[0]).1 == t.hop_ends(w[1]).0));
        }
    }
    // 1 + 5 + 5 + 1 ms each way.
    assert_eq!(t.rtt_us(id("src"), id("dst")), 24_000);
}

/// The sides split a topology as a dumbbell's directions: every way toward the first
/// host on one, every way from it on the other, so only a route between two other
/// hosts changes sides, where it turns.
#[test]
fn the_ways_toward_the_first_host_are_one_side_and_the_others_the_other() {
    let t: Topology = PARKING_LOT.parse().unwrap();
    let side_of = |from: &str, to: &str| -> Vec<Direction> {
        t.route(t.node(from).unwrap(), t.node(to).unwrap())
            .iter()
            .map(|&hop| t.side(hop))
            .collect()
    };
    assert_eq!(side_of("dst", "src"), [Direction::Up; 4]);
    assert_eq!(side_of("x2", "src"), [Direction::Up; 3]);
    assert_eq!(side_of("src", "dst"), [Direction::Down; 4]);
    assert_eq!(side_of("src", "x1"), [Direction::Down; 2]);
    // x1 to x2 meets the way toward src at r1 and leaves it there.
    assert_eq!(
        side_of("x1", "x2"),
        [Direction::Up, Direction::Down, Direction::Down]
    );
    let ups = t.hops().filter(|&hop| t.side(hop) == Direction::Up).count();
    assert_eq!(ups, t.links.len(), "one way of each link toward src");
}

#[test]
fn the_least_delay_wins_over_fewer_links_and_a_host_never_forwards() {
    let t: Topology = r#"
        host = [{ name = "a" }, { name = "b" }, { name = "c" }]
        router = [{ name = "r1" }, { name = "r2" }, { name = "r3" }]
        link = [
            { between = ["a", "r1"] },
            { between = ["r1", "b"], path = "rtt 100ms" },
            { between = ["r1", "r2"], path = "rtt 10ms" },
            { between = ["r2", "r3"], path = "rtt 10ms" },
            { between = ["r3", "b"], path = "rtt 10ms" },
            { between = ["a", "c"] },
            { between = ["c", "b"] },
        ]
    "#
    .parse()
    .unwrap();
    // 15 ms through three routers beats 50 ms through one; the free way through host
    // c is no way at all.
    assert_eq!(way(&t, "a", "b"), ["a>r1", "r1>r2", "r2>r3", "r3>b"]);
    assert_eq!(way(&t, "a", "c"), ["a>c"]);
}

#[test]
fn a_given_route_is_taken_one_way_and_the_other_keeps_the_shortest() {
    // A longer way from r1 to r3 through r4, which the way back is told to take.
    let text = PARKING_LOT
        .replace(
            r#"{ name = "r3" }]"#,
            r#"{ name = "r3" }, { name = "r4" }]"#,
        )
        .replace(
            r#"{ between = ["x2", "r2"], path = "rtt 2ms" },"#,
            r#"{ between = ["x2", "r2"], path = "rtt 2ms" },
    { between = ["r1", "r4"], path = "rtt 40ms" },
    { between = ["r4", "r3"], path = "rtt 40ms" },"#,
        )
        + r#"
[[route]]
from = "dst"
to = "src"
via = ["r3", "r4", "r1"]
"#;
    let t: Topology = text.parse().unwrap();
    let id = |n: &str| t.node(n).unwrap();
    assert_eq!(way(&t, "src", "dst"), LONG_FLOW_THERE);
    assert_eq!(
        way(&t, "dst", "src"),
        ["dst>r3", "r3>r4", "r4>r1", "r1>src"]
    );
    // 12 ms there, 42 back.
    assert_eq!(t.rtt_us(id("src"), id("dst")), 54_000);
}

#[test]
fn bad_topologies_are_one_line_naming_the_element() {
    let two = "host = [{ name = \"a\" }, { name = \"b\" }]\n";
    let cases = [
        ("host = [{ name = \"a\" }]", "a topology needs at least two hosts"),
        (
            "host = [{ name = \"a b\" }, { name = \"b\" }]",
            "invalid name 'a b': a host or router is 1 to 16 letters, digits, '-' or '_'",
        ),
        (
            "host = [{ name = \"a\" }, { name = \"b\" }]\nrouter = [{ name = \"\" }]",
            "invalid name '': a host or router",
        ),
        (
            "host = [{ name = \"a\" }, { name = \"a\" }]",
            "'a' is named twice; hosts and routers share one set of names",
        ),
        (
            &format!("{two}link = [{{ between = [\"a\", \"z\"] }}]"),
            "link a–z: no host or router named 'z'",
        ),
        (
            &format!("{two}link = [{{ name = \"l\", between = [\"a\", \"a\"] }}]"),
            "link l: it joins 'a' to itself",
        ),
        (
            &format!("{two}link = [{{ between = [\"a\", \"b\"], path = \"rtt 10\" }}]"),
            "link a–b: path spec: at '10' (word 2): a duration needs a unit, as in 10ms, 10us or 10s",
        ),
        (
            &format!("{two}router = [{{ name = \"r\" }}]\nlink = [{{ between = [\"a\", \"b\"] }}]"),
            "router 'r' has no link",
        ),
        (
            "host = [{ name = \"a\" }, { name = \"b\" }, { name = \"c\" }, { name = \"d\" }]
             link = [{ between = [\"a\", \"b\"] }, { between = [\"c\", \"d\"] }]",
            "host 'a' cannot reach host 'c': no links join them through routers",
        ),
        (
            &format!("{two}link = [{{ between = [\"a\", \"b\"] }}]\nroute = [{{ from = \"a\", to = \"b\", via = [\"q\"] }}]"),
            "route a → b: no host or router named 'q'",
        ),
        (
            &format!("{two}link = [{{ between = [\"a\", \"b\"] }}]\nhost2 = 1"),
            "topology: ",
        ),
    ];
    for (text, expected) in cases {
        let e = err(text);
        assert!(
            e.starts_with(expected),
            "{text}\n  gave {e}\n  not {expected}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // Routes from src to dst through the parking lot that no packet can take.
    for (via, expected) in [
        (
            r#"["r1", "r2", "r1", "r3"]"#,
            "route src → dst: it passes 'r1' twice: a loop",
        ),
        (
            r#"["r1", "x1"]"#,
            "route src → dst: 'x1' is a host; hosts do not forward, a route goes via routers",
        ),
        (
            r#"["r1", "r3"]"#,
            "route src → dst: no link joins 'r1' and 'r3'",
        ),
    ] {
        let text = format!("{PARKING_LOT}\n[[route]]\nfrom = \"src\"\nto = \"dst\"\nvia = {via}\n");
        assert_eq!(err(&text), expected);
    }
}

#[test]
fn a_senders_gap_pacer_goes_on_the_first_link_of_its_way_once() {
    let mut t: Topology = PARKING_LOT.parse().unwrap();
    let (src, dst, x1) = (
        t.node("src").unwrap(),
        t.node("dst").unwrap(),
        t.node("x1").unwrap(),
    );
    let rate = |bps| Pace::Rate(bps);
    t.pace_first_link(src, dst, rate(5_000_000)).unwrap();
    // The same rate again, from the same host: the same pacer.
    t.pace_first_link(src, x1, rate(5_000_000)).unwrap();
    let first = &t.links[0];
    assert_eq!(first.path.to_string(), "rtt 2ms up.pace 5mbit");
    // Back from dst: the last link's down way, following the window.
    t.pace_first_link(dst, src, Pace::Window(PaceRtt::Min))
        .unwrap();
    assert_eq!(t.links[3].path.to_string(), "rtt 2ms down.pace cwnd/minrtt");
    let error = t.pace_first_link(src, dst, rate(6_000_000)).unwrap_err();
    assert_eq!(
        error,
        format!(
            "link {} (\"rtt 2ms up.pace 5mbit\") is paced already where src sends: one gap pacer per link way",
            t.links[0].name
        )
    );
}

#[test]
fn a_route_s_dynamic_pacers_spread_the_window_over_one_round_trip() {
    let chain = |l2: &str| {
        format!(
            "[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[router]]\nname = \"r\"\n\
             [[link]]\nname = \"l1\"\nbetween = [\"a\", \"r\"]\npath = \"rate 10mbit pace cwnd\"\n\
             [[link]]\nname = \"l2\"\nbetween = [\"r\", \"b\"]\npath = \"{l2}\"\n"
        )
        .parse::<Topology>()
    };
    let same = chain("rate 10mbit pace cwnd").unwrap();
    let (a, b) = (same.node("a").unwrap(), same.node("b").unwrap());
    let ways = |t: &Topology, from, to| -> Vec<String> {
        t.window_pacers(from, to)
            .iter()
            .map(|(hop, rtt)| format!("{} {:?} {}", t.links[hop.link].name, hop.dir, rtt.name()))
            .collect()
    };
    assert_eq!(ways(&same, a, b), ["l1 Up cwnd", "l2 Up cwnd"]);
    // Each way its own: back from b, only l1 is paced (l2 paces up alone).
    let up_only = chain("rate 10mbit up.pace cwnd").unwrap();
    assert_eq!(ways(&up_only, b, a), ["l1 Down cwnd"]);
    assert_eq!(
        chain("rate 10mbit pace cwnd/minrtt").unwrap_err().to_string(),
        "route a → b: link l1 paces by cwnd and link l2 by cwnd/minrtt: the senders on a route publish one window rate, so give its dynamic pacers one round trip"
    );
}
