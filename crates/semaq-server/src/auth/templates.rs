//! Scope templates: the `{{...}}` placeholders a scoped signing key's permissions may hold,
//! filled in per user at connect as nats-server's `processUserPermissionsTemplate` does.
//!
//! `{{name()}}`, `{{subject()}}`, `{{account-name()}}` and `{{account-subject()}}` give one value;
//! `{{tag(x)}}` and `{{account-tag(x)}}` give one per `x:<value>` tag, so a subject with tags
//! expands to every combination. A subject that comes out invalid (a tag the user lacks) is
//! left out of an allow list, and refuses the user in a deny list, so a missing tag never
//! widens what the user may do; an allow list emptied that way becomes a deny of `>`.

use semaq_wire::subject;

use super::jwt::{SubjectList, UserPermissionLimits};
use crate::limits;

/// What the placeholders stand for, for one user.
#[derive(Debug, Clone, Copy)]
pub struct TemplateValues<'a> {
    /// The user JWT's `name`.
    pub user_name: &'a str,
    /// The user's public key.
    pub user_key: &'a str,
    /// The user JWT's `tags`.
    pub user_tags: &'a [String],
    /// The account JWT's `name`.
    pub account_name: &'a str,
    /// The account's public key.
    pub account_key: &'a str,
    /// The account JWT's `tags`.
    pub account_tags: &'a [String],
}

/// Why a template could not be filled in for a user; the texts are nats-server's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A placeholder that names no known operation.
    #[error("template operation in {subject:?}: {operation:?} is not defined")]
    UnknownOperation {
        /// The subject holding it.
        subject: String,
        /// What it names.
        operation: String,
    },
    /// A deny-list subject naming a tag the user (or account) does not have.
    #[error("generated invalid subject {subject:?}: {tag:?} is not defined")]
    MissingTag {
        /// The subject holding it.
        subject: String,
        /// The tag's name.
        tag: String,
    },
    /// A deny-list subject that is not valid once filled in.
    #[error("generated invalid subject")]
    InvalidSubject,
    /// More subjects than [`limits::TEMPLATE_SUBJECTS_MAX`].
    #[error("template expansion exceeds limit: {0}")]
    TooManySubjects(usize),
}

/// Whether any subject of the permissions holds a placeholder.
pub fn has_placeholders(permissions: &UserPermissionLimits) -> bool {
    let lists = [&permissions.publish, &permissions.subscribe];
    lists.iter().flat_map(|list| list.allow.iter().chain(list.deny.iter()).flatten()).any(|s| !spans(s).is_empty())
}

/// The permissions with every placeholder filled in from `values`.
pub fn fill(
    permissions: &UserPermissionLimits,
    values: &TemplateValues<'_>,
) -> Result<UserPermissionLimits, TemplateError> {
    let mut filled = permissions.clone();
    filled.subscribe = fill_lists(&permissions.subscribe, values)?;
    filled.publish = fill_lists(&permissions.publish, values)?;
    Ok(filled)
}

fn fill_lists(list: &SubjectList, values: &TemplateValues<'_>) -> Result<SubjectList, TemplateError> {
    let allow = list.allow.as_deref().map(|allow| fill_list(allow, values, false)).transpose()?;
    let mut deny = list.deny.as_deref().map(|deny| fill_list(deny, values, true)).transpose()?;
    let allow_emptied = allow.as_ref().is_some_and(Vec::is_empty) && list.allow.as_ref().is_some_and(|a| !a.is_empty());
    if allow_emptied {
        let deny = deny.get_or_insert_with(Vec::new);
        if !deny.iter().any(|s| s == ">") {
            deny.push(">".to_string());
        }
    }
    Ok(SubjectList { allow, deny })
}

/// One list filled in; `strict` (deny lists) refuses a subject that comes out invalid rather
/// than leaving it out.
fn fill_list(list: &[String], values: &TemplateValues<'_>, strict: bool) -> Result<Vec<String>, TemplateError> {
    if list.iter().all(|s| spans(s).is_empty()) {
        return Ok(list.to_vec());
    }
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        fill_entry(entry, values, strict, &mut out)?;
    }
    Ok(out)
}

fn fill_entry(
    entry: &str,
    values: &TemplateValues<'_>,
    strict: bool,
    out: &mut Vec<String>,
) -> Result<(), TemplateError> {
    let spans = spans(entry);
    let choices = spans
        .iter()
        .map(|&(start, end)| placeholder_values(entry, &entry[start + 2..end - 2], values, strict))
        .collect::<Result<Vec<_>, _>>()?;
    let combinations = choices.iter().try_fold(1usize, |count, choice| {
        count.checked_mul(choice.len()).filter(|total| *total <= limits::TEMPLATE_SUBJECTS_MAX)
    });
    let combinations = combinations.ok_or(TemplateError::TooManySubjects(limits::TEMPLATE_SUBJECTS_MAX))?;
    if out.len() + combinations > limits::TEMPLATE_SUBJECTS_MAX {
        return Err(TemplateError::TooManySubjects(limits::TEMPLATE_SUBJECTS_MAX));
    }
    let mut picks = vec![0usize; choices.len()];
    for _ in 0..combinations {
        let mut filled = String::with_capacity(entry.len());
        let mut rest = 0;
        for (index, &(start, end)) in spans.iter().enumerate() {
            filled.push_str(&entry[rest..start]);
            filled.push_str(&choices[index][picks[index]]);
            rest = end;
        }
        filled.push_str(&entry[rest..]);
        if subject::is_valid_filter(&filled) {
            out.push(filled);
        } else if strict {
            return Err(TemplateError::InvalidSubject);
        }
        next_pick(&mut picks, &choices);
    }
    Ok(())
}

/// Advances `picks` to the next combination, the last placeholder fastest (as nats-server's
/// cartesian product orders them).
fn next_pick(picks: &mut [usize], choices: &[Vec<String>]) {
    for index in (0..picks.len()).rev() {
        picks[index] += 1;
        if picks[index] < choices[index].len() {
            return;
        }
        picks[index] = 0;
    }
}

/// What one placeholder's operation stands for: one value, or one per matching tag. A missing
/// tag gives a value no subject may hold (a space), so its subject is left out, unless `strict`.
fn placeholder_values(
    entry: &str,
    operation: &str,
    values: &TemplateValues<'_>,
    strict: bool,
) -> Result<Vec<String>, TemplateError> {
    let operation = operation.trim();
    let single = |value: &str| Ok(vec![value.to_string()]);
    if operation.eq_ignore_ascii_case("name()") {
        return single(values.user_name);
    }
    if operation.eq_ignore_ascii_case("subject()") {
        return single(values.user_key);
    }
    if operation.eq_ignore_ascii_case("account-name()") {
        return single(values.account_name);
    }
    if operation.eq_ignore_ascii_case("account-subject()") {
        return single(values.account_key);
    }
    let (tag, tags) = match (call_argument(operation, "tag("), call_argument(operation, "account-tag(")) {
        (Some(tag), _) => (tag, values.user_tags),
        (None, Some(tag)) => (tag, values.account_tags),
        (None, None) => {
            return Err(TemplateError::UnknownOperation {
                subject: entry.to_string(),
                operation: operation.to_string(),
            })
        }
    };
    let prefix = format!("{}:", tag.to_lowercase());
    let found: Vec<String> = tags.iter().filter_map(|t| t.strip_prefix(&prefix)).map(str::to_string).collect();
    match (found.is_empty(), strict) {
        (false, _) => Ok(found),
        (true, true) => Err(TemplateError::MissingTag { subject: entry.to_string(), tag: tag.to_string() }),
        (true, false) => single(" "),
    }
}

/// The argument of `operation` when it is a call of `name` (case-insensitive), e.g. `tag(x)`.
fn call_argument<'o>(operation: &'o str, name: &str) -> Option<&'o str> {
    let head = operation.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    operation[name.len()..].strip_suffix(')')
}

/// Byte ranges of the `{{...}}` placeholders in `text`: two braces, at least one character that
/// is not a closing brace, two closing braces (nats-server's `{{2}([^}]+)}{2}`).
fn spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while at + 1 < bytes.len() {
        if bytes[at] != b'{' || bytes[at + 1] != b'{' {
            at += 1;
            continue;
        }
        let inner = at + 2;
        let close = bytes[inner..].iter().position(|b| *b == b'}').map(|offset| inner + offset);
        match close {
            Some(close) if close > inner && bytes.get(close + 1) == Some(&b'}') => {
                found.push((at, close + 2));
                at = close + 2;
            }
            _ => at += 1,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(user_tags: &'a [String], account_tags: &'a [String]) -> TemplateValues<'a> {
        TemplateValues {
            user_name: "alice",
            user_key: "UKEY",
            user_tags,
            account_name: "sales",
            account_key: "AKEY",
            account_tags,
        }
    }

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    fn list(allow: &[&str], deny: &[&str]) -> SubjectList {
        let some = |l: &[&str]| (!l.is_empty()).then(|| tags(l));
        SubjectList { allow: some(allow), deny: some(deny) }
    }

    fn publish(allow: &[&str], deny: &[&str]) -> UserPermissionLimits {
        UserPermissionLimits { publish: list(allow, deny), ..Default::default() }
    }

    #[test]
    fn names_and_keys_fill_in_anywhere_in_a_subject() {
        let template =
            publish(&["u.{{name()}}.>", "k.{{subject()}}", "a.{{account-name()}}.{{ account-subject() }}"], &[]);
        let filled = fill(&template, &values(&[], &[])).expect("filled");
        assert_eq!(filled.publish.allow, Some(tags(&["u.alice.>", "k.UKEY", "a.sales.AKEY"])));
        let upper = publish(&["x{{NAME()}}y"], &[]);
        assert_eq!(fill(&upper, &values(&[], &[])).expect("filled").publish.allow, Some(tags(&["xalicey"])));
    }

    #[test]
    fn a_tag_with_several_values_expands_to_every_combination() {
        let (user, account) = (tags(&["dept:eng", "dept:ops", "other:x"]), tags(&["region:eu", "region:us"]));
        let template = publish(&["{{tag(Dept)}}.{{account-tag(region)}}"], &[]);
        let filled = fill(&template, &values(&user, &account)).expect("filled");
        assert_eq!(filled.publish.allow, Some(tags(&["eng.eu", "eng.us", "ops.eu", "ops.us"])));
    }

    #[test]
    fn a_missing_tag_drops_the_allow_subject_and_refuses_in_a_deny_list() {
        let template = publish(&["{{tag(dept)}}.>", "open"], &[]);
        assert_eq!(fill(&template, &values(&[], &[])).expect("filled").publish.allow, Some(tags(&["open"])));
        let only = fill(&publish(&["{{tag(dept)}}.>"], &[]), &values(&[], &[])).expect("filled");
        assert_eq!(only.publish.allow, Some(Vec::new()));
        assert_eq!(only.publish.deny, Some(tags(&[">"])), "an emptied allow list allows nothing");
        let denied = fill(&publish(&[], &["{{tag(dept)}}"]), &values(&[], &[]));
        assert!(matches!(denied, Err(TemplateError::MissingTag { .. })), "{denied:?}");
    }

    #[test]
    fn an_unknown_operation_refuses_the_user() {
        let filled = fill(&publish(&["a.{{nope()}}"], &[]), &values(&[], &[]));
        let expected = TemplateError::UnknownOperation { subject: "a.{{nope()}}".into(), operation: "nope()".into() };
        assert_eq!(filled, Err(expected));
    }

    #[test]
    fn lists_without_placeholders_are_left_as_they_are() {
        let template = UserPermissionLimits { subscribe: list(&["a", "b.*"], &["c"]), ..Default::default() };
        assert!(!has_placeholders(&template));
        assert!(has_placeholders(&publish(&["a.{{name()}}"], &[])));
        assert!(!has_placeholders(&publish(&["a.{{}}", "b.{x}"], &[])), "no operation between the braces");
        assert_eq!(fill(&template, &values(&[], &[])).expect("filled"), template);
    }

    #[test]
    fn expansions_past_the_bound_refuse_the_user() {
        let many: Vec<String> = (0..100).map(|i| format!("t:{i}")).collect();
        let template = publish(&["{{tag(t)}}.{{tag(t)}}"], &[]);
        assert_eq!(
            fill(&template, &values(&many, &[])),
            Err(TemplateError::TooManySubjects(limits::TEMPLATE_SUBJECTS_MAX))
        );
    }
}
