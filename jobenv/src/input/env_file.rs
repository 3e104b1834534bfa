//! The secrets env-file format: `KEY=VALUE` lines, blank lines and `#` comments ignored, an
//! `export ` prefix accepted, the value taken verbatim (no quote removal). A key is a variable
//! name (`^[A-Za-z_][A-Za-z0-9_]*$`): anything else before a `=` is likely secret text (a
//! wrapped PEM or base64 line ending in `=`, a stray `MY PASSWORD x=`), so such a line is
//! reported by its number alone.

/// One line of an env file: `(key, value, line number)`, or `(line number, reason)` for a line
/// that is not `KEY=VALUE`. The reason never quotes the line: it may hold a secret.
pub type EnvLine<'a> = Result<(&'a str, &'a str, usize), (usize, &'static str)>;

/// Parses an env file, skipping blank lines and comments.
pub fn parse_env_file(text: &str) -> Vec<EnvLine<'_>> {
    let mut out = Vec::new();
    for (index, raw) in text.split('\n').enumerate() {
        let line_no = index + 1;
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let line = trimmed.strip_prefix("export ").map(str::trim_start).unwrap_or(trimmed);
        match line.split_once('=') {
            Some((key, value)) => {
                let key = key.trim_end();
                if value.len() >= super::MAX_ARG_STRLEN {
                    out.push(Err((
                        line_no,
                        "has a value of 128 KiB or more, more than a program can be given",
                    )));
                } else if is_variable_name(key) {
                    out.push(Ok((key, value, line_no)));
                } else {
                    out.push(Err((line_no, "has an invalid variable name")));
                }
            }
            None => out.push(Err((line_no, "is not KEY=VALUE"))),
        }
    }
    out
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`
pub fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_lines() {
        let parsed =
            parse_env_file("# c\n\nA=1\nexport B = x=y \r\n  C=\nnoequals\n=v\nMIIB+/x=\nMY PASSWORD x=\n1X=y\n");
        assert_eq!(parsed[0], Ok(("A", "1", 3)));
        assert_eq!(parsed[1], Ok(("B", " x=y ", 4)));
        assert_eq!(parsed[2], Ok(("C", "", 5)));
        assert_eq!(parsed[3], Err((6, "is not KEY=VALUE")));
        for (index, line) in [(4, 7), (5, 8), (6, 9), (7, 10)] {
            assert_eq!(parsed[index], Err((line, "has an invalid variable name")));
        }
        assert_eq!(parsed.len(), 8);
    }

    #[test]
    fn variable_names() {
        assert!(is_variable_name("TF_VAR_token"));
        assert!(is_variable_name("_X"));
        assert!(!is_variable_name("1234"));
        assert!(!is_variable_name("KEY.bak"));
        assert!(!is_variable_name(".hidden"));
    }
}
