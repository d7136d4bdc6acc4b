//! Secrets and how they are compared: new random ones, their SHA-256 (all that
//! is kept of a token) and a comparison whose time does not say where two
//! differ.

use sha2::{Digest, Sha256};

/// A new random secret: `dw_` and 64 hex digits (256 bits).
pub fn new_secret() -> anyhow::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(format!("dw_{}", hex(&b)))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Equal in time independent of where they differ.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
