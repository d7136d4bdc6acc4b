//! How the tagged enums are read: each from one flat struct.
//!
//! [`Failure`](crate::restart::Failure), [`NvmlStatus`](crate::NvmlStatus),
//! [`FlagChange`](crate::flags::FlagChange) and [`FlagSpec`](crate::flags::FlagSpec) are written as
//! one JSON object with a tag field (`"kind"`, `"state"`, `"change"`, `"type"`)
//! beside the variant's own fields. serde's derived reader for such an object
//! cannot read the fields before it knows the tag, so it buffers the whole object
//! into a generic tree and reads every variant again from that tree, a second
//! reader for each type inside, the browser's bundle's largest single part. Here
//! each is read (`#[serde(try_from)]`) as one struct beside its type that holds
//! every variant's fields, then checked against its tag: one reader, any field order, the same values. A field the
//! variant needs and the object lacks is refused by name, as serde's reader
//! refuses it; fields of other variants are ignored, as unknown fields are.
//! The writing side is serde's own, so the golden fixtures hold the wire format,
//! and `shared/tests/flat.rs` reads every variant both ways. This module holds
//! what those readers share.

use std::fmt;

/// Why a flat struct does not make its type.
#[derive(Debug)]
pub enum BadField {
    /// A field the variant needs and the object lacks.
    Missing(&'static str),
    /// An integer flag's bound that is a fraction or past `i64`.
    NotInteger(&'static str),
}

impl fmt::Display for BadField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(field) => write!(f, "missing field `{field}`"),
            Self::NotInteger(field) => write!(f, "`{field}` of an int flag is not an integer"),
        }
    }
}

pub(crate) fn need<T>(value: Option<T>, field: &'static str) -> Result<T, BadField> {
    value.ok_or(BadField::Missing(field))
}
