//! The lab daemon's protocol: `tcplab lab daemon` (which `lab up` starts) holds a lab
//! and answers `lab show` and `lab down` on the lab's Unix socket.
//!
//! One request per connection and one line each way, so `socat` can talk to it too: a
//! request is a word (`show`, `down`); a reply is the lab as JSON, `ok`, or `error: `
//! and why. Before it serves, the daemon says `ready` (or `error: ` and why) on its
//! stdout, which `lab up` waits for. The messages are typed here ([`LabRequest`],
//! [`LabReply`], [`Startup`]); [`serve`] is the daemon's side, [`show`] and [`down`]
//! the client's.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcplab_record::DirectionStats;
use tcplab_sys::poll;

use crate::registry::{self, HostEntry, LabEntry};
use crate::{Lab, LabError};

/// How long a client waits for the daemon's answer, and the daemon for a request.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// How a failure starts its line, in a reply or in the daemon's first word.
const ERROR_PREFIX: &str = "error: ";
/// The reply to `down` once the lab is down.
const DOWN_REPLY: &str = "ok";
/// The daemon's first word once it serves.
const READY: &str = "ready";

/// What a client asks a lab's daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabRequest {
    /// The lab and its links' counters now.
    Show,
    /// The lab taken down; the daemon exits after its reply.
    Down,
}

impl LabRequest {
    pub const ALL: [LabRequest; 2] = [LabRequest::Show, LabRequest::Down];

    /// The request's word on the socket.
    pub fn word(self) -> &'static str {
        match self {
            LabRequest::Show => "show",
            LabRequest::Down => "down",
        }
    }

    /// The request a line holds (its trailing newline and spaces ignored).
    pub fn decode(line: &str) -> Result<Self, ProtocolError> {
        let word = line.trim();
        Self::ALL
            .into_iter()
            .find(|r| r.word() == word)
            .ok_or_else(|| ProtocolError::UnknownRequest(word.to_owned()))
    }
}

/// `lab show`'s document: the lab, its hosts and both directions' counters now. `path`,
/// `server`, `client` (the first) and `clients` repeat `lab`'s, at the top for scripts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabShown {
    pub lab: LabEntry,
    pub path: String,
    pub server: HostEntry,
    pub client: HostEntry,
    pub clients: Vec<HostEntry>,
    pub up: DirectionStats,
    pub down: DirectionStats,
}

impl LabShown {
    /// The document of `entry` with its directions' counters.
    pub fn new(entry: &LabEntry, up: DirectionStats, down: DirectionStats) -> Self {
        LabShown {
            lab: entry.clone(),
            path: entry.path.clone(),
            server: entry.server.clone(),
            client: entry.clients[0].clone(),
            clients: entry.clients.clone(),
            up,
            down,
        }
    }
}

/// What a lab's daemon answers.
#[derive(Clone, Debug, PartialEq)]
pub enum LabReply {
    /// To `show`.
    Shown(Box<LabShown>),
    /// To `down`: the lab is down.
    Down,
    /// The request failed or was refused: why.
    Failed(String),
}

impl LabReply {
    /// The reply's line, without its newline.
    pub fn encode(&self) -> String {
        match self {
            LabReply::Shown(shown) => {
                serde_json::to_string(shown).expect("the document serializes")
            }
            LabReply::Down => DOWN_REPLY.to_owned(),
            LabReply::Failed(why) => format!("{ERROR_PREFIX}{}", one_line(why)),
        }
    }

    /// The reply a line holds.
    pub fn decode(line: &str) -> Result<Self, ProtocolError> {
        let line = line.trim();
        if line == DOWN_REPLY {
            return Ok(LabReply::Down);
        }
        if let Some(why) = line.strip_prefix(ERROR_PREFIX) {
            return Ok(LabReply::Failed(why.to_owned()));
        }
        serde_json::from_str(line)
            .map(|shown| LabReply::Shown(Box::new(shown)))
            .map_err(|e| ProtocolError::GarbledReply {
                line: shortened(line),
                reason: e.to_string(),
            })
    }
}

/// What the daemon says once on its stdout before it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Startup {
    /// The lab is up and the socket listens.
    Ready,
    /// The lab could not be built: why.
    Failed(String),
}

impl Startup {
    /// The line, without its newline.
    pub fn encode(&self) -> String {
        match self {
            Startup::Ready => READY.to_owned(),
            Startup::Failed(why) => format!("{ERROR_PREFIX}{}", one_line(why)),
        }
    }

    /// The daemon's first line; an empty one is a daemon that exited without a word.
    pub fn decode(line: &str) -> Result<Self, ProtocolError> {
        match line.trim() {
            READY => Ok(Startup::Ready),
            "" => Err(ProtocolError::Silent),
            other => match other.strip_prefix(ERROR_PREFIX) {
                Some(why) => Ok(Startup::Failed(why.to_owned())),
                None => Err(ProtocolError::GarbledStartup(shortened(other))),
            },
        }
    }
}

/// A message that is not one of the protocol's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("unknown request '{0}' (a lab daemon answers show and down)")]
    UnknownRequest(String),
    #[error("unreadable answer '{line}': {reason}")]
    GarbledReply { line: String, reason: String },
    #[error("the lab daemon said '{0}' instead of ready")]
    GarbledStartup(String),
    #[error("the lab daemon exited without a word")]
    Silent,
}

/// Why a request to a lab's daemon got no answer it could use.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("no lab named {name} (see tcplab lab list)")]
    NoSuchLab {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("lab {name} is a leftover of a dead process (run tcplab lab gc)")]
    Leftover {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("lab {name} does not answer")]
    NoAnswer {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("lab {name}: {why}")]
    Failed { name: String, why: String },
    #[error("lab {name}: {source}")]
    Protocol {
        name: String,
        #[source]
        source: ProtocolError,
    },
    #[error("lab {name} answered {request} with '{reply}'")]
    Unexpected {
        name: String,
        request: &'static str,
        reply: String,
    },
}

/// Lab `name` as its daemon shows it now.
pub fn show(name: &str) -> Result<LabShown, AskError> {
    match ask(name, LabRequest::Show)? {
        LabReply::Shown(shown) => Ok(*shown),
        other => Err(unexpected(name, LabRequest::Show, &other)),
    }
}

/// Has lab `name`'s daemon take the lab down, and waits for its word that it is.
pub fn down(name: &str) -> Result<(), AskError> {
    match ask(name, LabRequest::Down)? {
        LabReply::Down => Ok(()),
        other => Err(unexpected(name, LabRequest::Down, &other)),
    }
}

fn unexpected(name: &str, request: LabRequest, reply: &LabReply) -> AskError {
    AskError::Unexpected {
        name: name.to_owned(),
        request: request.word(),
        reply: shortened(&reply.encode()),
    }
}

/// Sends one request to lab `name`'s daemon and reads its reply; a reply that says it
/// failed is an error.
fn ask(name: &str, request: LabRequest) -> Result<LabReply, AskError> {
    let io_error = |source| AskError::NoAnswer {
        name: name.to_owned(),
        source,
    };
    let socket = registry::socket_path(name).map_err(io_error)?;
    let mut stream = UnixStream::connect(socket).map_err(|source| {
        let name = name.to_owned();
        match registry::get(&name) {
            Ok(Some(entry)) if !registry::pid_alive(entry.pid) => {
                AskError::Leftover { name, source }
            }
            Ok(Some(_)) => AskError::NoAnswer { name, source },
            _ => AskError::NoSuchLab { name, source },
        }
    })?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(io_error)?;
    writeln!(stream, "{}", request.word()).map_err(io_error)?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(io_error)?;
    match LabReply::decode(&line) {
        Ok(LabReply::Failed(why)) => Err(AskError::Failed {
            name: name.to_owned(),
            why,
        }),
        Ok(reply) => Ok(reply),
        Err(source) => Err(AskError::Protocol {
            name: name.to_owned(),
            source,
        }),
    }
}

/// Why the daemon stopped serving in failure.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("waiting for requests: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Down(#[from] LabError),
}

/// What a daemon's requests act on: its lab, or a stand-in in tests.
trait Served {
    fn shown(&self) -> Result<LabShown, LabError>;
}

impl Served for Lab {
    fn shown(&self) -> Result<LabShown, LabError> {
        let stats = self.stats()?;
        Ok(LabShown::new(&self.entry, stats.up, stats.down))
    }
}

/// What the daemon does about one request line.
#[derive(Debug, PartialEq)]
enum Handling {
    /// Replies at once and serves on.
    Reply(LabReply),
    /// Takes the lab down, replies, and stops.
    GoDown,
}

/// The daemon's handling of `line`: a garbled or unknown request is refused with why.
fn handle(line: &str, lab: &dyn Served) -> Handling {
    match LabRequest::decode(line) {
        Ok(LabRequest::Show) => Handling::Reply(match lab.shown() {
            Ok(shown) => LabReply::Shown(Box::new(shown)),
            Err(e) => LabReply::Failed(e.to_string()),
        }),
        Ok(LabRequest::Down) => Handling::GoDown,
        Err(e) => Handling::Reply(LabReply::Failed(e.to_string())),
    }
}

/// The reply to `down` once the lab's teardown ended as `result`.
fn down_reply<T>(result: &Result<T, LabError>) -> LabReply {
    match result {
        Ok(_) => LabReply::Down,
        Err(e) => LabReply::Failed(e.to_string()),
    }
}

/// Answers requests about `lab` on `listener` until a `down` request, `stop`, or the
/// lab's emulator stopping; the lab is down when it returns.
pub fn serve(lab: Lab, listener: &UnixListener, stop: &AtomicBool) -> Result<(), ServeError> {
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) && lab.is_running() {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                poll::wait_for(listener, libc::POLLIN, 100)?;
                continue;
            }
            Err(_) => continue,
        };
        // A client that fails here only loses its own answer: the lab serves on.
        let Ok(line) = read_request(&stream) else {
            continue;
        };
        match handle(&line, &lab) {
            Handling::Reply(reply) => {
                let _ = writeln!(stream, "{}", reply.encode());
            }
            Handling::GoDown => {
                let result = lab.down();
                let _ = writeln!(stream, "{}", down_reply(&result).encode());
                return result.map(drop).map_err(ServeError::Down);
            }
        }
    }
    lab.down()?;
    Ok(())
}

/// One request line from a client, waited for at most [`ANSWER_TIMEOUT`].
fn read_request(stream: &UnixStream) -> io::Result<String> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line)
}

/// `text` on one line: a reply is read up to its first newline.
fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}

/// At most 80 characters of `text`, for an error that quotes what it could not read.
fn shortened(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> LabEntry {
        let host = |ns: &str, addr: &str, access: Option<&str>| HostEntry {
            ns: ns.to_owned(),
            addr: addr.to_owned(),
            addr6: format!("fd00::{}", addr.rsplit('.').next().unwrap()),
            access: access.map(str::to_owned),
        };
        LabEntry {
            name: "wan".to_owned(),
            pid: 4242,
            path: "rtt 20ms rate 100mbit seed 7".to_owned(),
            server: host("tl-wan-s", "10.77.0.1", None),
            clients: vec![
                host("tl-wan-c", "10.77.1.1", Some("rtt 5ms")),
                host("tl-wan-c2", "10.77.2.1", None),
            ],
            created_unix_us: 1_700_000_000_000_000,
            topology: None,
        }
    }

    fn shown() -> LabShown {
        let mut up = DirectionStats {
            realtime: true,
            ..Default::default()
        };
        up.lateness.packets = 12;
        LabShown::new(&entry(), up, DirectionStats::default())
    }

    /// A lab stand-in whose counters can or cannot be read.
    struct StandIn(Result<LabShown, String>);

    impl Served for StandIn {
        fn shown(&self) -> Result<LabShown, LabError> {
            self.0.clone().map_err(LabError::Privilege)
        }
    }

    #[test]
    fn requests_round_trip_through_their_words() {
        for request in LabRequest::ALL {
            assert_eq!(LabRequest::decode(request.word()), Ok(request));
            let line = format!("{}\n", request.word());
            assert_eq!(LabRequest::decode(&line), Ok(request));
        }
        assert_eq!(LabRequest::Show.word(), "show");
        assert_eq!(LabRequest::Down.word(), "down");
    }

    #[test]
    fn an_unknown_or_garbled_request_is_refused_naming_it() {
        for (line, word) in [
            ("shw\n", "shw"),
            ("SHOW", "SHOW"),
            ("show down", "show down"),
            ("", ""),
            ("\u{1b}[A", "\u{1b}[A"),
        ] {
            let e = LabRequest::decode(line).unwrap_err();
            assert_eq!(e, ProtocolError::UnknownRequest(word.to_owned()));
            assert_eq!(
                e.to_string(),
                format!("unknown request '{word}' (a lab daemon answers show and down)")
            );
        }
    }

    #[test]
    fn replies_round_trip_through_their_lines() {
        for reply in [
            LabReply::Shown(Box::new(shown())),
            LabReply::Down,
            LabReply::Failed("cannot read the links' counters".to_owned()),
        ] {
            let line = reply.encode();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(LabReply::decode(&format!("{line}\n")), Ok(reply));
        }
        assert_eq!(LabReply::Down.encode(), "ok");
        assert_eq!(LabReply::Failed("why".into()).encode(), "error: why");
    }

    #[test]
    fn the_shown_document_has_the_fields_scripts_read() {
        let doc: serde_json::Value =
            serde_json::from_str(&LabReply::Shown(Box::new(shown())).encode()).unwrap();
        assert_eq!(doc["path"], "rtt 20ms rate 100mbit seed 7");
        assert_eq!(doc["lab"]["pid"], 4242);
        assert_eq!(doc["server"]["ns"], "tl-wan-s");
        assert_eq!(doc["client"]["addr"], "10.77.1.1");
        assert_eq!(doc["client"]["access"], "rtt 5ms");
        assert_eq!(doc["clients"].as_array().unwrap().len(), 2);
        assert_eq!(doc["up"]["lateness"]["packets"], 12);
        assert!(doc["down"]["links"].is_array());
    }

    #[test]
    fn a_failure_spanning_lines_stays_one_line() {
        let reply = LabReply::Failed("first\nsecond".to_owned());
        assert_eq!(reply.encode(), "error: first second");
        let startup = Startup::Failed("no\nroot".to_owned());
        assert_eq!(startup.encode(), "error: no root");
    }

    #[test]
    fn a_garbled_reply_is_an_error_quoting_it_shortly() {
        let e = LabReply::decode("{\"lab\": 3}").unwrap_err();
        assert!(
            matches!(&e, ProtocolError::GarbledReply { line, .. } if line == "{\"lab\": 3}"),
            "{e:?}"
        );
        let long = "x".repeat(200);
        let ProtocolError::GarbledReply { line, .. } = LabReply::decode(&long).unwrap_err() else {
            panic!("not a garbled reply");
        };
        assert_eq!(line, format!("{}…", "x".repeat(80)));
    }

    #[test]
    fn startup_lines_round_trip_and_silence_is_an_error() {
        for startup in [
            Startup::Ready,
            Startup::Failed("cannot build the lab".into()),
        ] {
            assert_eq!(
                Startup::decode(&format!("{}\n", startup.encode())),
                Ok(startup)
            );
        }
        assert_eq!(Startup::decode(""), Err(ProtocolError::Silent));
        assert_eq!(
            Startup::decode("readyish"),
            Err(ProtocolError::GarbledStartup("readyish".to_owned()))
        );
        assert_eq!(
            ProtocolError::Silent.to_string(),
            "the lab daemon exited without a word"
        );
    }

    #[test]
    fn show_replies_with_the_lab_or_why_it_cannot() {
        let lab = StandIn(Ok(shown()));
        assert_eq!(
            handle("show\n", &lab),
            Handling::Reply(LabReply::Shown(Box::new(shown())))
        );
        let broken = StandIn(Err("netlink refused".to_owned()));
        assert_eq!(
            handle("show\n", &broken),
            Handling::Reply(LabReply::Failed("netlink refused".to_owned()))
        );
    }

    #[test]
    fn down_goes_down_and_an_unknown_request_is_refused_in_the_reply() {
        let lab = StandIn(Ok(shown()));
        assert_eq!(handle("down\n", &lab), Handling::GoDown);
        assert_eq!(
            handle("reboot\n", &lab),
            Handling::Reply(LabReply::Failed(
                "unknown request 'reboot' (a lab daemon answers show and down)".to_owned()
            ))
        );
    }

    #[test]
    fn down_replies_ok_or_why_the_teardown_failed() {
        assert_eq!(down_reply(&Ok::<(), LabError>(())), LabReply::Down);
        let failed: Result<(), LabError> = Err(LabError::Privilege("busy".to_owned()));
        assert_eq!(down_reply(&failed), LabReply::Failed("busy".to_owned()));
    }

    #[test]
    fn a_client_reads_the_error_a_daemon_refuses_with() {
        let e = AskError::Failed {
            name: "wan".to_owned(),
            why: "unknown request 'reboot'".to_owned(),
        };
        assert_eq!(e.to_string(), "lab wan: unknown request 'reboot'");
        let e = unexpected("wan", LabRequest::Down, &LabReply::Shown(Box::new(shown())));
        assert!(
            e.to_string().starts_with("lab wan answered down with '{"),
            "{e}"
        );
    }
}
