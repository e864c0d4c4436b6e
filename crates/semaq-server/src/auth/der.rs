//! Just enough DER to read an X.509 certificate's subject and subject alternative names, for
//! `verify_and_map` (rustls has already verified the certificate; this only reads names).

/// One subject attribute: its type as a dotted OID and its value, when it is a string type Go
/// reads as a string.
pub(super) type Attribute = (String, Option<String>);

/// A certificate's subject (RDNs in certificate order, each a set of attributes) and its
/// e-mail, DNS and URI alternative names in certificate order.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Names {
    pub subject: Vec<Vec<Attribute>>,
    pub emails: Vec<String>,
    pub dns: Vec<String>,
    pub uris: Vec<String>,
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const EXPLICIT_VERSION: u8 = 0xa0;
const EXPLICIT_EXTENSIONS: u8 = 0xa3;
const RFC822_NAME: u8 = 0x81;
const DNS_NAME: u8 = 0x82;
const URI: u8 = 0x86;
const SUBJECT_ALT_NAME: &str = "2.5.29.17";

/// The names of the DER certificate `der`; `None` when it is not one.
pub(super) fn names(der: &[u8]) -> Option<Names> {
    let (tag, certificate, _) = element(der)?;
    expect(tag, SEQUENCE)?;
    let (tag, tbs, _) = element(certificate)?;
    expect(tag, SEQUENCE)?;
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == EXPLICIT_VERSION {
        rest = after;
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = element(rest)?.2;
    }
    let (tag, subject, mut rest) = element(rest)?;
    expect(tag, SEQUENCE)?;
    let mut names = Names { subject: rdns(subject)?, ..Names::default() };
    rest = element(rest)?.2; // subjectPublicKeyInfo
    while !rest.is_empty() {
        let (tag, content, after) = element(rest)?;
        if tag == EXPLICIT_EXTENSIONS {
            alt_names(content, &mut names)?;
        }
        rest = after;
    }
    Some(names)
}

fn expect(tag: u8, wanted: u8) -> Option<()> {
    (tag == wanted).then_some(())
}

/// The first element of `input`: its tag, its content and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count].iter().fold(0usize, |length, byte| (length << 8) | usize::from(*byte));
        (length, &rest[count..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// Every element of `input`, bounded by [`crate::limits::CERTIFICATE_NAMES_MAX`].
fn elements(mut input: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while !input.is_empty() && out.len() < crate::limits::CERTIFICATE_NAMES_MAX {
        let (tag, content, rest) = element(input)?;
        out.push((tag, content));
        input = rest;
    }
    Some(out)
}

fn rdns(name: &[u8]) -> Option<Vec<Vec<Attribute>>> {
    let mut rdns = Vec::new();
    for (tag, set) in elements(name)? {
        expect(tag, SET)?;
        let mut attributes = Vec::new();
        for (tag, pair) in elements(set)? {
            expect(tag, SEQUENCE)?;
            let (tag, oid_bytes, rest) = element(pair)?;
            expect(tag, OID)?;
            let (value_tag, value, _) = element(rest)?;
            attributes.push((oid(oid_bytes)?, string(value_tag, value)));
        }
        rdns.push(attributes);
    }
    Some(rdns)
}

/// The dotted form of an OID's content.
fn oid(bytes: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut arc: u64 = 0;
    for byte in bytes {
        arc = arc.checked_mul(128)? | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (arc / 40).min(2);
                arcs.extend([first, arc - first * 40]);
            } else {
                arcs.push(arc);
            }
            arc = 0;
        }
    }
    let text: Vec<String> = arcs.iter().map(u64::to_string).collect();
    (!text.is_empty()).then(|| text.join("."))
}

/// A string value as Go's `crypto/x509` reads one: UTF8String, PrintableString, IA5String,
/// NumericString, T61String (as Latin-1) and BMPString (UTF-16).
fn string(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x12 | 0x13 | 0x16 => String::from_utf8(value.to_vec()).ok(),
        0x14 => Some(value.iter().map(|byte| char::from(*byte)).collect()),
        0x1e if value.len().is_multiple_of(2) => {
            let units: Vec<u16> = value.chunks_exact(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

fn alt_names(extensions: &[u8], names: &mut Names) -> Option<()> {
    let (tag, list, _) = element(extensions)?;
    expect(tag, SEQUENCE)?;
    for (tag, extension) in elements(list)? {
        expect(tag, SEQUENCE)?;
        let (tag, id, mut rest) = element(extension)?;
        expect(tag, OID)?;
        if oid(id)? != SUBJECT_ALT_NAME {
            continue;
        }
        let (mut tag, mut value, after) = element(rest)?;
        if tag != OCTET_STRING {
            // The optional `critical` BOOLEAN comes first.
            rest = after;
            (tag, value, _) = element(rest)?;
            expect(tag, OCTET_STRING)?;
        }
        let (tag, general_names, _) = element(value)?;
        expect(tag, SEQUENCE)?;
        for (tag, name) in elements(general_names)? {
            let list = match tag {
                RFC822_NAME => &mut names.emails,
                DNS_NAME => &mut names.dns,
                URI => &mut names.uris,
                _ => continue,
            };
            list.push(String::from_utf8(name.to_vec()).ok()?);
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_read_in_dotted_form() {
        assert_eq!(oid(&[0x55, 0x04, 0x03]).as_deref(), Some("2.5.4.3"));
        assert_eq!(
            oid(&[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19]).as_deref(),
            Some("0.9.2342.19200300.100.1.25")
        );
        assert_eq!(
            oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).as_deref(),
            Some("1.2.840.113549.1.9.1")
        );
    }

    #[test]
    fn truncated_or_overlong_input_is_no_certificate() {
        assert_eq!(element(&[0x30, 0x05, 0x01]), None);
        assert_eq!(element(&[0x30, 0x85, 1, 1, 1, 1, 1]), None);
        assert_eq!(names(&[0x30, 0x00]), None);
        assert_eq!(names(&[]), None);
    }
}
