//! `drainwatch status`: the state once, as text or as `/api/state`'s JSON.

use shared::Snapshot;

use super::client::{self, Client};
use super::{CliError, Exit, StatusArgs, render};
use crate::clock::now_ms;

pub async fn status(args: StatusArgs) -> Result<Exit, CliError> {
    let client = Client::new(&args.remote)?;
    let text = client.get_text("api/state").await?;
    if args.remote.json {
        println!("{}", text.trim_end());
        return Ok(Exit::Ok);
    }
    let snapshot: Snapshot = client::parse("api/state", &text)?;
    print!("{}", render::snapshot(&snapshot, now_ms()));
    Ok(Exit::Ok)
}
