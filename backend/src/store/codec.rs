//! How values sit in the database's text columns: JSON (`text`/`parse`), and an
//! enum by its snake_case name (`name`/`named`), as serde writes them.

/// `v` as a JSON column (`null` if it cannot be written).
pub(super) fn text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}

/// A JSON column read back.
pub(super) fn parse<T: serde::de::DeserializeOwned>(s: &str) -> rusqlite::Result<T> {
    serde_json::from_str(s).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// An enum's snake_case name, as serde writes it.
pub(crate) fn name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// An enum stored by its snake_case name.
pub(super) fn named<T: serde::de::DeserializeOwned>(s: &str) -> rusqlite::Result<T> {
    parse(&serde_json::Value::String(s.to_owned()).to_string())
}
