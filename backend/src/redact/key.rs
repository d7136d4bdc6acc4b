//! The redaction key: 32 random bytes in [`KEY_FILE`] (mode 0600) beside the
//! database, made once and kept, so that ids stay the same across restarts of
//! drainwatch; a key from the clock where the OS gives no randomness.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::KEY_LEN;

/// The key's file, in the store's folder.
pub const KEY_FILE: &str = "redact.key";

/// Why the key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not a redaction key ({len} bytes, not {KEY_LEN}); delete it to make a new one"
    )]
    Damaged { path: PathBuf, len: usize },
    #[error("no randomness from the OS for the redaction key: {0}")]
    Random(String),
}

pub(super) fn random_key() -> Result<[u8; KEY_LEN], RedactError> {
    let mut key = [0u8; KEY_LEN];
    getrandom::fill(&mut key).map_err(|e| RedactError::Random(e.to_string()))?;
    Ok(key)
}

/// The key in `dir/redact.key`, made (32 random bytes, mode 0600) if there is none.
pub fn load_key(dir: &Path) -> Result<[u8; KEY_LEN], RedactError> {
    let path = dir.join(KEY_FILE);
    if let Some(key) = read_key(&path)? {
        return Ok(key);
    }
    let key = random_key()?;
    let tmp = dir.join(format!("{KEY_FILE}.{}.tmp", std::process::id()));
    let write_err = |source| RedactError::Write {
        path: path.clone(),
        source,
    };
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&key).and_then(|()| f.sync_all()));
    // A link never replaces a key another drainwatch made meanwhile.
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_key(&path)?.ok_or_else(|| write_err(e))
        }
        Err(e) => Err(write_err(e)),
    }
}

/// The key in `path`, if the file exists; its mode is narrowed to 0600.
fn read_key(path: &Path) -> Result<Option<[u8; KEY_LEN]>, RedactError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(RedactError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let key: [u8; KEY_LEN] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| RedactError::Damaged {
            path: path.to_owned(),
            len: bytes.len(),
        })?;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), "the redaction key was readable by others; narrowing it to 0600");
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
    Ok(Some(key))
}

/// A last-resort key when the OS gives no randomness.
pub(super) fn clock_key() -> [u8; KEY_LEN] {
    use sha2::Digest;
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}:{}", h.finish());
    let mut key = [0u8; KEY_LEN];
    key.copy_from_slice(&sha2::Sha256::digest(seed.as_bytes()));
    key
}
