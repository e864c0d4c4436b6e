//! `semaq stream add|ls|info|rm` and `semaq consumer add|ls|rm`: JetStream streams and durable
//! consumers through async-nats' jetstream module, with SemaQ's metadata keys (`semaq.level`,
//! `semaq.schema`, `semaq.schema.version`, `semaq.evolve`, `semaq.require`, `semaq.sync`,
//! `semaq.filter`) as flags. `info` and `add` show the level and what it enforces, from the
//! `semaq` section of the server's stream info (which async-nats' typed info drops).

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use async_nats::jetstream::{self, consumer, stream};
use futures::TryStreamExt;
use serde_json::Value;

use crate::connect::Target;
use crate::parse::{format_duration, parse_duration};

/// Stream metadata: the semantic level.
const LEVEL_KEY: &str = "semaq.level";
/// Stream metadata: the bound registry subject.
const SCHEMA_KEY: &str = "semaq.schema";
/// Stream metadata: the bound schema version.
const VERSION_KEY: &str = "semaq.schema.version";
/// Stream metadata: L4 schema auto-evolution (`auto` | `off`).
const EVOLVE_KEY: &str = "semaq.evolve";
/// Stream metadata: the headers an L4 stream requires.
const REQUIRE_KEY: &str = "semaq.require";
/// Stream metadata: the fsync policy.
const SYNC_KEY: &str = "semaq.sync";
/// Consumer metadata: the CEL content filter.
const FILTER_KEY: &str = "semaq.filter";

/// `semaq stream ...`
#[derive(clap::Args, Debug)]
pub struct StreamArgs {
    #[command(subcommand)]
    command: StreamCommand,
}

#[derive(clap::Subcommand, Debug)]
enum StreamCommand {
    /// Create a stream
    Add(Box<AddStream>),
    /// List streams
    Ls,
    /// Show a stream's configuration and state as JSON
    Info {
        /// Stream name
        name: String,
    },
    /// Delete a stream and its messages
    Rm {
        /// Stream name
        name: String,
    },
}

#[derive(clap::Args, Debug)]
struct AddStream {
    /// Stream name
    name: String,
    /// Subjects the stream stores, e.g. 'ai.>' (repeatable)
    #[arg(long = "subjects", required = true, value_name = "SUBJECT")]
    subjects: Vec<String>,
    /// file or memory
    #[arg(long, default_value = "file")]
    storage: String,
    /// limits, interest or workqueue
    #[arg(long, default_value = "limits")]
    retention: String,
    /// Keep at most this many messages
    #[arg(long, value_name = "N")]
    max_msgs: Option<i64>,
    /// Discard messages older than this, e.g. 1h
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    max_age: Option<Duration>,
    /// Semantic level 0-4 (`semaq.level`): 2 checks the schema, 3 exactly-once, 4 traceable & autonomous
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=4))]
    level: Option<u8>,
    /// A schema file to register (subject = file stem) or an existing registry subject
    #[arg(long, value_name = "FILE_OR_SUBJECT")]
    schema: Option<String>,
    /// Bind this schema version instead of the latest
    #[arg(long, value_name = "V", requires = "schema")]
    schema_version: Option<u32>,
    /// L4: evolve the bound schema from payloads with new fields: auto or off (`semaq.evolve`)
    #[arg(long, value_name = "MODE")]
    evolve: Option<String>,
    /// L4: headers every message must carry, e.g. traceparent,Semaq-Session (`semaq.require`)
    #[arg(long, value_name = "H1,H2")]
    require: Option<String>,
    /// always, never or an interval like 100ms (`semaq.sync`)
    #[arg(long, value_name = "POLICY")]
    sync: Option<String>,
}

/// `semaq consumer ...`
#[derive(clap::Args, Debug)]
pub struct ConsumerArgs {
    #[command(subcommand)]
    command: ConsumerCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ConsumerCommand {
    /// Create a durable consumer
    Add(AddConsumer),
    /// List a stream's consumers
    Ls {
        /// Stream name
        stream: String,
    },
    /// Delete a consumer
    Rm {
        /// Stream name
        stream: String,
        /// Consumer name
        name: String,
    },
}

#[derive(clap::Args, Debug)]
struct AddConsumer {
    /// Stream name
    stream: String,
    /// Durable consumer name
    name: String,
    /// Only messages on this subject
    #[arg(long, value_name = "SUBJECT")]
    filter_subject: Option<String>,
    /// Only messages matching this CEL expression, e.g. 'confidence > 0.85' (`semaq.filter`)
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// A pull consumer (the default)
    #[arg(long, conflicts_with = "deliver")]
    pull: bool,
    /// A push consumer delivering to this subject
    #[arg(long, value_name = "SUBJECT")]
    deliver: Option<String>,
    /// explicit, all or none
    #[arg(long, default_value = "explicit")]
    ack: String,
}

/// Runs one `semaq stream` command.
pub async fn run_stream(target: &Target, args: StreamArgs) -> Result<()> {
    let context = jetstream::new(target.connect().await?);
    match args.command {
        StreamCommand::Add(add) => add_stream(target, &context, *add).await,
        StreamCommand::Ls => {
            let names: Vec<String> = context.stream_names().try_collect().await.context("cannot list streams")?;
            if names.is_empty() {
                eprintln!("No streams");
            }
            for name in names {
                println!("{name}");
            }
            Ok(())
        }
        StreamCommand::Info { name } => {
            let mut stream = get_stream(&context, &name).await?;
            let info = stream.info().await.with_context(|| format!("cannot read stream {name}"))?;
            let state = &info.state;
            let semaq = semaq_section(target, &context, &name).await?;
            let shown = serde_json::json!({
                "config": info.config,
                "created": info.created.to_string(),
                "state": {
                    "messages": state.messages,
                    "bytes": state.bytes,
                    "first_seq": state.first_sequence,
                    "last_seq": state.last_sequence,
                    "consumer_count": state.consumer_count,
                },
                "semaq": semaq,
            });
            // The level for a reader on stderr; stdout stays one JSON document for scripts.
            eprint!("{}", describe_level(&semaq));
            println!("{}", serde_json::to_string_pretty(&shown)?);
            Ok(())
        }
        StreamCommand::Rm { name } => {
            context.delete_stream(&name).await.with_context(|| format!("cannot delete stream {name}"))?;
            eprintln!("Deleted stream {name}");
            Ok(())
        }
    }
}

/// Runs one `semaq consumer` command.
pub async fn run_consumer(target: &Target, args: ConsumerArgs) -> Result<()> {
    let context = jetstream::new(target.connect().await?);
    match args.command {
        ConsumerCommand::Add(add) => add_consumer(&context, add).await,
        ConsumerCommand::Ls { stream } => {
            let stream_handle = get_stream(&context, &stream).await?;
            let names: Vec<String> =
                stream_handle.consumer_names().try_collect().await.context("cannot list consumers")?;
            if names.is_empty() {
                eprintln!("No consumers on {stream}");
            }
            for name in names {
                println!("{name}");
            }
            Ok(())
        }
        ConsumerCommand::Rm { stream, name } => {
            let stream_handle = get_stream(&context, &stream).await?;
            stream_handle.delete_consumer(&name).await.with_context(|| format!("cannot delete consumer {name}"))?;
            eprintln!("Deleted consumer {name} on {stream}");
            Ok(())
        }
    }
}

async fn get_stream(context: &jetstream::Context, name: &str) -> Result<jetstream::stream::Stream> {
    context.get_stream(name).await.with_context(|| format!("cannot find stream {name}"))
}

async fn add_stream(target: &Target, context: &jetstream::Context, add: AddStream) -> Result<()> {
    let metadata = stream_metadata(target, &add).await?;
    let mut config = stream::Config {
        name: add.name.clone(),
        subjects: add.subjects.clone(),
        storage: storage_type(&add.storage)?,
        retention: retention_policy(&add.retention)?,
        metadata,
        ..Default::default()
    };
    if let Some(max_msgs) = add.max_msgs {
        config.max_messages = max_msgs;
    }
    if let Some(max_age) = add.max_age {
        config.max_age = max_age;
    }
    let mut created =
        context.create_stream(config).await.with_context(|| format!("cannot create stream {}", add.name))?;
    let config = &created.info().await.context("cannot read the new stream")?.config;
    println!("Created stream {}", config.name);
    println!("  subjects:  {}", config.subjects.join(", "));
    println!("  storage:   {:?}, retention: {:?}", config.storage, config.retention);
    if config.max_messages > 0 {
        println!("  max msgs:  {}", config.max_messages);
    }
    if !config.max_age.is_zero() {
        println!("  max age:   {}", format_duration(config.max_age));
    }
    println!("  level:     {}", config.metadata.get(LEVEL_KEY).map_or("1", String::as_str));
    if let Some(subject) = config.metadata.get(SCHEMA_KEY) {
        let version = config.metadata.get(VERSION_KEY).map_or("latest", String::as_str);
        println!("  schema:    {subject} (version {version})");
    }
    if let Some(sync) = config.metadata.get(SYNC_KEY) {
        println!("  sync:      {sync}");
    }
    let semaq = semaq_section(target, context, &config.name).await?;
    if let Some(enforces) = semaq["enforces"].as_array().filter(|e| !e.is_empty()) {
        let enforces: Vec<&str> = enforces.iter().filter_map(Value::as_str).collect();
        println!("  enforces:  {}", enforces.join("; "));
    }
    Ok(())
}

/// The `semaq` section of the server's stream info (level, what it enforces, ...); `null` from
/// servers that have none (nats-server).
async fn semaq_section(target: &Target, context: &jetstream::Context, name: &str) -> Result<Value> {
    let subject = format!("$JS.API.STREAM.INFO.{name}");
    let request = async_nats::Request::new().payload("".into()).timeout(Some(target.timeout));
    let reply =
        context.client().send_request(subject, request).await.with_context(|| format!("cannot read stream {name}"))?;
    let info: Value = serde_json::from_slice(&reply.payload).context("the stream info is not JSON")?;
    Ok(info.get("semaq").cloned().unwrap_or(Value::Null))
}

/// `Level 4 (...) enforces:` and one line per guarantee, for people.
fn describe_level(semaq: &Value) -> String {
    let Some(level) = semaq["level"].as_u64() else { return String::new() };
    let mut text = format!("Level {level} enforces:\n");
    for item in semaq["enforces"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        text.push_str(&format!("  - {item}\n"));
    }
    text
}

/// Builds the stream's SemaQ metadata, registering `--schema FILE` first when it names a file.
async fn stream_metadata(target: &Target, add: &AddStream) -> Result<HashMap<String, String>> {
    let mut metadata = HashMap::new();
    if let Some(schema) = &add.schema {
        let path = Path::new(schema);
        let subject = if path.is_file() {
            let subject = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .filter(|stem| !stem.is_empty())
                .ok_or_else(|| anyhow!("cannot name a registry subject after {}", path.display()))?
                .to_string();
            let answer = crate::schema::register_file(target, &subject, path).await?;
            eprintln!("Registered {} as subject {subject} (id {})", path.display(), answer["id"]);
            subject
        } else {
            schema.clone()
        };
        metadata.insert(SCHEMA_KEY.to_string(), subject);
        metadata.insert(LEVEL_KEY.to_string(), add.level.unwrap_or(2).to_string());
    } else if let Some(level) = add.level {
        metadata.insert(LEVEL_KEY.to_string(), level.to_string());
    }
    if let Some(version) = add.schema_version {
        metadata.insert(VERSION_KEY.to_string(), version.to_string());
    }
    level_flags(add, &mut metadata)?;
    if let Some(sync) = &add.sync {
        if sync != "always" && sync != "never" && parse_duration(sync).is_err() {
            bail!("--sync must be always, never or an interval like 100ms, not {sync:?}");
        }
        metadata.insert(SYNC_KEY.to_string(), sync.clone());
    }
    Ok(metadata)
}

/// `--evolve` and `--require`, checked here for a clear message (the server checks them too).
fn level_flags(add: &AddStream, metadata: &mut HashMap<String, String>) -> Result<()> {
    let level = metadata.get(LEVEL_KEY).and_then(|level| level.parse::<u8>().ok()).unwrap_or(1);
    if let Some(evolve) = &add.evolve {
        if evolve != "auto" && evolve != "off" {
            bail!("--evolve must be auto or off, not {evolve:?}");
        }
        if evolve == "auto" && level < 4 {
            bail!("--evolve auto needs --level 4");
        }
        metadata.insert(EVOLVE_KEY.to_string(), evolve.clone());
    }
    if let Some(require) = &add.require {
        if level < 4 {
            bail!("--require needs --level 4");
        }
        metadata.insert(REQUIRE_KEY.to_string(), require.clone());
    }
    Ok(())
}

fn storage_type(text: &str) -> Result<stream::StorageType> {
    match text.to_ascii_lowercase().as_str() {
        "file" => Ok(stream::StorageType::File),
        "memory" => Ok(stream::StorageType::Memory),
        _ => bail!("--storage must be file or memory, not {text:?}"),
    }
}

fn retention_policy(text: &str) -> Result<stream::RetentionPolicy> {
    match text.to_ascii_lowercase().as_str() {
        "limits" => Ok(stream::RetentionPolicy::Limits),
        "interest" => Ok(stream::RetentionPolicy::Interest),
        "workqueue" => Ok(stream::RetentionPolicy::WorkQueue),
        _ => bail!("--retention must be limits, interest or workqueue, not {text:?}"),
    }
}

fn ack_policy(text: &str) -> Result<consumer::AckPolicy> {
    match text.to_ascii_lowercase().as_str() {
        "explicit" => Ok(consumer::AckPolicy::Explicit),
        "all" => Ok(consumer::AckPolicy::All),
        "none" => Ok(consumer::AckPolicy::None),
        _ => bail!("--ack must be explicit, all or none, not {text:?}"),
    }
}

async fn add_consumer(context: &jetstream::Context, add: AddConsumer) -> Result<()> {
    let stream = get_stream(context, &add.stream).await?;
    let mut metadata = HashMap::new();
    if let Some(filter) = &add.filter {
        metadata.insert(FILTER_KEY.to_string(), filter.clone());
    }
    let ack_policy = ack_policy(&add.ack)?;
    let filter_subject = add.filter_subject.clone().unwrap_or_default();
    let created = match &add.deliver {
        Some(deliver) => stream
            .create_consumer(consumer::push::Config {
                durable_name: Some(add.name.clone()),
                deliver_subject: deliver.clone(),
                filter_subject,
                ack_policy,
                metadata,
                ..Default::default()
            })
            .await
            .map(|_| ()),
        None => stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(add.name.clone()),
                filter_subject,
                ack_policy,
                metadata,
                ..Default::default()
            })
            .await
            .map(|_| ()),
    };
    created.with_context(|| format!("cannot create consumer {} on {}", add.name, add.stream))?;
    let kind = if add.deliver.is_some() { "push" } else { "pull" };
    println!("Created {kind} consumer {} on {}", add.name, add.stream);
    if let Some(subject) = &add.filter_subject {
        println!("  filter subject: {subject}");
    }
    if let Some(filter) = &add.filter {
        println!("  filter:         {filter}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_parse_and_bad_ones_are_named() {
        assert_eq!(storage_type("memory").unwrap(), stream::StorageType::Memory);
        assert_eq!(retention_policy("workqueue").unwrap(), stream::RetentionPolicy::WorkQueue);
        assert_eq!(ack_policy("none").unwrap(), consumer::AckPolicy::None);
        assert!(storage_type("disk").unwrap_err().to_string().contains("\"disk\""));
        assert!(retention_policy("x").is_err());
        assert!(ack_policy("x").is_err());
    }
}
