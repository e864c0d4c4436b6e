//! `semaq schema register|list|show|check|delete|config|mode`: the server's schema registry over
//! `$SEMAQ.API.SCHEMA.*` (request/reply with JSON bodies, Confluent's error codes).

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

use crate::connect::Target;

/// `semaq schema ...`
#[derive(clap::Args, Debug)]
pub struct SchemaArgs {
    #[command(subcommand)]
    command: SchemaCommand,
}

#[derive(clap::Subcommand, Debug)]
enum SchemaCommand {
    /// Register a schema file under a subject (a new version if it is compatible)
    Register {
        /// Registry subject, e.g. ai-event-v1
        subject: String,
        /// Schema file (`-` for stdin); .avsc is Avro, .json JSON Schema, .proto Protobuf unless --type says
        file: PathBuf,
        /// avro, json or protobuf
        #[arg(long = "type")]
        schema_type: Option<String>,
        /// A schema it refers to: the name it uses (import path, Avro type, $ref) = subject, at a version (default latest)
        #[arg(long = "ref", value_name = "NAME=SUBJECT[:VERSION]")]
        references: Vec<String>,
        /// Register the normalized form, so equivalent spellings share one id
        #[arg(long)]
        normalize: bool,
    },
    /// List subjects
    List {
        /// Include soft-deleted subjects
        #[arg(long)]
        deleted: bool,
    },
    /// Show a subject's version (latest by default), or a schema by global id
    Show {
        /// Registry subject
        #[arg(required_unless_present = "id")]
        subject: Option<String>,
        /// Version number or `latest`
        #[arg(default_value = "latest", value_name = "VERSION")]
        at: String,
        /// A global schema id instead of a subject
        #[arg(long, conflicts_with = "subject")]
        id: Option<u32>,
    },
    /// Check a schema file against a subject without registering it (exit 1 when incompatible)
    Check {
        /// Registry subject
        subject: String,
        /// Schema file (`-` for stdin)
        file: PathBuf,
        /// Check against this version only (default: as registering would)
        #[arg(long, value_name = "VERSION")]
        against: Option<String>,
        /// avro, json or protobuf
        #[arg(long = "type")]
        schema_type: Option<String>,
        /// A schema it refers to, as for register
        #[arg(long = "ref", value_name = "NAME=SUBJECT[:VERSION]")]
        references: Vec<String>,
    },
    /// Delete a subject, or one version (soft; --permanent after a soft delete)
    Delete {
        /// Registry subject
        subject: String,
        /// Only this version
        #[arg(value_name = "VERSION")]
        at: Option<String>,
        /// Hard delete
        #[arg(long)]
        permanent: bool,
    },
    /// Propose a schema from JSON samples on stdin, one per line
    Infer {
        /// avro or json
        #[arg(long, default_value = "avro")]
        format: String,
        /// Name of the Avro record
        #[arg(long, default_value = "Record")]
        name: String,
    },
    /// Show or set the compatibility level, globally or for one subject
    Config {
        /// Registry subject (global level when absent)
        #[arg(long)]
        subject: Option<String>,
        /// BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE or NONE
        level: Option<String>,
    },
    /// Show or set the mode (READWRITE, READONLY, READONLY_OVERRIDE, IMPORT), globally or for one subject
    Mode {
        /// Registry subject (global mode when absent)
        #[arg(long)]
        subject: Option<String>,
        /// The mode to set
        mode: Option<String>,
        /// Enter IMPORT even though subjects exist
        #[arg(long)]
        force: bool,
    },
}

/// Runs one `semaq schema` command.
pub async fn run(target: &Target, args: SchemaArgs) -> Result<()> {
    if let SchemaCommand::Infer { format, name } = &args.command {
        let schema = infer(std::io::stdin().lock(), format, name)?;
        println!("{}", serde_json::to_string_pretty(&schema)?);
        return Ok(());
    }
    let (operation, body) = request_for(args.command.with_schema_file()?)?;
    let answer = call(target, operation, &body).await?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if operation == "CHECK" && answer["is_compatible"] == json!(false) {
        bail!("the schema is not compatible");
    }
    Ok(())
}

/// Registers `file` under `subject` exactly as `semaq schema register SUBJECT FILE` does
/// (type from the extension), returning the registry's answer (`{"id": ...}`).
pub async fn register_file(target: &Target, subject: &str, file: &Path) -> Result<Value> {
    let command = SchemaCommand::Register {
        subject: subject.to_string(),
        file: file.to_path_buf(),
        schema_type: None,
        references: Vec::new(),
        normalize: false,
    };
    let (operation, body) = request_for(command.with_schema_file()?)?;
    call(target, operation, &body)
        .await
        .with_context(|| format!("cannot register {} as schema subject {subject}", file.display()))
}

/// A command with its schema file already read.
struct Parts {
    command: SchemaCommand,
    schema: Option<(String, String)>,
}

impl SchemaCommand {
    fn with_schema_file(self) -> Result<Parts> {
        let schema = match &self {
            SchemaCommand::Register { file, schema_type, .. } | SchemaCommand::Check { file, schema_type, .. } => {
                Some(read_schema(file, schema_type.as_deref())?)
            }
            _ => None,
        };
        Ok(Parts { command: self, schema })
    }
}

fn request_for(parts: Parts) -> Result<(&'static str, Value)> {
    let schema_body = |subject: &str, references: &[String]| -> Result<Value> {
        let (text, schema_type) = parts.schema.clone().ok_or_else(|| anyhow!("no schema"))?;
        let references = references.iter().map(|r| parse_reference(r)).collect::<Result<Vec<_>>>()?;
        Ok(json!({ "subject": subject, "schema": text, "schemaType": schema_type, "references": references }))
    };
    Ok(match &parts.command {
        SchemaCommand::Register { subject, references, normalize, .. } => {
            let mut body = schema_body(subject, references)?;
            body["normalize"] = json!(normalize);
            ("REGISTER", body)
        }
        SchemaCommand::List { deleted } => ("SUBJECTS", json!({ "deleted": deleted })),
        SchemaCommand::Show { id: Some(id), .. } => ("ID", json!({ "id": id })),
        SchemaCommand::Show { subject, at, .. } => ("GET", json!({ "subject": subject, "version": at })),
        SchemaCommand::Check { subject, against, references, .. } => {
            let mut body = schema_body(subject, references)?;
            if let Some(version) = against {
                body["version"] = json!(version);
            }
            ("CHECK", body)
        }
        SchemaCommand::Delete { subject, at, permanent } => {
            ("DELETE", json!({ "subject": subject, "version": at, "permanent": permanent }))
        }
        SchemaCommand::Infer { .. } => bail!("infer needs no server"),
        SchemaCommand::Config { subject, level } => ("CONFIG", json!({ "subject": subject, "compatibility": level })),
        SchemaCommand::Mode { subject, mode, force } => {
            ("MODE", json!({ "subject": subject, "mode": mode, "force": force }))
        }
    })
}

/// `NAME=SUBJECT[:VERSION]` → Confluent's `{"name", "subject", "version"}` (`-1`: the latest).
fn parse_reference(text: &str) -> Result<Value> {
    let (name, target) =
        text.split_once('=').ok_or_else(|| anyhow!("--ref {text:?}: expected NAME=SUBJECT[:VERSION]"))?;
    let (subject, version) = match target.rsplit_once(':') {
        Some((subject, "latest")) => (subject, -1),
        Some((subject, version)) => {
            let version: i64 = version.parse().ok().filter(|v| *v >= 1).ok_or_else(|| {
                anyhow!("--ref {text:?}: the version must be a number from 1, or latest, not {version:?}")
            })?;
            (subject, version)
        }
        None => (target, -1),
    };
    if name.is_empty() || subject.is_empty() {
        bail!("--ref {text:?}: expected NAME=SUBJECT[:VERSION]");
    }
    Ok(json!({ "name": name, "subject": subject, "version": version }))
}

/// Reads a schema file: (text, AVRO | JSON).
fn read_schema(file: &Path, schema_type: Option<&str>) -> Result<(String, String)> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the schema from stdin")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let schema_type = match schema_type.map(str::to_ascii_uppercase) {
        Some(given) if given == "AVRO" || given == "JSON" || given == "PROTOBUF" => given,
        Some(other) => bail!("--type must be avro, json or protobuf, not {other:?}"),
        None if file.extension().is_some_and(|e| e == "json") => "JSON".into(),
        None if file.extension().is_some_and(|e| e == "proto") => "PROTOBUF".into(),
        None => "AVRO".into(),
    };
    Ok((text, schema_type))
}

/// Samples `semaq schema infer` reads at most; the rest of the input is ignored.
const INFER_SAMPLES_MAX: usize = 100_000;

/// Reads JSON objects, one per line, and proposes an Avro (`avro`) or JSON Schema (`json`).
fn infer(input: impl std::io::BufRead, format: &str, name: &str) -> Result<Value> {
    let mut shape = semaq_registry::infer::Shape::default();
    let mut count = 0;
    for (number, line) in input.lines().enumerate().take(INFER_SAMPLES_MAX) {
        let line = line.context("cannot read the samples")?;
        if line.trim().is_empty() {
            continue;
        }
        let sample: Value = serde_json::from_str(&line).with_context(|| format!("line {}: not JSON", number + 1))?;
        if !sample.is_object() {
            bail!("line {}: a sample must be a JSON object", number + 1);
        }
        shape.add(&sample, 0);
        count += 1;
    }
    if count == 0 {
        bail!("no samples on stdin (one JSON object per line)");
    }
    match format.to_ascii_lowercase().as_str() {
        "avro" => Ok(semaq_registry::infer::avro_schema(&shape, name)),
        "json" => Ok(semaq_registry::infer::json_schema(&shape)),
        other => bail!("--format must be avro or json, not {other:?}"),
    }
}

async fn call(target: &Target, operation: &str, body: &Value) -> Result<Value> {
    let client = target.connect().await?;
    let subject = format!("$SEMAQ.API.SCHEMA.{operation}");
    let request = async_nats::Request::new().payload(body.to_string().into()).timeout(Some(target.timeout));
    let reply = client
        .send_request(subject.clone(), request)
        .await
        .map_err(|error| anyhow!("schema registry request {operation} failed: {error}"))?;
    let answer: Value = serde_json::from_slice(&reply.payload).context("the server's answer is not JSON")?;
    if let (Some(code), Some(message)) = (answer.get("error_code"), answer.get("message").and_then(Value::as_str)) {
        bail!("{message} (error_code {code})");
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infer_reads_one_object_per_line_and_names_bad_lines() {
        let schema = infer("{\"a\": 1}\n\n{\"a\": 2, \"b\": \"x\"}\n".as_bytes(), "avro", "Event").unwrap();
        assert_eq!(schema["name"], "Event");
        assert_eq!(schema["fields"][0], json!({"name": "a", "type": "long"}));
        assert!(infer("{}\n[1]\n".as_bytes(), "json", "E").unwrap_err().to_string().contains("line 2"));
        assert!(infer("".as_bytes(), "json", "E").is_err());
    }

    #[test]
    fn references_are_name_subject_and_version() {
        assert_eq!(
            parse_reference("geo/address.proto=geo-address:2").unwrap(),
            json!({"name": "geo/address.proto", "subject": "geo-address", "version": 2})
        );
        assert_eq!(parse_reference("geo.Address=addr").unwrap()["version"], -1);
        assert_eq!(parse_reference("a=b:latest").unwrap()["version"], -1);
        assert!(parse_reference("no-equals").is_err());
        assert!(parse_reference("a=b:0").is_err());
        assert!(parse_reference("=b").is_err());
    }

    #[test]
    fn register_sends_references_and_normalize() {
        let parts = Parts {
            command: SchemaCommand::Register {
                subject: "orders".into(),
                file: PathBuf::from("order.avsc"),
                schema_type: None,
                references: vec!["geo.Address=geo-address:1".into()],
                normalize: true,
            },
            schema: Some(("{}".into(), "AVRO".into())),
        };
        let (operation, body) = request_for(parts).unwrap();
        assert_eq!(operation, "REGISTER");
        assert_eq!(body["references"], json!([{"name": "geo.Address", "subject": "geo-address", "version": 1}]));
        assert_eq!(body["normalize"], true);
    }

    #[test]
    fn the_file_extension_picks_the_schema_type() {
        let dir = tempfile::tempdir().unwrap();
        let avsc = dir.path().join("event.avsc");
        std::fs::write(&avsc, "\"string\"").unwrap();
        assert_eq!(read_schema(&avsc, None).unwrap().1, "AVRO");
        let json = dir.path().join("event.json");
        std::fs::write(&json, "{}").unwrap();
        assert_eq!(read_schema(&json, None).unwrap().1, "JSON");
        assert_eq!(read_schema(&json, Some("avro")).unwrap().1, "AVRO");
        assert!(read_schema(&json, Some("xml")).is_err());
    }
}
