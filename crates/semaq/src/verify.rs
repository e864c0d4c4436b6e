//! `semaq verify STREAM [--from SEQ] [--dir STORE_DIR] [--key HEX]`: walks a level-4 stream's
//! hash chain, checks every checkpoint signature against the stream's public key, and names the
//! first sequence where the chain breaks (exit 1), or says what was proved.
//!
//! Online, messages come from the server in bulk with their exact bytes (chain pages of up to a
//! megabyte, the next one fetched while the current one is checked); offline (`--dir`), they are
//! read straight from the stopped server's files with `semaq_store::LogReader`. Both feed the
//! same `semaq_store::chain::Verifier` the server's chain is defined by.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use bytes::Bytes;
use semaq_store::chain::checkpoint::{self, Checkpoint, PublicKey};
use semaq_store::chain::{page, Break, Summary, Verifier};
use semaq_store::{LogReader, ReadItem, StoreError};
use serde_json::{json, Value};

use crate::connect::Target;

/// `semaq verify ...`
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The level 4 stream
    stream: String,
    /// Start at this sequence (default: the first stored message)
    #[arg(long, value_name = "SEQ")]
    from: Option<u64>,
    /// Verify offline on the store directory of a stopped server (its -sd / store_dir)
    #[arg(long, value_name = "STORE_DIR")]
    dir: Option<PathBuf>,
    /// The stream's public key (hex) as you recorded it; default: the key the server or directory holds
    #[arg(long, value_name = "HEX")]
    key: Option<String>,
    /// Print the outcome as JSON
    #[arg(long)]
    json: bool,
}

/// What a walk found, whichever way the messages came.
pub(crate) struct Outcome {
    /// `online, nats://...` or `offline, <dir>`.
    pub(crate) source: String,
    /// The key the checkpoints were checked with.
    pub(crate) key: PublicKey,
    /// Messages whose hash and link were checked.
    pub(crate) verified: u64,
    /// What the walk proved, or where it broke.
    pub(crate) result: Result<Summary, Break>,
    /// Things worth saying that are not breaks.
    pub(crate) notes: Vec<String>,
}

/// Runs `semaq verify`.
pub async fn run(target: &Target, args: VerifyArgs) -> Result<()> {
    let pinned = args
        .key
        .as_deref()
        .map(|hex| PublicKey::from_hex(hex).ok_or_else(|| anyhow!("--key is not a hex Ed25519 public key")))
        .transpose()?;
    let started = Instant::now();
    let outcome = match &args.dir {
        Some(dir) => offline(dir, &args.stream, args.from.unwrap_or(0), pinned)?,
        None => online(target, &args.stream, args.from.unwrap_or(0), pinned).await?,
    };
    let elapsed = started.elapsed();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome_json(&args.stream, &outcome, elapsed))?);
    } else {
        println!("{}", describe(&args.stream, &outcome, elapsed));
    }
    match &outcome.result {
        Ok(_) => Ok(()),
        Err(found) => bail!("the chain of stream {} breaks at seq {} ({})", args.stream, found.seq, found.kind),
    }
}

fn check_pinned(found: PublicKey, pinned: Option<PublicKey>) -> Result<PublicKey> {
    match pinned {
        Some(pinned) if pinned != found => bail!(
            "the stream's key is {}, not the {} you gave: its checkpoints may have been signed again with another key",
            found.to_hex(),
            pinned.to_hex()
        ),
        _ => Ok(found),
    }
}

/// Verifies through the server's API (chain pages, the next fetched while one is checked).
pub(crate) async fn online(target: &Target, stream: &str, from_seq: u64, pinned: Option<PublicKey>) -> Result<Outcome> {
    let client = target.connect().await?;
    let (key, checkpoints) = fetch_provenance(&client, stream, target.timeout).await?;
    let key = check_pinned(key, pinned)?;
    let mut verifier = Verifier::new(stream, &key, &checkpoints, from_seq);
    let fetch = |from_seq| tokio::spawn(fetch_page(client.clone(), stream.to_string(), from_seq, target.timeout));
    let mut pending = Some(fetch(from_seq));
    let (result, first_seq) = loop {
        let Some(fetching) = pending.take() else { bail!("no page is being fetched") };
        let bytes = fetching.await.context("the page fetch stopped")??;
        let page = page::decode(&bytes).map_err(|reason| anyhow!("the server's chain page is malformed: {reason}"))?;
        let done = page.next_seq > page.last_seq;
        if !done {
            // Fetch the next page while this one is checked.
            pending = Some(fetch(page.next_seq));
        }
        let checked = page.messages.iter().try_for_each(|message| verifier.check(*message));
        if let Err(found) = checked {
            break (Err(found), page.first_seq);
        }
        if done {
            break (Ok(()), page.first_seq);
        }
    };
    let result = result.and_then(|()| verifier.finish(first_seq));
    Ok(Outcome {
        source: format!("online, {}", target.url),
        key,
        verified: verifier.verified(),
        result,
        notes: Vec::new(),
    })
}

/// The stream's public key and every checkpoint, page by page.
async fn fetch_provenance(
    client: &async_nats::Client,
    stream: &str,
    timeout: Duration,
) -> Result<(PublicKey, Vec<Checkpoint>)> {
    let mut checkpoints = Vec::new();
    let mut offset = 0u64;
    loop {
        let answer = api_request(
            client,
            &format!("$SEMAQ.API.STREAM.PROVENANCE.{stream}"),
            json!({ "offset": offset }),
            timeout,
        )
        .await?;
        let answer: Value = serde_json::from_slice(&answer).context("the provenance answer is not JSON")?;
        if let Some(error) = answer.get("error") {
            bail!("{}", error["description"].as_str().unwrap_or("the server refused the provenance request"));
        }
        let key = answer["public_key"]
            .as_str()
            .and_then(PublicKey::from_hex)
            .context("the server sent no valid public key")?;
        let listed = answer["checkpoints"].as_array().context("the provenance answer lists no checkpoints")?;
        for item in listed {
            checkpoints.push(checkpoint_from_json(item).with_context(|| format!("malformed checkpoint {item}"))?);
        }
        let total = answer["total"].as_u64().unwrap_or(0);
        offset = answer["offset"].as_u64().unwrap_or(offset) + listed.len() as u64;
        if listed.is_empty() || offset >= total {
            return Ok((key, checkpoints));
        }
    }
}

fn checkpoint_from_json(item: &Value) -> Option<Checkpoint> {
    let signature = base64::engine::general_purpose::STANDARD.decode(item["signature"].as_str()?).ok()?;
    Some(Checkpoint {
        seq: item["seq"].as_u64()?,
        head: semaq_store::chain::hash_from_hex(item["head"].as_str()?)?,
        signature: signature.try_into().ok()?,
    })
}

async fn fetch_page(client: async_nats::Client, stream: String, from_seq: u64, timeout: Duration) -> Result<Bytes> {
    let body =
        api_request(&client, &format!("$SEMAQ.API.STREAM.CHAIN.{stream}"), json!({ "from_seq": from_seq }), timeout)
            .await?;
    if page::is_page(&body) {
        return Ok(body);
    }
    let answer: Value = serde_json::from_slice(&body).context("the chain page answer is neither a page nor JSON")?;
    bail!("{}", answer["error"]["description"].as_str().unwrap_or("the server refused the chain page request"))
}

async fn api_request(client: &async_nats::Client, subject: &str, body: Value, timeout: Duration) -> Result<Bytes> {
    let request = async_nats::Request::new().payload(body.to_string().into()).timeout(Some(timeout));
    let reply = client.send_request(subject.to_string(), request).await.map_err(|error| match error.kind() {
        async_nats::RequestErrorKind::NoResponders => {
            anyhow!("{subject}: no responders (is this a SemaQ server with JetStream?)")
        }
        _ => anyhow!("{subject} failed: {error}"),
    })?;
    Ok(reply.payload)
}

/// Verifies a stopped server's files in `store_dir`.
pub(crate) fn offline(store_dir: &Path, stream: &str, from_seq: u64, pinned: Option<PublicKey>) -> Result<Outcome> {
    let stream_dir = store_dir.join("jetstream").join("streams").join(stream);
    let meta_path = stream_dir.join("stream.json");
    let meta: Value = std::fs::read(&meta_path)
        .with_context(|| {
            format!("no file stream {stream} under {} ({} is missing)", store_dir.display(), meta_path.display())
        })
        .and_then(|bytes| {
            serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", meta_path.display()))
        })?;
    let level = meta["config"]["metadata"]["semaq.level"].as_str().unwrap_or("1");
    if level.trim() != "4" {
        bail!("stream {stream} is level {level}: only level 4 streams have a provenance chain");
    }
    let provenance = stream_dir.join("provenance");
    let read = |name: &str| {
        std::fs::read(provenance.join(name)).with_context(|| format!("cannot read {}", provenance.join(name).display()))
    };
    let key = PublicKey::decode_file(&read("public.key")?)
        .map_err(|e| anyhow!("{}: {e}", provenance.join("public.key").display()))?;
    let key = check_pinned(key, pinned)?;
    let file = checkpoint::decode_file(&read("checkpoints")?).map_err(|e| anyhow!("{e}"))?;
    let mut notes = Vec::new();
    if !file.damaged.is_empty() {
        notes.push(format!("{} checkpoint records fail their checksum and were left out", file.damaged.len()));
    }
    let reader = LogReader::open(&stream_dir.join("msgs")).map_err(|error| match error {
        StoreError::Locked(_) => {
            anyhow!("the stream's files are open in a running server: stop it, or verify online without --dir")
        }
        other => anyhow!(other),
    })?;
    let mut verifier = Verifier::new(stream, &key, &file.checkpoints, from_seq);
    let mut found = None;
    let summary = reader.read(from_seq, |item| {
        let checked = match item {
            ReadItem::Message(message) => verifier.check(message),
            ReadItem::Unreadable { seq, detail } => Err(verifier.unreadable(seq, &detail)),
        };
        match checked {
            Ok(()) => ControlFlow::Continue(()),
            Err(broken) => {
                found = Some(broken);
                ControlFlow::Break(())
            }
        }
    })?;
    if summary.torn_tail_bytes > 0 {
        notes.push(format!(
            "{} bytes at the end are a write cut short by a crash (never acknowledged)",
            summary.torn_tail_bytes
        ));
    }
    let result = match found {
        Some(broken) => Err(broken),
        None => verifier.finish(reader.first_seq()),
    };
    Ok(Outcome {
        source: format!("offline, {}", store_dir.display()),
        key,
        verified: verifier.verified(),
        result,
        notes,
    })
}

fn rate(verified: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        verified as f64 / seconds
    } else {
        0.0
    }
}

fn describe(stream: &str, outcome: &Outcome, elapsed: Duration) -> String {
    let mut lines = vec![format!(
        "verify {stream} ({}): {} messages in {:.3} s, {:.0} msgs/s",
        outcome.source,
        outcome.verified,
        elapsed.as_secs_f64(),
        rate(outcome.verified, elapsed)
    )];
    lines.push(format!("  key          ed25519 {}", outcome.key.to_hex()));
    match &outcome.result {
        Ok(summary) => {
            if let Some((first, last)) = summary.range {
                lines.push(format!("  range        seq {first}..={last}"));
            }
            lines.push(format!(
                "  checkpoints  {} signatures valid, {} matched the chain{}",
                summary.signatures_checked,
                summary.checkpoints_matched,
                summary.signed_through.map_or(String::new(), |seq| format!("; signed through seq {seq}"))
            ));
            if let (true, Some((first, _))) = (summary.anchored, summary.range) {
                lines.push(format!(
                    "  note         the walk starts from the predecessor hash seq {first} records (seq {} is not checked)",
                    first.saturating_sub(1)
                ));
            }
            if summary.skipped > 0 {
                lines.push(format!("  note         {} seqs stepped over: removed before anything was chained on them (a refused or crash-cut atomic batch)", summary.skipped));
            }
            if let Some((from, to)) = summary.unsigned() {
                lines.push(format!("  note         seqs {from}..={to} are chained but not yet signed (the next checkpoint is at most 100 ms away)"));
            }
            lines.extend(outcome.notes.iter().map(|note| format!("  note         {note}")));
            lines.push("  result       OK: the chain is intact".into());
        }
        Err(found) => {
            lines.extend(outcome.notes.iter().map(|note| format!("  note         {note}")));
            lines.push(format!("  result       BROKEN at seq {}: {}: {}", found.seq, found.kind, found.detail));
        }
    }
    lines.join("\n")
}

fn outcome_json(stream: &str, outcome: &Outcome, elapsed: Duration) -> Value {
    let mut body = json!({
        "stream": stream,
        "source": outcome.source,
        "public_key": outcome.key.to_hex(),
        "verified": outcome.verified,
        "elapsed_s": elapsed.as_secs_f64(),
        "msgs_per_s": rate(outcome.verified, elapsed),
        "notes": outcome.notes,
        "ok": outcome.result.is_ok(),
    });
    match &outcome.result {
        Ok(summary) => {
            body["range"] = json!(summary.range);
            body["signatures_checked"] = json!(summary.signatures_checked);
            body["checkpoints_matched"] = json!(summary.checkpoints_matched);
            body["signed_through"] = json!(summary.signed_through);
            body["unsigned"] = json!(summary.unsigned());
            body["anchored"] = json!(summary.anchored);
            body["skipped"] = json!(summary.skipped);
        }
        Err(found) => {
            body["break"] = json!({ "seq": found.seq, "kind": found.kind.to_string(), "detail": found.detail })
        }
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_read_from_the_api_json() {
        let keys = semaq_store::chain::KeyPair::from_seed(&[5; 32]);
        let signed = keys.sign("S", 42, &[7; 32]);
        let item = json!({
            "seq": 42,
            "head": semaq_store::chain::to_hex(&[7; 32]),
            "signature": base64::engine::general_purpose::STANDARD.encode(signed.signature),
        });
        assert_eq!(checkpoint_from_json(&item), Some(signed));
        assert_eq!(checkpoint_from_json(&json!({"seq": 1})), None);
    }
}
