//! The documents of a file: multi-document YAML and `kubectl get -o yaml` Lists, each object with
//! the line it starts on; a syntax error names its line.

use std::fmt;
use std::path::Path;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

use crate::layer::{InputError, Skipped};

/// One object of the input and the line it starts on.
pub(super) struct Located {
    pub(super) line: u32,
    pub(super) value: Value,
}

/// The objects of a multi-document input, Lists unpacked; what is not an object is skipped.
pub(super) fn read(file: &Path, text: &str) -> Result<(Vec<Located>, Vec<Skipped>), InputError> {
    // A rendered chart can hold more than the default 1024 documents; the size cap (4 MiB)
    // bounds them instead. Depth, nodes and aliases keep their defaults against hostile input.
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! { max_documents: 65_536 },
    };
    let docs: Vec<Spanned<Body>> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|e| syntax(file, &e))?;
    let mut objects = Vec::new();
    let mut skipped = Vec::new();
    let not_object = |line: u32, what: &str| Skipped {
        file: file.to_path_buf(),
        what: format!("document at line {line}"),
        why: format!("{what}, not a Kubernetes object"),
    };
    for doc in docs {
        let line = line_of(&doc.referenced);
        match doc.value {
            Body::Other(what) => skipped.push(not_object(line, what)),
            Body::Mapping {
                mut value,
                item_lines,
            } if is_list(&value) => {
                let items = match value["items"].take() {
                    Value::Array(items) => items,
                    Value::Null => Vec::new(),
                    other => {
                        let field = format!("List (line {line}) items");
                        let why = "a List's items must be a sequence of objects";
                        return Err(InputError::field(file, &field, &show(&other), why));
                    }
                };
                for (i, item) in items.into_iter().enumerate() {
                    let line = item_lines.get(i).copied().unwrap_or(line);
                    if item.is_object() {
                        objects.push(Located { line, value: item });
                    } else {
                        skipped.push(not_object(line, "a List item that is not a mapping"));
                    }
                }
            }
            Body::Mapping { value, .. } => objects.push(Located { line, value }),
        }
    }
    Ok((objects, skipped))
}

fn is_list(v: &Value) -> bool {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.ends_with("List") && v.get("items").is_some()
}

fn line_of(location: &serde_saphyr::Location) -> u32 {
    u32::try_from(location.line()).unwrap_or(u32::MAX)
}

/// A YAML error as the kit reports it: the line, and the message without its position.
fn syntax(file: &Path, e: &serde_saphyr::Error) -> InputError {
    let message = e.to_string();
    let why = message
        .split(" at line ")
        .next()
        .unwrap_or(&message)
        .to_string();
    match e.location() {
        Some(location) => InputError::syntax(file, line_of(&location), why),
        None => InputError::Unreadable {
            file: file.to_path_buf(),
            why,
        },
    }
}

/// A document's top node: a mapping (with, for a List, each item's line) or anything else.
enum Body {
    Mapping { value: Value, item_lines: Vec<u32> },
    Other(&'static str),
}

/// Scalars met where a collection was wanted all read as one value.
macro_rules! scalars_as {
    ($value:expr) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML document")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut object = serde_json::Map::new();
        let mut item_lines = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // A List's items keep their lines, so that each object has its own.
            let value = if key == "items" {
                let items: Items = map.next_value()?;
                item_lines = items.lines;
                items.value
            } else {
                map.next_value()?
            };
            object.insert(key, value);
        }
        Ok(Body::Mapping {
            value: Value::Object(object),
            item_lines,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Body, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Body::Other("a sequence"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Body, E> {
        Ok(Body::Other("a null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<Body, E> {
        self.visit_unit()
    }

    scalars_as!(Body::Other("a scalar"));
}

/// A mapping's `items`: a sequence keeps each element's line; anything else reads as null.
#[derive(Default)]
struct Items {
    value: Value,
    lines: Vec<u32>,
}

impl<'de> Deserialize<'de> for Items {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemsVisitor)
    }
}

struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Items;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items, A::Error> {
        let mut values = Vec::new();
        let mut lines = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Value>>()? {
            lines.push(line_of(&item.referenced));
            values.push(item.value);
        }
        Ok(Items {
            value: Value::Array(values),
            lines,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Items, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Items::not_a_sequence())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Items, E> {
        Ok(Items::default())
    }

    fn visit_none<E: de::Error>(self) -> Result<Items, E> {
        self.visit_unit()
    }

    scalars_as!(Items::not_a_sequence());
}

impl Items {
    fn not_a_sequence() -> Self {
        Items {
            value: Value::String("(not a sequence)".into()),
            ..Items::default()
        }
    }
}

/// A value as an error shows it: strings bare, anything else as JSON, long ones cut.
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => cut(s.clone()),
        other => cut(other.to_string()),
    }
}

pub(super) fn cut(s: String) -> String {
    if s.chars().count() <= 80 {
        return s;
    }
    let mut short: String = s.chars().take(77).collect();
    short.push_str("...");
    short
}
