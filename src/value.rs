//! The values facts and targets are made of.
//!
//! Kernel settings are integers (one or several per key), versions, or text. `i64` holds every
//! sysctl the catalog reads: fs.file-max's "no limit" is `i64::MAX`, which is also how an
//! `unlimited` rlimit is stored, and both print as `unlimited`.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Num(i64),
    List(Vec<i64>),
    Text(String),
    Bool(bool),
}

impl Value {
    /// Parse a sysctl/proc value: one integer, several whitespace-separated integers, or text.
    pub fn parse_kernel(text: &str) -> Value {
        let t = text.trim();
        let nums: Result<Vec<i64>, _> = t.split_whitespace().map(str::parse::<i64>).collect();
        match nums {
            Ok(v) if v.len() == 1 => Value::Num(v[0]),
            Ok(v) if !v.is_empty() => Value::List(v),
            // u64 values above i64::MAX (e.g. 18446744073709551615) mean "no limit".
            _ if t.parse::<u64>().is_ok() => Value::Num(i64::MAX),
            _ => Value::Text(t.to_string()),
        }
    }

    pub fn as_num(&self) -> Option<i64> {
        match self {
            Value::Num(n) => Some(*n),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
}

/// Plain rendering for tables and fix commands: lists space-separated as sysctl writes them.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(i64::MAX) => f.write_str("unlimited"),
            Value::Num(n) => write!(f, "{n}"),
            Value::List(v) => {
                let parts: Vec<String> = v.iter().map(|n| n.to_string()).collect();
                f.write_str(&parts.join(" "))
            }
            Value::Text(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Dotted version numbers ("6.18.44-fc" -> [6, 18, 44]), for kernel-version checks.
pub fn version_parts(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()
        .unwrap_or("")
        .split('.')
        .map_while(|p| p.parse().ok())
        .collect()
}

/// Flatten a serializable value (a profile) straight into catalog variables by dotted path
/// (`linux.somaxconn` -> `Value::Num(65535)`): each integer becomes a [`Value`] once, with no
/// intermediate JSON tree. Integers past i64 are "no limit" (`i64::MAX`), like a kernel value;
/// `None` and unit values are left out; a list is kept when every item is an integer.
pub fn flatten<T: Serialize>(value: &T) -> Result<BTreeMap<String, Value>, FlattenError> {
    let mut out = BTreeMap::new();
    value.serialize(flat::Flat {
        path: String::new(),
        out: &mut out,
    })?;
    Ok(out)
}

/// A shape [`flatten`] does not take (a map, a float, an enum variant with fields): nothing
/// in a profile has one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlattenError(String);

impl serde::ser::Error for FlattenError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        FlattenError(msg.to_string())
    }
}

mod flat {
    use super::{FlattenError, Value};
    use serde::ser::{self, Impossible, Serialize};
    use std::collections::BTreeMap;

    /// Writes the value at `path` (and below it, for a struct) into `out`.
    pub struct Flat<'a> {
        pub path: String,
        pub out: &'a mut BTreeMap<String, Value>,
    }

    impl Flat<'_> {
        fn put(self, v: Value) -> Result<(), FlattenError> {
            self.out.insert(self.path, v);
            Ok(())
        }
        fn child(&mut self, key: &str) -> Flat<'_> {
            let path = if self.path.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.path)
            };
            Flat {
                path,
                out: self.out,
            }
        }
    }

    fn refuse<T>(what: &str) -> Result<T, FlattenError> {
        Err(FlattenError(format!(
            "cannot flatten {what} into a variable"
        )))
    }

    macro_rules! ints {
        ($($f:ident: $t:ty),*) => {$(
            fn $f(self, v: $t) -> Result<(), FlattenError> {
                self.put(Value::Num(i64::try_from(v).unwrap_or(i64::MAX)))
            }
        )*};
    }

    impl<'a> ser::Serializer for Flat<'a> {
        type Ok = ();
        type Error = FlattenError;
        type SerializeSeq = List<'a>;
        type SerializeTuple = List<'a>;
        type SerializeTupleStruct = List<'a>;
        type SerializeTupleVariant = Impossible<(), FlattenError>;
        type SerializeMap = Impossible<(), FlattenError>;
        type SerializeStruct = Self;
        type SerializeStructVariant = Impossible<(), FlattenError>;

        ints!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
              serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);

        fn serialize_bool(self, v: bool) -> Result<(), FlattenError> {
            self.put(Value::Bool(v))
        }
        fn serialize_f32(self, _: f32) -> Result<(), FlattenError> {
            refuse("a float")
        }
        fn serialize_f64(self, _: f64) -> Result<(), FlattenError> {
            refuse("a float")
        }
        fn serialize_char(self, v: char) -> Result<(), FlattenError> {
            self.put(Value::Text(v.to_string()))
        }
        fn serialize_str(self, v: &str) -> Result<(), FlattenError> {
            self.put(Value::Text(v.to_string()))
        }
        fn serialize_bytes(self, _: &[u8]) -> Result<(), FlattenError> {
            refuse("bytes")
        }
        fn serialize_none(self) -> Result<(), FlattenError> {
            Ok(())
        }
        fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<(), FlattenError> {
            v.serialize(self)
        }
        fn serialize_unit(self) -> Result<(), FlattenError> {
            Ok(())
        }
        fn serialize_unit_struct(self, _: &'static str) -> Result<(), FlattenError> {
            Ok(())
        }
        fn serialize_unit_variant(
            self,
            _: &'static str,
            _: u32,
            variant: &'static str,
        ) -> Result<(), FlattenError> {
            self.put(Value::Text(variant.to_string()))
        }
        fn serialize_newtype_struct<T: ?Sized + Serialize>(
            self,
            _: &'static str,
            v: &T,
        ) -> Result<(), FlattenError> {
            v.serialize(self)
        }
        fn serialize_newtype_variant<T: ?Sized + Serialize>(
            mut self,
            _: &'static str,
            _: u32,
            variant: &'static str,
            v: &T,
        ) -> Result<(), FlattenError> {
            v.serialize(self.child(variant))
        }
        fn serialize_seq(self, _: Option<usize>) -> Result<List<'a>, FlattenError> {
            Ok(List {
                flat: self,
                items: Some(Vec::new()),
            })
        }
        fn serialize_tuple(self, n: usize) -> Result<List<'a>, FlattenError> {
            self.serialize_seq(Some(n))
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            n: usize,
        ) -> Result<List<'a>, FlattenError> {
            self.serialize_seq(Some(n))
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, FlattenError> {
            refuse("an enum variant with fields")
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, FlattenError> {
            refuse("a map")
        }
        fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, FlattenError> {
            Ok(self)
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, FlattenError> {
            refuse("an enum variant with fields")
        }
    }

    impl ser::SerializeStruct for Flat<'_> {
        type Ok = ();
        type Error = FlattenError;
        fn serialize_field<T: ?Sized + Serialize>(
            &mut self,
            key: &'static str,
            v: &T,
        ) -> Result<(), FlattenError> {
            v.serialize(self.child(key))
        }
        fn end(self) -> Result<(), FlattenError> {
            Ok(())
        }
    }

    /// A list: kept when every item is an integer that fits i64, else left out.
    pub struct List<'a> {
        flat: Flat<'a>,
        items: Option<Vec<i64>>,
    }

    impl List<'_> {
        fn push<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), FlattenError> {
            let mut one = BTreeMap::new();
            let item = v.serialize(Flat {
                path: String::new(),
                out: &mut one,
            });
            let n = match (item, one.remove("")) {
                // u64 past i64 is not an integer a list keeps.
                (Ok(()), Some(Value::Num(n))) if n != i64::MAX => Some(n),
                _ => None,
            };
            self.items = self.items.take().zip(n).map(|(mut l, n)| {
                l.push(n);
                l
            });
            Ok(())
        }
        fn finish(self) -> Result<(), FlattenError> {
            match self.items {
                Some(l) => self.flat.put(Value::List(l)),
                None => Ok(()),
            }
        }
    }

    /// A sequence, a tuple and a tuple struct all flatten alike: each element onto the list.
    macro_rules! list_serializer {
        ($($trait:ident :: $method:ident),*) => {$(
            impl ser::$trait for List<'_> {
                type Ok = ();
                type Error = FlattenError;
                fn $method<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), FlattenError> {
                    self.push(v)
                }
                fn end(self) -> Result<(), FlattenError> {
                    self.finish()
                }
            }
        )*};
    }
    list_serializer!(
        SerializeSeq::serialize_element,
        SerializeTuple::serialize_element,
        SerializeTupleStruct::serialize_field
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values() {
        assert_eq!(Value::parse_kernel("4096\n"), Value::Num(4096));
        assert_eq!(
            Value::parse_kernel("32768\t60999\n"),
            Value::List(vec![32768, 60999])
        );
        assert_eq!(
            Value::parse_kernel("9223372036854775807"),
            Value::Num(i64::MAX)
        );
        assert_eq!(
            Value::parse_kernel("18446744073709551615"),
            Value::Num(i64::MAX)
        );
        assert_eq!(Value::parse_kernel("cubic"), Value::Text("cubic".into()));
        assert_eq!(Value::Num(i64::MAX).to_string(), "unlimited");
        assert_eq!(Value::List(vec![1, 2, 3]).to_string(), "1 2 3");
    }

    #[test]
    fn versions() {
        assert_eq!(version_parts("6.18.44-fc-v657"), vec![6, 18, 44]);
        assert_eq!(version_parts("3.9"), vec![3, 9]);
        assert_eq!(version_parts("5.4.0-150-generic"), vec![5, 4, 0]);
    }

    /// The typed flattening gives exactly what the JSON round trip it replaced gave, for
    /// every built-in profile (each of its variables, by name and value).
    #[test]
    fn profiles_flatten_as_the_json_round_trip_did() {
        fn via_json(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, Value>) {
            let key = |k: &str| {
                if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                }
            };
            let leaf = |v: &serde_json::Value| -> Option<Value> {
                Some(match v {
                    serde_json::Value::Number(n) => Value::Num(n.as_i64().unwrap_or(i64::MAX)),
                    serde_json::Value::Bool(b) => Value::Bool(*b),
                    serde_json::Value::String(s) => Value::Text(s.clone()),
                    serde_json::Value::Array(a) => {
                        Value::List(a.iter().map(|x| x.as_i64()).collect::<Option<Vec<_>>>()?)
                    }
                    _ => return None,
                })
            };
            match v {
                serde_json::Value::Object(map) => {
                    for (k, v) in map {
                        via_json(&key(k), v, out);
                    }
                }
                other => {
                    if let Some(value) = leaf(other) {
                        out.insert(prefix.to_string(), value);
                    }
                }
            }
        }
        for (name, _) in crate::profile::EMBEDDED {
            let p = crate::profile::load(name).unwrap().profile;
            let mut want = BTreeMap::new();
            via_json("", &serde_json::to_value(&p).unwrap(), &mut want);
            assert_eq!(flatten(&p).unwrap(), want, "{name}");
            assert_eq!(
                want["linux.somaxconn"],
                Value::Num(p.linux.somaxconn as i64)
            );
        }
        assert!(flatten(&BTreeMap::from([("a", 1)])).is_err());
        let mut big = BTreeMap::new();
        big.insert("n".to_string(), Value::Num(i64::MAX));
        #[derive(Serialize)]
        struct Big {
            n: u64,
            l: [u64; 2],
        }
        let b = Big {
            n: u64::MAX,
            l: [1, u64::MAX],
        };
        assert_eq!(
            flatten(&b).unwrap(),
            big,
            "past i64: no limit; a list of it: left out"
        );
    }
}
