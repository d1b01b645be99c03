//! The pre-shared key of `tcplab serve --key-file` and the challenge–response that proves
//! it, both ways, before anything else happens on a control connection.
//!
//! After the hellos:
//! 1. server → `Challenge{Ns}`: 32 random bytes, fresh for every connection, so an
//!    answer recorded on one connection is worthless on the next (no replay);
//! 2. client → `Auth{Nc, proof}`, proof = HMAC-SHA256(key, "tcplab-auth-client" ‖ Ns ‖ Nc),
//!    or no proof when the client has no key;
//! 3. server → `Welcome{proof}`, proof = HMAC-SHA256(key, "tcplab-auth-server" ‖ Nc ‖ Ns):
//!    the server holds the key too. Or `Refused{reason}`. The Welcome also says when
//!    `Auth` arrived and when it left, on the server's clock, and that clock's boot: the
//!    round trip is the test's first clock exchange (`crate::client`).
//!
//! A server without a key welcomes without a proof, and a client that has a key refuses
//! to go on then: such a server could be anyone. Proofs are compared in constant time
//! (`hmac`'s `verify_slice`). The nonces and the test cookie come from `rand`'s
//! thread generator, a CSPRNG seeded by the OS.
//!
//! This authenticates the ends; it does not encrypt or sign what follows, which a
//! throughput test does not need (see docs/security.md).

use std::fmt;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

use tcplab_analysis::clock::Exchange;
use tcplab_sys::clock::monotonic_us;
use tcplab_sys::sysctl;

use crate::protocol::{self, Message, ProtocolError, ServerClock};
use crate::server::Rejected;
use crate::TrafficError;

pub const NONCE_LEN: usize = 32;
/// Shorter keys are too easy to guess; 16 random bytes are beyond any brute force.
pub const MIN_KEY_LEN: usize = 16;
/// A longer "key" is almost certainly the wrong file.
pub const MAX_KEY_LEN: usize = 4096;

const CLIENT_LABEL: &[u8] = b"tcplab-auth-client";
const SERVER_LABEL: &[u8] = b"tcplab-auth-server";

pub type Nonce = [u8; NONCE_LEN];

/// The key both ends hold. Its bytes never appear in `Debug` output or logs.
#[derive(Clone)]
pub struct PreSharedKey(Vec<u8>);

impl fmt::Debug for PreSharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PreSharedKey({} bytes)", self.0.len())
    }
}

impl PreSharedKey {
    pub fn new(bytes: Vec<u8>) -> Result<PreSharedKey, String> {
        if bytes.is_empty() {
            return Err("the key is empty".into());
        }
        if bytes.len() < MIN_KEY_LEN {
            return Err(format!(
                "the key has {} bytes, fewer than {MIN_KEY_LEN}",
                bytes.len()
            ));
        }
        if bytes.len() > MAX_KEY_LEN {
            return Err(format!("the key is longer than {MAX_KEY_LEN} bytes"));
        }
        Ok(PreSharedKey(bytes))
    }

    /// What a client sends to prove the key against the server's nonce.
    pub fn client_proof(&self, server: &Nonce, client: &Nonce) -> Vec<u8> {
        self.mac(CLIENT_LABEL, server, client)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// What the server sends back to prove it holds the key too.
    pub fn server_proof(&self, server: &Nonce, client: &Nonce) -> Vec<u8> {
        self.mac(SERVER_LABEL, client, server)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Checks a client's proof in constant time.
    pub fn verify_client(&self, server: &Nonce, client: &Nonce, proof: &[u8]) -> bool {
        self.mac(CLIENT_LABEL, server, client)
            .verify_slice(proof)
            .is_ok()
    }

    /// Checks the server's proof in constant time.
    pub fn verify_server(&self, server: &Nonce, client: &Nonce, proof: &[u8]) -> bool {
        self.mac(SERVER_LABEL, client, server)
            .verify_slice(proof)
            .is_ok()
    }

    /// HMAC(key, label ‖ first ‖ second): the labels keep a client's proof from ever
    /// passing as a server's, and the fixed-length nonces make the message unambiguous.
    fn mac(&self, label: &[u8], first: &Nonce, second: &Nonce) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key");
        mac.update(label);
        mac.update(first);
        mac.update(second);
        mac
    }
}

/// A key file that cannot be used, named in one line.
#[derive(Debug, thiserror::Error)]
#[error("key file {path}: {reason}")]
pub struct KeyFileError {
    pub path: String,
    pub reason: String,
}

/// Reads a key file: its bytes are the key, less one trailing newline (`echo` and
/// editors add one).
pub fn read_key_file(path: &Path) -> Result<PreSharedKey, KeyFileError> {
    let error = |reason: String| KeyFileError {
        path: path.display().to_string(),
        reason,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEY_LEN as u64 + 2).read_to_end(&mut bytes))
        .map_err(|e| error(e.to_string()))?;
    let key = bytes
        .strip_suffix(b"\r\n")
        .or_else(|| bytes.strip_suffix(b"\n"))
        .unwrap_or(&bytes);
    PreSharedKey::new(key.to_vec()).map_err(error)
}

/// Whether users other than the owner may read the file: worth a warning, since whoever
/// reads the key may use the server.
pub fn readable_by_others(path: &Path) -> io::Result<bool> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o044 != 0)
}

pub fn nonce() -> Nonce {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    nonce
}

/// The server's first step, right after its hello (it need not wait for the client's):
/// the challenge, whose nonce [`check_answer`] takes.
pub fn send_challenge(conn: &mut impl Write) -> Result<Nonce, ProtocolError> {
    let server_nonce = nonce();
    protocol::send(
        conn,
        &Message::Challenge {
            nonce: protocol::to_hex(&server_nonce),
        },
    )?;
    Ok(server_nonce)
}

/// The server's second step, after the client's hello: reads the client's answer to
/// `server_nonce` and, when `key` is set, admits it only with a right proof; welcomes
/// it with the server's clock. Reads no message longer than `max_message`.
pub fn check_answer(
    conn: &mut (impl Read + Write),
    server_nonce: &Nonce,
    key: Option<&PreSharedKey>,
    max_message: usize,
) -> Result<(), Rejected> {
    let boot_id = sysctl::boot_id();
    let (client_nonce, proof) = match protocol::recv(conn, max_message)? {
        Message::Auth { nonce, proof } => (protocol::parse_hex::<NONCE_LEN>(&nonce)?, proof),
        other => {
            return Err(ProtocolError::Malformed(format!("expected Auth, got {other:?}")).into())
        }
    };
    let recv_us = monotonic_us();
    let welcome = |proof| Message::Welcome {
        proof,
        clock: Some(ServerClock {
            boot_id,
            recv_us,
            send_us: monotonic_us(),
        }),
    };
    let Some(key) = key else {
        return Ok(protocol::send(conn, &welcome(None))?);
    };
    let Some(proof) = proof else {
        return Err(Rejected::Refused(
            "this server requires its pre-shared key: give tcplab run --key-file FILE".into(),
        ));
    };
    let proof = protocol::parse_hex::<{ PROOF_LEN }>(&proof)?;
    if !key.verify_client(server_nonce, &client_nonce, &proof) {
        return Err(Rejected::Refused(
            "wrong key: the proof does not match this server's pre-shared key".into(),
        ));
    }
    let proof = protocol::to_hex(&key.server_proof(server_nonce, &client_nonce));
    protocol::send(conn, &welcome(Some(proof)))?;
    Ok(())
}

/// Bytes of an HMAC-SHA256 proof.
const PROOF_LEN: usize = 32;

/// The server's clock as its Welcome said it: the Auth/Welcome round trip as a clock
/// exchange, and the boot of the server's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WelcomeClock {
    pub exchange: Exchange,
    pub boot_id: String,
}

/// The client's side, right after the hellos: answers the challenge (with a proof when
/// it has a key) and, with a key, accepts only a server that proves the key too. Returns
/// the server's clock where its Welcome says it.
pub fn answer_challenge(
    conn: &mut (impl Read + Write),
    key: Option<&PreSharedKey>,
) -> Result<Option<WelcomeClock>, TrafficError> {
    let server_nonce = match crate::client::answer(conn)? {
        Message::Challenge { nonce } => protocol::parse_hex::<NONCE_LEN>(&nonce)?,
        other => {
            return Err(
                ProtocolError::Malformed(format!("expected Challenge, got {other:?}")).into(),
            )
        }
    };
    let client_nonce = nonce();
    let client_send_us = monotonic_us();
    protocol::send(
        conn,
        &Message::Auth {
            nonce: protocol::to_hex(&client_nonce),
            proof: key.map(|k| protocol::to_hex(&k.client_proof(&server_nonce, &client_nonce))),
        },
    )?;
    let (server_proof, clock) = match crate::client::answer(conn)? {
        Message::Welcome { proof, clock } => (proof, clock),
        other => {
            return Err(ProtocolError::Malformed(format!("expected Welcome, got {other:?}")).into())
        }
    };
    let clock = clock.map(|c| WelcomeClock {
        exchange: Exchange {
            client_send_us,
            server_recv_us: c.recv_us,
            server_send_us: c.send_us,
            client_recv_us: monotonic_us(),
        },
        boot_id: c.boot_id,
    });
    let Some(key) = key else { return Ok(clock) };
    let Some(proof) = server_proof else {
        return Err(TrafficError::ServerNotProven(
            "it has no key (it serves without --key-file), so it may not be the server \
             you meant; leave out --key-file to test against it anyway"
                .into(),
        ));
    };
    let proof = protocol::parse_hex::<{ PROOF_LEN }>(&proof)?;
    if !key.verify_server(&server_nonce, &client_nonce, &proof) {
        return Err(TrafficError::ServerNotProven(
            "its proof does not match the key".into(),
        ));
    }
    Ok(clock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread;

    fn key(byte: u8) -> PreSharedKey {
        PreSharedKey::new(vec![byte; 32]).unwrap()
    }

    /// The server's two steps back to back.
    fn challenge_client(
        conn: &mut (impl Read + Write),
        key: Option<&PreSharedKey>,
        max_message: usize,
    ) -> Result<(), Rejected> {
        let nonce = send_challenge(conn)?;
        check_answer(conn, &nonce, key, max_message)
    }

    #[test]
    fn proofs_verify_only_with_the_same_key_nonces_and_direction() {
        let (k, other) = (key(1), key(2));
        let (ns, nc) = (nonce(), nonce());
        let client = k.client_proof(&ns, &nc);
        assert!(k.verify_client(&ns, &nc, &client));
        assert!(!other.verify_client(&ns, &nc, &client));
        // Another connection's nonce: a recorded proof does not replay.
        assert!(!k.verify_client(&nonce(), &nc, &client));
        // A client's proof never passes as the server's, nor the other way round.
        assert!(!k.verify_server(&ns, &nc, &client));
        assert!(!k.verify_client(&ns, &nc, &k.server_proof(&ns, &nc)));
        assert!(k.verify_server(&ns, &nc, &k.server_proof(&ns, &nc)));
        // A truncated proof is no proof.
        assert!(!k.verify_client(&ns, &nc, &client[..16]));
    }

    #[test]
    fn the_proof_is_hmac_sha256_of_the_label_and_nonces() {
        // HMAC-SHA256 with key "0123456789abcdef" of "tcplab-auth-client" followed by
        // 32 bytes of 0x00 and 32 bytes of 0xff, from Python's hmac module.
        let k = PreSharedKey::new(b"0123456789abcdef".to_vec()).unwrap();
        let proof = k.client_proof(&[0; 32], &[0xff; 32]);
        assert_eq!(
            protocol::to_hex(&proof),
            "883431c1d998c17d63d986759ac9549bb1d2f664e3b95489b814228a8f6f80ce"
        );
    }

    #[test]
    fn key_files_trim_one_newline_and_refuse_short_or_empty_keys() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let key = read_key_file(&write("ok", b"0123456789abcdef\n")).unwrap();
        assert_eq!(key.0, b"0123456789abcdef");
        let key = read_key_file(&write("crlf", b"0123456789abcdef\r\n")).unwrap();
        assert_eq!(key.0.len(), 16);
        let err = read_key_file(&write("empty", b"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("the key is empty"), "{err}");
        let err = read_key_file(&write("short", b"secret\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("short") && err.contains("fewer than 16"),
            "{err}"
        );
        let err = read_key_file(&write("long", &[b'k'; MAX_KEY_LEN + 1]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("longer than"), "{err}");
        let err = read_key_file(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("key file ") && err.contains("missing"),
            "{err}"
        );
        assert!(format!("{key:?}").contains("16 bytes"));
    }

    #[test]
    fn key_files_readable_by_others_are_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, b"0123456789abcdef").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!readable_by_others(&path).unwrap());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(readable_by_others(&path).unwrap());
    }

    /// Runs both sides of the exchange over a socket pair.
    fn exchange(
        server_key: Option<PreSharedKey>,
        client_key: Option<PreSharedKey>,
    ) -> (
        Result<(), Rejected>,
        Result<Option<WelcomeClock>, TrafficError>,
    ) {
        let (mut server_end, mut client_end) = UnixStream::pair().unwrap();
        let server = thread::spawn(move || {
            let outcome = challenge_client(&mut server_end, server_key.as_ref(), 1 << 16);
            if let Err(Rejected::Refused(reason)) = &outcome {
                protocol::send(
                    &mut server_end,
                    &Message::Refused {
                        reason: reason.clone(),
                    },
                )
                .unwrap();
            }
            outcome
        });
        let client = answer_challenge(&mut client_end, client_key.as_ref());
        (server.join().unwrap(), client)
    }

    fn refusal(outcome: &Result<(), Rejected>) -> &str {
        match outcome {
            Err(Rejected::Refused(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_right_key_admits_both_ways() {
        let (server, client) = exchange(Some(key(7)), Some(key(7)));
        assert!(server.is_ok(), "{server:?}");
        assert!(client.is_ok(), "{client:?}");
    }

    #[test]
    fn the_welcome_is_a_clock_exchange_on_the_servers_boot() {
        let (server, client) = exchange(None, None);
        assert!(server.is_ok(), "{server:?}");
        let clock = client.unwrap().expect("the server's clock");
        assert_eq!(clock.boot_id, sysctl::boot_id());
        // One clock: the exchange's round trip is real and its offset within it of 0.
        let offset = tcplab_analysis::clock::estimate(&[clock.exchange]).unwrap();
        assert!(clock.exchange.rtt_us().is_some(), "{clock:?}");
        assert!(
            offset.same_clock(&clock.boot_id, &sysctl::boot_id()),
            "{offset:?}"
        );
    }

    #[test]
    fn a_wrong_or_missing_key_is_refused_and_the_client_hears_why() {
        let (server, client) = exchange(Some(key(7)), Some(key(8)));
        assert!(refusal(&server).contains("wrong key"));
        assert!(matches!(client, Err(TrafficError::Refused(r)) if r.contains("wrong key")));

        let (server, client) = exchange(Some(key(7)), None);
        assert!(refusal(&server).contains("--key-file"));
        assert!(matches!(client, Err(TrafficError::Refused(r)) if r.contains("--key-file")));
    }

    #[test]
    fn a_client_with_a_key_does_not_trust_a_server_without_one() {
        let (server, client) = exchange(None, Some(key(7)));
        assert!(server.is_ok());
        assert!(matches!(client, Err(TrafficError::ServerNotProven(r)) if r.contains("no key")));
        let (server, client) = exchange(None, None);
        assert!(server.is_ok() && client.is_ok());
    }

    #[test]
    fn a_recorded_answer_does_not_replay_on_a_new_connection() {
        let k = key(7);
        // Record a genuine client's Auth on one connection…
        let (mut server_end, mut client_end) = UnixStream::pair().unwrap();
        let client = {
            let k = k.clone();
            thread::spawn(move || answer_challenge(&mut client_end, Some(&k)))
        };
        protocol::send(
            &mut server_end,
            &Message::Challenge {
                nonce: protocol::to_hex(&nonce()),
            },
        )
        .unwrap();
        let recorded = protocol::recv(&mut server_end, 1 << 16).unwrap();
        drop(server_end);
        let _ = client.join();
        // …and play it to the server on another.
        let (mut server_end, mut attacker) = UnixStream::pair().unwrap();
        let server = thread::spawn(move || challenge_client(&mut server_end, Some(&k), 1 << 16));
        protocol::recv(&mut attacker, 1 << 16).unwrap();
        protocol::send(&mut attacker, &recorded).unwrap();
        assert!(refusal(&server.join().unwrap()).contains("wrong key"));
    }
}
