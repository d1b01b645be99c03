//! A test's kernel events (`--trace-events`): traced while it runs, attributed to its
//! flows and ends afterwards. Both ends' sockets are seen when the server runs on this
//! machine (a lab, loopback); a remote server's are not.

use tcplab_analysis::events::{self, TestPorts, TraceLine};
use tcplab_record::events::{EventRecord, TraceRecord};
use tcplab_record::RunRecord;
use tcplab_sys::trace::{Trace, TraceError};

use crate::engine::FlowSocket;

/// A test's trace, or why it could not be taken.
pub struct TestTrace {
    trace: Result<Trace, TraceError>,
    ports: TestPorts,
}

impl TestTrace {
    /// Starts tracing the sockets of the test whose server listens on `data_port`,
    /// before its data connections open.
    pub fn start(data_port: u16) -> TestTrace {
        TestTrace {
            trace: Trace::start(&events::TRACEPOINTS, &events::port_filter(data_port)),
            ports: TestPorts {
                data_port,
                flows: Vec::new(),
            },
        }
    }

    /// Learns which flow each data connection is.
    pub fn add_flows(&mut self, flows: &[FlowSocket]) {
        self.ports.flows = flows
            .iter()
            .filter_map(|f| Some((f.id, f.stream.local_addr().ok()?.port())))
            .collect();
    }

    /// Ends the trace: its record and the test's events on its time base (`t0_us` on
    /// the monotonic clock), in time order.
    pub fn finish(self, t0_us: i64) -> (TraceRecord, Vec<EventRecord>) {
        let ports = self.ports;
        finish(self.trace, |line| ports.attribute(line, t0_us))
    }
}

/// Ends `trace`: its record and the events `attribute` finds a socket for, in time
/// order; a trace that could not be taken is a record saying why.
pub fn finish(
    trace: Result<Trace, TraceError>,
    attribute: impl Fn(TraceLine) -> Option<EventRecord>,
) -> (TraceRecord, Vec<EventRecord>) {
    let (text, lost) = match trace.and_then(Trace::finish) {
        Ok(read) => read,
        Err(e) => {
            let record = TraceRecord {
                taken: false,
                note: Some(e.to_string()),
                ..TraceRecord::default()
            };
            return (record, Vec::new());
        }
    };
    let mut events: Vec<EventRecord> = String::from_utf8_lossy(&text)
        .lines()
        .filter_map(events::parse_line)
        .filter_map(attribute)
        .collect();
    events.sort_by_key(|e| e.t_us);
    let record = TraceRecord {
        taken: true,
        note: None,
        events: events.len() as u64,
        lost,
    };
    (record, events)
}

/// Puts a test's events into its record: those of `trace`, or, when events were asked
/// for and there is no trace (a UDP test), why there are none.
pub fn attach(record: &mut RunRecord, trace: Option<TestTrace>, asked: bool, t0_us: i64) {
    match trace {
        Some(trace) => {
            let (taken, events) = trace.finish(t0_us);
            record.trace = Some(taken);
            record.events = events;
        }
        None if asked => {
            record.trace = Some(TraceRecord {
                note: Some("kernel events are of TCP sockets: a UDP test has none".into()),
                ..TraceRecord::default()
            })
        }
        None => {}
    }
}
