//! Checking an Avro binary datum against its schema without building its value: every varint,
//! length, UTF-8 string, enum and union index read and bounded, nothing allocated. Validating L2
//! payloads this way costs a fraction of decoding them (`AvroSchema::decode_binary` decodes).

use std::collections::HashMap;

use apache_avro::schema::{DecimalSchema, Schema};

use crate::limits;

/// Where the check failed: a JSON path (`$.a[2]`) and what is wrong.
pub type Failure = (String, String);

/// Reads a datum of `schema` from the whole of `body`.
pub fn check(schema: &Schema, names: &HashMap<String, Schema>, body: &[u8]) -> Result<(), Failure> {
    let mut datum = Datum { rest: body, names, items_left: limits::SCHEMA_DATUM_ITEMS_MAX, path: String::from("$") };
    match datum.value(schema, 0) {
        Ok(()) if datum.rest.is_empty() => Ok(()),
        Ok(()) => Err(("$".into(), format!("{} bytes left over after the Avro datum", datum.rest.len()))),
        Err(message) => Err((datum.path, message)),
    }
}

struct Datum<'a> {
    rest: &'a [u8],
    names: &'a HashMap<String, Schema>,
    /// Array and map items still allowed (zero-byte items would otherwise loop freely).
    items_left: usize,
    /// Where the reader is; left at the failing value on error.
    path: String,
}

impl Datum<'_> {
    fn take(&mut self, count: usize, what: &str) -> Result<&[u8], String> {
        if self.rest.len() < count {
            return Err(format!("the datum is truncated in {what} ({count} bytes needed, {} left)", self.rest.len()));
        }
        let (taken, rest) = self.rest.split_at(count);
        self.rest = rest;
        Ok(taken)
    }

    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.rest.split_first().ok_or("the datum is truncated in a varint")?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err("a varint is longer than 10 bytes".into())
    }

    fn int(&mut self) -> Result<i32, String> {
        let value = self.long()?;
        i32::try_from(value).map_err(|_| format!("{value} is out of range for an int"))
    }

    fn length(&mut self, what: &str) -> Result<usize, String> {
        let length = self.long()?;
        usize::try_from(length).map_err(|_| format!("negative length {length} of {what}"))
    }

    fn bytes(&mut self, what: &str) -> Result<&[u8], String> {
        let length = self.length(what)?;
        self.take(length, what)
    }

    fn string(&mut self) -> Result<(), String> {
        let bytes = self.bytes("a string")?;
        std::str::from_utf8(bytes).map(drop).map_err(|e| format!("a string is not UTF-8: {e}"))
    }

    fn value(&mut self, schema: &Schema, depth: usize) -> Result<(), String> {
        if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
            return Err("nested too deeply".into());
        }
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => match self.take(1, "a boolean")?[0] {
                0 | 1 => Ok(()),
                other => Err(format!("{other} is not a boolean (0 or 1)")),
            },
            Schema::Int | Schema::Date | Schema::TimeMillis => self.int().map(drop),
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long().map(drop),
            Schema::Float => self.take(4, "a float").map(drop),
            Schema::Double => self.take(8, "a double").map(drop),
            Schema::Bytes | Schema::BigDecimal => self.bytes("bytes").map(drop),
            Schema::String => self.string(),
            Schema::Uuid => {
                let bytes = self.bytes("a uuid")?;
                let text = std::str::from_utf8(bytes).unwrap_or_default();
                if bytes.len() == 16 || super::avro::is_uuid(text) {
                    Ok(())
                } else {
                    Err(format!("{:?} is not a uuid", String::from_utf8_lossy(bytes)))
                }
            }
            Schema::Decimal(DecimalSchema { inner, .. }) => self.value(inner, depth + 1),
            Schema::Fixed(fixed) => self.take(fixed.size, "a fixed").map(drop),
            Schema::Duration => self.take(12, "a duration").map(drop),
            Schema::Enum(e) => {
                let index = self.int()?;
                match usize::try_from(index) {
                    Ok(i) if i < e.symbols.len() => Ok(()),
                    _ => Err(format!("enum index {index} is not one of the {} symbols of {}", e.symbols.len(), e.name)),
                }
            }
            Schema::Array(array) => self.blocks(depth, |datum, index| {
                datum.at(&format!("[{index}]"), |datum| datum.value(&array.items, depth + 1))
            }),
            Schema::Map(map) => self.blocks(depth, |datum, index| {
                datum.string()?;
                datum.at(&format!("[{index}]"), |datum| datum.value(&map.types, depth + 1))
            }),
            Schema::Union(union) => {
                let index = self.long()?;
                let variants = union.variants();
                let variant = usize::try_from(index)
                    .ok()
                    .and_then(|i| variants.get(i))
                    .ok_or_else(|| format!("union branch {index} does not exist (the union has {})", variants.len()))?;
                self.value(variant, depth + 1)
            }
            Schema::Record(record) => {
                for field in &record.fields {
                    self.at(&field_path(&field.name), |datum| datum.value(&field.schema, depth + 1))?;
                }
                Ok(())
            }
            Schema::Ref { name } => match self.names.get(&name.fullname(None)) {
                Some(named) => self.value(named, depth + 1),
                None => Err(format!("unknown type {}", name.fullname(None))),
            },
        }
    }

    /// Array or map blocks: a count, negative when a byte size follows, until a zero count.
    fn blocks(
        &mut self,
        depth: usize,
        mut item: impl FnMut(&mut Self, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut index = 0;
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                self.length("a block")?;
            }
            let count = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
            if count > self.items_left {
                return Err(format!("more than {} items in one datum", limits::SCHEMA_DATUM_ITEMS_MAX));
            }
            self.items_left -= count;
            for _ in 0..count {
                item(self, index)?;
                index += 1;
            }
            if depth > limits::SCHEMA_NESTING_DEPTH_MAX {
                return Err("nested too deeply".into());
            }
        }
    }

    /// Runs `check` with `segment` appended to the path, which stays there on error.
    fn at(&mut self, segment: &str, check: impl FnOnce(&mut Self) -> Result<(), String>) -> Result<(), String> {
        let before = self.path.len();
        self.path.push_str(segment);
        check(self)?;
        self.path.truncate(before);
        Ok(())
    }
}

fn field_path(name: &str) -> String {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!(".{name}")
    } else {
        format!("[{}]", serde_json::Value::from(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(text: &str) -> Schema {
        Schema::parse_str(text).unwrap()
    }

    fn checked(text: &str, body: &[u8]) -> Result<(), Failure> {
        check(&schema(text), &HashMap::new(), body)
    }

    #[test]
    fn well_formed_datums_pass_and_leftovers_do_not() {
        let record = r#"{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "note", "type": ["null", "string"]}]}"#;
        // n = 3, tags = ["a"] in one block, note = branch 1 "x".
        let good = [6, 2, 2, b'a', 0, 2, 2, b'x'];
        assert_eq!(checked(record, &good), Ok(()));
        assert_eq!(checked(record, &[6, 0, 0]), Ok(()), "empty array, null note");
        assert!(checked(record, &[6, 0, 0, 9]).unwrap_err().1.contains("left over"));
        // A negative block count carries the block's byte size.
        assert_eq!(checked(record, &[6, 1, 4, 2, b'a', 0, 0]), Ok(()));
    }

    #[test]
    fn failures_name_the_path_and_the_reason() {
        let record = r#"{"type": "record", "name": "R", "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}}]}"#;
        assert_eq!(checked(record, &[4, 2, b'a', 2, 0xff]).unwrap_err().0, "$.tags[1]");
        let (path, message) = checked(record, &[0, 2]).unwrap_err();
        assert_eq!(path, "$.e");
        assert!(message.contains("enum index 1"), "{message}");
        assert!(checked(r#""int""#, &[0xff, 0xff, 0xff, 0xff, 0x7f]).unwrap_err().1.contains("out of range"));
        assert!(checked(r#""boolean""#, &[2]).is_err());
        assert!(checked(r#""string""#, &[4, 0xc3, 0x28]).unwrap_err().1.contains("UTF-8"));
        assert!(checked(r#"["null", "int"]"#, &[4]).unwrap_err().1.contains("branch 2"));
    }

    #[test]
    fn zero_byte_items_are_bounded() {
        // 2^40 nulls in one block take no bytes each.
        let huge = [0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0];
        assert!(checked(r#"{"type": "array", "items": "null"}"#, &huge).unwrap_err().1.contains("items"));
    }

    #[test]
    fn it_agrees_with_the_avro_decoder_on_every_truncation_and_flipped_byte() {
        use apache_avro::types::Value;
        let text = r#"{"type": "record", "name": "R", "fields": [
            {"name": "id", "type": "long"}, {"name": "score", "type": "double"}, {"name": "ok", "type": "boolean"},
            {"name": "name", "type": "string"}, {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}},
            {"name": "tags", "type": {"type": "map", "values": "int"}}, {"name": "note", "type": ["null", "string"]},
            {"name": "raw", "type": {"type": "fixed", "name": "F", "size": 2}}]}"#;
        let parsed = super::super::avro::AvroSchema::parse(text, &[]).unwrap();
        let value = Value::Record(vec![
            ("id".into(), Value::Long(-12345)),
            ("score".into(), Value::Double(0.5)),
            ("ok".into(), Value::Boolean(true)),
            ("name".into(), Value::String("héllo".into())),
            ("kind".into(), Value::Enum(1, "B".into())),
            ("tags".into(), Value::Map([("a".to_string(), Value::Int(7))].into_iter().collect())),
            ("note".into(), Value::Union(1, Box::new(Value::String("n".into())))),
            ("raw".into(), Value::Fixed(2, vec![1, 2])),
        ]);
        let datum = apache_avro::to_avro_datum(&parsed.schema, value).unwrap();
        let agree = |body: &[u8]| {
            let ours = parsed.validate_binary(body).is_ok();
            let theirs = parsed.decode_binary(body).is_ok();
            assert_eq!(ours, theirs, "body {body:?}");
        };
        agree(&datum);
        assert!(parsed.validate_binary(&datum).is_ok());
        for cut in 0..datum.len() {
            agree(&datum[..cut]);
        }
        for at in 0..datum.len() {
            for bit in 0..8 {
                let mut flipped = datum.clone();
                flipped[at] ^= 1 << bit;
                agree(&flipped);
            }
        }
    }
}
