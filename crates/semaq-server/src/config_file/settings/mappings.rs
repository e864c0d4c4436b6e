//! Subject mappings (`mappings`, or `maps`), top level for the default account `$G` and inside an
//! account's block, in nats-server's syntax:
//!
//! ```text
//! mappings {
//!   foo: bar
//!   "orders.*.*": "orders.$2.$1"
//!   canary: [ {destination: "canary.v1", weight: 90%}, {destination: "canary.v2", weight: 10%} ]
//! }
//! ```
//!
//! Each mapping is checked as it is read, as nats-server adds it to its account, and a bad one
//! stops the server with nats-server's text.

use super::{invalid, string, wrong_type, Mapper};
use crate::config_file::syntax::{Kind, Value};
use crate::config_file::ConfigError;
use crate::mappings::{MapDest, SubjectMapping, SubjectMappings};

impl Mapper<'_> {
    /// `mappings { source: destination(s), ... }` at `path`.
    pub(super) fn mappings(&mut self, path: &str, value: &Value) -> Result<Vec<SubjectMapping>, ConfigError> {
        let Kind::Map(map) = &value.kind else {
            return Err(wrong_type(path, "a block of mappings", value));
        };
        let mut table = SubjectMappings::default();
        let mut mappings = Vec::new();
        for entry in map.entries.iter().filter(|entry| !entry.referenced) {
            let source = entry.key.as_str();
            if !semaq_wire::subject::is_valid_filter(source) {
                return Err(invalid(&entry.at, format!("Subject {source:?} is not a valid subject")));
            }
            let v = &entry.value;
            let destinations = match &v.kind {
                Kind::String(destination) => {
                    let destinations = vec![MapDest::whole(destination)];
                    table.add(source, &destinations).map_err(|error| {
                        invalid(&v.at, format!("Error adding mapping for {source:?} to {destination:?} : {error}"))
                    })?;
                    destinations
                }
                Kind::Array(items) => {
                    let destinations = items.iter().map(destination).collect::<Result<Vec<_>, _>>()?;
                    add_weighted(&mut table, source, &destinations, v)?;
                    destinations
                }
                _ => {
                    let destinations = vec![destination(v)?];
                    add_weighted(&mut table, source, &destinations, v)?;
                    destinations
                }
            };
            mappings.retain(|mapping: &SubjectMapping| mapping.source != source);
            mappings.push(SubjectMapping { source: source.to_string(), destinations });
        }
        Ok(mappings)
    }
}

fn add_weighted(
    table: &mut SubjectMappings,
    source: &str,
    destinations: &[MapDest],
    value: &Value,
) -> Result<(), ConfigError> {
    table
        .add(source, destinations)
        .map_err(|error| invalid(&value.at, format!("Error adding mapping for {source:?} : {error}")))
}

/// One `{destination: d, weight: 40%, cluster: c}`, checked as nats-server's
/// `parseAccountMapDest` checks it.
fn destination(value: &Value) -> Result<MapDest, ConfigError> {
    let Kind::Map(map) = &value.kind else {
        return Err(invalid(&value.at, "Expected an entry for the mapping destination".to_string()));
    };
    let mut destination = MapDest { subject: String::new(), weight: 0, cluster: String::new() };
    let mut weighted = false;
    for entry in &map.entries {
        let v = &entry.value;
        match entry.key.to_ascii_lowercase().as_str() {
            "dest" | "destination" => destination.subject = string("destination", v)?,
            "weight" => {
                destination.weight = weight(v)?;
                weighted = true;
            }
            "cluster" => destination.cluster = string("cluster", v)?,
            _ => return Err(invalid(&v.at, format!("Unknown field {:?} for mapping destination", entry.key))),
        }
    }
    if !weighted {
        let message = format!("Missing weight for mapping destination {:?}", destination.subject);
        return Err(invalid(&value.at, message));
    }
    Ok(destination)
}

/// A weight of 0 to 100: a number, or a string of one with an optional `%`.
fn weight(value: &Value) -> Result<u8, ConfigError> {
    let number = match &value.kind {
        Kind::Integer(number) => *number,
        Kind::String(text) => {
            let digits = text.strip_suffix('%').unwrap_or(text);
            digits
                .parse::<i64>()
                .map_err(|_| invalid(&value.at, format!("Invalid weight {digits:?} for mapping destination")))?
        }
        _ => return Err(invalid(&value.at, format!("Unknown entry type for weight of {}", value.text))),
    };
    u8::try_from(number)
        .ok()
        .filter(|weight| *weight <= 100)
        .ok_or_else(|| invalid(&value.at, format!("Invalid weight {number} for mapping destination")))
}
