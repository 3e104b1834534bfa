//! The inputs of a derivation, read from its `.drv` file (Nix's ATerm:
//! `Derive([outputs],[input derivations],[input sources],system,builder,[args],[env])`). A miss
//! realises the outputs of each input derivation that the shell asks for and roots them: those
//! are what nix-shell builds before it enters the shell, and what a garbage collection would
//! otherwise take (a `.drv`'s own references are its input `.drv`s and sources, not their
//! outputs).

/// One value of the ATerm: a string, a list `[...]` or a tuple `(...)`.
#[derive(Debug, PartialEq)]
enum Term {
    Str(String),
    List(Vec<Term>),
    Tuple(Vec<Term>),
}

/// Each input derivation with the names of the outputs the shell needs, in file order.
pub fn input_derivations(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    let body = text
        .strip_prefix("Derive")
        .ok_or("it does not start with Derive(: a derivation format jobenv does not read")?;
    let mut parser = Parser {
        text: body.as_bytes(),
        at: 0,
    };
    let Term::Tuple(fields) = parser.term(0)? else {
        return Err("Derive is not followed by a tuple".into());
    };
    if parser.at != parser.text.len() {
        return Err("text follows the derivation".into());
    }
    let Some(Term::List(inputs)) = fields.get(1) else {
        return Err("its second field is not a list".into());
    };
    inputs
        .iter()
        .map(|input| match input {
            Term::Tuple(pair) => match pair.as_slice() {
                [Term::Str(path), Term::List(outputs)] => {
                    let outputs = outputs
                        .iter()
                        .map(|o| match o {
                            Term::Str(name) => Ok(name.clone()),
                            _ => Err("an output name is not a string".to_owned()),
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((path.clone(), outputs))
                }
                _ => Err("an input derivation is not (path, [outputs])".to_owned()),
            },
            _ => Err("an input derivation is not a tuple".to_owned()),
        })
        .collect()
}

/// Nesting deeper than this is no derivation (they nest three deep).
const MAX_DEPTH: usize = 8;

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn term(&mut self, depth: usize) -> Result<Term, String> {
        if depth > MAX_DEPTH {
            return Err("it nests too deep".into());
        }
        match self.text.get(self.at) {
            Some(b'"') => self.string().map(Term::Str),
            Some(b'[') => self.sequence(b']', depth).map(Term::List),
            Some(b'(') => self.sequence(b')', depth).map(Term::Tuple),
            _ => Err(format!("unexpected text at byte {}", self.at)),
        }
    }

    fn sequence(&mut self, close: u8, depth: usize) -> Result<Vec<Term>, String> {
        self.at += 1;
        let mut items = Vec::new();
        if self.text.get(self.at) == Some(&close) {
            self.at += 1;
            return Ok(items);
        }
        loop {
            items.push(self.term(depth + 1)?);
            match self.text.get(self.at) {
                Some(b',') => self.at += 1,
                Some(&b) if b == close => {
                    self.at += 1;
                    return Ok(items);
                }
                _ => return Err(format!("unexpected text at byte {}", self.at)),
            }
        }
    }

    /// A string, with Nix's escapes (`\"`, `\\`, `\n`, `\r`, `\t`).
    fn string(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut bytes = Vec::new();
        loop {
            match self.text.get(self.at) {
                None => return Err("a string does not end".into()),
                Some(b'"') => {
                    self.at += 1;
                    return String::from_utf8(bytes).map_err(|_| "a string is not UTF-8".into());
                }
                Some(b'\\') => {
                    let escaped = *self.text.get(self.at + 1).ok_or("a string does not end")?;
                    bytes.push(match escaped {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        other => other,
                    });
                    self.at += 2;
                }
                Some(&b) => {
                    bytes.push(b);
                    self.at += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_derivations_and_their_outputs_are_read() {
        let text = r#"Derive([("out","/nix/store/p6fk-web-shell","","")],[("/nix/store/cbry-dep.drv",["out"]),("/nix/store/aaaa-lib.drv",["dev","out"])],["/nix/store/src-x"],"x86_64-linux","/bin/sh",["-c","echo > $out"],[("A","quote \" and \\ and\nnewline"),("out","/nix/store/p6fk-web-shell")])"#;
        assert_eq!(
            input_derivations(text).unwrap(),
            [
                ("/nix/store/cbry-dep.drv".to_owned(), vec!["out".to_owned()]),
                (
                    "/nix/store/aaaa-lib.drv".to_owned(),
                    vec!["dev".to_owned(), "out".to_owned()]
                )
            ]
        );
        let none = r#"Derive([("out","/nix/store/p-s","","")],[],[],"x86_64-linux","/bin/sh",[],[])"#;
        assert!(input_derivations(none).unwrap().is_empty());
    }

    #[test]
    fn anything_else_is_an_error_never_a_guess() {
        for bad in [
            "",
            "DrvWithVersion(\"xp-dyn-drv\",[])",
            "Derive([],[(\"/x.drv\",\"out\")])",
            "Derive([],[(\"/x.drv\",[\"out\"])]",
            "Derive([],[(\"/x.drv\",[\"out\"])]) trailing",
            "Derive([],[(\"/x.drv,[\"out\"])])",
            "Derive([],\"x\")",
            &format!("Derive({}{})", "[".repeat(20), "]".repeat(20)),
        ] {
            assert!(input_derivations(bad).is_err(), "{bad}");
        }
    }
}
