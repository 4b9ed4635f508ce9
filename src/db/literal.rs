//! SQL literals for the arguments of a `Named` statement's `EXECUTE` (`client::Execute`), the
//! only place the worker puts values into SQL text. Text is quoted by the driver's own
//! `escape_literal` (an `E''` literal when it holds a backslash, so that it reads the same
//! whatever `standard_conforming_strings` says); numbers are written by Rust; every array is
//! cast to its type, so an empty one is typed too.

use postgres_protocol::escape::escape_literal;
use serde_json::Value;

/// A `bigint`.
pub fn bigint(value: i64) -> String {
    format!("{value}::bigint")
}

/// An `integer`.
pub fn integer(value: i32) -> String {
    format!("{value}::integer")
}

/// A `bigint[]`.
pub fn bigints(values: impl IntoIterator<Item = i64>) -> String {
    array(values.into_iter().map(|v| v.to_string()), "bigint")
}

/// A `text`.
pub fn text(value: &str) -> String {
    format!("{}::text", escape_literal(value))
}

/// A `text[]`.
pub fn texts<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    array(values.into_iter().map(escape_literal), "text")
}

/// A `jsonb[]`; `None` is SQL NULL.
pub fn jsonbs<'a>(values: impl IntoIterator<Item = Option<&'a Value>>) -> String {
    array(
        values.into_iter().map(|v| match v {
            Some(v) => escape_literal(&v.to_string()),
            None => "NULL".to_owned(),
        }),
        "jsonb",
    )
}

fn array(elements: impl Iterator<Item = String>, element_type: &str) -> String {
    let elements: Vec<String> = elements.collect();
    format!("ARRAY[{}]::{element_type}[]", elements.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_value_is_quoted_or_written_as_a_number_and_every_array_is_typed() {
        assert_eq!(bigint(-7), "-7::bigint");
        assert_eq!(bigints([]), "ARRAY[]::bigint[]");
        assert_eq!(text("it's"), "'it''s'::text");
        assert_eq!(integer(42), "42::integer");
        assert_eq!(bigints([1, 22]), "ARRAY[1, 22]::bigint[]");
        assert_eq!(texts(["a'b", "c\\d"]), "ARRAY['a''b',  E'c\\\\d']::text[]");
        assert_eq!(
            jsonbs([Some(&json!({"k": "it's"})), None]),
            "ARRAY['{\"k\":\"it''s\"}', NULL]::jsonb[]"
        );
    }
}
