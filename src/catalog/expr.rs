//! Target expressions: the small language check targets are written in.
//!
//! `2 * linux.nofile`, `estimate.total_bytes`, `min(host.cpus, 8)`,
//! `sysctl.net.ipv4.tcp_mem[2] * host.page_size / connections`. Integers only (kernel settings
//! are integers; write `4 * x / 5` for 80%), checked arithmetic, and identifiers that are
//! validated when the catalog loads, so a typo fails at startup with a line number, not mid-run.

use crate::value::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Num(i64),
    Var(String),
    List(Vec<Expr>),
    Index(Box<Expr>, usize),
    Bin(Op, Box<Expr>, Box<Expr>),
    Call(Func, Vec<Expr>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Func {
    Min,
    Max,
}

/// Parse an expression; the error says where and what was expected.
pub fn parse(src: &str) -> Result<Expr, String> {
    let tokens = tokenize(src)?;
    let mut p = Parser { tokens, pos: 0 };
    let e = p.sum()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(format!("unexpected '{t}' in '{src}'")),
    }
}

impl Expr {
    /// Every variable the expression reads, for load-time validation and for fetching
    /// `sysctl.*` values before evaluation.
    pub fn vars(&self, out: &mut Vec<String>) {
        match self {
            Expr::Num(_) => {}
            Expr::Var(v) => out.push(v.clone()),
            Expr::List(items) | Expr::Call(_, items) => items.iter().for_each(|e| e.vars(out)),
            Expr::Index(e, _) => e.vars(out),
            Expr::Bin(_, a, b) => {
                a.vars(out);
                b.vars(out);
            }
        }
    }

    /// Evaluate against `vars`. A missing variable is an error naming it (for host facts that
    /// could not be read, the caller turns it into a skip).
    pub fn eval(&self, vars: &BTreeMap<String, Value>) -> Result<Value, String> {
        Ok(match self {
            Expr::Num(n) => Value::Num(*n),
            Expr::Var(v) => vars
                .get(v)
                .cloned()
                .ok_or_else(|| format!("{v} is not known"))?,
            Expr::List(items) => {
                let nums = items
                    .iter()
                    .map(|e| num(e.eval(vars)?))
                    .collect::<Result<Vec<_>, _>>()?;
                Value::List(nums)
            }
            Expr::Index(e, i) => match e.eval(vars)? {
                Value::List(v) => Value::Num(
                    *v.get(*i)
                        .ok_or_else(|| format!("index {i} is past the {} values", v.len()))?,
                ),
                other => return Err(format!("cannot index '{other}'")),
            },
            Expr::Bin(op, a, b) => {
                let (a, b) = (num(a.eval(vars)?)?, num(b.eval(vars)?)?);
                let r = match op {
                    Op::Add => a.checked_add(b),
                    Op::Sub => a.checked_sub(b),
                    Op::Mul => a.checked_mul(b),
                    Op::Div if b == 0 => return Err("division by zero".into()),
                    Op::Div => a.checked_div(b),
                };
                // Saturate: a target past i64 is "more than any kernel value".
                Value::Num(r.unwrap_or(i64::MAX))
            }
            Expr::Call(f, args) => {
                let nums = args
                    .iter()
                    .map(|e| num(e.eval(vars)?))
                    .collect::<Result<Vec<_>, _>>()?;
                let r = match f {
                    Func::Min => nums.iter().min(),
                    Func::Max => nums.iter().max(),
                };
                Value::Num(*r.ok_or("min/max need at least one argument")?)
            }
        })
    }
}

fn num(v: Value) -> Result<i64, String> {
    v.as_num().ok_or_else(|| format!("'{v}' is not a number"))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i64),
    Ident(String),
    Sym(char),
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Num(n) => write!(f, "{n}"),
            Tok::Ident(s) => f.write_str(s),
            Tok::Sym(c) => write!(f, "{c}"),
        }
    }
}

fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '_') {
                i += 1;
            }
            let text: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            out.push(Tok::Num(
                text.parse()
                    .map_err(|_| format!("number '{text}' is too large"))?,
            ));
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | '.' | '-'))
            {
                i += 1;
            }
            out.push(Tok::Ident(chars[start..i].iter().collect()));
        } else if "+-*/(),[]".contains(c) {
            out.push(Tok::Sym(c));
            i += 1;
        } else {
            return Err(format!("unexpected character '{c}' in '{src}'"));
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Sym(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{c}'"))
        }
    }
    fn sum(&mut self) -> Result<Expr, String> {
        let mut e = self.product()?;
        loop {
            let op = if self.eat('+') {
                Op::Add
            } else if self.eat('-') {
                Op::Sub
            } else {
                return Ok(e);
            };
            e = Expr::Bin(op, Box::new(e), Box::new(self.product()?));
        }
    }
    fn product(&mut self) -> Result<Expr, String> {
        let mut e = self.postfix()?;
        loop {
            let op = if self.eat('*') {
                Op::Mul
            } else if self.eat('/') {
                Op::Div
            } else {
                return Ok(e);
            };
            e = Expr::Bin(op, Box::new(e), Box::new(self.postfix()?));
        }
    }
    fn postfix(&mut self) -> Result<Expr, String> {
        let mut e = self.atom()?;
        while self.eat('[') {
            let Some(Tok::Num(i)) = self.next() else {
                return Err("expected an index number after '['".into());
            };
            self.expect(']')?;
            e = Expr::Index(Box::new(e), i as usize);
        }
        Ok(e)
    }
    fn list(&mut self, close: char) -> Result<Vec<Expr>, String> {
        let mut items = vec![self.sum()?];
        while self.eat(',') {
            items.push(self.sum()?);
        }
        self.expect(close)?;
        Ok(items)
    }
    fn atom(&mut self) -> Result<Expr, String> {
        match self.next() {
            Some(Tok::Num(n)) => Ok(Expr::Num(n)),
            Some(Tok::Sym('(')) => {
                let e = self.sum()?;
                self.expect(')')?;
                Ok(e)
            }
            Some(Tok::Sym('[')) => Ok(Expr::List(self.list(']')?)),
            Some(Tok::Ident(name)) if self.peek() == Some(&Tok::Sym('(')) => {
                self.pos += 1;
                let f = match name.as_str() {
                    "min" => Func::Min,
                    "max" => Func::Max,
                    _ => return Err(format!("unknown function '{name}'; known: min, max")),
                };
                Ok(Expr::Call(f, self.list(')')?))
            }
            Some(Tok::Ident(name)) => Ok(Expr::Var(name)),
            Some(t) => Err(format!("unexpected '{t}'")),
            None => Err("the expression ends too early".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, Value> {
        let mut v = BTreeMap::new();
        v.insert("connections".into(), Value::Num(100_000));
        v.insert("host.cpus".into(), Value::Num(2));
        v.insert(
            "sysctl.net.ipv4.tcp_mem".into(),
            Value::List(vec![10, 20, 30]),
        );
        v
    }

    fn eval(s: &str) -> Result<Value, String> {
        parse(s)?.eval(&vars())
    }

    #[test]
    fn arithmetic_precedence_and_functions() {
        assert_eq!(eval("2 * connections + 1"), Ok(Value::Num(200_001)));
        assert_eq!(eval("(1 + 2) * 3"), Ok(Value::Num(9)));
        assert_eq!(eval("min(host.cpus, 8)"), Ok(Value::Num(2)));
        assert_eq!(eval("max(1, 5, 3)"), Ok(Value::Num(5)));
        assert_eq!(eval("sysctl.net.ipv4.tcp_mem[2] * 2"), Ok(Value::Num(60)));
        assert_eq!(eval("[1, 2 * 2]"), Ok(Value::List(vec![1, 4])));
        assert_eq!(eval("1_000 / 3"), Ok(Value::Num(333)));
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(eval("1 / 0").unwrap_err().contains("division by zero"));
        assert!(eval("nope + 1").unwrap_err().contains("nope is not known"));
        assert!(parse("2 *").unwrap_err().contains("ends too early"));
        assert!(parse("avg(1)")
            .unwrap_err()
            .contains("unknown function 'avg'"));
        assert!(parse("1 $ 2").unwrap_err().contains("'$'"));
        assert!(eval("sysctl.net.ipv4.tcp_mem[5]")
            .unwrap_err()
            .contains("past the 3 values"));
    }

    #[test]
    fn overflow_saturates() {
        assert_eq!(eval("9223372036854775807 * 2"), Ok(Value::Num(i64::MAX)));
    }

    #[test]
    fn vars_are_listed() {
        let mut out = vec![];
        parse("min(host.cpus, connections / 2)")
            .unwrap()
            .vars(&mut out);
        assert_eq!(out, vec!["host.cpus", "connections"]);
    }
}
