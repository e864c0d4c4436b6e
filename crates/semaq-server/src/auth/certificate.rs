//! The names a client certificate offers to `verify_and_map`, in the order nats-server tries
//! them (`checkClientTLSCertSubject` in its `server/auth.go`): e-mail, DNS and URI subject
//! alternative names, then the subject as a distinguished name, then the subject in Go's
//! RFC 2253 text with and without its domain components.

use x509_parser::asn1_rs::{Any, Tag};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// One subject attribute: its type as a dotted OID and its value, when it is a string type Go
/// reads as a string.
type Attribute = (String, Option<String>);

/// What a client certificate can be mapped to a user by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertificateNames {
    /// E-mail, then DNS, then URI subject alternative names, each looked up as a user name.
    alt_names: Vec<String>,
    /// The subject, compared with every user name that parses as a distinguished name; `None`
    /// when it holds an attribute nats-server's DN parser does not know.
    dn: Option<Dn>,
    /// The subject in Go's `RDNSequence.String()` form followed by its `DC=` components, when
    /// it has any.
    subject_with_dcs: Option<String>,
    /// The subject in Go's `RDNSequence.String()` form.
    subject: String,
}

impl CertificateNames {
    /// The names of the DER certificate `der`; `None` when it does not parse.
    pub fn from_der(der: &[u8]) -> Option<Self> {
        let (_, certificate) = X509Certificate::from_der(der).ok()?;
        let subject = subject_attributes(&certificate);
        let subject = subject.as_slice();
        let dcs: Vec<String> =
            strings(subject).filter(|(oid, _)| *oid == DC_OID).map(|(_, value)| format!("DC={value}")).collect();
        let go_subject = go_subject_text(subject);
        Some(Self {
            alt_names: alt_names(&certificate)?,
            dn: Dn::from_subject(subject),
            subject_with_dcs: (!dcs.is_empty()).then(|| format!("{go_subject},{}", dcs.join(","))),
            subject: go_subject,
        })
    }

    /// The user this certificate maps to, trying the names in nats-server's order: each
    /// alternative name that `is_user`, then the first of `dn_users` (user names that parse as
    /// DNs) equal to the subject's DN, then one with the same RDNs in another order, then the
    /// subject's text with its domain components, then without.
    pub fn find_user(&self, is_user: impl Fn(&str) -> bool, dn_users: &[(String, Dn)]) -> Option<String> {
        if let Some(name) = self.alt_names.iter().find(|name| is_user(name)) {
            return Some(name.clone());
        }
        if let Some(subject) = &self.dn {
            let by_dn = |matches: fn(&Dn, &Dn) -> bool| dn_users.iter().find(|(_, dn)| matches(dn, subject));
            if let Some((user, _)) = by_dn(Dn::equal).or_else(|| by_dn(Dn::rdns_match)) {
                return Some(user.clone());
            }
        }
        let texts = self.subject_with_dcs.iter().chain(std::iter::once(&self.subject));
        texts.into_iter().find(|text| is_user(text)).cloned()
    }
}

/// The subject's RDNs in certificate order, each its attributes, bounded by
/// [`crate::limits::CERTIFICATE_NAMES_MAX`] per level.
fn subject_attributes(certificate: &X509Certificate<'_>) -> Vec<Vec<Attribute>> {
    let max = crate::limits::CERTIFICATE_NAMES_MAX;
    let attributes = |rdn: &x509_parser::x509::RelativeDistinguishedName<'_>| -> Vec<Attribute> {
        let pairs = rdn.iter().take(max);
        pairs.map(|pair| (pair.attr_type().to_id_string(), go_string(pair.attr_value()))).collect()
    };
    certificate.subject().iter_rdn().take(max).map(attributes).collect()
}

/// A string value as Go's `crypto/x509` reads one: UTF8String, PrintableString, IA5String,
/// NumericString, T61String (as Latin-1) and BMPString (UTF-16).
fn go_string(value: &Any<'_>) -> Option<String> {
    let bytes = value.data;
    match value.tag() {
        Tag::Utf8String | Tag::NumericString | Tag::PrintableString | Tag::Ia5String => {
            String::from_utf8(bytes.to_vec()).ok()
        }
        Tag::T61String => Some(bytes.iter().map(|byte| char::from(*byte)).collect()),
        Tag::BmpString if bytes.len().is_multiple_of(2) => {
            let units: Vec<u16> = bytes.chunks_exact(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// The e-mail, then DNS, then URI alternative names, each kind in certificate order; `None`
/// when the extension does not parse or one of those names is not UTF-8 (Go refuses such a
/// certificate).
fn alt_names(certificate: &X509Certificate<'_>) -> Option<Vec<String>> {
    let Some(extension) = certificate.subject_alternative_name().ok()? else {
        return Some(Vec::new());
    };
    let (mut emails, mut dns, mut uris) = (Vec::new(), Vec::new(), Vec::new());
    for name in extension.value.general_names.iter().take(crate::limits::CERTIFICATE_NAMES_MAX) {
        match name {
            GeneralName::RFC822Name(email) => emails.push(email.to_string()),
            GeneralName::DNSName(host) => dns.push(host.to_string()),
            GeneralName::URI(uri) => uris.push(uri.to_string()),
            GeneralName::Invalid(tag, _) if [RFC822_NAME, DNS_NAME, URI].contains(tag) => return None,
            _ => {}
        }
    }
    Some(emails.into_iter().chain(dns).chain(uris).collect())
}

/// The context-specific tags of the alternative names `verify_and_map` reads.
const RFC822_NAME: Tag = Tag(1);
const DNS_NAME: Tag = Tag(2);
const URI: Tag = Tag(6);

/// The domain component attribute (`DC`), 0.9.2342.19200300.100.1.25.
const DC_OID: &str = "0.9.2342.19200300.100.1.25";

/// The attribute types nats-server's DN parser knows (its `internal/ldap` table).
const LDAP_TYPES: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.17", "POSTALCODE"),
    (DC_OID, "DC"),
];

/// The subject attributes Go's `pkix.Name` keeps, in the order `ToRDNSequence` writes them;
/// `true` for the two of which Go keeps only the last value.
const GO_NAME_TYPES: &[(&str, &str, bool)] = &[
    ("2.5.4.6", "C", false),
    ("2.5.4.8", "ST", false),
    ("2.5.4.7", "L", false),
    ("2.5.4.9", "STREET", false),
    ("2.5.4.17", "POSTALCODE", false),
    ("2.5.4.10", "O", false),
    ("2.5.4.11", "OU", false),
    ("2.5.4.3", "CN", true),
    ("2.5.4.5", "SERIALNUMBER", true),
];

/// The subject's string-valued attributes in certificate order, as (OID, value).
fn strings(subject: &[Vec<Attribute>]) -> impl Iterator<Item = (&str, &str)> {
    subject.iter().flatten().filter_map(|(oid, value)| Some((oid.as_str(), value.as_deref()?)))
}

/// Go's `cert.Subject.ToRDNSequence().String()`: the attributes `pkix.Name` keeps, one RDN per
/// type (several values of a type joined by `+`), most specific first.
fn go_subject_text(subject: &[Vec<Attribute>]) -> String {
    let rdns: Vec<String> = GO_NAME_TYPES
        .iter()
        .filter_map(|(oid, short, last_only)| {
            let mut of_type: Vec<&str> = strings(subject).filter(|(o, _)| o == oid).map(|(_, v)| v).collect();
            if *last_only {
                of_type = of_type.pop().into_iter().collect();
            }
            let texts: Vec<String> = of_type.iter().map(|value| format!("{short}={}", go_escape(value))).collect();
            (!texts.is_empty()).then(|| texts.join("+"))
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// Go's escaping of an attribute value in `RDNSequence.String()`.
fn go_escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    let last = value.len().saturating_sub(1);
    for (at, c) in value.char_indices() {
        let escape = match c {
            ',' | '+' | '"' | '\\' | '<' | '>' | ';' => true,
            ' ' => at == 0 || at == last,
            '#' => at == 0,
            _ => false,
        };
        if escape {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A distinguished name as nats-server's `internal/ldap` package compares them: RDNs most
/// specific first, each a set of (type, value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dn {
    rdns: Vec<Vec<(String, String)>>,
}

impl Dn {
    /// The certificate subject's DN (`FromRawCertSubject`): `None` when an attribute's type is
    /// not one nats-server knows or its value is not a string.
    fn from_subject(subject: &[Vec<Attribute>]) -> Option<Self> {
        let mut rdns = Vec::new();
        for rdn in subject {
            let mut attributes = Vec::new();
            for (oid, value) in rdn {
                let (_, short) = LDAP_TYPES.iter().find(|(known, _)| *known == oid.as_str())?;
                attributes.push((short.to_string(), value.clone()?));
            }
            attributes.reverse();
            if !attributes.is_empty() {
                rdns.push(attributes);
            }
        }
        rdns.reverse();
        Some(Self { rdns })
    }

    /// An RFC 4514 DN as nats-server's `ldap.ParseDN` reads a user name; `None` when it is not
    /// one (no `type=value` pair, a bad escape, a BER-encoded `#` value).
    pub fn parse(text: &str) -> Option<Self> {
        DnParser::default().parse(text.as_bytes())
    }

    /// Same RDNs in the same order (`DN.Equal`).
    fn equal(&self, other: &Dn) -> bool {
        self.rdns.len() == other.rdns.len() && self.rdns.iter().zip(&other.rdns).all(|(a, b)| rdn_equal(a, b))
    }

    /// Same RDNs in any order (`DN.RDNsMatch`).
    fn rdns_match(&self, other: &Dn) -> bool {
        if self.rdns.len() != other.rdns.len() {
            return false;
        }
        let mut matched = vec![false; other.rdns.len()];
        self.rdns.iter().all(|mine| {
            let found = (0..other.rdns.len()).find(|&at| !matched[at] && rdn_equal(mine, &other.rdns[at]));
            if let Some(at) = found {
                matched[at] = true;
            }
            found.is_some()
        })
    }
}

/// Same attributes in any order; types compare case-insensitively, values exactly.
fn rdn_equal(a: &[(String, String)], b: &[(String, String)]) -> bool {
    let has_all = |mine: &[(String, String)], theirs: &[(String, String)]| {
        theirs.iter().all(|(t, v)| mine.iter().any(|(mt, mv)| mt.eq_ignore_ascii_case(t) && mv == v))
    };
    a.len() == b.len() && has_all(a, b) && has_all(b, a)
}

/// The state of `ldap.ParseDN`.
#[derive(Default)]
struct DnParser {
    rdns: Vec<Vec<(String, String)>>,
    rdn: Vec<(String, String)>,
    buffer: Vec<u8>,
    kind: Option<String>,
    trailing_spaces: usize,
}

impl DnParser {
    fn parse(mut self, text: &[u8]) -> Option<Dn> {
        let mut at = 0;
        let mut escaping = false;
        while at < text.len() {
            let byte = text[at];
            if escaping {
                escaping = false;
                self.trailing_spaces = 0;
                if b" \"#+,;<=>\\".contains(&byte) {
                    self.buffer.push(byte);
                } else {
                    let pair = text.get(at..at + 2)?;
                    let hex = std::str::from_utf8(pair).ok()?;
                    self.buffer.push(u8::from_str_radix(hex, 16).ok()?);
                    at += 1;
                }
            } else {
                match byte {
                    b'\\' => {
                        self.trailing_spaces = 0;
                        escaping = true;
                    }
                    b'=' => {
                        self.kind = Some(self.take()?);
                        if text.get(at + 1) == Some(&b'#') {
                            return None;
                        }
                    }
                    b',' | b'+' => {
                        self.push_attribute()?;
                        if byte == b',' {
                            self.rdns.push(std::mem::take(&mut self.rdn));
                        }
                    }
                    b' ' if self.buffer.is_empty() => {}
                    _ => {
                        self.trailing_spaces = if byte == b' ' { self.trailing_spaces + 1 } else { 0 };
                        self.buffer.push(byte);
                    }
                }
            }
            at += 1;
        }
        if !self.buffer.is_empty() {
            self.push_attribute()?;
            self.rdns.push(std::mem::take(&mut self.rdn));
        }
        Some(Dn { rdns: self.rdns })
    }

    /// The buffered text without its unescaped trailing spaces.
    fn take(&mut self) -> Option<String> {
        let keep = self.buffer.len() - self.trailing_spaces.min(self.buffer.len());
        self.buffer.truncate(keep);
        self.trailing_spaces = 0;
        String::from_utf8(std::mem::take(&mut self.buffer)).ok()
    }

    fn push_attribute(&mut self) -> Option<()> {
        let kind = self.kind.take().filter(|kind| !kind.is_empty())?;
        let value = self.take()?;
        self.rdn.push((kind, value));
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dn(text: &str) -> Dn {
        Dn::parse(text).unwrap_or_else(|| panic!("{text} should parse"))
    }

    #[test]
    fn user_names_parse_as_nats_server_parses_them() {
        let parsed = dn("CN=example.com, OU=NATS\\, Inc,O=Synadia+L=LA, DC=foo ");
        let pairs =
            |list: &[(&str, &str)]| list.iter().map(|(t, v)| (t.to_string(), v.to_string())).collect::<Vec<_>>();
        assert_eq!(
            parsed.rdns,
            vec![
                pairs(&[("CN", "example.com")]),
                pairs(&[("OU", "NATS, Inc")]),
                pairs(&[("O", "Synadia"), ("L", "LA")]),
                pairs(&[("DC", "foo")]),
            ]
        );
        assert_eq!(dn("CN=a\\41b").rdns, vec![vec![("CN".to_string(), "aAb".to_string())]]);
        for not_a_dn in ["alice@example.com", "CN=#04", "=x", "CN=a\\4"] {
            assert!(Dn::parse(not_a_dn).is_none(), "{not_a_dn}");
        }
    }

    #[test]
    fn dns_are_equal_in_order_and_match_in_any_order_with_types_ignoring_case() {
        assert!(dn("CN=a,O=b").equal(&dn("cn=a,o=b")));
        assert!(!dn("CN=a,O=b").equal(&dn("O=b,CN=a")));
        assert!(dn("CN=a,O=b").rdns_match(&dn("O=b,CN=a")));
        assert!(!dn("CN=a,O=b").rdns_match(&dn("CN=a,O=B")));
        assert!(!dn("CN=a,CN=a").rdns_match(&dn("CN=a,O=b")));
    }

    #[test]
    fn garbage_bytes_are_no_certificate() {
        let truncated = [0x30, 0x05, 0x01];
        let overlong = [0x30, 0x85, 1, 1, 1, 1, 1];
        let noise: Vec<u8> = (0u8..=255).cycle().skip(7).take(600).collect();
        for garbage in [&[][..], &[0x30, 0x00], &truncated, &overlong, &noise] {
            assert_eq!(CertificateNames::from_der(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn alternative_names_map_before_the_subject_emails_first() {
        let mut params = rcgen::CertificateParams::new(vec!["host.example.com".to_string()]).unwrap();
        params.subject_alt_names.push(rcgen::SanType::URI("nats://uri".try_into().unwrap()));
        params.subject_alt_names.push(rcgen::SanType::Rfc822Name("a@example.com".try_into().unwrap()));
        params.distinguished_name.push(rcgen::DnType::CommonName, "alice");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "Acme, Inc");
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        let names = CertificateNames::from_der(certificate.der()).unwrap();
        assert_eq!(names.alt_names, ["a@example.com", "host.example.com", "nats://uri"]);
        assert_eq!(names.subject, "CN=alice,O=Acme\\, Inc");
        let anyone = |_: &str| true;
        assert_eq!(names.find_user(anyone, &[]).as_deref(), Some("a@example.com"));
        let subject_only = |name: &str| name.starts_with("CN=");
        assert_eq!(names.find_user(subject_only, &[]).as_deref(), Some("CN=alice,O=Acme\\, Inc"));
        let by_dn = [("user".to_string(), dn("O=Acme\\, Inc,CN=alice"))];
        assert_eq!(names.find_user(|_| false, &by_dn).as_deref(), Some("user"));
    }

    #[test]
    fn values_are_escaped_as_go_escapes_them() {
        assert_eq!(go_escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(go_escape(" #x y "), "\\ #x y\\ ");
        assert_eq!(go_escape("#x"), "\\#x");
        assert_eq!(go_escape("x#"), "x#");
    }
}
