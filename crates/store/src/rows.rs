//! Converting record fields to SQLite values and back.
//!
//! Conventions (see SCHEMA.md): enums are stored as their serde names (`"up"`, `"client"`,
//! `"done"` …), so the JSON document and the database spell them the same; integers
//! follow [`SqlInt`]; an `f64` that is NaN is stored as NULL (SQLite has no NaN) and a
//! NULL in a REAL column reads back as NaN.

use std::fmt::Debug;
use std::path::Path;

use rusqlite::types::{Value, ValueRef};
use rusqlite::Row;
use serde::de::{DeserializeOwned, IntoDeserializer};
use serde::Serialize;

use crate::columns::SqlInt;
use crate::error::{Result, StoreError};

pub(crate) fn int<T: SqlInt>(v: T) -> Value {
    Value::Integer(v.to_sql())
}

pub(crate) fn opt_int<T: SqlInt>(v: Option<T>) -> Value {
    v.map_or(Value::Null, int)
}

pub(crate) fn real(v: f64) -> Value {
    if v.is_nan() {
        Value::Null
    } else {
        Value::Real(v)
    }
}

pub(crate) fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

pub(crate) fn opt_text(s: Option<&str>) -> Value {
    s.map_or(Value::Null, text)
}

/// The serde name of a unit enum variant (`Direction::Up` → `"up"`).
pub(crate) fn enum_name<T: Serialize + Debug>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        // Only unit variants are stored this way; anything else is a bug in this crate.
        other => panic!("{v:?} does not serialize to a name: {other:?}"),
    }
}

pub(crate) fn enum_value<T: Serialize + Debug>(v: &T) -> Value {
    Value::Text(enum_name(v))
}

pub(crate) fn opt_enum_value<T: Serialize + Debug>(v: Option<&T>) -> Value {
    v.map_or(Value::Null, enum_value)
}

/// The unit enum variant with this serde name.
pub(crate) fn enum_from_name<T: DeserializeOwned>(s: &str) -> Option<T> {
    let de: serde::de::value::StrDeserializer<'_, serde::de::value::Error> = s.into_deserializer();
    T::deserialize(de).ok()
}

/// A column of a row: its name, or its position with its name for messages.
pub(crate) trait Col: Copy {
    type Index: rusqlite::RowIndex;
    fn index(self) -> Self::Index;
    fn name(&self) -> &str;
}

impl<'s> Col for &'s str {
    type Index = &'s str;
    fn index(self) -> &'s str {
        self
    }
    fn name(&self) -> &str {
        self
    }
}

impl Col for (usize, &str) {
    type Index = usize;
    fn index(self) -> usize {
        self.0
    }
    fn name(&self) -> &str {
        self.1
    }
}

/// Reads the columns of one row by name, turning bad values into [`StoreError::BadValue`].
pub(crate) struct RowReader<'a> {
    pub row: &'a Row<'a>,
    pub table: &'static str,
    pub path: &'a Path,
    pub run_id: i64,
}

impl RowReader<'_> {
    fn get(&self, col: impl Col) -> Result<ValueRef<'_>> {
        self.row
            .get_ref(col.index())
            .map_err(|error| StoreError::Sqlite {
                path: self.path.to_owned(),
                op: "loading a run",
                error,
            })
    }

    pub(crate) fn bad(&self, col: impl Col, value: impl Debug, why: &str) -> StoreError {
        StoreError::BadValue {
            path: self.path.to_owned(),
            run_id: self.run_id,
            what: format!("{}.{} = {value:?}: {why}", self.table, col.name()),
        }
    }

    pub(crate) fn opt_int<T: SqlInt>(&self, col: impl Col) -> Result<Option<T>> {
        match self.get(col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(v) => T::from_sql(v)
                .map(Some)
                .ok_or_else(|| self.bad(col, v, "out of range")),
            other => Err(self.bad(col, other, "not an integer")),
        }
    }

    pub(crate) fn int<T: SqlInt>(&self, col: impl Col) -> Result<T> {
        self.opt_int(col)?
            .ok_or_else(|| self.bad(col, ValueRef::Null, "missing"))
    }

    /// NULL reads as NaN (see the module doc).
    pub(crate) fn real(&self, col: impl Col) -> Result<f64> {
        match self.get(col)? {
            ValueRef::Null => Ok(f64::NAN),
            ValueRef::Real(v) => Ok(v),
            ValueRef::Integer(v) => Ok(v as f64),
            other => Err(self.bad(col, other, "not a number")),
        }
    }

    /// NULL reads as `None`.
    pub(crate) fn opt_real(&self, col: impl Col) -> Result<Option<f64>> {
        match self.get(col)? {
            ValueRef::Null => Ok(None),
            _ => self.real(col).map(Some),
        }
    }

    pub(crate) fn opt_text(&self, col: impl Col) -> Result<Option<String>> {
        match self.get(col)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(s) => Ok(Some(s.to_owned())),
                Err(_) => Err(self.bad(col, String::from_utf8_lossy(t), "not UTF-8")),
            },
            other => Err(self.bad(col, other, "not text")),
        }
    }

    pub(crate) fn text(&self, col: impl Col) -> Result<String> {
        self.opt_text(col)?
            .ok_or_else(|| self.bad(col, ValueRef::Null, "missing"))
    }

    pub(crate) fn opt_enum<T: DeserializeOwned>(&self, col: impl Col) -> Result<Option<T>> {
        match self.opt_text(col)? {
            None => Ok(None),
            Some(s) => enum_from_name(&s)
                .map(Some)
                .ok_or_else(|| self.bad(col, s, "unknown name")),
        }
    }

    pub(crate) fn enum_<T: DeserializeOwned>(&self, col: impl Col) -> Result<T> {
        self.opt_enum(col)?
            .ok_or_else(|| self.bad(col, ValueRef::Null, "missing"))
    }

    pub(crate) fn json<T: DeserializeOwned>(&self, col: impl Col) -> Result<T> {
        let s = self.text(col)?;
        serde_json::from_str(&s).map_err(|e| self.bad(col, s, &e.to_string()))
    }

    /// A nullable JSON column.
    pub(crate) fn opt_json<T: DeserializeOwned>(&self, col: impl Col) -> Result<Option<T>> {
        match self.opt_text(col)? {
            None => Ok(None),
            Some(s) => serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| self.bad(col, s, &e.to_string())),
        }
    }
}

/// A nullable JSON column's value.
pub(crate) fn opt_json<T: Serialize>(v: Option<&T>) -> Value {
    v.map_or(Value::Null, |v| {
        Value::Text(serde_json::to_string(v).expect("records serialize"))
    })
}
