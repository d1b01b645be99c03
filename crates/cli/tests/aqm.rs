//! AQMs and ECN at the emulator's bottleneck, through real kernel TCP: the kernel's own
//! counters (tcp_info's delivered_ce, its retransmissions) against the link's. The
//! bufferbloat study's quick variant is in sweeps.rs.

use crate::support;

use serde_json::Value;
use support::*;
use tcplab_sys::netns::privileged_or_skip;

fn bottleneck<'a>(run: &'a Value, dir: &str) -> &'a Value {
    run["path"][dir]["links"]
        .as_array()
        .expect("links")
        .iter()
        .find(|l| l["name"] == "bottleneck")
        .expect("a bottleneck")
}

/// CoDel with ECN, cubic senders with and without ECN: asked for by the flows (`--ecn`,
/// which sets the client host's tcp_ecn; the server accepts by default) the
/// connections negotiate it (tcp_info's options) and the AQM marks instead of dropping,
/// the senders' kernels count the marks (tcp_info's delivered_ce) and retransmit
/// (almost) nothing; with `tcp_ecn=0` on every host the same AQM drops and the senders
/// retransmit what it dropped. explain names the AQM and what it did.
#[test]
fn ecn_turns_the_aqms_drops_into_marks_the_senders_see() {
    if !privileged_or_skip("aqm_ecn") {
        return;
    }
    let _machine = among_others();
    let dir = tempfile::tempdir().unwrap();
    let run = |ecn: u8| -> Value {
        let db = dir.path().join(format!("ecn{ecn}.db"));
        let asked: &[&str] = match ecn {
            0 => &["--sysctl", "net.ipv4.tcp_ecn=0"],
            _ => &["--ecn"],
        };
        let out = tcplab()
            .args([
                "run",
                "--path",
                "rtt 20ms rate 20mbit queue 300 aqm codel ecn",
            ])
            .args(["-P", "4", "-C", "cubic", "-t", "6s"])
            .args(asked)
            .args(["--json", "--json-samples", "--db"])
            .arg(&db)
            .output()
            .unwrap();
        parse_success(&out)
    };
    let plain = run(0);
    let marked = run(1);
    let link = |v: &Value| {
        let l = bottleneck(v, "up");
        (
            u64_at(l, "/marked_ce"),
            u64_at(l, "/dropped_aqm") + u64_at(l, "/dropped_queue"),
        )
    };
    let delivered_ce = |v: &Value| {
        v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["host"] == "client")
            .filter_map(|s| s["info"]["delivered_ce"].as_u64())
            .max()
            .unwrap_or(0)
    };
    // TCPI_OPT_ECN: the connection negotiated ECN, in every client sample.
    let negotiated = |v: &Value| {
        v["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["host"] == "client")
            .all(|s| s["info"]["options"].as_u64().unwrap() & 8 != 0)
    };
    assert!(
        negotiated(&marked),
        "--ecn: every connection negotiated ECN"
    );
    assert!(!negotiated(&plain), "tcp_ecn=0: none did");
    let ((m0, d0), (m1, d1)) = (link(&plain), link(&marked));
    println!(
        "tcp_ecn 0: marked {m0}, dropped {d0}, retransmits {}; tcp_ecn 1: marked {m1}, dropped {d1}, retransmits {}, delivered_ce {}",
        plain["summary"]["retransmits"],
        marked["summary"]["retransmits"],
        delivered_ce(&marked)
    );
    assert_eq!(m0, 0, "no ECN-capable packet to mark");
    assert!(d0 > 0, "CoDel drops a standing queue of cubic flows");
    assert!(
        m1 > 0 && delivered_ce(&marked) > 0,
        "the marks reach the senders"
    );
    assert_eq!(delivered_ce(&plain), 0);
    assert!(d1 * 10 < d0, "with ECN {d1} drops, without {d0}");
    // The kernel retransmits what the link dropped, and no more than it dropped.
    assert!(u64_at(&plain, "/summary/retransmits") >= d0 * 9 / 10);
    assert!(u64_at(&marked, "/summary/retransmits") <= d1 + 2);
    let e = explained(&dir.path().join("ecn1.db"));
    let message =
        finding_message(&e, FindingKind::Aqm).unwrap_or_else(|| panic!("no aqm finding: {e:#}"));
    assert!(
        message.contains("codel") && message.contains(&format!("marked {m1} packets")),
        "{message}"
    );
}
