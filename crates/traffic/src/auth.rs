//! The pre-shared key of `tcplab serve --key-file`, read from its file. The key and
//! its challenge–response are `tcplab-proto`'s ([`tcplab_proto::auth`], re-exported
//! here); the handshake that proves it is `tcplab_proto::handshake::tcplab`'s.

use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub use tcplab_proto::auth::*;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_trim_one_newline_and_refuse_short_or_empty_keys() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let key = read_key_file(&write("ok", b"0123456789abcdef\n")).unwrap();
        assert_eq!(key.bytes(), b"0123456789abcdef");
        let key = read_key_file(&write("crlf", b"0123456789abcdef\r\n")).unwrap();
        assert_eq!(key.bytes().len(), 16);
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
}
