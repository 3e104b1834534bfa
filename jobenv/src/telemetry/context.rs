//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `TRACEPARENT` and
//! `TRACESTATE` a front-end sends in a payload, checked to the letter, and the `TRACEPARENT` a
//! program gets.
//!
//! By hand, because the SDK's propagator is lenient where a control key must not be: it trims
//! the value, takes a trace id of two hex digits (`u128::from_str_radix`) and a version-00 value
//! with a trailing dash. The rules here are the recommendation's: lowercase hex of the exact
//! lengths, neither id all zeros, version `ff` invalid, and a version above 00 may carry more
//! after a dash.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// The longest `TRACESTATE` jobenv passes on: the recommendation's 32 members of at most 256
/// characters could make 8 KiB; vendors are asked to keep theirs short, and 512 is what every
/// participant must propagate.
pub const MAX_TRACESTATE: usize = 512;

/// A valid parent from a payload: its ids, and both values (the program gets them when jobenv
/// does not export): a version-00 `TRACEPARENT` as it came, a later version's as version 00 of
/// its checked fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// Only the sampled flag: the other bits are not defined by version 00.
    pub sampled: bool,
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// The rule a `TRACEPARENT` breaks, for the warning.
pub const TRACEPARENT_RULE: &str =
    "must be a W3C traceparent: 00-<32 lowercase hex>-<16 lowercase hex>-<2 lowercase hex>, neither id all zeros";
pub const TRACESTATE_RULE: &str = "must be a W3C tracestate of at most 32 key=value members and 512 characters";

/// Checks `traceparent` (and `tracestate`, which is worthless without it). `Err` names the key
/// that was dropped and the rule it broke; a bad `TRACESTATE` alone drops only itself.
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> (Option<Parent>, Option<(&'static str, &'static str)>) {
    let Some((trace_id, span_id, flags)) = parse_traceparent(traceparent) else {
        return (None, Some(("TRACEPARENT", TRACEPARENT_RULE)));
    };
    let (tracestate, problem) = match tracestate {
        None => (None, None),
        Some(state) if is_valid_tracestate(state) => (Some(state.to_owned()), None),
        Some(_) => (None, Some(("TRACESTATE", TRACESTATE_RULE))),
    };
    // Passed on as version 00 of the checked fields alone: what a later version adds after
    // them is not checked (its format is not known), so it never reaches a program.
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let parent = Parent {
        trace_id,
        span_id,
        sampled: flags & 1 == 1,
        traceparent: format!("00-{}-{}-{flags:02x}", hex(&trace_id), hex(&span_id)),
        tracestate,
    };
    (Some(parent), problem)
}

fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let bytes = value.as_bytes();
    if bytes.len() < 55 {
        return None;
    }
    let version = hex::<1>(&value[0..2])?[0];
    // Version 00 is exactly 55 characters; a later one may add fields after a dash.
    let well_sized = match version {
        0xff => false,
        0x00 => bytes.len() == 55,
        _ => bytes.len() == 55 || bytes[55] == b'-',
    };
    if !well_sized || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let trace_id = hex::<16>(&value[3..35])?;
    let span_id = hex::<8>(&value[36..52])?;
    let flags = hex::<1>(&value[53..55])?[0];
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some((trace_id, span_id, flags))
}

/// Exactly `N` bytes of lowercase hex.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The recommendation's list-member grammar (keys `[a-z0-9][_0-9a-z\-*/]{0,255}`, optionally
/// `tenant@system`; values of printable ASCII but `,` and `=`, no trailing space), at most 32
/// members, no key twice, and at most [`MAX_TRACESTATE`] characters.
pub fn is_valid_tracestate(value: &str) -> bool {
    if value.len() > MAX_TRACESTATE {
        return false;
    }
    let mut keys: Vec<&str> = Vec::new();
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let Some((key, state)) = member.split_once('=') else {
            return false;
        };
        if !is_valid_key(key) || !is_valid_value(state) || keys.contains(&key) {
            return false;
        }
        keys.push(key);
    }
    keys.len() <= 32
}

fn is_valid_key(key: &str) -> bool {
    let part = |text: &str, max: usize, first_digit_ok: bool| {
        let bytes = text.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= max
            && (bytes[0].is_ascii_lowercase() || (first_digit_ok && bytes[0].is_ascii_digit()))
            && bytes
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'*' | b'/'))
    };
    match key.split_once('@') {
        None => part(key, 256, true),
        Some((tenant, system)) => part(tenant, 241, true) && part(system, 14, false),
    }
}

fn is_valid_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 256
        && bytes.last() != Some(&b' ')
        && bytes
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

impl Parent {
    /// The parent as the SDK's remote span context.
    pub fn span_context(&self) -> SpanContext {
        let state = self
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        let flags = if self.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanContext::new(
            TraceId::from_bytes(self.trace_id),
            SpanId::from_bytes(self.span_id),
            flags,
            true,
            state,
        )
    }
}

/// The `TRACEPARENT` of a span (version 00).
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8() & 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_good_traceparent_and_its_parts() {
        let (parent, problem) = parse(GOOD, Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
        assert_eq!(problem, None);
        let parent = parent.unwrap();
        assert!(parent.sampled);
        assert_eq!(parent.traceparent, GOOD);
        let context = parent.span_context();
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(context.trace_state().get("congo"), Some("t61rcWkgMzE"));
        assert_eq!(traceparent(&context), GOOD);
        let (parent, _) = parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", None);
        assert!(!parent.unwrap().sampled);
        // A later version may carry more after a dash; its known fields are read.
        assert!(
            parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what", None)
                .0
                .is_some()
        );
        assert!(
            parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None)
                .0
                .is_some()
        );
    }

    /// What a later version adds is not checked, so it is not passed on: the program gets version
    /// 00 of the checked fields (a newline and an escape, or 300 KB that exec could not pass,
    /// never reach it). A version-00 value is passed on as it came (the positive control).
    #[test]
    fn a_later_versions_unchecked_tail_never_reaches_the_program() {
        let ids = "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7";
        for tail in [
            "-\nINJECTED=1\u{1b}[31m".to_owned(),
            format!("-{}", "x".repeat(300_000)),
        ] {
            let (parent, problem) = parse(&format!("01-{ids}-09{tail}"), None);
            assert_eq!(problem, None);
            let parent = parent.unwrap();
            assert_eq!(parent.traceparent, format!("00-{ids}-09"));
            assert!(parent.sampled);
        }
        assert_eq!(parse(GOOD, None).0.unwrap().traceparent, GOOD);
    }

    #[test]
    fn what_the_sdks_propagator_takes_and_a_control_key_does_not() {
        for bad in [
            "",
            "00-ab-cd-01",
            &format!("{GOOD}-"),
            &format!(" {GOOD}"),
            &format!("{GOOD} "),
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            let (parent, problem) = parse(bad, Some("a=b"));
            assert!(parent.is_none(), "{bad:?} was taken");
            assert_eq!(problem, Some(("TRACEPARENT", TRACEPARENT_RULE)), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_tracestate_is_dropped_alone() {
        for bad in [
            "A=b",
            "a=",
            "a=b,a=c",
            "a=b\u{7f}c",
            "a=b=c",
            "=b",
            "a@SYS=b",
            "a@systemnameistoolong=b",
            "a=\u{e9}",
            &(0..33).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(","),
            &format!("a={}", "v".repeat(MAX_TRACESTATE)),
        ] {
            let (parent, problem) = parse(GOOD, Some(bad));
            assert_eq!(problem, Some(("TRACESTATE", TRACESTATE_RULE)), "{bad:?}");
            assert_eq!(parent.unwrap().tracestate, None, "{bad:?}");
        }
        for good in ["a=b", "a=b , c=d", "tenant@vendor=x,0k=v", "a=b,,c=d", ""] {
            let (parent, problem) = parse(GOOD, Some(good));
            assert_eq!(problem, None, "{good:?}");
            assert_eq!(parent.unwrap().tracestate.as_deref(), Some(good));
        }
    }
}
