//! Reading names and values out of text by bytes: what may be a name, and the
//! value that follows a secret name (`=`, `:`, quoted, or after `--name `).
//! Every boundary found is an ASCII byte, so the caller may slice there.

pub(super) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// An option or variable name: name bytes only, with a letter in it.
pub(super) fn is_name(s: &str) -> bool {
    s.bytes().all(is_name_byte) && s.bytes().any(|b| b.is_ascii_alphabetic())
}

fn is_quote(b: u8) -> bool {
    b == b'"' || b == b'\''
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
        i += 1;
    }
    i
}

/// The value that follows the secret name at `b[start..end]`, if any: after
/// `=` or `:` (the name perhaps quoted), or after spaces for a `--name`.
pub(super) fn value_after(b: &[u8], start: usize, end: usize) -> Option<(usize, usize)> {
    let mut j = end;
    if start > 0 && is_quote(b[start - 1]) && b.get(j) == Some(&b[start - 1]) {
        j += 1;
    }
    let k = skip_ws(b, j);
    match b.get(k) {
        Some(b'=' | b':') => value_at(b, skip_ws(b, k + 1)),
        Some(_) if k > j && b[start..].starts_with(b"--") && !b[k..].starts_with(b"--") => {
            value_at(b, k)
        }
        _ => None,
    }
}

/// The value starting at `b[v]`: quoted (up to its closing quote) or bare (up
/// to a space or punctuation that ends it). Nothing for an empty one or `None`.
fn value_at(b: &[u8], v: usize) -> Option<(usize, usize)> {
    let q = *b.get(v)?;
    let (vs, ve) = if is_quote(q) {
        let close = b[v + 1..].iter().position(|&c| c == q);
        (v + 1, close.map_or(b.len(), |p| v + 1 + p))
    } else {
        let ends = |c: &u8| {
            c.is_ascii_whitespace()
                || matches!(c, b',' | b';' | b')' | b']' | b'}' | b'&' | b'"' | b'\'')
        };
        (v, b[v..].iter().position(ends).map_or(b.len(), |p| v + p))
    };
    let value = &b[vs..ve];
    (!value.is_empty() && value != b"None" && value != b"null").then_some((vs, ve))
}
