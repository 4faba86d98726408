//! What would make the YAML reader take minutes or gigabytes, found on the raw text before
//! it runs: flow collections nested too deep, and aliases that expand past what the file holds.

/// The deepest nesting of flow collections (`[`, `{`) a script may have. The YAML parser's
/// time grows with the square of the depth (100,000 levels took 41 s, 200,000 over 100 s,
/// and 1 MiB holds 500,000), so it is checked on the raw text before the parser runs; a
/// script needs a handful, and the parser refuses values nested deeper than 128 anyway.
pub const MAX_NESTING: usize = 64;

/// Where a YAML token may start, as the raw text is read byte by byte: at a line's start, and
/// after an indicator that ends one (`- `, `? `, `: `, and in a flow collection `[`, `{`,
/// `,` and `:`). A quote, a bracket or a star anywhere else is part of a plain scalar
/// (`it's`, `a[1]`, `2*3`) and means nothing. Spaces leave it as it was.
struct TokenStart {
    at_start: bool,
}

impl TokenStart {
    fn new() -> TokenStart {
        TokenStart { at_start: true }
    }

    /// Move past byte `c` (`next` follows it), at flow depth `depth`.
    fn step(&mut self, c: u8, next: Option<u8>, depth: usize) {
        let spaced = matches!(next, None | Some(b' ' | b'\t' | b'\r' | b'\n'));
        self.at_start = match c {
            b'\n' => true,
            b' ' | b'\t' | b'\r' => self.at_start,
            b'-' | b'?' => self.at_start && spaced,
            b':' => spaced || depth > 0,
            b'[' | b'{' => self.at_start,
            b',' => depth > 0,
            _ => false,
        };
    }
}

/// The line where the raw text nests flow collections deeper than [`MAX_NESTING`], if it
/// does: brackets counted where a token may start, outside quoted scalars and comments.
pub(super) fn too_deep(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let (mut depth, mut line, mut i) = (0usize, 1usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut tokens = TokenStart::new();
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
        }
        match quote {
            Some(b'"') if c == b'\\' => {
                // An escape: the next byte is taken whatever it is (a line break too).
                if b.get(i + 1) == Some(&b'\n') {
                    line += 1;
                }
                i += 2;
                continue;
            }
            Some(b'\'') if c == b'\'' && b.get(i + 1) == Some(&b'\'') => {
                i += 2;
                continue;
            }
            Some(q) if c == q => {
                quote = None;
                tokens.at_start = false;
                i += 1;
                continue;
            }
            Some(_) => {
                i += 1;
                continue;
            }
            None => {}
        }
        let before = tokens.at_start;
        match c {
            b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n') => {
                // A comment, to the end of its line.
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' if before => quote = Some(c),
            b'[' | b'{' if before => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(line);
                }
            }
            b']' | b'}' if depth > 0 => depth -= 1,
            _ => {}
        }
        tokens.step(c, b.get(i + 1).copied(), depth);
        i += 1;
    }
    None
}

/// Whether the raw text may hold an alias (`*NAME` where a token starts). Over-inclusive on
/// purpose (quotes are not followed, and `,` and `:` are read as in a flow collection
/// everywhere): a yes only costs [`expansion`]'s count, a no must be right.
pub(super) fn may_alias(text: &str) -> bool {
    let b = text.as_bytes();
    let mut tokens = TokenStart::new();
    for (i, &c) in b.iter().enumerate() {
        if c == b'*' && tokens.at_start {
            return true;
        }
        tokens.step(c, b.get(i + 1).copied(), 1);
    }
    false
}

/// The most values a script's aliases may expand it to: as many as the text has bytes (a
/// file without aliases never has more), plus room for a small file's honest reuse. The
/// YAML reader's own limit counts alias jumps, not the values each replays: a 60 KB file of
/// one 10,000-value list aliased 10,000 times grew past 4 GiB before it was refused.
pub(super) fn max_values(text: &str) -> usize {
    text.len() + 65_536
}

/// Count the values `text` expands to, aliases replayed, and stop at [`max_values`]: the
/// line where it passed them, when it did. Nothing is kept while counting. A file the YAML
/// reader refuses for another reason passes here: parsing it names that reason.
pub(super) fn expansion(text: &str) -> Option<usize> {
    use serde::de::{
        DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
    };
    use std::cell::Cell;
    const SPENT: &str = "the aliases expand past the limit";
    #[derive(Clone, Copy)]
    struct Count<'c>(&'c Cell<usize>);
    impl Count<'_> {
        fn tick<E: serde::de::Error>(self) -> Result<(), E> {
            match self.0.get() {
                0 => Err(E::custom(SPENT)),
                n => {
                    self.0.set(n - 1);
                    Ok(())
                }
            }
        }
    }
    impl<'de> DeserializeSeed<'de> for Count<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Count<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("any value")
        }
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
            self.tick()
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
            self.tick()
        }
        fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
            self.tick()
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
            self.tick()
        }
        fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
            self.tick()
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
            self.tick()
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
            self.tick()
        }
        fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
            self.tick()
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
            self.tick()
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
            self.tick()
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            self.tick()?;
            d.deserialize_any(self)
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            self.tick()?;
            d.deserialize_any(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            self.tick()?;
            while seq.next_element_seed(self)?.is_some() {}
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            self.tick()?;
            while map.next_key_seed(self)?.is_some() {
                map.next_value_seed(self)?;
            }
            Ok(())
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            // A tagged value (`!tag x`): the tag, then its value.
            self.tick()?;
            let ((), v) = data.variant_seed(self)?;
            v.newtype_variant_seed(self)
        }
    }
    let left = Cell::new(max_values(text));
    let r = Count(&left).deserialize(serde_yaml_ng::Deserializer::from_str(text));
    match r {
        Err(e) if left.get() == 0 => Some(e.location().map_or(1, |l| l.line())),
        _ => None,
    }
}
