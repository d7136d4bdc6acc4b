//! Reading the socket's messages in one pass.
//!
//! Messages are tagged by a `type` field, which drainwatch always writes first
//! (`{"type":"sample",…}`). serde's derived reader for such enums cannot know
//! that: it buffers every message into a generic tree and reads each type from
//! the tree, which compiles a second reader for every shared type into the
//! bundle. Here the tag is read from the front of the text and the rest of the
//! object goes straight to its type's reader, the same one the REST bodies use.
//! The tests check every message fixture reads exactly as serde's derived reader
//! reads it.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use shared::auth::Presence;
use shared::{ErrorCode, ServerMsg};

use crate::state::Msg;

/// Splits `{"type":"<tag>",<rest>}` into the tag and `{<rest>}`.
fn split_tag(text: &str) -> Option<(&str, String)> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"type\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let (tag, rest) = (&rest[..end], rest[end + 1..].trim_start());
    if tag.contains('\\') {
        return None;
    }
    let body = match rest.strip_prefix(',') {
        Some(fields) => format!("{{{fields}"),
        None if rest.starts_with('}') => "{}".to_owned(),
        None => return None,
    };
    Some((tag, body))
}

fn read<T: DeserializeOwned>(body: &str) -> Result<T, String> {
    crate::json::from_str(body).map_err(|e| e.to_string())
}

#[derive(Deserialize)]
struct Hello {
    protocol_version: u32,
    server_version: String,
}

#[derive(Deserialize)]
struct Clients {
    clients: Vec<Presence>,
}

#[derive(Deserialize)]
struct Pong {
    nonce: u64,
}

/// A `timeline` message, read as news that its restart's timeline grew (the
/// agent draws the chart): its points are skipped.
#[derive(Deserialize)]
struct Timeline {
    restart_id: i64,
}

#[derive(Deserialize)]
struct CampaignStep {
    campaign_id: i64,
    step: crate::state::StepChanged,
}

#[derive(Deserialize)]
struct Error {
    code: ErrorCode,
    message: String,
}

/// One message from `/ws`.
pub(crate) fn parse_msg(text: &str) -> Result<Msg, String> {
    let Some((tag, body)) = split_tag(text) else {
        return Err("not a tagged JSON object".to_owned());
    };
    let body = body.as_str();
    Ok(match tag {
        "hello" => {
            let h: Hello = read(body)?;
            ServerMsg::Hello {
                protocol_version: h.protocol_version,
                server_version: h.server_version,
            }
        }
        "snapshot" => ServerMsg::Snapshot(read(body)?),
        "sample" => ServerMsg::Sample(read(body)?),
        "server" => ServerMsg::Server(read(body)?),
        "restart" => ServerMsg::Restart(read(body)?),
        "timeline" => {
            let t: Timeline = read(body)?;
            ServerMsg::Timeline {
                restart_id: t.restart_id,
                points: Vec::new(),
            }
        }
        "bench" => ServerMsg::Bench(read(body)?),
        "bench_run" => ServerMsg::BenchRun(read(body)?),
        "presence" => ServerMsg::Presence {
            clients: read::<Clients>(body)?.clients,
        },
        "campaign" => ServerMsg::Campaign(read(body)?),
        "campaign_step" => {
            let c: CampaignStep = read(body)?;
            ServerMsg::CampaignStep {
                campaign_id: c.campaign_id,
                step: c.step,
            }
        }
        "pong" => ServerMsg::Pong {
            nonce: read::<Pong>(body)?.nonce,
        },
        "error" => {
            let e: Error = read(body)?;
            ServerMsg::Error {
                code: e.code,
                message: e.message,
            }
        }
        other => return Err(format!("unknown message type `{other}`")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message fixture, as drainwatch writes it.
    const FIXTURES: [&str; 13] = [
        include_str!("../../shared/tests/fixtures/hello.json"),
        include_str!("../../shared/tests/fixtures/snapshot.json"),
        include_str!("../../shared/tests/fixtures/sample.json"),
        include_str!("../../shared/tests/fixtures/server.json"),
        include_str!("../../shared/tests/fixtures/restart.json"),
        include_str!("../../shared/tests/fixtures/timeline.json"),
        include_str!("../../shared/tests/fixtures/bench.json"),
        include_str!("../../shared/tests/fixtures/bench_run.json"),
        include_str!("../../shared/tests/fixtures/presence.json"),
        include_str!("../../shared/tests/fixtures/pong.json"),
        include_str!("../../shared/tests/fixtures/error.json"),
        include_str!("../../shared/tests/fixtures/campaign.json"),
        include_str!("../../shared/tests/fixtures/campaign_step.json"),
    ];

    #[test]
    fn every_fixture_reads_as_serde_reads_it() {
        for text in FIXTURES {
            let ours = parse_msg(text).unwrap_or_else(|e| panic!("{e}: {text}"));
            let mut serdes: Msg = serde_json::from_str(text).expect("fixture");
            // A timeline message is read as news of its restart only.
            if let ServerMsg::Timeline { points, .. } = &mut serdes {
                assert!(!points.is_empty(), "the fixture has points");
                points.clear();
            }
            assert_eq!(format!("{ours:?}"), format!("{serdes:?}"));
            // The same message as the server writes it on the wire (compact).
            let full: ServerMsg = serde_json::from_str(text).expect("fixture");
            let compact = serde_json::to_string(&full).expect("json");
            let ours = parse_msg(&compact).expect("compact");
            assert_eq!(format!("{ours:?}"), format!("{serdes:?}"));
        }
    }

    #[test]
    fn what_is_not_a_message_is_an_error() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"seq":1,"type":"sample"}"#,
            r#"{"type":"nonsense","x":1}"#,
            r#"{"type":"pong"}"#,
            r#"{"type":"pong","nonce":"x"}"#,
            r#"{"type":"po\"ng","nonce":1}"#,
            r#"{"type":"pong" "nonce":1}"#,
        ] {
            assert!(parse_msg(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            parse_msg(r#"{ "type" : "pong" , "nonce" : 7 }"#),
            Ok(ServerMsg::Pong { nonce: 7 })
        ));
    }
}
