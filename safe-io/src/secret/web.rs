//! A secret in a URL and in markup.
//!
//! Percent-encoding, upper-case hex, every byte of a non-ASCII character on its own: as RFC 3986
//! leaves only its unreserved characters (`A-Z a-z 0-9 - . _ ~`) as they are (.NET's
//! `Uri.EscapeDataString`, the GitHub Actions runner's form, curl's `--data-urlencode`,
//! Python's `quote(s, safe="")`); the same with `+` for a space (form encoding: Python's
//! `quote_plus`, Go's `url.QueryEscape`); with `/` left as it is (Python's `quote` default);
//! with `! ' ( ) *` left too (JavaScript's `encodeURIComponent`); and as a password in a URL's
//! userinfo (Go's `url.UserPassword`, which leaves `$ & + , ; =`).
//!
//! XML and HTML escaping: all of `& < > " '` as `.NET`'s `SecurityElement.Escape` writes them
//! (`&apos;`, the runner's form); only `& < >` (XML text content, Python's
//! `xml.sax.saxutils.escape`); quotes as Python's `html.escape` writes them (`&quot;` `&#x27;`);
//! and as Go's `html.EscapeString` and Jinja's markupsafe do (`&#34;` `&#39;`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Everything but RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
const PYTHON_QUOTE: &AsciiSet = &COMPONENT.remove(b'/');
const URI_COMPONENT: &AsciiSet = &COMPONENT
    .remove(b'!')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*');
const USERINFO: &AsciiSet = &COMPONENT
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=');

pub(super) fn forms(text: &str) -> Vec<String> {
    let encoded = |set: &'static AsciiSet| utf8_percent_encode(text, set).to_string();
    let component = encoded(COMPONENT);
    // `%` is itself encoded, so a `%20` in the result can only stand for a space.
    let form = component.replace("%20", "+");
    vec![
        component,
        form,
        encoded(PYTHON_QUOTE),
        encoded(URI_COMPONENT),
        encoded(USERINFO),
        escaped(text, |c| match c {
            '&' => Some("&amp;"),
            '<' => Some("&lt;"),
            '>' => Some("&gt;"),
            '"' => Some("&quot;"),
            '\'' => Some("&apos;"),
            _ => None,
        }),
        escaped(text, |c| match c {
            '&' => Some("&amp;"),
            '<' => Some("&lt;"),
            '>' => Some("&gt;"),
            _ => None,
        }),
        escaped(text, |c| match c {
            '&' => Some("&amp;"),
            '<' => Some("&lt;"),
            '>' => Some("&gt;"),
            '"' => Some("&quot;"),
            '\'' => Some("&#x27;"),
            _ => None,
        }),
        escaped(text, |c| match c {
            '&' => Some("&amp;"),
            '<' => Some("&lt;"),
            '>' => Some("&gt;"),
            '"' => Some("&#34;"),
            '\'' => Some("&#39;"),
            _ => None,
        }),
    ]
}

fn escaped(text: &str, entity: impl Fn(char) -> Option<&'static str>) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match entity(c) {
            Some(entity) => out.push_str(entity),
            None => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_and_markup_forms() {
        let all = forms("p ä/!'(&<\"~$");
        for expected in [
            "p%20%C3%A4%2F%21%27%28%26%3C%22~%24",
            "p+%C3%A4%2F%21%27%28%26%3C%22~%24",
            "p%20%C3%A4/%21%27%28%26%3C%22~%24",
            "p%20%C3%A4%2F!'(%26%3C%22~%24",
            "p%20%C3%A4%2F%21%27%28&%3C%22~$",
            "p ä/!&apos;(&amp;&lt;&quot;~$",
            "p ä/!'(&amp;&lt;\"~$",
            "p ä/!&#x27;(&amp;&lt;&quot;~$",
            "p ä/!&#39;(&amp;&lt;&#34;~$",
        ] {
            assert!(all.iter().any(|f| f == expected), "{expected} missing from {all:?}");
        }
    }
}
