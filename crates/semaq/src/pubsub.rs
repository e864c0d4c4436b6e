//! Core NATS commands: `pub`, `sub` and `req`.

use std::io::{self, Read, Write};

use std::str::FromStr;

use anyhow::{anyhow, bail, Context, Result};
use async_nats::{HeaderMap, HeaderName, HeaderValue, RequestErrorKind};
use bytes::Bytes;
use futures::StreamExt;

use crate::connect::{sync_with_server, Target};
use crate::output::{header_lines, message_json, write_text};
use crate::parse::{format_duration, parse_header, HeaderArg};

/// Arguments of `semaq pub`.
#[derive(clap::Args, Debug)]
pub struct PubArgs {
    /// Subject to publish to
    subject: String,
    /// Message body; read from stdin when omitted. `{{i}}` is replaced by the message number (from 1)
    body: Option<String>,
    /// Header 'Name: value' (repeatable)
    #[arg(short = 'H', long = "header", value_name = "'NAME: VALUE'", value_parser = parse_header)]
    headers: Vec<HeaderArg>,
    /// Publish the message this many times
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Print nothing on success
    #[arg(long, short)]
    quiet: bool,
    /// Publish through JetStream and wait for each PubAck, so a stream's refusal (a schema
    /// violation, say) is an error; without it a stream subject gets a fire-and-forget publish
    #[arg(long)]
    js: bool,
}

/// Arguments of `semaq sub`.
#[derive(clap::Args, Debug)]
pub struct SubArgs {
    /// Subject to subscribe to (wildcards `*` and `>` allowed)
    subject: String,
    /// Join this queue group: each message goes to one member of the group
    #[arg(long, value_name = "GROUP")]
    queue: Option<String>,
    /// Deliver only messages matching this CEL expression, evaluated by the server
    /// (e.g. 'confidence > 0.85'; see SPEC §3 for the names bound)
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// Exit after receiving this many messages
    #[arg(long)]
    count: Option<u64>,
    /// Print message headers
    #[arg(long)]
    headers: bool,
    /// Print one JSON object per message: subject, reply, headers, payload, encoding
    #[arg(long)]
    json: bool,
}

/// Arguments of `semaq req`.
#[derive(clap::Args, Debug)]
pub struct ReqArgs {
    /// Subject to send the request to
    subject: String,
    /// Request body; read from stdin when omitted
    body: Option<String>,
    /// Header 'Name: value' (repeatable)
    #[arg(short = 'H', long = "header", value_name = "'NAME: VALUE'", value_parser = parse_header)]
    headers: Vec<HeaderArg>,
    /// Print the reply's headers before its payload
    #[arg(long = "headers")]
    show_headers: bool,
}

/// Publishes the body `count` times, then flushes so nothing is lost on exit.
pub async fn publish(target: &Target, args: PubArgs) -> Result<()> {
    let body = body_or_stdin(args.body)?;
    let headers = header_map(&args.headers)?;
    let client = target.connect().await?;
    // Only a UTF-8 body can carry the `{{i}}` placeholder; binary bodies go out unchanged.
    let template = std::str::from_utf8(&body).ok().filter(|text| text.contains("{{i}}"));
    let mut bytes_total = 0usize;
    let mut jetstream = None;
    for number in 1..=args.count {
        let payload = match template {
            Some(text) => Bytes::from(text.replace("{{i}}", &number.to_string())),
            None => body.clone(),
        };
        bytes_total += payload.len();
        let subject = args.subject.clone();
        if args.js {
            let context = jetstream.get_or_insert_with(|| async_nats::jetstream::new(client.clone()));
            let ack = match &headers {
                Some(headers) => context.publish_with_headers(subject, headers.clone(), payload).await,
                None => context.publish(subject, payload).await,
            }
            .with_context(|| format!("cannot publish to {}", args.subject))?;
            let ack = ack.await.with_context(|| format!("stream refused the message on {}", args.subject))?;
            if !args.quiet {
                eprintln!("Stored in stream {} at sequence {}", ack.stream, ack.sequence);
            }
            continue;
        }
        let sent = match &headers {
            Some(headers) => client.publish_with_headers(subject, headers.clone(), payload).await,
            None => client.publish(subject, payload).await,
        };
        sent.with_context(|| format!("cannot publish to {}", args.subject))?;
    }
    flush(&client, target).await?;
    if !args.quiet {
        let noun = if args.count == 1 { "message" } else { "messages" };
        let unit = if bytes_total == 1 { "byte" } else { "bytes" };
        eprintln!("Published {} {noun} ({bytes_total} {unit}) to \"{}\"", args.count, args.subject);
    }
    Ok(())
}

/// Prints messages as they arrive until `--count` is reached or the process is interrupted.
pub async fn subscribe(target: &Target, args: SubArgs) -> Result<()> {
    let client = target.connect().await?;
    let mut subscription = match &args.filter {
        Some(filter) => filtered_subscription(&client, target, &args, filter).await?,
        None => plain_subscription(&client, target, &args).await?,
    };
    match (&args.queue, &args.filter) {
        (Some(group), _) => eprintln!("Subscribing on \"{}\" in queue group \"{group}\"", args.subject),
        (None, Some(filter)) => eprintln!("Subscribing on \"{}\" where {filter}", args.subject),
        (None, None) => eprintln!("Subscribing on \"{}\"", args.subject),
    }
    let mut out = io::stdout().lock();
    let mut received = 0u64;
    while args.count.is_none_or(|count| received < count) {
        let Some(message) = subscription.next().await else { bail!("connection closed by the server") };
        received += 1;
        let written = if args.json {
            writeln!(out, "{}", message_json(&message)).and_then(|()| out.flush())
        } else {
            write_text(&mut out, received, &message, args.headers)
        };
        if let Err(error) = written {
            // A closed pipe (`semaq sub x | head`) is a normal way to stop.
            if error.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(error).context("cannot write to stdout");
        }
    }
    Ok(())
}

async fn plain_subscription(
    client: &async_nats::Client,
    target: &Target,
    args: &SubArgs,
) -> Result<async_nats::Subscriber> {
    let subject = args.subject.clone();
    let subscription = match &args.queue {
        Some(group) => client.queue_subscribe(subject, group.clone()).await,
        None => client.subscribe(subject).await,
    }
    .with_context(|| format!("cannot subscribe to {}", args.subject))?;
    // Announce only once the server holds the subscription, so scripts can publish right after.
    sync_with_server(client, target.timeout).await.context("subscription not confirmed")?;
    Ok(subscription)
}

/// Subscribes to a fresh inbox and asks the server (`$SEMAQ.API.SUB.CREATE`) to deliver the
/// matching messages there; the filtered subscription ends when this connection closes.
async fn filtered_subscription(
    client: &async_nats::Client,
    target: &Target,
    args: &SubArgs,
    filter: &str,
) -> Result<async_nats::Subscriber> {
    let inbox = client.new_inbox();
    let subscription = client.subscribe(inbox.clone()).await.context("cannot subscribe to an inbox")?;
    let body = serde_json::json!({ "subject": args.subject, "filter": filter, "deliver": inbox, "queue": args.queue });
    let request = async_nats::Request::new().payload(body.to_string().into()).timeout(Some(target.timeout));
    let reply = client.send_request(FILTER_CREATE_SUBJECT, request).await.map_err(|error| match error.kind() {
        RequestErrorKind::NoResponders => anyhow!("the server does not support filtered subscriptions"),
        _ => anyhow!("cannot create the filtered subscription: {error}"),
    })?;
    let reply: serde_json::Value = serde_json::from_slice(&reply.payload).context("invalid reply from the server")?;
    if let Some(error) = reply.get("error") {
        let description = error["description"].as_str().unwrap_or("refused");
        bail!("filter refused: {description}");
    }
    Ok(subscription)
}

/// The server's API for filtered core subscriptions (SPEC §3).
const FILTER_CREATE_SUBJECT: &str = "$SEMAQ.API.SUB.CREATE";

/// Sends one request and prints the reply's payload (and headers with `--headers`).
pub async fn request(target: &Target, args: ReqArgs) -> Result<()> {
    let body = body_or_stdin(args.body)?;
    let client = target.connect().await?;
    let mut request = async_nats::Request::new().payload(body).timeout(Some(target.timeout));
    if let Some(headers) = header_map(&args.headers)? {
        request = request.headers(headers);
    }
    let reply = client.send_request(args.subject.clone(), request).await.map_err(|error| match error.kind() {
        RequestErrorKind::NoResponders => anyhow!("no responders on {}", args.subject),
        RequestErrorKind::TimedOut => {
            anyhow!("no reply on {} within {}", args.subject, format_duration(target.timeout))
        }
        _ => anyhow!("request on {} failed: {error}", args.subject),
    })?;
    let mut out = io::stdout().lock();
    if args.show_headers {
        for line in reply.headers.as_ref().map(header_lines).unwrap_or_default() {
            writeln!(out, "{line}")?;
        }
        writeln!(out)?;
    }
    out.write_all(&reply.payload)?;
    writeln!(out)?;
    Ok(())
}

/// Flushes buffered publishes, bounded by the timeout so a dead server cannot hang the command.
async fn flush(client: &async_nats::Client, target: &Target) -> Result<()> {
    match tokio::time::timeout(target.timeout, client.flush()).await {
        Ok(result) => result.context("cannot flush messages to the server"),
        Err(_) => bail!("cannot flush messages to {} within {}", target.url, format_duration(target.timeout)),
    }
}

fn body_or_stdin(body: Option<String>) -> Result<Bytes> {
    if let Some(body) = body {
        return Ok(body.into());
    }
    let mut bytes = Vec::new();
    io::stdin().read_to_end(&mut bytes).context("cannot read the message body from stdin")?;
    Ok(bytes.into())
}

/// Builds the header map through the fallible parsers, since async-nats' `&str` conversions panic on bad input.
fn header_map(headers: &[HeaderArg]) -> Result<Option<HeaderMap>> {
    if headers.is_empty() {
        return Ok(None);
    }
    let mut map = HeaderMap::new();
    for header in headers {
        let name = HeaderName::from_str(&header.name).map_err(|_| anyhow!("invalid header name '{}'", header.name))?;
        let value =
            HeaderValue::from_str(&header.value).map_err(|_| anyhow!("invalid value for header '{}'", header.name))?;
        map.append(name, value);
    }
    Ok(Some(map))
}
