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
//!    round trip is the test's first clock exchange (the client's handshake, [`crate::handshake`]).
//!
//! A server without a key welcomes without a proof, and a client that has a key refuses
//! to go on then: such a server could be anyone. Proofs are compared in constant time
//! (`hmac`'s `verify_slice`). The nonces and the test cookie come from `rand`'s
//! thread generator, a CSPRNG seeded by the OS.
//!
//! This authenticates the ends; it does not encrypt or sign what follows, which a
//! throughput test does not need (see docs/security.md).

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

use tcplab_analysis::clock::Exchange;

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

/// A fresh nonce from the OS-seeded CSPRNG.
pub fn nonce() -> Nonce {
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    nonce
}

/// Bytes of an HMAC-SHA256 proof.
pub const PROOF_LEN: usize = 32;

/// The server's clock as its Welcome said it: the Auth/Welcome round trip as a clock
/// exchange, and the boot of the server's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WelcomeClock {
    pub exchange: Exchange,
    pub boot_id: String,
}

impl PreSharedKey {
    /// The key's bytes, for tests of key files.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol;

    fn key(byte: u8) -> PreSharedKey {
        PreSharedKey::new(vec![byte; 32]).unwrap()
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
    fn keys_of_the_wrong_length_are_refused_and_never_shown() {
        assert_eq!(
            PreSharedKey::new(Vec::new()).unwrap_err(),
            "the key is empty"
        );
        assert!(PreSharedKey::new(vec![1; MIN_KEY_LEN - 1])
            .unwrap_err()
            .contains("fewer than 16"));
        assert!(PreSharedKey::new(vec![1; MAX_KEY_LEN + 1])
            .unwrap_err()
            .contains("longer than"));
        assert_eq!(format!("{:?}", key(3)), "PreSharedKey(32 bytes)");
    }
}
