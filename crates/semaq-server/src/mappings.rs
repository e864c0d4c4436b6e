//! Subject mappings as nats-server defines them (`AddWeightedMappings` and
//! `selectMappedSubject` in its `accounts.go`): an account's table of source subjects, each with
//! weighted destinations, which rewrites the subject of every message a client publishes before
//! it is routed.
//!
//! A mapping's weights (per cent) need not sum to 100: unless the source is itself one of the
//! destinations, the rest keeps the message on its own subject; when it is, the rest is lost
//! (nats-server's "chaos" mapping), the message then going to the empty subject, which nothing
//! matches. Destinations scoped to a cluster are kept out, as on a nats-server in no such
//! cluster, but still count towards the per-cluster weight and duplicate checks.
//!
//! Pure: no I/O, no locks; the table is built once at start and shared read-only.

use std::collections::HashMap;
use std::sync::Arc;

use semaq_wire::subject;

use crate::limits;
use crate::transform::{self, Transform, TransformError};

/// One destination of a mapping, as the config file or an account JWT gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapDest {
    /// The destination subject, possibly with mapping functions.
    pub subject: String,
    /// Per cent of the messages that go there.
    pub weight: u8,
    /// The cluster the destination applies in; empty for everywhere.
    pub cluster: String,
}

impl MapDest {
    /// All of the messages to `subject`, in every cluster.
    pub fn whole(subject: &str) -> Self {
        Self { subject: subject.to_string(), weight: 100, cluster: String::new() }
    }
}

/// A source subject with its destinations, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectMapping {
    /// The published subject (or wildcard filter) the mapping applies to.
    pub source: String,
    /// Where the messages go, by weight.
    pub destinations: Vec<MapDest>,
}

/// Why a mapping cannot be added, worded as nats-server words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// The source is not a valid subject.
    #[error("invalid subject")]
    BadSubject,
    /// Two destinations with one subject.
    #[error("duplicate entry for {0:?}")]
    Duplicate(String),
    /// A destination's weight over 100.
    #[error("individual weights need to be <= 100")]
    Weight,
    /// The destinations' weights (in one cluster) over 100.
    #[error("total weight needs to be <= 100")]
    TotalWeight,
    /// A destination that is no valid transform of the source.
    #[error(transparent)]
    Destination(#[from] TransformError),
    /// More destinations than [`limits::MAPPING_DESTINATIONS_MAX`].
    #[error("more than {0} destinations")]
    TooManyDestinations(usize),
    /// More mappings than [`limits::ACCOUNT_MAPPINGS_MAX`].
    #[error("more than {0} mappings in the account")]
    TooManyMappings(usize),
}

/// A destination's transform (`None`: the subject as published) with its weight, before the
/// running sums.
type Weighted = (Option<Transform>, u8);

/// Where a share of a mapping's messages goes.
#[derive(Debug, Clone)]
struct Destination {
    /// `None`: the subject stays as published (the share the weights leave).
    transform: Option<Transform>,
    /// The running sum of the weights up to this one: a draw below it (and not below the one
    /// before) picks this destination.
    below: u8,
}

#[derive(Debug, Clone)]
struct Mapping {
    source: String,
    wildcard: bool,
    destinations: Vec<Destination>,
    /// Destinations scoped to a cluster, by cluster: never drawn here (SemaQ is in none), only
    /// shown, as nats-server's `/accountz` shows them.
    scoped: Vec<(String, Vec<Destination>)>,
}

/// Each account's subject mappings by account name, for the accounts that have any.
pub type AccountMappings = HashMap<String, Arc<SubjectMappings>>;

/// An account's subject mappings, in the order they were added.
#[derive(Debug, Clone, Default)]
pub struct SubjectMappings {
    mappings: Vec<Mapping>,
}

impl SubjectMappings {
    /// The table holding each of `mappings`, or the first one that cannot be added (with its
    /// source).
    pub fn build(mappings: &[SubjectMapping]) -> Result<Self, (String, MappingError)> {
        let mut table = Self::default();
        for mapping in mappings {
            table.add(&mapping.source, &mapping.destinations).map_err(|error| (mapping.source.clone(), error))?;
        }
        Ok(table)
    }

    /// Whether there is no mapping.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
    }

    /// Adds the mapping of `source` to `destinations`, replacing one of the same source in place;
    /// checked in nats-server's order, so the first problem it names is the one reported.
    pub fn add(&mut self, source: &str, destinations: &[MapDest]) -> Result<(), MappingError> {
        if !subject::is_valid_filter(source) {
            return Err(MappingError::BadSubject);
        }
        if destinations.len() > limits::MAPPING_DESTINATIONS_MAX {
            return Err(MappingError::TooManyDestinations(limits::MAPPING_DESTINATIONS_MAX));
        }
        let mut seen: Vec<&str> = Vec::with_capacity(destinations.len());
        let mut totals: Vec<(&str, u32)> = Vec::new();
        let mut unscoped = Vec::new();
        let mut scoped: Vec<(String, Vec<Weighted>)> = Vec::new();
        for destination in destinations {
            if seen.contains(&destination.subject.as_str()) {
                return Err(MappingError::Duplicate(destination.subject.clone()));
            }
            seen.push(&destination.subject);
            if destination.weight > 100 {
                return Err(MappingError::Weight);
            }
            if add_weight(&mut totals, &destination.cluster, destination.weight) > 100 {
                return Err(MappingError::TotalWeight);
            }
            if destination.subject.is_empty() {
                // nats-server takes it and then fails on the first message it maps.
                return Err(TransformError::InvalidDestination(String::new()).into());
            }
            transform::validate_mapping(source, &destination.subject)?;
            let transform = Transform::new(source, &destination.subject)?;
            match scoped.iter_mut().find(|(cluster, _)| *cluster == destination.cluster) {
                _ if destination.cluster.is_empty() => unscoped.push((transform, destination.weight)),
                Some((_, list)) => list.push((transform, destination.weight)),
                None => scoped.push((destination.cluster.clone(), vec![(transform, destination.weight)])),
            }
        }
        let source_listed = seen.contains(&source);
        let mapping = Mapping {
            source: source.to_string(),
            wildcard: subject::has_wildcard(source),
            destinations: weighted(unscoped, source_listed),
            scoped: scoped.into_iter().map(|(cluster, list)| (cluster, weighted(list, source_listed))).collect(),
        };
        let full = self.mappings.len() >= limits::ACCOUNT_MAPPINGS_MAX;
        match self.mappings.iter_mut().find(|existing| existing.source == source) {
            Some(existing) => *existing = mapping,
            None if full => return Err(MappingError::TooManyMappings(limits::ACCOUNT_MAPPINGS_MAX)),
            None => self.mappings.push(mapping),
        }
        Ok(())
    }

    /// The subject a message published to `published` goes to instead, drawn by weight for
    /// each message; `None` when no mapping applies. The first mapping (in order added) whose
    /// source takes the subject decides; an empty subject when the weights leave the message
    /// nowhere. As in nats-server, a non-pedantic client's `*` or `>` token is taken where the
    /// source has a `*` (or a `>` covering it) and passes into the destination as it is.
    pub fn select(&self, published: &str) -> Option<String> {
        let mapping = self.mappings.iter().find(|mapping| match mapping.wildcard {
            // Neither server delivers a subject with an empty token; mapping none keeps a
            // destination that drops that token from delivering it (nats-server maps none).
            true => subject::is_routable(published) && subject::is_subset(published, &mapping.source),
            false => mapping.source == published,
        })?;
        let chosen = match mapping.destinations.as_slice() {
            [only] if only.below == 100 => Some(only),
            all => {
                let draw = (rand::random::<u32>() % 100) as u8;
                all.iter().find(|destination| draw < destination.below)
            }
        };
        Some(chosen.map_or_else(String::new, |destination| destination.apply(published)))
    }

    /// Each mapping's source with its destinations as nats-server's `/accountz` shows them:
    /// ordered by weight, each weight the running sum up to it, the published subject itself
    /// (wildcards as `$N`) for what the weights leave, cluster-scoped ones after the others.
    pub fn describe(&self) -> Vec<(&str, Vec<MapDest>)> {
        let shown = |mapping: &Mapping, destinations: &[Destination], cluster: &str| {
            let subject = |d: &Destination| {
                d.transform.as_ref().map_or_else(|| tokenize(&mapping.source), |t| t.destination().to_string())
            };
            let describe = |d: &Destination| MapDest { subject: subject(d), weight: d.below, cluster: cluster.into() };
            destinations.iter().map(describe).collect::<Vec<_>>()
        };
        self.mappings
            .iter()
            .map(|mapping| {
                let mut destinations = shown(mapping, &mapping.destinations, "");
                for (cluster, scoped) in &mapping.scoped {
                    destinations.extend(shown(mapping, scoped, cluster));
                }
                (mapping.source.as_str(), destinations)
            })
            .collect()
    }
}

/// nats-server's `transformTokenize`: each `*` of `source` as `$1`, `$2`...
fn tokenize(source: &str) -> String {
    let mut star = 0;
    let tokens = source.split('.').map(|token| match token {
        "*" => {
            star += 1;
            format!("${star}")
        }
        _ => token.to_string(),
    });
    tokens.collect::<Vec<_>>().join(".")
}

impl Destination {
    fn apply(&self, published: &str) -> String {
        self.transform.as_ref().map_or_else(|| published.to_string(), |transform| transform.rewrite_taken(published))
    }
}

/// Adds `weight` to `cluster`'s total and returns the new total.
fn add_weight<'a>(totals: &mut Vec<(&'a str, u32)>, cluster: &'a str, weight: u8) -> u32 {
    let at = match totals.iter().position(|(name, _)| *name == cluster) {
        Some(at) => at,
        None => {
            totals.push((cluster, 0));
            totals.len() - 1
        }
    };
    totals[at].1 += u32::from(weight);
    totals[at].1
}

/// The destinations ordered by weight with running sums, plus the published subject itself for
/// what the weights leave, unless the source is listed (then the rest is lost).
fn weighted(destinations: Vec<Weighted>, source_listed: bool) -> Vec<Destination> {
    let mut destinations = destinations;
    let total: u32 = destinations.iter().map(|(_, weight)| u32::from(*weight)).sum();
    if total != 100 && !source_listed {
        let rest = if destinations.is_empty() { 100 } else { 100 - total.min(100) as u8 };
        destinations.push((None, rest));
    }
    destinations.sort_by_key(|(_, weight)| *weight);
    let mut sum = 0u8;
    destinations
        .into_iter()
        .map(|(transform, weight)| {
            sum = sum.saturating_add(weight);
            Destination { transform, below: sum }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(subject: &str, weight: u8) -> MapDest {
        MapDest { subject: subject.to_string(), weight, cluster: String::new() }
    }

    fn table(source: &str, destinations: &[MapDest]) -> SubjectMappings {
        let mut table = SubjectMappings::default();
        table.add(source, destinations).expect("valid mapping");
        table
    }

    /// How many of 1,000 draws for `published` go to each of `subjects`.
    fn counts(table: &SubjectMappings, published: &str, subjects: &[&str]) -> Vec<usize> {
        let draws: Vec<String> = (0..1_000).map(|_| table.select(published).expect("mapped")).collect();
        subjects.iter().map(|subject| draws.iter().filter(|drawn| drawn == subject).count()).collect()
    }

    #[test]
    fn a_literal_mapping_rewrites_only_its_subject() {
        let table = table("foo", &[MapDest::whole("bar")]);
        assert_eq!(table.select("foo").as_deref(), Some("bar"));
        assert_eq!(table.select("foo.x"), None);
    }

    #[test]
    fn a_wildcard_mapping_moves_tokens() {
        let table = table("orders.*.*", &[MapDest::whole("by.{{wildcard(2)}}.$1")]);
        assert_eq!(table.select("orders.eu.7").as_deref(), Some("by.7.eu"));
    }

    #[test]
    fn a_published_wildcard_token_is_taken_by_a_wildcard_source_and_passes_through() {
        let table = table("a.*.*", &[MapDest::whole("b.$2.$1")]);
        assert_eq!(table.select("a.*.x").as_deref(), Some("b.x.*"));
        assert_eq!(table.select("a.>"), None);
        assert_eq!(table.select("a..x"), None);
        let tail = table_of("t.>", "u.>");
        assert_eq!(tail.select("t.*.>").as_deref(), Some("u.*.>"));
        assert_eq!(table_of("foo", "bar").select("*"), None);
    }

    fn table_of(source: &str, destination: &str) -> SubjectMappings {
        table(source, &[MapDest::whole(destination)])
    }

    #[test]
    fn weights_short_of_100_leave_the_rest_on_the_published_subject() {
        let table = table("foo", &[dest("bar", 50)]);
        let [bar, foo] = counts(&table, "foo", &["bar", "foo"])[..] else { panic!("two counts") };
        assert_eq!(bar + foo, 1_000);
        assert!((350..=650).contains(&bar), "bar drawn {bar} times of 1000");
    }

    #[test]
    fn listing_the_source_loses_what_the_weights_leave() {
        let table = table("foo", &[dest("bar", 40), dest("foo", 20)]);
        let [bar, foo, lost] = counts(&table, "foo", &["bar", "foo", ""])[..] else { panic!("three counts") };
        assert_eq!(bar + foo + lost, 1_000);
        assert!((250..=550).contains(&bar) && (80..=320).contains(&foo) && (250..=550).contains(&lost));
    }

    #[test]
    fn cluster_scoped_destinations_do_not_apply_without_that_cluster() {
        let scoped = MapDest { cluster: "east".into(), ..MapDest::whole("bar") };
        let table = table("foo", &[scoped]);
        assert_eq!(table.select("foo").as_deref(), Some("foo"));
    }

    #[test]
    fn the_first_matching_mapping_decides_and_a_new_one_for_a_source_replaces_it() {
        let mut table = table("a.*", &[MapDest::whole("first.$1")]);
        table.add("a.b", &[MapDest::whole("second")]).expect("valid");
        assert_eq!(table.select("a.b").as_deref(), Some("first.b"));
        table.add("a.*", &[MapDest::whole("third.$1")]).expect("valid");
        assert_eq!(table.select("a.b").as_deref(), Some("third.b"));
    }

    #[test]
    fn bad_mappings_are_refused_with_nats_server_texts() {
        let error = |source: &str, destinations: &[MapDest]| {
            SubjectMappings::default().add(source, destinations).expect_err("refused").to_string()
        };
        assert_eq!(error("foo..x", &[MapDest::whole("bar")]), "invalid subject");
        assert_eq!(error("foo.>", &[MapDest::whole("bar")]), "invalid subject");
        assert_eq!(error("foo", &[dest("a", 50), dest("a", 10)]), "duplicate entry for \"a\"");
        assert_eq!(error("foo", &[dest("a", 101)]), "individual weights need to be <= 100");
        assert_eq!(error("foo", &[MapDest::whole("")]), "invalid mapping destination: invalid transform");
        assert_eq!(error("foo", &[dest("a", 60), dest("b", 50)]), "total weight needs to be <= 100");
        assert_eq!(
            error("foo.*", &[MapDest::whole("bar.$2")]),
            "invalid mapping destination: wildcard index out of range in $2: [2]"
        );
        assert_eq!(
            error("foo.*", &[MapDest::whole("bar.{{nope(1)}}")]),
            "invalid mapping destination: unknown function in {{nope(1)}}"
        );
    }

    #[test]
    fn the_description_shows_running_weights_and_the_rest_as_nats_server_does() {
        let east = MapDest { cluster: "east".into(), ..dest("only.$2", 100) };
        let table = table("a.*.*", &[dest("b.$1", 70), dest("c.$2", 20), east]);
        let shown = table.describe();
        let weights: Vec<(&str, u8, &str)> =
            shown[0].1.iter().map(|d| (d.subject.as_str(), d.weight, d.cluster.as_str())).collect();
        assert_eq!(shown[0].0, "a.*.*");
        assert_eq!(weights, [("a.$1.$2", 10, ""), ("c.$2", 30, ""), ("b.$1", 100, ""), ("only.$2", 100, "east")]);
    }

    #[test]
    fn weights_total_per_cluster() {
        let east = |subject: &str| MapDest { cluster: "east".into(), ..dest(subject, 60) };
        assert!(SubjectMappings::default().add("foo", &[dest("a", 60), east("b")]).is_ok());
        let refused = SubjectMappings::default().add("foo", &[east("a"), east("b")]);
        assert_eq!(refused, Err(MappingError::TotalWeight));
    }
}
